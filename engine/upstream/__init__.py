"""The source side, watched: Kafka Connect's connectors (``source.connect_url``), the
source database's replication slots (``source.database_dsn``, PostgreSQL) and Debezium's
heartbeats, as one :class:`SourceView` per look.

In: the config. Out: views (:class:`SourceWatch` once, :class:`SourceWatcher` while the
replicator runs), which the state store keeps for ``cdcctl status``, the dashboard and
the metrics; a table's problems are those of the connector writing its topic.
"""

from __future__ import annotations

from engine.upstream.model import Connector, ConnectorTask, Slot, SourceView
from engine.upstream.watch import SourceWatch, SourceWatcher

__all__ = ["Connector", "ConnectorTask", "Slot", "SourceView", "SourceWatch", "SourceWatcher"]
