"""The replication loop: source -> decode -> stage -> Spark merge -> Hudi commit.

Exactly once: a batch becomes visible only when a table's completed commit appears, and
that commit carries the Kafka positions (``deltastreamer.checkpoint.key``) that produced
it. On start every table rolls back instants that never completed and the consumer is
positioned at each table's own checkpoint. Kafka group offsets are committed after the
Hudi commits, for lag tools only.

One micro-batch commits one instant per table that received messages. All file groups
of all tables touched by the batch are merged in a single Spark job, one task per file
group.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine import faults
from engine.config import Config
from engine.decode.debezium_json import decode_debezium_json
from engine.errors import CdcError, HudiError, SchemaEvolutionError, TableNameError
from engine.hudi.bucket_index import bucket_file_id, bucket_ids
from engine.hudi.table import HudiTable, WriteStat, base_file_name
from engine.merge import FileGroupResult, FileGroupTask, execute_task
from engine.model import (
    CONTROL_COLUMNS,
    KEY,
    OP,
    OP_TRUNCATE,
    POS,
    POS_SUB,
    REPLICA_CDC_COLUMNS,
    SOURCE_TS,
)
from engine.naming import table_name_for_topic, table_path
from engine.source import KafkaSource

PRECOMBINE = POS
CDC_FIELDS = [
    pa.field(REPLICA_CDC_COLUMNS[0], pa.string()),
    pa.field(REPLICA_CDC_COLUMNS[1], pa.int64()),
    pa.field(REPLICA_CDC_COLUMNS[2], pa.int64()),
    pa.field(REPLICA_CDC_COLUMNS[3], pa.int64()),
]


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
    stale: int = 0
    bad: int = 0
    ignored: int = 0
    batches: int = 0
    commits: int = 0
    rows_applied: int = 0
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
    lag_messages: int
    #: seconds spent per phase: poll, decode, stage, merge (Spark job), commit
    phases: dict[str, float] = field(default_factory=dict)


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


def evolve_schema(current: pa.Schema | None, batch_columns: pa.Schema) -> pa.Schema:
    """The table's data schema after a batch: existing columns, then new ones.

    Safe widenings are applied; anything else raises SchemaEvolutionError.
    """
    row_fields = [f for f in batch_columns if f.name not in CONTROL_COLUMNS]
    if current is None:
        return pa.schema([f.with_nullable(True) for f in row_fields] + CDC_FIELDS)
    fields = {f.name: f for f in current}
    out = list(current)
    for f in row_fields:
        old = fields.get(f.name)
        if old is None:
            out.insert(len(out) - len(CDC_FIELDS), f.with_nullable(True))
        elif old.type != f.type and not pa.types.is_null(f.type):
            try:
                merged = pa.unify_schemas(
                    [pa.schema([old]), pa.schema([f])], promote_options="permissive"
                ).field(0)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                raise SchemaEvolutionError(
                    f"column {f.name!r} changed from {old.type} to {f.type}",
                    hint="this change cannot be applied in place; recreate the table",
                ) from None
            out[out.index(old)] = merged.with_nullable(True)
    return pa.schema(out)


def _ipc_schema(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


class Replicator:
    """Runs micro-batches until stopped or, with ``until_caught_up``, caught up."""

    def __init__(
        self,
        config: Config,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        log: Callable[[str], None] | None = None,
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
        self.source: KafkaSource | None = None
        self.deadletter_dir = self.work / "deadletter"

    # -- lifecycle -------------------------------------------------------------------
    def request_stop(self, *_args: Any) -> None:
        """Stop after the batch in flight (signal handler)."""
        self._stop = True

    def run(self, until_caught_up: bool = False, max_batches: int | None = None) -> None:
        """Replicate. Returns when stopped, caught up, or after ``max_batches``."""
        from engine.spark import get_spark, warm_up

        self.target.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        spark = get_spark(
            self.cfg.spark.master, self.cfg.spark.driver_memory, self.cfg.spark.options
        )
        warm_up(spark)
        self.source = KafkaSource(self.cfg.source, self.cfg.replicator.max_batch_events)
        self._refresh_topics()
        goal = self.source.end_offsets(self.source.assigned) if until_caught_up else None
        previous = None
        if threading_main():
            previous = signal.signal(signal.SIGINT, self.request_stop)
            signal.signal(signal.SIGTERM, self.request_stop)
        try:
            while not self._stop:
                if goal is not None and self._caught_up(goal):
                    break
                if max_batches is not None and self._batch_no >= max_batches:
                    break
                if time.monotonic() - self._last_refresh > self.cfg.replicator.topic_refresh_seconds:
                    self._refresh_topics()
                self._run_batch(spark)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self.source.close()

    def _caught_up(self, goal: dict[tuple[str, int], int]) -> bool:
        for (topic, part), end in goal.items():
            rt = self.tables.get(topic)
            if rt is None or rt.state == TableState.FAILING:
                continue
            if rt.committed.get(part, 0) < end:
                return False
        return True

    # -- topics and tables -------------------------------------------------------------
    def _refresh_topics(self) -> None:
        assert self.source is not None
        self._last_refresh = time.monotonic()
        positions: dict[tuple[str, int], int | None] = {}
        for topic, parts in self.source.discover().items():
            rt = self.tables.get(topic)
            if rt is None:
                rt = self._open_table(topic)
                if rt is None:
                    continue
            for part in parts:
                if part not in rt.partitions:
                    rt.partitions.append(part)
                    positions[(topic, part)] = rt.committed.get(part)
        self.source.assign(positions)

    def _open_table(self, topic: str) -> TableRuntime | None:
        try:
            name = table_name_for_topic(topic)
            path = table_path(self.target, name)
        except TableNameError as exc:
            self.log(f"skipping topic {topic!r}: {exc.message}")
            return None
        if name in self._names and self._names[name] != topic:
            rt = TableRuntime(topic, name, path, state=TableState.FAILING)
            rt.error = f"table name {name!r} is already used by topic {self._names[name]!r}"
            self.tables[topic] = rt
            self.log(rt.error)
            return None
        self._names[name] = topic
        rt = TableRuntime(topic, name, path)
        if HudiTable.exists(path):
            rt.hudi = HudiTable.open(path)
            rolled = rt.hudi.rollback_pending()
            if rolled:
                self.log(f"{name}: rolled back unfinished instants {', '.join(rolled)}")
            rt.committed = parse_checkpoint(rt.hudi.checkpoint(), topic)
        staging = self.work / "staging" / name
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        self.tables[topic] = rt
        return rt

    # -- one micro-batch -------------------------------------------------------------------
    def _run_batch(self, spark: Any) -> None:
        assert self.source is not None
        started = time.monotonic()
        messages = self.source.poll(
            self.cfg.replicator.max_batch_events, self.cfg.replicator.max_batch_seconds
        )
        if not messages:
            return
        phases = {"poll": time.monotonic() - started}
        faults.maybe_crash("consumed")
        self._batch_no += 1
        grouped: dict[str, tuple[list, list, list, list]] = {}
        for m in messages:
            lists = grouped.get(m.topic())
            if lists is None:
                lists = grouped[m.topic()] = ([], [], [], [])
            lists[0].append(m.key())
            lists[1].append(m.value())
            lists[2].append(m.partition())
            lists[3].append(m.offset())

        plans: list[tuple[TableRuntime, str, dict[int, int], pa.Schema | None]] = []
        tasks: list[FileGroupTask] = []
        report_tables: dict[str, dict[str, int]] = {}
        for topic, (keys, values, parts, offs) in grouped.items():
            rt = self.tables.get(topic)
            if rt is None or rt.state == TableState.FAILING:
                continue
            next_offsets = dict(rt.committed)
            for p, o in zip(parts, offs, strict=True):
                if o + 1 > next_offsets.get(p, 0):
                    next_offsets[p] = o + 1
            t0 = time.monotonic()
            result = decode_debezium_json(topic, keys, values, parts, offs)
            phases["decode"] = phases.get("decode", 0.0) + time.monotonic() - t0
            rt.stats.ignored += result.ignored
            if result.bad:
                self._quarantine(rt, result.bad)
            batch = result.batch
            t0 = time.monotonic()
            try:
                planned = self._plan_table(rt, batch, result.key_fields, len(tasks))
            except (SchemaEvolutionError, HudiError) as exc:
                rt.state, rt.error = TableState.FAILING, str(exc)
                self.log(f"{rt.name}: FAILING: {exc}")
                continue
            if planned is None:  # nothing applicable and no table yet: nothing to commit
                rt.committed = next_offsets
                continue
            instant, data_schema, table_tasks = planned
            phases["stage"] = phases.get("stage", 0.0) + time.monotonic() - t0
            tasks.extend(table_tasks)
            plans.append((rt, instant, next_offsets, data_schema))

        results: list[FileGroupResult] = []
        t0 = time.monotonic()
        if tasks:
            results = spark.sparkContext.parallelize(tasks, len(tasks)).map(execute_task).collect()
        phases["merge"] = time.monotonic() - t0
        faults.maybe_crash("files_written")
        t0 = time.monotonic()
        by_path: dict[str, list[FileGroupResult]] = {}
        for task, res in zip(tasks, results, strict=True):
            by_path.setdefault(task.table_path, []).append(res)

        group_offsets: dict[tuple[str, int], int] = {}
        for rt, instant, next_offsets, data_schema in plans:
            assert rt.hudi is not None and data_schema is not None
            table_results = by_path.get(str(rt.path), [])
            stats = []
            counts = {"inserts": 0, "updates": 0, "deletes": 0, "stale": 0}
            for r in table_results:
                c = r.counts
                counts["inserts"] += c.inserts
                counts["updates"] += c.updates
                counts["deletes"] += c.deletes
                counts["stale"] += c.stale
                if r.file_name:
                    stats.append(
                        WriteStat(
                            file_id=r.file_id,
                            path=r.file_name,
                            prev_commit=r.prev_commit,
                            num_writes=r.num_writes,
                            num_deletes=c.deletes,
                            num_update_writes=c.updates,
                            num_inserts=c.inserts,
                            total_write_bytes=r.file_size,
                            file_size_in_bytes=r.file_size,
                        )
                    )
            extra = {
                "deltastreamer.checkpoint.key": format_checkpoint(rt.topic, next_offsets),
                "cdcctl.bucket.num": str(self.cfg.hudi.num_buckets),
                "cdcctl.bucket.hash.field": ",".join(self._key_fields(rt)),
                "cdcctl.source.topic": rt.topic,
            }
            faults.maybe_crash("before_commit")
            rt.hudi.commit(instant, stats, data_schema, extra)
            faults.maybe_crash("after_commit")
            shutil.rmtree(self.work / "staging" / rt.name / instant, ignore_errors=True)
            rt.committed = next_offsets
            for p, o in next_offsets.items():
                group_offsets[(rt.topic, p)] = o
            s = rt.stats
            s.inserts += counts["inserts"]
            s.updates += counts["updates"]
            s.deletes += counts["deletes"]
            s.stale += counts["stale"]
            s.rows_applied += counts["inserts"] + counts["updates"] + counts["deletes"]
            s.commits += 1
            s.batches += 1
            report_tables[rt.name] = counts
            if s.commits % 10 == 0:
                rt.hudi.clean(self.cfg.hudi.clean_retain_commits)
        phases["commit"] = time.monotonic() - t0
        self.source.commit_group_offsets(group_offsets)
        ends = self.source.end_offsets(self.source.assigned, cached=True)
        lag = 0
        for (topic, part), end in ends.items():
            rt = self.tables.get(topic)
            if rt is not None and end >= 0:
                lag += max(0, end - rt.committed.get(part, 0))
        report = BatchReport(
            number=self._batch_no,
            messages=len(messages),
            seconds=time.monotonic() - started,
            tables=report_tables,
            lag_messages=lag,
            phases=phases,
        )
        if self.on_batch:
            self.on_batch(report)

    def _key_fields(self, rt: TableRuntime) -> list[str]:
        assert rt.hudi is not None
        return rt.hudi.record_key_fields

    def _plan_table(
        self, rt: TableRuntime, batch: pa.Table | None, key_fields: list[str], first_task: int
    ) -> tuple[str, pa.Schema, list[FileGroupTask]] | None:
        """Create/open the table, start an instant and stage one task per touched group."""
        if rt.hudi is None:
            if batch is None or batch.num_rows == 0 or not key_fields:
                return None
            schema = evolve_schema(None, batch.schema)
            rt.path.mkdir(parents=True, exist_ok=True)
            rt.hudi = HudiTable.create(
                rt.path, rt.name, key_fields, PRECOMBINE, self.cfg.hudi.num_buckets, schema
            )
        table = rt.hudi
        current = table.arrow_schema()
        schema = current if batch is None else evolve_schema(current, batch.schema)
        instant = table.new_instant_time()
        table.start_commit(instant)
        tasks: list[FileGroupTask] = []
        if batch is None or batch.num_rows == 0:
            return instant, schema, tasks
        keyed = batch.filter(pc.is_valid(batch.column(KEY)))
        if pc.any(pc.equal(batch.column(OP), OP_TRUNCATE)).as_py():
            raise HudiError(
                f"truncate events on {rt.topic} are not applied by this version",
                hint="see README: supported and not supported",
            )
        if keyed.num_rows == 0:
            return instant, schema, tasks
        ts = pc.max(keyed.column(SOURCE_TS)).as_py()
        if ts is not None:
            rt.stats.last_source_ts_ms = max(ts, rt.stats.last_source_ts_ms or 0)
        num_buckets = int(table.num_buckets)
        buckets = bucket_ids(keyed.column(KEY), num_buckets)
        order = np.argsort(buckets, kind="stable")
        sorted_buckets = buckets[order]
        keyed = keyed.take(pa.array(order))
        present = np.unique(sorted_buckets)
        starts = np.searchsorted(sorted_buckets, present, side="left")
        ends = np.searchsorted(sorted_buckets, present, side="right")
        groups = table.file_groups()
        stage = self.work / "staging" / rt.name / instant
        stage.mkdir(parents=True, exist_ok=True)
        schema_ipc = _ipc_schema(schema)
        for i, (b, lo, hi) in enumerate(zip(present.tolist(), starts, ends, strict=True)):
            part = first_task + i
            current_slice = groups.get(b)
            file_id = current_slice.file_id if current_slice else bucket_file_id(b)
            name = base_file_name(file_id, f"{part}-1-0", instant)
            events_file = stage / f"bucket-{b:08d}.arrow"
            chunk = keyed.slice(int(lo), int(hi - lo))
            with pa.OSFile(str(events_file), "wb") as sink, pa.ipc.new_file(sink, chunk.schema) as w:
                w.write_table(chunk)
            tasks.append(
                FileGroupTask(
                    table_path=str(rt.path),
                    instant=instant,
                    bucket=b,
                    file_id=file_id,
                    file_name=name,
                    prev_file=str(current_slice.path) if current_slice else None,
                    prev_instant=current_slice.instant if current_slice else None,
                    events_file=str(events_file),
                    data_schema_ipc=schema_ipc,
                    task_partition=part,
                    driver_pid=os.getpid(),
                )
            )
        return instant, schema, tasks

    def _quarantine(self, rt: TableRuntime, bad: list[Any]) -> None:
        """Append undecodable messages, with coordinates and raw bytes, to the dead letters."""
        self.deadletter_dir.mkdir(parents=True, exist_ok=True)
        path = self.deadletter_dir / f"{rt.name}.jsonl"
        with path.open("a") as fh:
            for b in bad:
                fh.write(
                    json.dumps(
                        {
                            "topic": b.topic,
                            "partition": b.partition,
                            "offset": b.offset,
                            "reason": b.reason,
                            "key_b64": base64.b64encode(b.key).decode() if b.key else None,
                            "value_b64": base64.b64encode(b.value).decode() if b.value else None,
                        }
                    )
                    + "\n"
                )
            fh.flush()
        rt.stats.bad += len(bad)
        self.log(f"{rt.name}: quarantined {len(bad)} bad message(s) to {path}")

    def status(self) -> list[dict[str, Any]]:
        """A snapshot of every table's state and counters."""
        out = []
        for rt in self.tables.values():
            out.append(
                {
                    "table": rt.name,
                    "topic": rt.topic,
                    "state": rt.state,
                    "error": rt.error,
                    **rt.stats.__dict__,
                }
            )
        return out


def threading_main() -> bool:
    """Signal handlers can only be installed from the main thread."""
    import threading

    return threading.current_thread() is threading.main_thread()


__all__ = ["BatchReport", "CdcError", "Replicator", "TableState"]
