"""Everything known about one replicated table, for the dashboard's detail screen.

:class:`TableDetailReader` reads, without taking any lock and while a replicator runs:

* from the state store, through :func:`engine.state.read_status` (what ``cdcctl status``
  shows): the table's state, counters, lag, latency percentiles, throughput history and
  last error, and the table's own entries of the event log;
* from the replica, through the Hudi package's read-only view
  (:class:`~engine.hudi.HudiView`): the last instants of its timeline, its live file
  groups and their log files, the last compaction, its schema and the newest commit that
  changed it, and the checkpoint (the next offset per partition the newest commit
  applied up to);
* from the broker, in a separate call (:meth:`TableDetailReader.offsets`) whose every
  wait is short: each partition's end offset, next to the applied one. An unreachable
  broker is an answer (:attr:`KafkaOffsets.error`), not an exception.

The replica is read again on every call; a file the writer removes between the listing
and the read (a clean, an archiving run) makes the read start over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import CdcError, HudiError
from engine.hudi import HudiView, instant_datetime, parse_checkpoint
from engine.hudi import options as o
from engine.naming import table_store
from engine.state.control import open_store, read_status
from engine.state.recorder import HISTORY_STEP_S
from engine.state.records import ReplicatorRecord, TableRecord
from engine.storage import Storage

if TYPE_CHECKING:
    import pyarrow as pa

    from engine.config import Config

#: Instants of the timeline a detail shows (newest first).
TIMELINE_ENTRIES = 12
#: Event-log entries of the table a detail shows (the newest).
EVENT_ENTRIES = 30
#: Longest wait of any one broker request of :meth:`TableDetailReader.offsets`.
BROKER_TIMEOUT_S = 2.0
#: Times a replica read starts over when the writer removed a file under it.
_ATTEMPTS = 3


def instant_time(instant: str) -> float:
    """An instant (``yyyyMMddHHmmssSSS``, UTC) as seconds since the epoch."""
    return instant_datetime(instant).timestamp()


@dataclass(frozen=True)
class InstantInfo:
    """One instant of the active timeline."""

    instant: str
    #: ``commit``, ``deltacommit``, ``replacecommit``, ``clean`` or ``rollback``.
    action: str
    #: ``REQUESTED``, ``INFLIGHT`` or ``COMPLETED``.
    state: str

    @property
    def at(self) -> float:
        """When it started (the instant's time), seconds since the epoch."""
        return instant_time(self.instant)


@dataclass(frozen=True)
class Column:
    """A column of the replica's data schema."""

    name: str
    type: str
    nullable: bool
    #: Part of the record key.
    key: bool = False


@dataclass(frozen=True)
class SchemaChange:
    """The newest commit that changed the schema, and what it changed."""

    instant: str
    added: tuple[Column, ...] = ()
    removed: tuple[str, ...] = ()
    #: (column, type before, type after)
    changed: tuple[tuple[str, str, str], ...] = ()
    #: Whether the schema before it is known (its previous commit is on the timeline).
    before_known: bool = True


@dataclass(frozen=True)
class Compaction:
    """A write that gave file groups a new base file over their earlier slice."""

    instant: str
    file_groups: int

    @property
    def at(self) -> float:
        """When it started (the instant's time), seconds since the epoch."""
        return instant_time(self.instant)


@dataclass(frozen=True)
class ReplicaDetail:
    """The replica on disk, as its timeline and file groups say."""

    path: str
    #: ``MERGE_ON_READ`` or ``COPY_ON_WRITE``.
    table_type: str
    #: The newest instants, newest first (at most :data:`TIMELINE_ENTRIES`).
    instants: tuple[InstantInfo, ...]
    #: Completed write instants on the active timeline.
    completed: int
    file_groups: int
    log_files: int
    #: Merge-on-Read: the newest compaction on the active timeline (None: none there).
    last_compaction: Compaction | None
    schema: tuple[Column, ...]
    schema_change: SchemaChange | None
    #: The topic the newest checkpoint is of, and its next offset per partition.
    topic: str | None
    checkpoint: dict[int, int]
    #: The newest completed write instant.
    last_commit: str | None

    @property
    def merge_on_read(self) -> bool:
        return self.table_type.upper() == o.TABLE_TYPE_MOR


@dataclass(frozen=True)
class TableDetail:
    """One read of a table's detail (see the module docstring)."""

    table: str
    work_dir: str
    #: ``read_status(work_dir).replicator``; None: the work folder has no state store.
    replicator: ReplicatorRecord | None
    #: The table's record of ``read_status`` (``cdcctl status --json``); None: the store
    #: has no row for it.
    status: TableRecord | None
    #: The table's event-log entries, oldest first: ``at`` (seconds since the epoch),
    #: ``kind``, ``message``.
    events: tuple[dict[str, Any], ...]
    topic: str | None
    replica: ReplicaDetail | None
    #: Why there is no replica detail (no config, no replica yet, unreadable).
    replica_error: str | None = None
    #: Seconds each point of the status record's ``throughput`` history stands for.
    throughput_step_s: float = HISTORY_STEP_S


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition of the table's topic: what was applied, where its log ends."""

    partition: int
    #: Next offset the newest commit applied up to (None: nothing applied from it).
    applied: int | None
    #: Next offset to be written (None: the broker did not say).
    end: int | None

    @property
    def lag(self) -> int | None:
        """Messages not yet applied (None when the end is unknown)."""
        if self.end is None:
            return None
        return max(0, self.end - (self.applied or 0))


@dataclass(frozen=True)
class KafkaOffsets:
    """The partitions of the table's topic; ``error`` says why end offsets are unknown
    (``reachable``: the broker answered, e.g. without the topic)."""

    topic: str | None
    partitions: tuple[PartitionOffsets, ...] = ()
    error: str | None = None
    #: The broker asked (``source.bootstrap_servers``).
    servers: str | None = None
    reachable: bool = field(default=False)


def _columns(schema: pa.Schema, keys: set[str]) -> tuple[Column, ...]:
    return tuple(Column(f.name, str(f.type), f.nullable, f.name in keys) for f in schema)


class TableDetailReader:
    """Reads one table's detail again and again (keeping parsed commit files between
    reads: completed commit files never change)."""

    def __init__(
        self,
        work_dir: Path,
        config: Config | None,
        table: str,
        *,
        timeline_entries: int = TIMELINE_ENTRIES,
        event_entries: int = EVENT_ENTRIES,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.config = config
        self.table = table
        self.timeline_entries = timeline_entries
        self.event_entries = event_entries
        self._hudi: HudiView | None = None
        self._target: Storage | None = None

    # -- the state store and the replica ------------------------------------------------
    def read(self) -> TableDetail:
        """The table's detail now: state store and replica (never the broker).

        A missing store or replica is said in the result; no exception is raised for it.
        """
        found = read_status(self.work_dir)
        replicator = status = None
        events: tuple[dict[str, Any], ...] = ()
        if found is not None:
            replicator, status = found.replicator, found.table(self.table)
            store = open_store(self.work_dir)
            if store is not None:
                try:
                    events = tuple(store.events(self.event_entries, table=self.table))
                finally:
                    store.close()
        topic = status.topic if status else None
        replica, error = None, None
        if self.config is None:
            error = "no config given: the replica's folder is unknown"
        else:
            try:
                name = self.config.table_name(topic) if topic else self.table
                if self._target is None:
                    self._target = self.config.target_store(patient=False)
                table = table_store(self._target, name)
                replica = self._replica(table)
                if replica is None:
                    error = f"no replica yet at {table.url}"
            except CdcError as exc:
                error = exc.message
        if topic is None and replica is not None:
            topic = replica.topic
        return TableDetail(
            table=self.table,
            work_dir=str(self.work_dir),
            replicator=replicator,
            status=status,
            events=events,
            topic=topic,
            replica=replica,
            replica_error=error,
        )

    def _replica(self, store: Storage) -> ReplicaDetail | None:
        last: Exception | None = None
        for _ in range(_ATTEMPTS):
            if not HudiView.exists(store):
                self._hudi = None
                return None
            try:
                if self._hudi is None or self._hudi.location != store.url:
                    self._hudi = HudiView.open(store)
                return self._read_replica(self._hudi)
            except (FileNotFoundError, HudiError) as exc:
                # Cleaned, archived or rolled back under us: list again.
                self._hudi, last = None, exc
        if isinstance(last, HudiError):
            raise last
        raise HudiError(f"{store.url}: the replica changed under every read: {last}")

    def _read_replica(self, table: HudiView) -> ReplicaDetail:
        timeline = table.rescan()
        entries = timeline.entries()
        groups = table.file_groups(listed=False)
        completed = sorted(timeline.completed)
        keys = set(table.record_key_fields)
        schema = table.arrow_schema()
        value = table.checkpoint()
        topic = value.partition(",")[0] if value else None
        compaction = None
        if table.is_mor:
            for instant in reversed(completed):
                n = table.compacted_groups(instant)
                if n:
                    compaction = Compaction(instant, n)
                    break
        return ReplicaDetail(
            path=table.location,
            table_type=table.table_type,
            instants=tuple(InstantInfo(*e) for e in entries[: self.timeline_entries]),
            completed=len(completed),
            file_groups=len(groups),
            log_files=sum(len(s.log_files) for s in groups.values()),
            last_compaction=compaction,
            schema=_columns(schema, keys) if schema is not None else (),
            schema_change=self._schema_change(table, completed, keys),
            topic=topic,
            checkpoint=parse_checkpoint(value, topic) if value and topic else {},
            last_commit=completed[-1] if completed else None,
        )

    @staticmethod
    def _schema_change(
        table: HudiView, completed: list[str], keys: set[str]
    ) -> SchemaChange | None:
        """The newest commit whose ``cdcctl.counts`` records a schema change (``ddl``),
        compared with the schema of the commit before it."""
        for i in range(len(completed) - 1, -1, -1):
            extra = table.extra_metadata(completed[i])
            try:
                counts = json.loads(extra.get(o.COUNTS_KEY) or "{}")
            except ValueError:
                counts = {}
            if not counts.get("ddl"):
                continue
            after = table.schema_at(completed[i])
            before = table.schema_at(completed[i - 1]) if i > 0 else None
            if after is None or before is None:
                return SchemaChange(completed[i], before_known=False)
            old = {f.name: f for f in before}
            new = {f.name: f for f in after}
            added = tuple(
                Column(f.name, str(f.type), f.nullable, f.name in keys)
                for f in after
                if f.name not in old
            )
            removed = tuple(name for name in old if name not in new)
            changed = tuple(
                (name, str(old[name].type), str(new[name].type))
                for name in new
                if name in old and not old[name].type.equals(new[name].type)
            )
            return SchemaChange(completed[i], added, removed, changed)
        return None

    # -- the broker -----------------------------------------------------------------------
    def offsets(self, detail: TableDetail, timeout: float = BROKER_TIMEOUT_S) -> KafkaOffsets:
        """Each partition's applied offset (from ``detail``'s checkpoint) and end offset
        (asked of the broker, every request waiting at most ``timeout`` seconds)."""
        from engine.source.kafka import partition_ends  # confluent-kafka only when asked

        applied = detail.replica.checkpoint if detail.replica is not None else {}
        topic = detail.topic

        def known() -> tuple[PartitionOffsets, ...]:
            return tuple(PartitionOffsets(p, off, None) for p, off in sorted(applied.items()))

        if self.config is None:
            return KafkaOffsets(topic, known(), "no config given: the broker is unknown")
        servers = self.config.source.kafka.bootstrap_servers
        if topic is None:
            return KafkaOffsets(None, (), "the table's topic is not known yet", servers)
        try:
            ends = partition_ends(self.config.source, topic, applied, timeout)
        except CdcError as exc:
            return KafkaOffsets(topic, known(), exc.message, servers)
        if not ends:
            missing = f"topic {topic} is not on the broker"
            return KafkaOffsets(topic, known(), missing, servers, reachable=True)
        parts = sorted(set(ends) | set(applied))
        return KafkaOffsets(
            topic,
            tuple(PartitionOffsets(p, applied.get(p), ends.get(p)) for p in parts),
            None,
            servers,
            reachable=True,
        )
