"""The replicator: the loop that sequences the stages, batch after batch.

``loop`` runs poll -> decode -> plan -> merge -> commit -> report; ``tables`` opens and
recovers each topic's table; ``planning`` turns a table's batch into an instant and
merge tasks; ``compaction`` decides which file groups get a new base file; ``progress``
is the bookkeeping each commit carries; ``deadletter`` keeps undecodable messages and
``replay`` lists and re-applies them.
"""

from __future__ import annotations

from engine.replicator.loop import BatchReport, Replicator

__all__ = ["BatchReport", "Replicator"]
