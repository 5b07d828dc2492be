"""The vocabulary of replication state: a table's state, its counters, its status."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class TableState(StrEnum):
    """Where a table stands (the names operators of AWS DMS and Flink CDC know)."""

    SNAPSHOTTING = "SNAPSHOTTING"
    REPLICATING = "REPLICATING"
    PAUSED = "PAUSED"
    FAILING = "FAILING"
    FAILED = "FAILED"

    @property
    def stopped(self) -> bool:
        """Whether the table no longer replicates (until it is fixed and restarted):
        FAILED. A FAILING table is retrying a transient failure and keeps its partitions."""
        return self is TableState.FAILED


@dataclass
class TableCounters:
    """Counters of one table: source events applied, by op, and what else happened.

    Cumulative across runs when the replicator keeps a state store (loaded from it, and
    reconciled with the commits' ``cdcctl.counts`` after a crash). Each source event
    applied counts once, whatever later events of its batch do to its key; a Kafka
    tombstone is not an event of its own.
    """

    #: Rows in the replica as of its last commit (rows inserted, less rows deleted or
    #: truncated; counted since the store knew of rows: stores made before count from
    #: then on).
    rows: int = 0
    #: Snapshot reads applied (``op=r``).
    snapshot_rows: int = 0
    #: Inserts (``op=c``), updates (``op=u``), deletes (``op=d``), truncates (``op=t``).
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    truncates: int = 0
    #: Events not newer than what the table held for their key: dropped.
    late: int = 0
    #: TOAST placeholders with no earlier value anywhere (the column stays null).
    toast_unresolved: int = 0
    #: TOAST placeholders filled with the column's previous value.
    toast_filled: int = 0
    #: Undecodable messages quarantined to the dead letters.
    bad: int = 0
    #: Valid messages that are not row changes (heartbeats, transaction markers, ...).
    ignored: int = 0
    #: Schema changes: events of the MySQL schema change topic handled for the table
    #: (applied, ignored or failing it), or, for a table that never got one, batches
    #: whose row events changed its schema.
    ddl: int = 0
    #: Retries of transient failures.
    retries: int = 0
    commits: int = 0
    #: Source commit time (ms) of the newest event applied.
    last_source_ts_ms: int | None = None


@dataclass(frozen=True)
class TableStatus:
    """A snapshot of one table: what the CLI prints and ``--json`` emits."""

    table: str
    topic: str
    state: TableState
    error: str | None = None
    counters: TableCounters = field(default_factory=TableCounters)

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready dict: table, topic, state, error, then every counter."""
        return {
            "table": self.table,
            "topic": self.topic,
            "state": self.state.value,
            "error": self.error,
            **asdict(self.counters),
        }
