"""The replicator's tables: one per selected topic, opened (and recovered) on first sight.

A topic maps to a table name and folder (:mod:`engine.naming`); ``source.include_tables``
and ``exclude_tables`` select by that name. Opening an existing table rolls back what a
crashed run left and loads its progress from the newest commit; a new table's folder is
created with its first batch. Two topics mapping to one name: the second one's table is
FAILED with a message, never a shared folder. After a transient failure a table is
opened again (:meth:`Tables.reopen`) the way a restart opens it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.config import Config
from engine.errors import HudiError, TableNameError, WriterLockError
from engine.hudi import HudiWriter, check_no_stray_timeline, ownership
from engine.lock import Locks
from engine.naming import table_key, table_store
from engine.replicator.progress import TOPIC_KEY, TableProgress
from engine.replicator.retry import Incident
from engine.state import TableCounters, TableState, TableStatus
from engine.storage import Storage, StorageError
from engine.storage.lease import Lease

if TYPE_CHECKING:
    from engine.replicator.batches import DdlItem

log = logging.getLogger("cdcctl.replicator")


class _TableField(logging.Filter):
    """The replicator's lines about one table start with its name (``"%s: ..."``); such
    a record carries it as ``record.table`` (the JSON log file's ``table``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            not hasattr(record, "table")
            and isinstance(record.msg, str)
            and record.msg.startswith("%s: ")
            and isinstance(args, tuple)
            and args
            and isinstance(args[0], str)
        ):
            record.table = args[0]
        return True


log.addFilter(_TableField())


def table_selected(cfg: Config, name: str) -> bool:
    """Whether ``source.include_tables`` / ``exclude_tables`` select a table name."""
    src = cfg.source
    if src.include_tables and not any(fnmatch.fnmatchcase(name, p) for p in src.include_tables):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in src.exclude_tables)


@dataclass
class TableRuntime:
    """What the replicator knows about one topic/table, and its state machine: the
    methods below are the only ones that move ``state`` (besides opening it)."""

    topic: str
    name: str
    #: Its files: a folder, or a bucket's prefix.
    store: Storage
    writer: HudiWriter | None = None
    partitions: list[int] = field(default_factory=list)
    progress: TableProgress = field(default_factory=TableProgress)
    state: TableState = TableState.REPLICATING
    error: str | None = None
    counters: TableCounters = field(default_factory=TableCounters)
    #: A transient failure of this table alone being retried (its storage).
    incident: Incident | None = None
    #: Not read until its incident's next try (its partitions are unassigned).
    held: bool = False
    #: The state to return to once a transient failure is over.
    resume_state: TableState = TableState.REPLICATING
    #: Not a table: the kind of non-row records its topic holds (schema changes,
    #: transaction metadata, heartbeats, ...), recognised by content. Such a topic is
    #: read but never written, listed or counted as a table.
    control: str | None = None
    #: Schema changes waiting for this table to be live again (paused, held).
    pending_ddl: list[DdlItem] = field(default_factory=list)
    #: Schema changes handled in batches not committed yet: handled again if the table
    #: is reopened (its batch dropped), since their topic is not read again.
    uncommitted_ddl: list[DdlItem] = field(default_factory=list)
    #: A storage error met while opening it, for the loop to retry (then None).
    trouble: OSError | None = None
    #: It stops once its batch in flight commits (``errors.tolerance``, a schema change
    #: it cannot take, an epoch change): nothing after that is read into a later batch.
    stopping: bool = False
    #: This run's lease on it (a table on object storage, while the replicator runs).
    lease: Lease | None = None

    @property
    def location(self) -> str:
        """Where it is, for messages: its folder or ``s3://`` URL."""
        return self.store.url

    @property
    def path(self) -> Path:
        """Its folder.

        Raises:
            StorageError: It is on object storage, where what asked is not done yet.
        """
        local = self.store.local_path("")
        if local is None:
            raise StorageError(
                f"table {self.name} is on object storage ({self.location}): this works on "
                "a folder only so far",
                hint="see docs/guide/tables.md#object-storage for what a bucket target does",
            )
        return local

    @property
    def live(self) -> bool:
        """Whether the table is read and applied now (not FAILED, PAUSED or held)."""
        return not (self.state.stopped or self.state is TableState.PAUSED or self.held)

    @property
    def checkpoint(self) -> dict[tuple[str, int], int | None]:
        """Where each of its partitions is read from again: its committed positions."""
        return {(self.topic, p): self.progress.committed.get(p) for p in self.partitions}

    # -- the state machine ------------------------------------------------------------
    def fail(self, error: str, *, logged: bool = True) -> None:
        """Stop the table (FAILED: a person must act); a retry of it ends."""
        self.state, self.error = TableState.FAILED, error
        self.incident, self.held = None, False
        if logged:
            log.error("%s: FAILED: %s", self.name, error)

    def begin_failing(self, cause: str) -> None:
        """A transient failure touches it: FAILING (remembering the state to return
        to), one retry more."""
        if self.state is not TableState.FAILING:
            self.resume_state = self.state
        self.state, self.error = TableState.FAILING, cause
        self.counters.retries += 1

    def recover(self) -> None:
        """The failure it was retrying is over: back to the state it was in."""
        if self.state is TableState.FAILING:
            self.state, self.error = self.resume_state, None

    def pause(self) -> bool:
        """PAUSED (the caller stops reading it). False if it already was."""
        if self.state is TableState.PAUSED:
            return False
        self.state = TableState.PAUSED
        return True

    def resume(self) -> bool:
        """REPLICATING again after a pause. False if it was not paused."""
        if self.state is not TableState.PAUSED:
            return False
        self.state = TableState.REPLICATING
        return True

    def restart(self) -> None:
        """Replicating afresh (a resync, an accepted epoch): no error, no stop pending."""
        self.state, self.error = TableState.REPLICATING, None
        self.incident, self.held, self.stopping = None, False, False

    def committed(self, *, snapshot: bool) -> None:
        """A commit landed: SNAPSHOTTING while it reads only snapshot records (its last
        one not among them), else REPLICATING; a FAILING table is over its failure."""
        if self.state in (TableState.REPLICATING, TableState.SNAPSHOTTING, TableState.FAILING):
            self.state = TableState.SNAPSHOTTING if snapshot else TableState.REPLICATING
            self.error = None

    def status(self) -> TableStatus:
        """A snapshot of the table's state and counters."""
        return TableStatus(self.name, self.topic, self.state, self.error, self.counters)


class Tables:
    """Every table the replicator has seen, by topic."""

    def __init__(self, config: Config, staging: Path) -> None:
        self.cfg = config
        self.target = config.target_store()
        self.staging = staging
        self.by_topic: dict[str, TableRuntime] = {}
        self._names: dict[str, str] = {}
        #: While a replicator runs: the writer locks of its tables (None: no locking,
        #: e.g. when the property tests drive :meth:`Replicator.apply` directly).
        self.locks: Locks | None = None

    def lock(self, rt: TableRuntime) -> None:
        """Hold ``rt``'s writer lock, if this run locks (before anything is written): a
        ``flock`` in a folder, a lease in a bucket (its writer then commits through it)."""
        if self.locks is None:
            return
        lease = self.locks.take_table(rt.store, f"table {rt.name} ({rt.location})")
        if lease is not None:
            rt.lease = lease
            if rt.writer is not None:
                rt.writer.fence(lease)

    def owner(self, name: str) -> str | None:
        """The topic whose table ``name`` is (None: no topic has it yet)."""
        return self._names.get(table_key(name))

    def store_name(self, rt: TableRuntime) -> str:
        """A table's name in the state store (a second topic mapping to a taken name,
        which fails, is told apart by its topic)."""
        return rt.name if self.owner(rt.name) == rt.topic else f"{rt.name} ({rt.topic})"

    def statuses(self) -> list[TableStatus]:
        """Every table's status, named as in the state store."""
        return [dataclasses.replace(rt.status(), table=self.store_name(rt)) for rt in self]

    def release(self, rt: TableRuntime) -> None:
        """A topic that turned out to hold no rows gives its table name back (a table
        topic opened later may take it)."""
        if self._names.get(table_key(rt.name)) == rt.topic:
            del self._names[table_key(rt.name)]

    def get(self, topic: str) -> TableRuntime | None:
        """The table of a topic: opened on first sight; None when the topic is not replicated."""
        return self.by_topic.get(topic) or self._open(topic)

    def __iter__(self) -> Iterator[TableRuntime]:
        """The tables (topics recognised as holding no rows are left out)."""
        return iter([rt for rt in self.by_topic.values() if rt.control is None])

    def __getitem__(self, topic: str) -> TableRuntime:
        return self.by_topic[topic]

    def _selected(self, name: str) -> bool:
        return table_selected(self.cfg, name)

    def _open(self, topic: str) -> TableRuntime | None:
        try:
            name = self.cfg.table_name(topic)
        except TableNameError as exc:
            log.warning("skipping topic %r: %s", topic, exc.message)
            return None
        if not self._selected(name):
            return None
        try:
            path = table_store(self.target, name)
        except TableNameError as exc:  # a folder it must not write: the table fails
            # Never opened nor written (FAILED from the start, no owner: resync refuses
            # it); the target stands in for the store its name cannot have.
            rt = TableRuntime(topic, name, self.target, state=TableState.FAILED)
            rt.error = exc.message
            self.by_topic[topic] = rt
            log.error("%s: FAILED: %s", name, exc.message)
            return rt
        owner = self._names.get(table_key(name))
        if owner is not None and owner != topic:
            error = (
                f"table name {name!r} is already used by topic {owner!r}; exclude one of "
                "them (source.exclude_topics)"
            )
            rt = TableRuntime(topic, name, path, state=TableState.FAILED, error=error)
            self.by_topic[topic] = rt
            log.error("%s: FAILED: topic %r: %s", name, topic, error)
            return rt
        self._names[table_key(name)] = topic
        rt = TableRuntime(topic, name, path)
        self.by_topic[topic] = rt
        try:
            self._load(rt)
        except (HudiError, WriterLockError) as exc:
            rt.writer, rt.state, rt.error = None, TableState.FAILED, str(exc)
            log.error("%s: FAILED: %s", name, exc)
            return rt
        except OSError as exc:  # its storage: retried (Recovery.table_trouble)
            rt.writer, rt.trouble = None, exc
            return rt
        return rt

    def _load(self, rt: TableRuntime) -> None:
        """Open an existing table for writing: take its lock, check it is consistent
        (:meth:`HudiWriter.verify`), check it is this topic's, roll back what a crashed
        run left, load its progress; drop its staged files. A missing table is left to
        its first batch (``rt.writer`` stays None).

        Raises:
            HudiError: the table is damaged, another topic's or another Hudi writer's
                (:class:`~engine.errors.ForeignTableError`); nothing was written.
            WriterLockError: another replicator writes it.
            OSError: its storage failed (retried).
        """
        path, name = rt.store, rt.name
        if HudiWriter.exists(path):
            ownership.check(path, name)  # before the lock: its file is a write
            self.lock(rt)  # before rolling back: the unfinished instants may be another's
            writer = HudiWriter.open(path)
            if rt.lease is not None:
                writer.fence(rt.lease)
            for stray in writer.verify():
                log.warning(
                    "%s: %s in the table folder is not a table file; readers skip it "
                    "(move it out of %s)",
                    name,
                    stray,
                    rt.location,
                )
            written_by = writer.extra_metadata().get(TOPIC_KEY)
            if written_by and written_by != rt.topic:
                raise HudiError(
                    f"the table folder {rt.location} holds the replica of topic {written_by!r}, "
                    f"not of {rt.topic!r} (both map to table {name!r}); exclude one of the "
                    "topics (source.exclude_topics), or move the folder out of target.path "
                    "to rebuild it from this topic"
                )
            rolled = writer.recover()
            if rolled:
                log.info("%s: rolled back unfinished instants %s", name, ", ".join(rolled))
            rt.writer = writer
            rt.progress = TableProgress.load(writer, rt.topic)
        else:
            check_no_stray_timeline(path, name)
        shutil.rmtree(self.staging / name, ignore_errors=True)

    def reopen(self, rt: TableRuntime) -> None:
        """Open a table again after a failed batch, as a restart would: roll back its
        unfinished instants, drop its staged files, reload its progress from its newest
        commit (the batch in flight is forgotten; its events are read again, and the
        schema changes it handled are handled again)."""
        rt.pending_ddl = rt.uncommitted_ddl + rt.pending_ddl
        rt.uncommitted_ddl = []
        rt.writer = None
        self._load(rt)
        if rt.writer is None:
            rt.progress = TableProgress()
        shutil.rmtree(self.staging / rt.name, ignore_errors=True)
