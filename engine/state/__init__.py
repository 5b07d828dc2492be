"""Per-table state the replicator reports: states, counters, status records.

Today these live in the running replicator's memory and are returned by
:meth:`engine.replicator.Replicator.status`; the SQLite state store that the CLI, the
dashboard and the metrics endpoint read will live in this package too.
"""

from __future__ import annotations

from engine.state.model import TableCounters, TableState, TableStatus

__all__ = ["TableCounters", "TableState", "TableStatus"]
