"""The replication loop: source -> decode -> stage -> Spark merge -> Hudi commit.

Exactly once: a batch becomes visible only when a table's completed commit appears, and
that commit carries the Kafka positions (``deltastreamer.checkpoint.key``) that produced
it. On start every table rolls back instants that never completed and the consumer is
positioned at each table's own checkpoint. Kafka group offsets are committed after the
Hudi commits, for lag tools only.

One micro-batch commits one instant per table that received messages. All file groups
of all tables touched by the batch are merged in a single Spark job, one task per file
group. :meth:`Replicator.apply` runs one batch from given messages (no Kafka), which is
how the property tests drive the real engine.
"""

from __future__ import annotations

import base64
import fnmatch
import gc
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

from engine import faults, tombstones
from engine.config import Config
from engine.decode.debezium_json import decode_debezium_json
from engine.errors import HudiError, SchemaEvolutionError, TableNameError
from engine.hudi.bucket_index import bucket_file_id, bucket_ids
from engine.hudi.log_file import LogFileName
from engine.hudi.schema import avro_schema_json
from engine.hudi.table import FileSlice, HudiTable, WriteStat, base_file_name
from engine.merge import (
    FileGroupResult,
    FileGroupTask,
    MergeCounts,
    MergeOptions,
    execute_tasks,
    file_schema,
    pack_tasks,
)
from engine.model import (
    KEY,
    OFFSET,
    OP,
    OP_TRUNCATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
)
from engine.naming import table_name_for_topic, table_path
from engine.schema import evolve_schema
from engine.ordering import gtid_positions
from engine.source import KafkaSource
from engine.transactions import TransactionTracker, apply_cuts, data_collection

PRECOMBINE = POS
#: Base files below this size count as this size for the log-size compaction trigger.
COMPACTION_MIN_BASE_BYTES = 4 << 20
TRUNCATE_KEY = "cdcctl.truncate.pos"
MAX_TS_KEY = "cdcctl.source.max_ts"
TOPIC_KEY = "cdcctl.source.topic"
#: Last keyed event per partition: a tombstone opening the next batch inherits its position.
TAIL_KEY = "cdcctl.partition.tail"
GTID_KEY = "cdcctl.gtid.lineages"


class Record(Protocol):
    """What the engine needs of a Kafka message (confluent_kafka.Message fits)."""

    def topic(self) -> str | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...


class TableState:
    """Per-table states shown by the CLI and dashboard."""

    SNAPSHOTTING = "SNAPSHOTTING"
    REPLICATING = "REPLICATING"
    PAUSED = "PAUSED"
    FAILING = "FAILING"
    FAILED = "FAILED"


@dataclass
class TableStats:
    """Counters of one table since the replicator started."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    truncates: int = 0
    late: int = 0
    toast_unresolved: int = 0
    bad: int = 0
    ignored: int = 0
    commits: int = 0
    last_source_ts_ms: int | None = None


@dataclass
class TableRuntime:
    """What the replicator knows about one topic/table."""

    topic: str
    name: str
    path: Path
    hudi: HudiTable | None = None
    partitions: list[int] = field(default_factory=list)
    #: next offset to consume per partition, as last committed to Hudi
    committed: dict[int, int] = field(default_factory=dict)
    #: position of the table's newest truncate (older events are late)
    floor: tuple[int, int] | None = None
    max_source_ts: int | None = None
    #: partition -> [offset, key, pos, pos_sub] of the last keyed event applied
    tail: dict[int, list] = field(default_factory=dict)
    #: GTID origins in the order first seen (engine/ordering.py)
    gtid_lineages: list[str] = field(default_factory=list)
    state: str = TableState.REPLICATING
    error: str | None = None
    stats: TableStats = field(default_factory=TableStats)


@dataclass
class BatchReport:
    """What one micro-batch did (printed by the CLI, asserted on by tests)."""

    number: int
    messages: int
    seconds: float
    tables: dict[str, dict[str, int]]
    lag_messages: int = 0
    #: seconds spent per phase: poll, decode, stage, merge (Spark job), commit
    phases: dict[str, float] = field(default_factory=dict)
    #: partitions to re-read from an offset (events held back to keep transactions whole)
    rewind: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class _Prepared:
    """A decoded batch waiting to be planned: per topic (table, rows, key, read offsets)."""

    count: int
    started: float
    topics: list[tuple[Any, pa.Table | None, list[str], dict[int, int]]] = field(
        default_factory=list
    )
    rewind: dict[tuple[str, int], int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class _Pending:
    """A planned batch whose Spark job may still be running."""

    prepared: _Prepared
    number: int = 0
    plans: list[Any] = field(default_factory=list)
    tasks: list[FileGroupTask] = field(default_factory=list)
    results: list[FileGroupResult] = field(default_factory=list)
    thread: threading.Thread | None = None
    error: BaseException | None = None
    merge_started: float = 0.0


@dataclass
class _Plan:
    rt: TableRuntime
    instant: str
    offsets: dict[int, int]
    schema: pa.Schema
    extra: dict[str, str]


def parse_checkpoint(value: str | None, topic: str) -> dict[int, int]:
    """Parse ``topic,0:1200,1:877`` (next offsets) for one topic."""
    if not value:
        return {}
    head, _, rest = value.partition(",")
    if head != topic:
        return {}
    out = {}
    for item in rest.split(","):
        if item:
            part, _, off = item.partition(":")
            out[int(part)] = int(off)
    return out


def format_checkpoint(topic: str, offsets: dict[int, int]) -> str:
    """Hudi streamer checkpoint string, partitions ascending."""
    return topic + "," + ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def _parse_pos(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    pos, _, sub = value.partition(":")
    return int(pos), int(sub)


def _inherit_tail(keyed: pa.Table, tail: dict[int, list]) -> pa.Table:
    """Give a batch-opening tombstone the position of its delete from the previous batch.

    Debezium writes a tombstone right after its delete, in the same partition. When a
    batch boundary falls between the two, the tombstone is the first message of its
    partition here and the delete was the partition's last keyed event before: ``tail``
    (updated in place to this batch's last keyed event per partition).
    """
    if keyed.num_rows == 0:
        return keyed
    parts = keyed.column(PARTITION).to_numpy()
    offs = keyed.column(OFFSET).to_numpy()
    pos = keyed.column(POS)
    if tail and pos.null_count:
        pos_list, sub_list = pos.to_pylist(), keyed.column(POS_SUB).to_pylist()
        keys = keyed.column(KEY)
        changed = False
        for part, (offset, key, t_pos, t_sub) in tail.items():
            hits = np.nonzero((parts == part) & (offs == offset + 1))[0]
            for i in hits:
                if pos_list[i] is None and keys[int(i)].as_py() == key:
                    pos_list[i], sub_list[i], changed = t_pos, t_sub, True
        if changed:
            keyed = keyed.set_column(keyed.schema.get_field_index(POS), POS, pa.array(pos_list, pa.int64()))
            keyed = keyed.set_column(
                keyed.schema.get_field_index(POS_SUB), POS_SUB, pa.array(sub_list, pa.int64())
            )
    for part in np.unique(parts).tolist():
        idx = np.nonzero(parts == part)[0]
        last = int(idx[np.argmax(offs[idx])])
        row_pos = keyed.column(POS)[last].as_py()
        if row_pos is not None:
            tail[part] = [
                int(offs[last]),
                keyed.column(KEY)[last].as_py(),
                row_pos,
                keyed.column(POS_SUB)[last].as_py() or 0,
            ]
        else:
            tail.pop(part, None)
    return keyed


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a batch is consumed and grouped.

    librdkafka's Message objects are GC-tracked; the 100k of a batch made the collector
    run a full collection about once per batch, each walking every live object
    (measured in the 1M-event catch-up: 12 full collections, ~0.8 s of the driver's main
    thread). Messages hold no reference cycles and are freed by reference counting
    before the collector resumes, so it has nothing of theirs to find.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _next_offsets(parts: list[int], offs: list[int]) -> dict[int, int]:
    """Per partition, the offset after the last message read."""
    distinct = set(parts)
    if len(distinct) == 1:
        return {parts[0]: max(offs) + 1}
    part_array, off_array = np.asarray(parts), np.asarray(offs, dtype=np.int64)
    return {p: int(off_array[part_array == p].max()) + 1 for p in sorted(distinct)}


def _group_by_topic(messages: Sequence[Record]) -> dict[str, tuple[list, list, list, list]]:
    """Keys, values, partitions and offsets per topic, in consumption order.

    Built with C-level maps and gathers: at a million messages per few seconds a
    per-message Python loop is a measurable share of the batch.
    """
    cls = type(messages[0]) if messages else Message
    if cls is Message:  # unbound C methods mapped over the batch: no per-message bytecode
        topic, key, value, partition, offset = (
            Message.topic, Message.key, Message.value, Message.partition, Message.offset
        )
    else:  # any other Record (tests, tools)
        topic, key, value, partition, offset = (
            methodcaller(n) for n in ("topic", "key", "value", "partition", "offset")
        )
    topics = list(map(topic, messages))
    keys = list(map(key, messages))
    values = list(map(value, messages))
    parts = list(map(partition, messages))
    offs = list(map(offset, messages))
    names = set(topics)
    if len(names) == 1:
        return {topics[0]: (keys, values, parts, offs)}  # type: ignore[dict-item]
    codes = {name: i for i, name in enumerate(names)}
    code_array = np.fromiter((codes[t] for t in topics), dtype=np.int32, count=len(topics))
    out = {}
    for name, code in codes.items():
        idx = np.flatnonzero(code_array == code).tolist()
        if len(idx) == 1:
            i = idx[0]
            out[name] = ([keys[i]], [values[i]], [parts[i]], [offs[i]])
            continue
        pick = itemgetter(*idx)
        out[name] = (list(pick(keys)), list(pick(values)), list(pick(parts)), list(pick(offs)))
    return out  # type: ignore[return-value]


class Replicator:
    """Runs micro-batches until stopped or, with ``until_caught_up``, caught up."""

    def __init__(
        self,
        config: Config,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        log: Callable[[str], None] | None = None,
        spark: Any = None,
    ) -> None:
        self.cfg = config
        self.target = config.target_path()
        self.work = config.work_path()
        self.on_batch = on_batch
        self.log = log or (lambda _msg: None)
        self.tables: dict[str, TableRuntime] = {}
        self._names: dict[str, str] = {}
        self._stop = False
        self._batch_no = 0
        self._last_refresh = 0.0
        self._spark = spark
        self._spark_boot: Future[Any] | None = None
        self.source: KafkaSource | None = None
        self.deadletter_dir = self.work / "deadletter"
        self.transactions = TransactionTracker()
        self._pending: _Pending | None = None
        self._goal: dict[tuple[str, int], int] | None = None
        self._goal_probe: Future[dict[tuple[str, int], int]] | None = None
        #: next offset read (decoded, maybe not yet committed) per partition
        self._consumed: dict[tuple[str, int], int] = {}

    # -- lifecycle -------------------------------------------------------------------
    def request_stop(self, *_args: Any) -> None:
        """Stop after the batch in flight (signal handler)."""
        self._stop = True

    def _start_spark(self) -> None:
        """Start Spark in the background: the JVM boots while Kafka is read and decoded."""
        if self._spark is not None or self._spark_boot is not None:
            return
        from engine.spark import start_for

        self._spark_boot = start_for(self.cfg)

    def _spark_context(self) -> Any:
        if self._spark is None:
            self._start_spark()
            assert self._spark_boot is not None
            self._spark = self._spark_boot.result()
        return self._spark

    def run(self, until_caught_up: bool = False, max_batches: int | None = None) -> None:
        """Replicate. Returns when stopped, caught up, or after ``max_batches``."""
        self.target.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        from engine.spark import check_java

        check_java()  # fail fast, in one line, before anything else starts
        self._start_spark()
        self.source = KafkaSource(self.cfg.source, self.cfg.replicator.max_batch_events)
        self._refresh_topics()
        # The end offsets to catch up to are probed by a second consumer (~0.7 s) while
        # the first batch is read; until they are known the replicator is not caught up.
        probe, self._goal, self._goal_probe = None, None, None
        if until_caught_up:
            probe = ThreadPoolExecutor(1, thread_name_prefix="end-offsets")
            self._goal_probe = probe.submit(self.source.exact_end_offsets, self.source.assigned)
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self.request_stop)
            signal.signal(signal.SIGTERM, self.request_stop)
        try:
            while not self._stop:
                goal = self._known_goal()
                if goal is not None and self._pending is None and self._caught_up(goal):
                    break
                if max_batches is not None and self._batch_no >= max_batches:
                    break
                if time.monotonic() - self._last_refresh > self.cfg.replicator.topic_refresh_seconds:
                    self._refresh_topics()
                self._run_batch()
            if self._pending is not None:  # the batch in flight is finished, never dropped
                pending, self._pending = self._pending, None
                self._report(self._finish(pending))
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            if probe is not None:
                probe.shutdown(wait=True)
            self.source.close()

    def _known_goal(self) -> dict[tuple[str, int], int] | None:
        """The end offsets to catch up to, once probed (a probe error is raised here)."""
        if self._goal is None and self._goal_probe is not None and self._goal_probe.done():
            self._goal = self._goal_probe.result()
        return self._goal

    def _caught_up(self, goal: dict[tuple[str, int], int], *, read: bool = False) -> bool:
        """Every live goal partition is committed (or, with ``read``, read) to its end."""
        for (topic, part), end in goal.items():
            rt = self.tables.get(topic)
            if rt is None or rt.state == TableState.FAILING:
                continue
            position = rt.committed.get(part, 0)
            if read:
                position = self._consumed.get((topic, part), position)
            if position < end:
                return False
        return True

    # -- topics and tables -------------------------------------------------------------
    def _refresh_topics(self) -> None:
        assert self.source is not None
        self._last_refresh = time.monotonic()
        positions: dict[tuple[str, int], int | None] = {}
        data_topics = self.source.discover()
        self.source.assign_transactions(self.source.transaction_topics(data_topics))
        for topic, parts in data_topics.items():
            rt = self.tables.get(topic) or self._open_table(topic)
            if rt is None or rt.state == TableState.FAILING:
                continue
            for part in parts:
                if part not in rt.partitions:
                    rt.partitions.append(part)
                    positions[(topic, part)] = rt.committed.get(part)
        self.source.assign(positions)

    def _selected(self, name: str) -> bool:
        src = self.cfg.source
        if src.include_tables and not any(fnmatch.fnmatchcase(name, p) for p in src.include_tables):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in src.exclude_tables)

    def _open_table(self, topic: str) -> TableRuntime | None:
        try:
            name = table_name_for_topic(topic)
            path = table_path(self.target, name)
        except TableNameError as exc:
            self.log(f"skipping topic {topic!r}: {exc.message}")
            return None
        if not self._selected(name):
            return None
        if name in self._names and self._names[name] != topic:
            rt = TableRuntime(topic, name, path, state=TableState.FAILING)
            rt.error = f"table name {name!r} is already used by topic {self._names[name]!r}"
            self.tables[topic] = rt
            self.log(rt.error)
            return rt
        self._names[name] = topic
        rt = TableRuntime(topic, name, path)
        if HudiTable.exists(path):
            rt.hudi = HudiTable.open(path)
            rolled = rt.hudi.rollback_pending()
            if rolled:
                self.log(f"{name}: rolled back unfinished instants {', '.join(rolled)}")
            self._sweep_tombstones(rt.hudi)
            extra = rt.hudi.latest_extra_metadata()
            rt.committed = parse_checkpoint(rt.hudi.checkpoint(), topic)
            rt.floor = _parse_pos(extra.get(TRUNCATE_KEY))
            rt.max_source_ts = int(extra[MAX_TS_KEY]) if extra.get(MAX_TS_KEY) else None
            rt.tail = {int(p): v for p, v in json.loads(extra.get(TAIL_KEY) or "{}").items()}
            rt.gtid_lineages = json.loads(extra.get(GTID_KEY) or "[]")
        shutil.rmtree(self.work / "staging" / name, ignore_errors=True)
        self.tables[topic] = rt
        return rt

    @staticmethod
    def _sweep_tombstones(table: HudiTable) -> None:
        live = {(fs.file_id, fs.state_instant) for fs in table.file_groups().values()}
        tombstones.sweep(table.base_path, live)

    def _fail(self, rt: TableRuntime, error: str) -> None:
        rt.state, rt.error = TableState.FAILING, error
        self.log(f"{rt.name}: FAILING: {error}")
        if self.source is not None:
            self.source.unassign([(rt.topic, p) for p in rt.partitions])

    # -- one micro-batch -------------------------------------------------------------------
    def _run_batch(self) -> None:
        """Poll and decode the next batch while Spark merges the previous one.

        Batch N is committed before batch N+1 is planned (planning reads the file slices
        N wrote and starts N+1's instant), so the pipeline changes timing, not order.
        """
        assert self.source is not None
        started = time.monotonic()
        goal = self._known_goal()
        goal_reached = goal is not None and self._caught_up(goal, read=True)
        count, grouped = 0, {}
        if not goal_reached:
            with _collector_paused():
                messages = self.source.poll(
                    self.cfg.replicator.max_batch_events, self.cfg.replicator.max_batch_seconds
                )
                count = len(messages)
                grouped = _group_by_topic(messages)
                del messages  # the raw messages (and librdkafka's buffers) are freed here
        prepared = None
        if count:
            faults.maybe_crash("consumed")
            self.transactions.observe(self.source.poll_transactions())
            prepared = self._prepare(grouped, count, started)
            if prepared.rewind:
                self.source.seek(prepared.rewind)
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._report(self._finish(pending))
        if prepared is not None:
            self._pending = self._launch(prepared, background=True)

    def _report(self, report: BatchReport) -> None:
        assert self.source is not None
        group_offsets = {
            (rt.topic, p): o for rt in self.tables.values() for p, o in rt.committed.items()
        }
        self.source.commit_group_offsets(group_offsets)
        ends = self.source.end_offsets(self.source.assigned, cached=True)
        report.lag_messages = sum(
            max(0, end - self.tables[t].committed.get(p, 0))
            for (t, p), end in ends.items()
            if t in self.tables and end >= 0
        )
        if self.on_batch:
            self.on_batch(report)

    def apply(self, messages: Sequence[Record], *, started: float | None = None) -> BatchReport:
        """Decode, merge and commit one micro-batch of messages; return what it did."""
        started = time.monotonic() if started is None else started
        prepared = self._prepare(_group_by_topic(messages), len(messages), started)
        return self._finish(self._launch(prepared, background=False))

    def _prepare(
        self, grouped: dict[str, tuple[list, list, list, list]], count: int, started: float
    ) -> _Prepared:
        """Decode every topic of a batch and cut it at unfinished transactions."""
        prepared = _Prepared(count=count, started=started)
        prepared.phases["poll"] = time.monotonic() - started
        for topic in [t for t in grouped if t.endswith(".transaction")]:
            self.transactions.observe(grouped.pop(topic)[1])
        for topic in list(grouped):
            # Popped so each topic's raw bytes are freed as soon as it is decoded.
            keys, values, parts, offs = grouped.pop(topic)
            rt = self.tables.get(topic) or self._open_table(topic)
            if rt is None or rt.state == TableState.FAILING:
                continue
            read_to = _next_offsets(parts, offs)
            t0 = time.monotonic()
            result = decode_debezium_json(topic, keys, values, parts, offs)
            del keys, values
            prepared.phases["decode"] = prepared.phases.get("decode", 0.0) + time.monotonic() - t0
            rt.stats.ignored += result.ignored
            batch = result.batch
            if batch is not None and self.cfg.source.mysql_gtid_ordering:
                batch = gtid_positions(batch, rt.gtid_lineages)
            cuts: dict[int, int] = {}
            if batch is not None:
                cuts, warnings = self.transactions.cuts(
                    batch, data_collection(topic), self.cfg.replicator.max_batch_events
                )
                for warning in warnings:
                    self.log(f"{rt.name}: {warning}")
                if cuts:
                    batch = apply_cuts(batch, cuts)
                    for p, cut in cuts.items():
                        read_to[p] = cut
                        prepared.rewind[(topic, p)] = cut
            for p, o in read_to.items():
                self._consumed[(topic, p)] = o
            bad = [b for b in result.bad if b.offset < cuts.get(b.partition, b.offset + 1)]
            if bad:
                self._quarantine(rt, bad)
                limit = self.cfg.replicator.max_bad_fraction
                if len(bad) > limit * len(offs):
                    self._fail(
                        rt,
                        f"{len(bad)} of {len(offs)} messages in one batch could not be decoded "
                        f"(more than replicator.max_bad_fraction = {limit}); they are in "
                        f"{self.deadletter_dir / (rt.name + '.jsonl')}",
                    )
                    continue
            prepared.topics.append((rt, batch, result.key_fields, read_to))
        return prepared

    def _launch(self, prepared: _Prepared, *, background: bool) -> _Pending:
        """Plan every table (after the previous batch committed) and start the Spark job."""
        self._batch_no += 1
        pending = _Pending(prepared=prepared, number=self._batch_no)
        for rt, batch, key_fields, read_to in prepared.topics:
            if rt.state == TableState.FAILING:
                continue
            offsets = {**rt.committed, **read_to}
            if offsets == rt.committed:
                continue  # everything was held back: nothing to commit yet
            t0 = time.monotonic()
            try:
                plan = self._plan_table(rt, batch, key_fields, len(pending.tasks), offsets)
            except (SchemaEvolutionError, HudiError) as exc:
                self._fail(rt, str(exc))
                continue
            prepared.phases["stage"] = prepared.phases.get("stage", 0.0) + time.monotonic() - t0
            if plan is None:  # nothing applicable and no table yet: nothing to commit
                rt.committed = offsets
                continue
            pending.plans.append(plan[0])
            pending.tasks.extend(plan[1])
        pending.merge_started = time.monotonic()
        if pending.tasks:
            if background:
                pending.thread = threading.Thread(
                    target=self._run_job, args=(pending,), name="spark-merge", daemon=True
                )
                pending.thread.start()
            else:
                self._run_job(pending)
        return pending

    def _run_job(self, pending: _Pending) -> None:
        try:
            spark = self._spark_context()
            tasks = pending.tasks
            bins = pack_tasks(tasks, spark.defaultParallelism)
            shares = [[tasks[i] for i in b] for b in bins]
            done = spark.parallelize(shares, len(shares)).map(execute_tasks).collect()
            results: list[FileGroupResult | None] = [None] * len(tasks)
            for b, share_results in zip(bins, done, strict=True):
                for i, result in zip(b, share_results, strict=True):
                    results[i] = result
            assert all(r is not None for r in results)
            pending.results = results  # type: ignore[assignment]
        except BaseException as exc:  # noqa: BLE001 - re-raised by _finish in the main thread
            pending.error = exc

    def _finish(self, pending: _Pending) -> BatchReport:
        """Wait for the merge, then commit every table of the batch."""
        if pending.thread is not None:
            pending.thread.join()
        if pending.error is not None:
            raise pending.error
        phases = pending.prepared.phases
        phases["merge"] = time.monotonic() - pending.merge_started
        report_tables = self._commit_all(pending.plans, pending.tasks, pending.results, phases)
        return BatchReport(
            number=pending.number,
            messages=pending.prepared.count,
            seconds=time.monotonic() - pending.prepared.started,
            tables=report_tables,
            phases=phases,
            rewind=pending.prepared.rewind,
        )

    def merge_batch(
        self, topic: str, batch: pa.Table, key_fields: list[str], offsets: dict[int, int]
    ) -> dict[str, int]:
        """Merge and commit one already-decoded change batch into a table.

        The apply path without Kafka and decoding: what benchmarks of the merge use.
        """
        rt = self.tables.get(topic) or self._open_table(topic)
        if rt is None:
            raise TableNameError(f"topic {topic!r} is not replicated")
        planned = self._plan_table(rt, batch, key_fields, 0, offsets)
        if planned is None:
            return {}
        pending = _Pending(prepared=_Prepared(count=batch.num_rows, started=time.monotonic()))
        pending.plans, pending.tasks = [planned[0]], planned[1]
        pending.merge_started = time.monotonic()
        self._run_job(pending)
        return self._finish(pending).tables[rt.name]

    def _commit_all(
        self,
        plans: list[_Plan],
        tasks: list[FileGroupTask],
        results: list[FileGroupResult],
        phases: dict[str, float],
    ) -> dict[str, dict[str, int]]:
        faults.maybe_crash("files_written")
        t0 = time.monotonic()
        by_path: dict[str, list[FileGroupResult]] = {}
        for task, res in zip(tasks, results, strict=True):
            by_path.setdefault(task.table_path, []).append(res)
        report_tables: dict[str, dict[str, int]] = {}
        for plan in plans:
            report_tables[plan.rt.name] = self._commit(plan, by_path.get(str(plan.rt.path), []))
        phases["commit"] = time.monotonic() - t0
        return report_tables

    def _commit(self, plan: _Plan, results: list[FileGroupResult]) -> dict[str, int]:
        rt, table = plan.rt, plan.rt.hudi
        assert table is not None
        total = MergeCounts()
        stats = []
        for r in results:
            total.add(r.counts)
            if r.file_name:
                stats.append(
                    WriteStat(
                        file_id=r.file_id,
                        path=r.file_name,
                        prev_commit=r.prev_commit,
                        num_writes=r.num_writes,
                        num_deletes=r.counts.deletes + r.counts.truncated,
                        num_update_writes=r.counts.updates,
                        num_inserts=r.counts.inserts,
                        total_write_bytes=r.file_size,
                        file_size_in_bytes=r.file_size,
                        base_file=r.base_file,
                    )
                )
        faults.maybe_crash("before_commit")
        table.commit(plan.instant, stats, plan.schema, plan.extra)
        faults.maybe_crash("after_commit")
        shutil.rmtree(self.work / "staging" / rt.name / plan.instant, ignore_errors=True)
        rt.committed = plan.offsets
        s = rt.stats
        s.inserts += total.inserts
        s.updates += total.updates
        s.deletes += total.deletes
        s.late += total.late
        s.toast_unresolved += total.toast_unresolved
        s.commits += 1
        if s.commits % 10 == 0:
            table.clean(self.cfg.hudi.clean_retain_commits)
            self._sweep_tombstones(table)
        return {
            "inserts": total.inserts,
            "updates": total.updates,
            "deletes": total.deletes,
            "late": total.late,
            "truncated": total.truncated,
            "toast_unresolved": total.toast_unresolved,
        }

    def _plan_table(
        self,
        rt: TableRuntime,
        batch: pa.Table | None,
        key_fields: list[str],
        first_task: int,
        offsets: dict[int, int],
    ) -> tuple[_Plan, list[FileGroupTask]] | None:
        """Create/open the table, start an instant and stage one task per touched group."""
        has_rows = batch is not None and batch.num_rows > 0
        if rt.hudi is None:
            if not has_rows or not key_fields:
                return None
            assert batch is not None
            schema = evolve_schema(None, batch.schema)
            rt.path.mkdir(parents=True, exist_ok=True)
            rt.hudi = HudiTable.create(
                rt.path,
                rt.name,
                key_fields,
                PRECOMBINE,
                self.cfg.hudi.num_buckets,
                schema,
                table_type=self.cfg.hudi.table_type,
            )
        table = rt.hudi
        if has_rows and key_fields and list(key_fields) != list(table.record_key_fields):
            raise SchemaEvolutionError(
                f"the primary key changed from ({', '.join(table.record_key_fields)}) to "
                f"({', '.join(key_fields)})",
                hint=f"a key change redefines the table: move {rt.path} away and restart "
                "to rebuild it from the topic",
            )
        current = table.arrow_schema()
        schema = evolve_schema(current, batch.schema) if has_rows and batch is not None else current
        assert schema is not None
        truncate = None
        keyed = None
        if has_rows:
            assert batch is not None
            ops = batch.column(OP)
            is_truncate = pc.equal(ops, OP_TRUNCATE)
            if pc.any(is_truncate).as_py():
                t_rows = batch.filter(is_truncate).select([POS, POS_SUB])
                pairs = sorted(
                    (p, s or 0) for p, s in zip(*(c.to_pylist() for c in t_rows.columns), strict=True)
                    if p is not None
                )
                truncate = pairs[-1] if pairs else None
                rt.stats.truncates += len(pairs)
            if batch.column(KEY).null_count:
                keyed = batch.filter(pc.is_valid(batch.column(KEY)))  # truncates
            else:
                keyed = batch
            keyed = _inherit_tail(keyed, rt.tail)
            ts = pc.max(batch.column(SOURCE_TS)).as_py()
            if ts is not None:
                rt.max_source_ts = max(ts, rt.max_source_ts or 0)
                rt.stats.last_source_ts_ms = rt.max_source_ts
        if truncate is not None and (rt.floor is None or truncate > rt.floor):
            floor_after = truncate
        else:
            floor_after = rt.floor
        extra = {
            "deltastreamer.checkpoint.key": format_checkpoint(rt.topic, offsets),
            TOPIC_KEY: rt.topic,
        }
        if floor_after is not None:
            extra[TRUNCATE_KEY] = f"{floor_after[0]}:{floor_after[1]}"
        if rt.max_source_ts is not None:
            extra[MAX_TS_KEY] = str(rt.max_source_ts)
        if rt.tail:
            extra[TAIL_KEY] = json.dumps(rt.tail, separators=(",", ":"))
        if rt.gtid_lineages:
            extra[GTID_KEY] = json.dumps(rt.gtid_lineages, separators=(",", ":"))
        instant = table.new_instant_time()
        table.start_commit(instant)
        plan = _Plan(rt, instant, offsets, schema, extra)
        options = self._merge_options(rt, table, truncate)
        rt.floor = floor_after
        groups = table.file_groups()
        # Which buckets get a task: those with events, and every group on a truncate.
        chunks: dict[int, pa.Table] = {}
        if keyed is not None and keyed.num_rows:
            buckets = bucket_ids(keyed.column(KEY), table.num_buckets)
            order = np.argsort(buckets, kind="stable")
            sorted_buckets = buckets[order]
            keyed = keyed.take(pa.array(order))
            present = np.unique(sorted_buckets)
            starts = np.searchsorted(sorted_buckets, present, side="left")
            ends = np.searchsorted(sorted_buckets, present, side="right")
            for b, lo, hi in zip(present.tolist(), starts, ends, strict=True):
                chunks[b] = keyed.slice(int(lo), int(hi - lo))
        touched = sorted(set(chunks) | (set(groups) if truncate is not None else set()))
        if not touched:
            return plan, []
        stage = self.work / "staging" / rt.name / instant
        stage.mkdir(parents=True, exist_ok=True)
        schema_ipc = schema.serialize().to_pybytes()
        avro = avro_schema_json(file_schema(schema), table.name) if table.is_mor else ""
        rewrite = self._rewrites(table, groups, touched, schema, truncate is not None)
        tasks = []
        for i, b in enumerate(touched):
            part = first_task + i
            current_slice = groups.get(b)
            file_id = current_slice.file_id if current_slice else bucket_file_id(b)
            append = b not in rewrite
            if append:
                assert current_slice is not None
                version = 1 + max(
                    (LogFileName.parse(n).version for n in current_slice.log_files), default=0
                )
                file_name = LogFileName(
                    file_id, current_slice.instant, version, part, instant
                ).name
            else:
                file_name = base_file_name(file_id, f"{part}-1-0", instant)
            events_file = None
            if b in chunks:
                events_file = stage / f"bucket-{b:08d}.arrow"
                chunk = chunks[b]
                with pa.OSFile(str(events_file), "wb") as sink:
                    with pa.ipc.new_file(sink, chunk.schema) as writer:
                        writer.write_table(chunk)
            tasks.append(
                FileGroupTask(
                    table_path=str(rt.path),
                    instant=instant,
                    bucket=b,
                    file_id=file_id,
                    file_name=file_name,
                    prev_file=str(current_slice.path) if current_slice else None,
                    prev_instant=current_slice.instant if current_slice else None,
                    events_file=str(events_file) if events_file else None,
                    data_schema_ipc=schema_ipc,
                    task_partition=part,
                    options=options,
                    driver_pid=os.getpid(),
                    prev_logs=current_slice.log_files if current_slice else (),
                    state_instant=current_slice.state_instant if current_slice else None,
                    append=append,
                    avro_schema=avro,
                    weight=self._task_weight(current_slice, chunks.get(b), append),
                )
            )
        return plan, tasks

    @staticmethod
    def _task_weight(current: FileSlice | None, events: pa.Table | None, append: bool) -> int:
        """Rough bytes a task reads and writes: all of the slice for a rewrite, about the
        key and position columns of it for an append, plus its events."""
        stored = current.base_size + current.log_size if current else 0
        return (stored // 8 if append else stored) + (events.nbytes if events is not None else 0)

    def _rewrites(
        self,
        table: HudiTable,
        groups: dict[int, FileSlice],
        touched: list[int],
        schema: pa.Schema,
        truncate: bool,
    ) -> set[int]:
        """The touched buckets that get a new base file; the others get a log file (MOR).

        Copy-on-Write rewrites every touched group. Merge-on-Read must rewrite a group
        without a slice, every group on a truncate, and a group whose base file has an
        older schema (a log block has its base file's columns). It compacts a group once
        its logs reach ``hudi.compaction_max_log_files`` files or
        ``hudi.compaction_max_log_ratio`` of its base file (small base files count as
        ``COMPACTION_MIN_BASE_BYTES``: rewriting them is cheap either way). Uniform keys
        make every group due at once, so at most a quarter of the table's groups are
        compacted per batch, fullest first, unless a group is twice over the file limit:
        a batch's latency never includes a whole-table rewrite.
        """
        if not table.is_mor or truncate:
            return set(touched)
        cfg = self.cfg.hudi
        must, due = set(), []
        for b in touched:
            current = groups.get(b)
            if current is None or table.schema_at(current.instant) != schema:
                must.add(b)
                continue
            files = len(current.log_files)
            fullness = max(
                files / cfg.compaction_max_log_files,
                current.log_size
                / (cfg.compaction_max_log_ratio * max(current.base_size, COMPACTION_MIN_BASE_BYTES)),
            )
            if files >= 2 * cfg.compaction_max_log_files:
                must.add(b)
            elif fullness >= 1:
                due.append((fullness, b))
        budget = max(1, -(-len(groups) // 4))
        return must | {b for _, b in sorted(due, reverse=True)[:budget]}

    def _merge_options(
        self, rt: TableRuntime, table: HudiTable, truncate: tuple[int, int] | None
    ) -> MergeOptions:
        min_ts = keep_after = None
        retain = self.cfg.hudi.clean_retain_commits
        completed = table.completed_instants()
        if rt.max_source_ts is not None and len(completed) >= retain:
            retention_ms = int(self.cfg.replicator.tombstone_retention_hours * 3_600_000)
            min_ts = rt.max_source_ts - retention_ms
            keep_after = completed[-retain]
        return MergeOptions(
            truncate=truncate,
            floor=rt.floor,
            toast_placeholder=self.cfg.source.toast_placeholder,
            tombstone_min_ts=min_ts,
            tombstone_keep_after=keep_after,
        )

    def _quarantine(self, rt: TableRuntime, bad: list[Any]) -> None:
        """Append undecodable messages, with coordinates and raw bytes, to the dead letters."""
        self.deadletter_dir.mkdir(parents=True, exist_ok=True)
        path = self.deadletter_dir / f"{rt.name}.jsonl"
        with path.open("a") as fh:
            for b in bad:
                record = {
                    "topic": b.topic,
                    "partition": b.partition,
                    "offset": b.offset,
                    "reason": b.reason,
                    "key_b64": base64.b64encode(b.key).decode() if b.key else None,
                    "value_b64": base64.b64encode(b.value).decode() if b.value else None,
                }
                fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        rt.stats.bad += len(bad)
        self.log(f"{rt.name}: quarantined {len(bad)} bad message(s) to {path}")

    def failing(self) -> list[TableRuntime]:
        """Tables that stopped replicating, with their errors."""
        return [rt for rt in self.tables.values() if rt.state == TableState.FAILING]

    def status(self) -> list[dict[str, Any]]:
        """A snapshot of every table's state and counters."""
        return [
            {"table": rt.name, "topic": rt.topic, "state": rt.state, "error": rt.error,
             **rt.stats.__dict__}
            for rt in self.tables.values()
        ]


__all__ = ["BatchReport", "Record", "Replicator", "TableState"]
