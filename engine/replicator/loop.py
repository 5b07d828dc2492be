"""The replication loop: poll -> decode -> plan -> merge -> commit -> report, and nothing else.

Exactly once: a batch becomes visible only when a table's completed commit appears, and
that commit carries the Kafka positions that produced it. On start every table rolls
back instants that never completed and the consumer is positioned at each table's own
checkpoint. Kafka group offsets are committed after the Hudi commits, for lag tools only.

One micro-batch commits one instant per table that received messages. All file groups
of all tables touched by the batch are merged in a single Spark job. Batches are
pipelined: batch N+1 is polled and decoded while Spark merges batch N, and N is
committed before N+1 is planned (planning reads the file slices N wrote). The stages
live in their packages: :mod:`engine.source`, :mod:`engine.decode`,
:mod:`engine.replicator.planning`, :mod:`engine.merge`, :mod:`engine.hudi`.
:meth:`Replicator.apply` runs one batch from given messages (no Kafka), which is how the
property tests drive the real engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import json
import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine import faults
from engine.config import DEFAULT_CLEAN_RETAIN_HOURS, Config
from engine.decode import BadMessage, DecodeResult, RecordBatch, control, decoder_for
from engine.decode.ddl import parse_schema_change
from engine.decode.gtid import gtid_positions
from engine.decode.limits import DECODER_FAILED, guarded
from engine.decode.messages import decode_messages
from engine.errors import (
    CdcError,
    HudiError,
    RetriesExhausted,
    SchemaEvolutionError,
    SourceError,
    SparkJobError,
    StorageError,
    TableNameError,
    WriterLockError,
)
from engine.files import private_dir
from engine.hudi import ownership
from engine.hudi.options import COUNTS_KEY
from engine.lock import LOCK_NAME, Locks
from engine.merge import MergeCounts, MergeTask, TaskResult, run_merge_job
from engine.model import SOURCE_TS, TX_ID
from engine.replicator import epochs, trimmed
from engine.replicator.ddl import (
    apply_column_ops,
    cut_at_position,
    decide,
    drop_unseen_columns,
    record,
    truncate_row,
)
from engine.replicator.deadletter import (
    REPLAYED_KEY,
    Coordinates,
    DeadLetters,
    ReplayOutcome,
    coordinates_text,
)
from engine.replicator.planning import TablePlan, plan_table, retention
from engine.replicator.progress import TableProgress
from engine.replicator.reset import drop_replica
from engine.replicator.retry import (
    Incident,
    storage_cause,
    task_error,
    task_storage_error,
    transient_cause,
)
from engine.replicator.tables import TableRuntime, Tables
from engine.source import (
    KafkaSource,
    Record,
    TopicRecords,
    TransactionTracker,
    apply_cuts,
    collector_paused,
    data_collection,
    group_by_topic,
    transaction_topic,
)
from engine.source.records import next_offsets
from engine.state import Request, StateRecorder, TableCounters, TableState, TableStatus
from engine.state.metrics import MetricsServer, serve_metrics
from engine.state.recorder import add_commit_counts

log = logging.getLogger("cdcctl.replicator")

#: Every this many commits of a table, old file slices are cleaned.
CLEAN_EVERY_COMMITS = 10
#: How often the lag of every table is measured (also while idle).
LAG_EVERY_SECONDS = 3.0
#: How often control requests are looked for while a batch merges.
CONTROL_EVERY_SECONDS = 0.5
#: Source times of a table's batch sampled for the latency percentiles.
LATENCY_SAMPLE = 256


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
class _Decoded:
    """One table's decoded share of a batch."""

    rt: TableRuntime
    batch: pa.Table | None
    key_fields: list[str]
    #: Next offset per partition after what this batch applies.
    read_to: dict[int, int]
    #: Undecodable messages of this share, quarantined (counted with its commit).
    bad: int = 0
    #: ``errors.tolerance = "none"``: why the table stops once this share is committed.
    fail: str | None = None
    #: A replay of dead letters: the ones this share applies (checkpoint unchanged).
    replayed: list[Coordinates] = field(default_factory=list)
    #: Schema change events handled with this share, and the column drops and renames
    #: they apply (``source.ddl = "apply"``).
    ddl_events: int = 0
    drop_columns: list[str] = field(default_factory=list)
    renames: dict[str, str] = field(default_factory=dict)
    #: Those schema change events (see ``TableRuntime.uncommitted_ddl``).
    ddl_items: list = field(default_factory=list)
    #: The share holds the table's last snapshot record (DecodeResult.snapshot_ended).
    snapshot_ended: bool = False
    #: The value schemas of its events (DecodeResult.row_schemas).
    row_schemas: list = field(default_factory=list)


@dataclass
class _Prepared:
    """A decoded batch waiting to be planned."""

    count: int
    started: float
    tables: list[_Decoded] = field(default_factory=list)
    rewind: dict[tuple[str, int], int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class _Pending:
    """A planned batch whose Spark job may still be running."""

    prepared: _Prepared
    number: int = 0
    plans: list[TablePlan] = field(default_factory=list)
    results: list[TaskResult] = field(default_factory=list)
    thread: threading.Thread | None = None
    error: BaseException | None = None
    merge_started: float = 0.0
    #: Per table: undecodable messages, and a sample of its events' source times.
    bad: dict[str, int] = field(default_factory=dict)
    source_ts: dict[str, np.ndarray] = field(default_factory=dict)
    #: Per table: why it stops once this batch is committed (``errors.tolerance``).
    fail: dict[str, str] = field(default_factory=dict)

    @property
    def tasks(self) -> list[MergeTask]:
        return [t for plan in self.plans for t in plan.tasks]


def _spark_reason(exc: BaseException) -> str:
    """The telling line of a failed Spark job (Py4J's own first line says only which
    call failed; the Java exception's message says why)."""
    text = ""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            text = str(java.getMessage() or "")
    lines = [line.strip() for line in (text or str(exc)).splitlines() if line.strip()]
    line = lines[0] if lines else type(exc).__name__
    # "Job aborted due to stage failure: ... SparkException: Python worker exited
    # unexpectedly (crashed). Consider ...": the innermost exception's first sentence.
    inner = line.rsplit("Exception: ", 1)[-1].split(". ", 1)[0].strip()
    line = inner or line
    return line if len(line) <= 300 else line[:297] + "..."


def _commit_counts(writer: Any, instant: str) -> dict[str, int]:
    """What a completed commit recorded it applied (``cdcctl.counts``)."""
    extra = writer.table.commit_metadata(instant).get("extraMetadata") or {}
    counts: dict[str, int] = json.loads(extra.get(COUNTS_KEY) or "{}")
    return counts


class Replicator:
    """Runs micro-batches until stopped or, with ``until_caught_up``, caught up."""

    def __init__(
        self,
        config: Config,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        spark: Any = None,
        config_path: str | None = None,
    ) -> None:
        self.cfg = config
        self.config_path = config_path
        #: The state store's writer, while :meth:`run` runs.
        self.recorder: StateRecorder | None = None
        #: The Prometheus endpoint (``replicator.metrics_port``), once started.
        self.metrics: MetricsServer | None = None
        self._last_lag = 0.0
        self.target = config.target_path()
        self.work = config.work_path()
        self.staging = self.work / "staging"
        self.on_batch = on_batch
        self.tables = Tables(config, self.staging)
        self.dead_letters = DeadLetters(self.work / "deadletter")
        #: Tables that stop once their batch in flight commits (``errors.tolerance``):
        #: nothing after their bad message is read into a later batch.
        self._stopping: set[str] = set()
        self.decode = decoder_for(config)
        #: Logical decoding messages kept as a table, behind the same limits.
        self._decode_messages = guarded(
            decode_messages,
            max_message_bytes=config.source.max_message_bytes,
            max_nesting_depth=config.source.max_nesting_depth,
        )
        self.transactions = TransactionTracker(self.decode.documents)
        #: Transaction-metadata topics known to exist: only their tables' transactions
        #: can be confirmed complete, so only those are held back until their END.
        self._tx_topics: set[str] = set()
        self._tx_warned: set[str] = set()
        #: Topics known to hold rows (never checked for being a non-table topic again),
        #: and topics of logical decoding messages kept as tables.
        self._row_topics: set[str] = set()
        self._message_topics: set[str] = set()
        self.source: KafkaSource | None = None
        self._stop = False
        self._batch_no = 0
        self._last_refresh = 0.0
        self._spark = spark
        self._spark_boot: Future[Any] | None = None
        self._pending: _Pending | None = None
        self._goal: dict[tuple[str, int], int] | None = None
        self._goal_probe: Future[dict[tuple[str, int], int]] | None = None
        #: next offset read (decoded, maybe not yet committed) per partition
        self._consumed: dict[tuple[str, int], int] = {}
        #: ``_consumed`` as of the previous topic refresh (partitions idle since then are
        #: checked for gaps).
        self._seen: dict[tuple[str, int], int] = {}
        #: Per partition, (high watermark, exact end) as last probed: while the watermark
        #: stays, the exact end does too (the Tansu broker's watermark lags within a batch).
        self._verified_ends: dict[tuple[str, int], tuple[int, int]] = {}
        #: A transient failure of the whole replicator (Kafka, Spark, storage) being
        #: retried; tables have incidents of their own for their storage errors.
        self._incident: Incident | None = None
        #: Commits made (a turn that made one ends an incident).
        self._commits = 0
        self._probe_pool: ThreadPoolExecutor | None = None

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
            if self._spark_boot is None:
                raise RuntimeError("Spark was not started")
            self._spark = self._spark_boot.result()
        return self._spark

    def run(self, until_caught_up: bool = False, max_batches: int | None = None) -> None:
        """Replicate. Returns when stopped, caught up, or after ``max_batches``."""
        locks = self.tables.locks = Locks()
        try:
            try:
                self.target.mkdir(parents=True, exist_ok=True)
                private_dir(self.work)  # owner-only: state, logs, dead letters
                locks.take(self.work / LOCK_NAME, f"the work folder {self.work}")
                recorder = self.recorder = StateRecorder(self.work, self.config_path)
                recorder.started()
            except OSError as exc:  # nothing has run yet: there is nothing to retry
                raise StorageError(f"cannot start: {storage_cause(exc)}") from exc
            commits = self.cfg.hudi.clean_retain_commits
            if commits is not None:
                log.warning(
                    "hudi.clean_retain_commits = %d: cleaning keeps the newest %d commits "
                    "readable, seconds of history on a table that commits every second "
                    "(time travel, incremental pulls and long queries lose their files); "
                    "remove it to retain by time (hudi.clean_retain_hours, default %g)",
                    commits,
                    commits,
                    DEFAULT_CLEAN_RETAIN_HOURS,
                )
            metrics = None
            try:
                metrics = self._serve_metrics(recorder)
                self._run(until_caught_up, max_batches)
            except BaseException as exc:
                recorder.replicator_state("failed", str(exc) or type(exc).__name__)
                raise
            else:
                recorder.replicator_state("stopped")
            finally:
                self._sync(force=True)
                if metrics is not None:
                    metrics.close()
                recorder.close()
                self.recorder = None
        finally:
            locks.release_all()
            self.tables.locks = None

    def _serve_metrics(self, recorder: StateRecorder) -> MetricsServer | None:
        """Serve the Prometheus endpoint when ``replicator.metrics_port`` is set."""
        port = self.cfg.replicator.metrics_port
        if port is None:
            return None
        server = self.metrics = serve_metrics(recorder, self.cfg.replicator.metrics_host, port)
        log.info("metrics: %s", server.url)
        return server

    def _run(self, until_caught_up: bool, max_batches: int | None) -> None:
        from engine.spark import check_java

        check_java()  # fail fast, in one line, before anything else starts
        self._start_spark()
        # At start a broker that cannot be reached is an error at once (most likely a
        # wrong address); once running, Kafka failures are retried (_retry).
        source = self.source = KafkaSource(self.cfg.source, self.cfg.replicator.max_batch_events)
        self._refresh_topics()
        # The end offsets to catch up to are probed by a second consumer (~0.7 s) while
        # the first batch is read; until they are known the replicator is not caught up.
        self._probe_pool, self._goal, self._goal_probe = None, None, None
        if until_caught_up:
            self._probe_pool = ThreadPoolExecutor(1, thread_name_prefix="end-offsets")
            self._goal_probe = self._probe_pool.submit(source.exact_end_offsets, source.assigned)
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self.request_stop)
            signal.signal(signal.SIGTERM, self.request_stop)
        try:
            while not self._stop:
                try:
                    if not self._turn(max_batches):
                        break
                except Exception as exc:
                    cause = transient_cause(exc)
                    if cause is None:
                        raise
                    self._retry(cause)
            if self.recorder is not None and self._stop:
                self.recorder.replicator_state("stopping")
                self._sync(force=True)
            if self._pending is not None:  # the batch in flight is finished, never dropped
                pending, self._pending = self._pending, None
                self._report(self._finish(pending))
            if self.recorder is not None:  # the lag as the run ends
                self._sync(self._lag(), force=True)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            if self._probe_pool is not None:
                self._probe_pool.shutdown(wait=True)
            if self.source is not None:
                self.source.close()

    def _turn(self, max_batches: int | None) -> bool:
        """One turn of the loop: control, then a batch. False when the run is over."""
        commits = self._commits
        self._control()
        if self._stop:
            return False
        goal = self._known_goal()
        if goal is not None and self._pending is None and self._caught_up(goal):
            return False
        if max_batches is not None and self._batch_no >= max_batches:
            return False
        if time.monotonic() - self._last_refresh > self.cfg.replicator.topic_refresh_seconds:
            self._refresh_topics()
        if self.source is None:
            raise RuntimeError("the replicator is not running")
        polled = self._run_batch(self.source)
        if self._incident is not None:
            idle = not polled and self._pending is None
            if self._commits > commits or (idle and not self._incident.needs_commit):
                self._recovered()
        return True

    # -- transient failures (the rule: engine/replicator/retry.py) -----------------------
    def _retry(self, cause: str) -> None:
        """Retry a failure of the whole replicator (Kafka, Spark, storage outside one
        table's commit): every live table goes FAILING, the batch in flight is dropped,
        and after a backoff the replicator starts over from each table's checkpoint, as a
        restart would. Returns once that worked (the incident ends with the next
        successful batch), or when a stop was asked for; raises past the limit."""
        limit = self.cfg.replicator.retry_max_seconds
        read_ahead = self._pending is not None or any(
            off > self.tables[t].progress.committed.get(p, 0)
            for (t, p), off in self._consumed.items()
            if t in self.tables.by_topic
        )
        incident = self._incident
        if incident is None:
            incident = self._incident = Incident.begin(cause)
            incident.needs_commit = False
        incident.needs_commit = incident.needs_commit or read_ahead
        while True:
            incident.cause = cause
            wait = incident.next_wait(limit)
            if wait is None:
                self._give_up(incident, limit)
            for rt in self.tables:
                if rt.state.stopped or rt.state is TableState.PAUSED:
                    continue
                if rt.state is not TableState.FAILING:
                    rt.resume_state = rt.state
                rt.state, rt.error = TableState.FAILING, cause
                rt.counters.retries += 1
            message = f"{cause}; retry {incident.attempts} in {wait:.1f} s"
            log.warning("%s", message)
            if self.recorder is not None:
                self.recorder.event(None, "retry", message)
            self._discard()
            if not self._wait(wait):
                return  # stopping: each table resumes from its checkpoint at the next start
            try:
                self._reset()
                return
            except Exception as exc:
                again = transient_cause(exc)
                if again is None:
                    raise
                cause = again

    def _give_up(self, incident: Incident, limit: float) -> NoReturn:
        """The incident outlasted ``replicator.retry_max_seconds``: stop the replicator."""
        message = incident.given_up(limit)
        for rt in self.tables:
            if rt.state is TableState.FAILING:
                rt.state, rt.error, rt.held, rt.incident = TableState.FAILED, message, False, None
        raise RetriesExhausted(
            message,
            hint="fix the cause and start again: each table resumes from its last commit",
        )

    def _recovered(self) -> None:
        """The replicator's incident is over: its tables are back where they were."""
        incident, self._incident = self._incident, None
        if incident is None:
            return
        for rt in self.tables:
            if rt.state is TableState.FAILING and rt.incident is None:
                rt.state, rt.error = rt.resume_state, None
        message = incident.recovered()
        log.warning("%s", message)
        if self.recorder is not None:
            self.recorder.event(None, "retry", message)

    def _discard(self) -> None:
        """Drop the batch in flight (after its Spark job ended) and close the consumer."""
        pending, self._pending = self._pending, None
        if pending is not None and pending.thread is not None:
            while pending.thread.is_alive():
                pending.thread.join(CONTROL_EVERY_SECONDS)
        self._stopping.clear()  # bad messages of dropped batches are met again when re-read
        if self.source is not None:
            self.source.close()
            self.source = None

    def _wait(self, seconds: float) -> bool:
        """Sleep, answering control requests; False if a stop was asked for meanwhile."""
        deadline = time.monotonic() + seconds
        while not self._stop:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, CONTROL_EVERY_SECONDS))
            self._control()
        return False

    def _reset(self) -> None:
        """Start over as a restart would: every table rolls back its unfinished instants
        and reloads its progress; a new consumer reads from each table's checkpoint."""
        for rt in self.tables:
            if rt.state.stopped or rt.held:
                continue
            self.tables.reopen(rt)
            if rt.state is not TableState.PAUSED:
                rt.partitions = []  # assigned again, at the checkpoint, by _refresh_topics
        for rt in self.tables.by_topic.values():
            if rt.control is not None:  # read again from the start (nothing applies twice)
                rt.partitions, rt.progress.committed = [], {}
        self._consumed, self._seen, self._verified_ends = {}, {}, {}
        # The new consumer reads them from the start.
        self.transactions = TransactionTracker(self.decode.documents)
        self._restart_spark_if_gone()
        self.source = KafkaSource(self.cfg.source, self.cfg.replicator.max_batch_events)
        self._refresh_topics()
        if self._probe_pool is not None and self._goal is None:
            self._goal_probe = self._probe_pool.submit(
                self.source.exact_end_offsets, self.source.assigned
            )

    def _restart_spark_if_gone(self) -> None:
        """A Spark context whose JVM died is started anew (a dead Python worker is not
        a reason: Spark starts new workers for the next job)."""
        if self._spark is None:
            return
        try:
            alive = not self._spark._jsc.sc().isStopped()
        except Exception:  # noqa: BLE001 - Py4J raises several types for a dead gateway
            alive = False
        if alive:
            return
        from engine.spark import stop_spark

        log.warning("Spark's JVM is gone; starting a new one")
        with contextlib.suppress(Exception):
            stop_spark()
        self._spark, self._spark_boot = None, None
        self._start_spark()

    def _table_trouble(self, rt: TableRuntime, exc: OSError, *, committed: bool) -> None:
        """A storage error of one table: it goes FAILING and is held (not read) until its
        next try, when it is opened again and read from its checkpoint; the other
        tables go on. Past ``replicator.retry_max_seconds`` the table alone is FAILED.
        ``committed``: the error came after its commit (cleaning, archiving)."""
        limit = self.cfg.replicator.retry_max_seconds
        cause = f"{rt.name}: {storage_cause(exc)}"
        incident = rt.incident
        if incident is None:
            incident = rt.incident = Incident.begin(cause)
            incident.needs_commit = not committed
        incident.cause = cause
        wait = incident.next_wait(limit)
        if wait is None:
            rt.incident, rt.held = None, False
            self._fail(rt, incident.given_up(limit))
            return
        if rt.state is not TableState.FAILING:
            rt.resume_state = rt.state
        rt.state, rt.error, rt.held = TableState.FAILING, cause, True
        rt.counters.retries += 1
        self._stop_reading(rt)
        message = f"{cause}; retry {incident.attempts} in {wait:.1f} s"
        log.warning("%s", message)
        if self.recorder is not None:
            self.recorder.event(self._store_name(rt), "retry", message)

    def _retry_tables(self) -> None:
        """Try again the held tables whose wait is over: open each again (rolling back
        its unfinished instant) and read it from its checkpoint."""
        now = time.monotonic()
        for rt in list(self.tables):
            incident = rt.incident
            if not rt.held or incident is None or incident.retry_at > now:
                continue
            if self.source is None:
                return
            try:
                self.tables.reopen(rt)
            except OSError as exc:
                self._table_trouble(rt, exc, committed=not incident.needs_commit)
                continue
            except (HudiError, WriterLockError) as exc:
                rt.incident, rt.held = None, False
                self._fail(rt, str(exc))
                continue
            rt.held = False
            self._stopping.discard(rt.name)  # its batch was dropped: read again from its checkpoint
            self.source.assign({(rt.topic, p): rt.progress.committed.get(p) for p in rt.partitions})
            if not incident.needs_commit:
                self._table_recovered(rt)

    def _table_recovered(self, rt: TableRuntime) -> None:
        """A table's own incident is over (it committed, or had nothing to commit)."""
        incident, rt.incident = rt.incident, None
        if incident is None:
            return
        if rt.state is TableState.FAILING and self._incident is None:
            rt.state, rt.error = rt.resume_state, None
        message = incident.recovered()
        log.warning("%s", message)
        if self.recorder is not None:
            self.recorder.event(self._store_name(rt), "retry", message)

    def _known_goal(self) -> dict[tuple[str, int], int] | None:
        """The end offsets to catch up to, once probed (a probe error is raised here)."""
        if self._goal is None and self._goal_probe is not None and self._goal_probe.done():
            self._goal = self._goal_probe.result()
        return self._goal

    def _caught_up(self, goal: dict[tuple[str, int], int], *, read: bool = False) -> bool:
        """Every live goal partition is committed (or, with ``read``, read) to its end."""
        for (topic, part), end in goal.items():
            rt = self.tables.by_topic.get(topic)
            if rt is None or rt.state.stopped:
                continue
            position = rt.progress.committed.get(part, 0)
            if read:
                position = self._consumed.get((topic, part), position)
            if position < end:
                return False
        return True

    # -- topics and tables -------------------------------------------------------------
    def _refresh_topics(self) -> None:
        if self.source is None:
            raise RuntimeError("the replicator is not running")
        self._last_refresh = time.monotonic()
        positions: dict[tuple[str, int], int | None] = {}
        data_topics = self.source.discover()
        tx_topics = self.source.transaction_topics(data_topics)
        self._tx_topics.update(tx_topics)
        self.source.assign_transactions(tx_topics)
        for topic, parts in data_topics.items():
            rt = self.tables.get(topic)
            if rt is not None and rt.trouble is not None:
                # Its storage failed as it was opened: held, and opened again later.
                rt.partitions = sorted({*rt.partitions, *parts})
                trouble, rt.trouble = rt.trouble, None
                self._table_trouble(rt, trouble, committed=True)
                continue
            if rt is None or not rt.live:
                continue
            for part in parts:
                if part not in rt.partitions:
                    rt.partitions.append(part)
                    positions[(topic, part)] = rt.progress.committed.get(part)
        # Checkpoints outside their partition's log: new partitions, and (the topic was
        # recreated) partitions being read whose log now ends before the checkpoint. A
        # partition that delivered messages since the last refresh plainly goes on.
        idle = {tp for tp in self.source.assigned if self._consumed.get(tp) == self._seen.get(tp)}
        self._seen = dict(self._consumed)
        reading = {
            (rt.topic, p): off
            for rt in self.tables
            if rt.live
            for p, off in rt.progress.committed.items()
            if (rt.topic, p) in idle
        }
        reading.update({tp: off for tp, off in positions.items() if off is not None})
        recreated = self._recreated_topics({topic for topic, _ in positions})
        for (topic, part), restart in self._offset_gaps(
            reading, new=set(positions), recreated=recreated
        ).items():
            positions[(topic, part)] = restart
        self.source.assign({tp: off for tp, off in positions.items() if self.tables[tp[0]].live})
        self._adopt()

    def _recreated_topics(self, topics: set[str]) -> dict[str, tuple[str, str]]:
        """Learn the topic ids of live tables (those with new partitions here, and those
        not knowing theirs yet: recorded in their next commit) and return the topics
        whose id differs from the one their table recorded: topic -> (recorded, now)."""
        if self.source is None:
            return {}
        wanted = {
            rt.topic
            for rt in self.tables
            if rt.live and (rt.topic in topics or rt.progress.topic_id is None)
        }
        recreated = {}
        for topic, found in self.source.topic_ids(wanted).items():
            progress = self.tables[topic].progress
            if progress.topic_id is None or not progress.committed:
                progress.topic_id = found
            elif progress.topic_id != found:
                recreated[topic] = (progress.topic_id, found)
        return recreated

    def _offset_gaps(
        self,
        checkpoints: dict[tuple[str, int], int],
        new: set[tuple[str, int]],
        recreated: dict[str, tuple[str, str]] | None = None,
    ) -> dict[tuple[str, int], int]:
        """Find checkpoints outside their partition's log; stop or resume their tables.

        A checkpoint before the log's start means events were deleted (retention,
        compaction) before they were replicated; one past the log's end means the topic
        was deleted and recreated (or truncated). A checkpoint in a topic whose id is not
        the one its table recorded (``recreated``: topic -> ids) was read from a topic
        since deleted: the new topic's offsets before it were never read. Each is a gap
        in the table's change history: the table stops (FAILED) with the missing range
        and the fixes, unless ``replicator.accept_offset_gaps`` names it; then it goes on
        from the log's start and its next commit records the gap.

        Returns:
            Where accepted partitions restart (offsets to seek to).
        """
        recreated = recreated or {}
        if self.source is None:
            return {}
        for topic, (_, now) in recreated.items():
            # A topic read from its start (no checkpoint) misses nothing: its new id holds.
            if not any(tp[0] == topic for tp in checkpoints):
                self.tables[topic].progress.topic_id = now
        if not checkpoints:
            return {}
        source = self.source
        starts = source.log_start_offsets([tp for tp in checkpoints if tp in new])
        # The high watermark decides unless it is below the checkpoint: then the exact
        # end settles it (the Tansu broker's watermark can lag within a record batch).
        highs = source.end_offsets(checkpoints)
        verified = self._verified_ends
        suspects = [
            tp
            for tp, off in checkpoints.items()
            if off > highs[tp] and not (tp in verified and verified[tp][0] == highs[tp])
        ]
        exact = source.exact_end_offsets(suspects) if suspects else {}
        verified.update({tp: (highs[tp], end) for tp, end in exact.items()})
        ends = {**highs, **{tp: verified[tp][1] for tp in checkpoints if tp in verified}}
        restarts: dict[tuple[str, int], int] = {}
        for (topic, part), off in sorted(checkpoints.items()):
            start, end = starts.get((topic, part), 0), ends[(topic, part)]
            ids = recreated.get(topic)
            if start <= off <= end and (ids is None or off <= start):
                if ids is not None and self.tables[topic].live:
                    self.tables[topic].progress.topic_id = ids[1]
                continue
            rt = self.tables[topic]
            if start <= off <= end:
                assert ids is not None
                gap = (
                    f"{topic}[{part}]: the topic was deleted and recreated (its id is "
                    f"{ids[1]}, the checkpoint {off} was read from {ids[0]}): offsets "
                    f"{start}..{off - 1} of the new topic were never read"
                )
            elif off < start:
                gap = (
                    f"{topic}[{part}]: offsets {off}..{start - 1} were deleted from the topic "
                    "(retention or compaction) before they were replicated"
                )
            else:
                gap = (
                    f"{topic}[{part}]: the partition now ends at offset {end}, before the "
                    f"checkpoint {off}: the topic was deleted and recreated (or truncated)"
                )
            if any(fnmatch.fnmatchcase(rt.name, p) for p in self.cfg.replicator.accept_offset_gaps):
                log.warning("%s: accepting a gap: %s; going on from offset %d", rt.name, gap, start)
                rt.progress.accepted_gaps.append(f"{topic}[{part}] {off}->{start}")
                rt.progress.committed[part] = start
                if ids is not None:
                    rt.progress.topic_id = ids[1]
                restarts[(topic, part)] = start
                if (topic, part) not in new:
                    source.seek({(topic, part): start})
                continue
            rt.state, rt.error = (
                TableState.FAILED,
                f"{gap}. Rebuild the table from a new snapshot (`cdcctl resync {rt.name}` "
                f"once the topic holds a fresh Debezium snapshot), or accept the gap: add "
                f"{rt.name!r} to replicator.accept_offset_gaps (recorded in its next commit)",
            )
            log.error("%s: FAILED: %s", rt.name, rt.error)
            source.unassign([(topic, p) for p in rt.partitions])
        return restarts

    def _fail(self, rt: TableRuntime, error: str) -> None:
        """Stop one table (FAILED: a person must act); the others go on."""
        rt.state, rt.error = TableState.FAILED, error
        rt.incident, rt.held = None, False
        log.error("%s: FAILED: %s", rt.name, error)
        if self.source is not None:
            self.source.unassign([(rt.topic, p) for p in rt.partitions])

    # -- one micro-batch -------------------------------------------------------------------
    def _run_batch(self, source: KafkaSource) -> int:
        """Poll and decode the next batch while Spark merges the previous one; returns
        how many messages were polled."""
        started = time.monotonic()
        goal = self._known_goal()
        goal_reached = goal is not None and self._caught_up(goal, read=True)
        count, grouped = 0, {}
        if not goal_reached:
            with collector_paused():
                messages = source.poll(
                    self.cfg.replicator.max_batch_events, self.cfg.replicator.max_batch_seconds
                )
                count = len(messages)
                grouped = group_by_topic(messages)
                del messages  # the raw messages (and librdkafka's buffers) are freed here
        if source.out_of_range:
            # The broker refused a fetch position: find out which end it fell off.
            lost, source.out_of_range = source.out_of_range, set()
            self._offset_gaps(
                {
                    tp: self.tables[tp[0]].progress.committed.get(tp[1], 0)
                    for tp in lost
                    if tp[0] in self.tables.by_topic
                },
                new=lost,
            )
        prepared = None
        if count:
            faults.point("consumed")
            self.transactions.observe(source.poll_transactions())
            prepared = self._prepare(grouped, count, started)
            if prepared.rewind:
                source.seek(prepared.rewind)
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._report(self._finish(pending))
        if prepared is not None:
            self._pending = self._launch(prepared, background=True)
        return count

    def _report(self, report: BatchReport) -> None:
        if self.source is None:
            raise RuntimeError("the replicator is not running")
        tables = self.tables.by_topic
        group_offsets = {
            (rt.topic, p): o for rt in tables.values() for p, o in rt.progress.committed.items()
        }
        self.source.commit_group_offsets(group_offsets)
        ends = self.source.end_offsets(self.source.assigned, cached=True)
        report.lag_messages = sum(
            max(0, end - tables[t].progress.committed.get(p, 0))
            for (t, p), end in ends.items()
            if t in tables and end >= 0
        )
        if self.on_batch:
            self.on_batch(report)

    def apply(self, messages: Sequence[Record], *, started: float | None = None) -> BatchReport:
        """Decode, merge and commit one micro-batch of messages; return what it did."""
        started = time.monotonic() if started is None else started
        prepared = self._prepare(group_by_topic(messages), len(messages), started)
        return self._finish(self._launch(prepared, background=False))

    def _prepare(self, grouped: dict[str, TopicRecords], count: int, started: float) -> _Prepared:
        """Decode every topic of a batch and cut it at unfinished transactions."""
        prepared = _Prepared(count=count, started=started)
        prepared.phases["poll"] = time.monotonic() - started
        for topic in [t for t in grouped if t.endswith(".transaction")]:
            self._tx_topics.add(topic)
            self.transactions.observe(grouped.pop(topic)[1])
        schema_changes: list[tuple[TableRuntime, TopicRecords]] = []
        for topic in list(grouped):
            # Popped so each topic's raw bytes are freed as soon as it is decoded.
            keys, values, parts, offs = grouped.pop(topic)
            rt = self.tables.get(topic)
            if rt is None or not rt.live:
                continue  # a paused or held table's records are read again from its checkpoint
            if rt.name in self._stopping:
                continue  # it stops at a bad message of the batch in flight
            read_to = next_offsets(parts, offs)
            if (
                rt.control is None
                and topic not in self._row_topics
                and topic not in self._message_topics
                and (rt.writer is None or self.cfg.source.logical_messages == "table")
            ):
                self._recognise(rt, values)
            if rt.control is not None:
                # Not a table: read, never written; its position is kept in memory only.
                rt.progress.committed = {**rt.progress.committed, **read_to}
                for p, o in read_to.items():
                    self._consumed[(topic, p)] = o
                if rt.control == control.SCHEMA_CHANGE:
                    schema_changes.append((rt, (keys, values, parts, offs)))
                    continue
                if rt.control == control.TRANSACTION:
                    self._tx_topics.add(topic)
                    self.transactions.observe(list(values))
                rt.counters.ignored += len(values)
                continue
            t0 = time.monotonic()
            if topic in self._message_topics:
                result = self._decode_messages(RecordBatch(topic, keys, values, parts, offs))
            else:
                result = self._decode(topic, keys, values, parts, offs)
            if result.batch is not None:
                self._row_topics.add(topic)
            del keys, values
            prepared.phases["decode"] = prepared.phases.get("decode", 0.0) + time.monotonic() - t0
            rt.counters.ignored += result.ignored
            if result.source_table:
                rt.progress.source_table = json.dumps(
                    result.source_table, sort_keys=True, separators=(",", ":")
                )
            batch = apply_column_ops(result.batch, rt.progress.ddl)
            if batch is not None and self.cfg.source.mysql_gtid_ordering:
                batch = gtid_positions(batch, rt.progress.gtid_lineages)
            epoch_fail = None
            if batch is not None and epochs.screened(self.cfg):
                batch, epoch_fail = epochs.mapped(batch, rt.progress.epoch, result.snapshot_ended)
            cuts: dict[int, int] = {}
            if batch is not None and self._confirmable(topic, rt, batch):
                cuts, warnings = self.transactions.cuts(
                    batch, data_collection(topic), self.cfg.replicator.max_batch_events
                )
                for warning in warnings:
                    log.warning("%s: %s", rt.name, warning)
                if cuts:
                    batch = apply_cuts(batch, cuts)
                    for p, cut in cuts.items():
                        read_to[p] = cut
                        prepared.rewind[(topic, p)] = cut
            bad = [b for b in result.bad if b.offset < cuts.get(b.partition, b.offset + 1)]
            decoded = _Decoded(rt, batch, result.key_fields, read_to)
            decoded.snapshot_ended = result.snapshot_ended
            decoded.row_schemas = result.row_schemas
            if bad:
                self._bad_messages(decoded, bad)
            if decoded.batch is not None and epochs.screened(self.cfg):
                self._epoch_change(decoded, epoch_fail)
            if decoded.fail is not None:
                self._stopping.add(rt.name)
            for p, o in read_to.items():
                self._consumed[(topic, p)] = o
            prepared.tables.append(decoded)
        # Schema changes last, so that each lands in its table's share of this batch.
        self._pending_ddl(prepared)
        for ddl_rt, records in schema_changes:
            self._schema_changes(prepared, ddl_rt, records)
        return prepared

    # -- topics that are not tables, and schema changes ------------------------------------
    def _recognise(self, rt: TableRuntime, values: Sequence[bytes | None]) -> None:
        """Tell from a new topic's records whether it is a table (see
        :mod:`engine.decode.control`); a topic of another kind never becomes one."""
        kind = control.topic_kind(values, self.decode.documents)
        if kind is None:
            return
        if kind == control.MESSAGE and self.cfg.source.logical_messages == "table":
            self._message_topics.add(rt.topic)
            log.info("%s: logical decoding messages: kept in an append-only table", rt.name)
            return
        if rt.writer is not None:
            return  # a replica exists: it is a table (its messages table, read after a restart)
        if self.recorder is not None:
            self.recorder.forget(self._store_name(rt))
        self.tables.release(rt)
        rt.control = kind
        what = {
            control.SCHEMA_CHANGE: "schema changes are applied to the tables they name",
            control.MESSAGE: 'skipped and counted (source.logical_messages = "skip")',
        }.get(kind, "skipped")
        log.info("topic %r holds %s records, not rows: not a table; %s", rt.topic, kind, what)

    def control_topics(self) -> dict[str, tuple[str, int]]:
        """Topics recognised as holding no rows: topic -> (kind, records skipped)."""
        return {
            rt.topic: (rt.control, rt.counters.ignored)
            for rt in self.tables.by_topic.values()
            if rt.control is not None
        }

    def _schema_changes(
        self, prepared: _Prepared, ddl_rt: TableRuntime, records: TopicRecords
    ) -> None:
        """Route the schema change topic's records to the tables they name."""
        keys, values, parts, offs = records
        bad = []
        # The limits first: nothing over them is parsed (as for row topics).
        refused = self.decode.refused(keys, values)
        documents = self.decode.documents
        docs = documents(values) if documents is not None else values
        for i, (key, value, doc, part, off) in enumerate(
            zip(keys, values, docs, parts, offs, strict=True)
        ):
            if value is None:
                ddl_rt.counters.ignored += 1
                continue
            try:
                if i in refused:
                    raise ValueError(refused[i])
                if doc is None:
                    raise ValueError("the value does not decode with source.format")
                change = parse_schema_change(doc)
            except ValueError as exc:
                reason = f"not a usable schema change event: {exc}"
                bad.append(BadMessage(ddl_rt.topic, int(part), int(off), key, value, reason))
                continue
            except Exception as exc:  # noqa: BLE001 - the decoders' exception net, for DDL
                reason = f"{DECODER_FAILED} ({type(exc).__name__}: {exc})"[:500]
                bad.append(BadMessage(ddl_rt.topic, int(part), int(off), key, value, reason))
                continue
            if not change.changes:
                ddl_rt.counters.ignored += 1
                log.info("schema change %r names no table: skipped", change.ddl[:200])
            for tc in change.changes:
                target = f"{ddl_rt.topic}.{tc.database}.{tc.table}"
                rt = self._ddl_target(target)
                if rt is None:
                    ddl_rt.counters.ignored += 1
                    log.info("schema change of %s skipped: no such table topic", target)
                    continue
                item = (ddl_rt.topic, change, tc, int(part), int(off))
                if not rt.live or rt.name in self._stopping:
                    rt.pending_ddl.append(item)
                    continue
                self._apply_ddl(prepared, rt, item)
        if bad:
            self.dead_letters.quarantine(ddl_rt.name, bad)
            for b in bad:
                log.error(
                    "schema change topic %s[%d] offset %d: %s; quarantined to %s",
                    b.topic,
                    b.partition,
                    b.offset,
                    b.reason,
                    self.dead_letters.path(ddl_rt.name),
                )

    def _ddl_target(self, topic: str) -> TableRuntime | None:
        """The table of a topic a schema change names: only a topic found in Kafka (or,
        with :meth:`apply`, seen in a batch) and selected; a change of a table whose
        topic does not exist yet has no replica to change and is not made one."""
        rt = self.tables.by_topic.get(topic)
        return None if rt is None or rt.control is not None else rt

    def _pending_ddl(self, prepared: _Prepared) -> None:
        """Schema changes read while their table was paused or held, now it is live."""
        for rt in list(self.tables):
            if rt.pending_ddl and rt.live and rt.name not in self._stopping:
                items, rt.pending_ddl = rt.pending_ddl, []
                for item in items:
                    if rt.live:
                        self._apply_ddl(prepared, rt, item)

    def _apply_ddl(self, prepared: _Prepared, rt: TableRuntime, item: tuple) -> None:
        """Decide and carry out one table change on one table (see
        :mod:`engine.replicator.ddl`): it lands with the table's share of this batch."""
        ddl_topic, change, tc, part, off = item
        state = rt.progress.ddl
        if state.seen(ddl_topic, part, off):
            return  # handled by an earlier commit (the topic is read again on each start)
        decoded = next((d for d in prepared.tables if d.rt is rt), None)
        # What the table holds: its replica, else (no replica yet) the columns of its
        # rows in this batch, so a change is judged the same whichever batch it lands in.
        replica = rt.writer.schema() if rt.writer is not None else None
        if replica is None and decoded is not None and decoded.batch is not None:
            replica = decoded.batch.schema
        new_name = None
        if tc.kind == "RENAME" and tc.new_table:
            with contextlib.suppress(TableNameError):
                new_name = self.cfg.table_name(f"{ddl_topic}.{tc.database}.{tc.new_table}")
        outcome = decide(
            self.cfg.ddl_policy(rt.name),
            rt.name,
            tc,
            change,
            state,
            replica,
            new_topic_table=new_name,
        )
        where = f"{ddl_topic}[{part}] offset {off}"
        if self.recorder is not None:
            self.recorder.event(rt.name, "ddl", f"{outcome.verdict}: {outcome.message}")
        if outcome.verdict == "failed":
            rt.counters.ddl += 1
            message = f"{outcome.message} (schema change at {where})"
            if decoded is None or decoded.batch is None or change.position is None:
                self._fail(rt, message)
                return
            # The table stops at the change: its rows from before it still commit, the
            # checkpoint stays at its first row after it (read again after the restart).
            cuts = cut_at_position(decoded.batch, change.position)
            if cuts:
                decoded.batch = drop_unseen_columns(
                    apply_cuts(decoded.batch, cuts),
                    rt.writer.schema() if rt.writer is not None else None,
                    state,
                )
                decoded.read_to.update(cuts)
                for p, cut in cuts.items():
                    self._consumed[(rt.topic, p)] = cut
            decoded.fail = decoded.fail or message
            self._stopping.add(rt.name)
            log.error("%s: stops at a schema change: %s", rt.name, message)
            return
        level = logging.INFO if outcome.verdict == "applied" else logging.WARNING
        log.log(
            level,
            "%s: schema change at %s %s: %s",
            rt.name,
            where,
            outcome.verdict,
            outcome.message,
        )
        state.mark(ddl_topic, part, off)
        if decoded is None:
            decoded = _Decoded(rt, None, [], {})
            prepared.tables.append(decoded)
        decoded.ddl_events += 1
        decoded.ddl_items.append(item)
        rt.uncommitted_ddl.append(item)
        if outcome.verdict != "applied":
            return
        record(state, outcome)
        decoded.drop_columns += outcome.drop_columns
        for old, new in outcome.renames.items():
            decoded.renames = {a: (new if b == old else b) for a, b in decoded.renames.items()}
            decoded.renames.setdefault(old, new)
        decoded.batch = apply_column_ops(decoded.batch, state)
        if outcome.truncate:
            if change.position is None:
                log.warning(
                    "%s: %s has no binlog position: the truncate is not applied", rt.name, where
                )
                return
            row = truncate_row(change.position, change.source_ts_ms, off, change.gtid)
            if self.cfg.source.mysql_gtid_ordering:
                row = gtid_positions(row, rt.progress.gtid_lineages)
            decoded.batch = (
                row
                if decoded.batch is None
                else pa.concat_tables([decoded.batch, row], promote_options="default")
            )

    def _decode(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        parts: Sequence[int],
        offs: Sequence[int],
    ) -> DecodeResult:
        """Decode one topic's records (the decoder applies the size and nesting limits of
        :mod:`engine.decode.limits`: a record over a limit is bad)."""
        return self.decode(RecordBatch(topic, keys, values, parts, offs))

    def _bad_messages(self, decoded: _Decoded, bad: list[BadMessage]) -> None:
        """Quarantine a share's bad messages as ``errors.tolerance`` says.

        ``"all"``: every one goes to the dead-letter file and is skipped. ``"none"``: the
        share is cut at the first bad message of each partition (the events before it
        still commit), that message goes to the dead-letter file, and the table stops
        once the share is committed, its checkpoint at the bad message.
        """
        rt = decoded.rt
        if self.cfg.errors.tolerance == "none":
            first: dict[int, BadMessage] = {}
            for b in bad:
                if b.partition not in first or b.offset < first[b.partition].offset:
                    first[b.partition] = b
            bad = sorted(first.values(), key=lambda b: (b.partition, b.offset))
            if decoded.batch is not None:
                decoded.batch = apply_cuts(decoded.batch, {p: b.offset for p, b in first.items()})
            for p, b in first.items():
                decoded.read_to[p] = b.offset
        written = self.dead_letters.quarantine(rt.name, bad)
        path = self.dead_letters.path(rt.name)
        if self.cfg.errors.tolerance == "none":
            where = "; ".join(
                f"{b.topic}[{b.partition}] offset {b.offset}: {b.reason}" for b in bad
            )
            decoded.fail = (
                f"a message could not be decoded ({where}); it is in {path} and the table "
                'stopped there (errors.tolerance = "none"). Fix the cause and restart: '
                'replication resumes at that message; or set errors.tolerance = "all" to '
                "skip bad messages to the dead-letter file (`cdcctl deadletters replay` "
                "re-applies them later)"
            )
            return
        decoded.bad = len(bad)
        log.warning(
            "%s: quarantined %d bad message(s) to %s%s",
            rt.name,
            len(bad),
            path,
            "" if written == len(bad) else f" ({len(bad) - written} already there)",
        )

    def _epoch_change(self, decoded: _Decoded, fail: str | None) -> None:
        """Stop a table at an epoch change of its source positions (:mod:`.epochs`): its
        share is cut at the change, and the table stops once the rest is committed."""
        rt, batch = decoded.rt, decoded.batch
        assert batch is not None
        pg = '"postgresql"' in (rt.progress.source_table or "")
        found = epochs.detect(
            batch,
            rt.progress.epoch,
            rt.progress.max_source_ts,
            topic=rt.topic,
            table=rt.name,
            pg=pg,
        )
        if fail is not None:  # positions that cannot be mapped: nothing of the share applies
            found = epochs.EpochChange(epochs.first_offsets(batch), fail)
        if found is not None:
            decoded.batch = apply_cuts(batch, found.cuts)
            decoded.read_to.update(found.cuts)
            decoded.fail = found.message

    def _confirmable(self, topic: str, rt: TableRuntime, batch: pa.Table) -> bool:
        """Whether the batch's transactions can be confirmed complete by END records.

        Events carry transaction ids whenever the connector has transaction metadata on,
        but without a ``<prefix>.transaction`` topic no END record will ever come:
        waiting for one would hold the table back forever. Such batches are applied as
        they come (a warning says once per table that they may split transactions).
        """
        if transaction_topic(topic) in self._tx_topics:
            return True
        if batch.column(TX_ID).null_count < batch.num_rows and rt.name not in self._tx_warned:
            self._tx_warned.add(rt.name)
            log.warning(
                "%s: events carry transaction ids but there is no %s topic to confirm them; "
                "batches may end inside a transaction",
                rt.name,
                transaction_topic(topic),
            )
        return False

    def _launch(self, prepared: _Prepared, *, background: bool) -> _Pending:
        """Plan every table (after the previous batch committed) and start the Spark job."""
        self._batch_no += 1
        pending = _Pending(prepared=prepared, number=self._batch_no)
        first_task = 0
        for decoded in prepared.tables:
            rt = decoded.rt
            if not rt.live:
                continue
            offsets = {**rt.progress.committed, **decoded.read_to}
            if offsets == rt.progress.committed and not decoded.replayed and not decoded.ddl_events:
                rt.counters.bad += decoded.bad
                if decoded.fail is not None:
                    self._fail(rt, decoded.fail)
                continue  # everything was held back: nothing to commit yet
            t0 = time.monotonic()
            live_tail = dict(rt.progress.tail)
            try:
                if rt.writer is None:
                    self.tables.lock(rt)  # a new table: locked before it is created
                plan = plan_table(
                    self.cfg,
                    rt,
                    decoded.batch,
                    decoded.key_fields,
                    first_task,
                    offsets,
                    self.staging,
                    drop_columns=decoded.drop_columns,
                    renames=decoded.renames,
                    ddl_events=decoded.ddl_events,
                    row_schemas=decoded.row_schemas,
                )
            except (SchemaEvolutionError, HudiError, WriterLockError) as exc:
                self._fail(rt, str(exc))
                continue
            except OSError as exc:  # its storage: retried for this table alone
                self._table_trouble(rt, exc, committed=False)
                continue
            prepared.phases["stage"] = prepared.phases.get("stage", 0.0) + time.monotonic() - t0
            if plan is None:  # nothing applicable and no table yet: nothing to commit
                rt.progress.committed = offsets
                rt.uncommitted_ddl = [i for i in rt.uncommitted_ddl if i not in decoded.ddl_items]
                rt.counters.bad += decoded.bad
                rt.counters.ddl += decoded.ddl_events
                if decoded.fail is not None:
                    self._fail(rt, decoded.fail)
                continue
            plan.snapshot_ended = decoded.snapshot_ended
            if decoded.replayed:
                # Replayed events are old: the live stream's tails stay what they were.
                rt.progress.tail = live_tail
                plan.extra = rt.progress.extra(rt.topic, rt.progress.floor)
                plan.extra[REPLAYED_KEY] = json.dumps(
                    [coordinates_text(w) for w in decoded.replayed], separators=(",", ":")
                )
            plan.ddl_items = decoded.ddl_items
            pending.plans.append(plan)
            pending.bad[rt.name] = decoded.bad
            if decoded.fail is not None:
                pending.fail[rt.name] = decoded.fail
            if decoded.batch is not None and decoded.batch.num_rows:
                times = pc.drop_null(decoded.batch.column(SOURCE_TS)).to_numpy()
                if times.size > LATENCY_SAMPLE:
                    times = times[np.linspace(0, times.size - 1, LATENCY_SAMPLE).astype(int)]
                pending.source_ts[rt.name] = times
            first_task += len(plan.tasks)
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
            pending.results = run_merge_job(self._spark_context(), pending.tasks)
        except BaseException as exc:  # noqa: BLE001 - re-raised by _finish in the main thread
            pending.error = exc

    def _finish(self, pending: _Pending) -> BatchReport:
        """Wait for the merge, then commit every table of the batch."""
        if pending.thread is not None:
            pending.thread.join(CONTROL_EVERY_SECONDS)
            while pending.thread.is_alive():  # a long merge: requests are still answered
                self._control(merging=True)
                pending.thread.join(CONTROL_EVERY_SECONDS)
        if pending.error is not None:
            if isinstance(pending.error, CdcError) or not isinstance(pending.error, Exception):
                raise pending.error
            terminal = task_error(pending.error)
            if terminal is not None:
                raise terminal from pending.error
            storage = task_storage_error(pending.error)
            if storage is not None:  # a merge task could not write its file: the batch is
                # dropped whole (its tables' results were one job) and retried
                raise SparkJobError(
                    f"the Spark job of batch {pending.number} failed: {storage_cause(storage)}",
                    hint="each table resumes from its last commit once the storage is fixed",
                ) from pending.error
            raise SparkJobError(
                f"the Spark job of batch {pending.number} failed: {_spark_reason(pending.error)}",
                hint=f"Spark's own log is {self.work / 'spark.log'}",
            ) from pending.error
        phases = pending.prepared.phases
        phases["merge"] = time.monotonic() - pending.merge_started
        faults.point("files_written")
        t0 = time.monotonic()
        results = iter(pending.results)
        tables = {}
        for plan in pending.plans:
            own = [next(results) for _ in plan.tasks]
            try:
                tables[plan.rt.name] = self._commit(
                    plan,
                    own,
                    pending.bad.get(plan.rt.name, 0),
                    pending.source_ts.get(plan.rt.name, np.empty(0, np.int64)),
                )
            except HudiError as exc:
                # This table alone stops; its instant stays unfinished and is rolled back
                # at the next start. The other tables of the batch still commit.
                self._fail(plan.rt, str(exc))
                continue
            except OSError as exc:
                # Its storage: retried for this table alone (its instant is rolled back
                # then); the other tables of the batch still commit.
                landed = plan.rt.progress.committed is plan.offsets
                self._table_trouble(plan.rt, exc, committed=landed)
                continue
            if plan.rt.name in pending.fail:  # errors.tolerance = "none": stop at the bad one
                self._fail(plan.rt, pending.fail[plan.rt.name])
        phases["commit"] = time.monotonic() - t0
        return BatchReport(
            number=pending.number,
            messages=pending.prepared.count,
            seconds=time.monotonic() - pending.prepared.started,
            tables=tables,
            phases=phases,
            rewind=pending.prepared.rewind,
        )

    def merge_batch(
        self, topic: str, batch: pa.Table, key_fields: list[str], offsets: dict[int, int]
    ) -> dict[str, int]:
        """Merge and commit one already-decoded change batch into a table.

        The apply path without Kafka and decoding: what benchmarks of the merge use.
        """
        rt = self.tables.get(topic)
        if rt is None:
            raise TableNameError(f"topic {topic!r} is not replicated")
        prepared = _Prepared(count=batch.num_rows, started=time.monotonic())
        prepared.tables.append(_Decoded(rt, batch, key_fields, offsets))
        return self._finish(self._launch(prepared, background=False)).tables.get(rt.name, {})

    def _commit(
        self,
        plan: TablePlan,
        results: list[TaskResult],
        bad: int = 0,
        source_ts: np.ndarray | None = None,
    ) -> dict[str, int]:
        rt, writer = plan.rt, plan.rt.writer
        if writer is None:
            raise RuntimeError(f"{rt.name}: a planned table has no writer")
        total = MergeCounts()
        for r in results:
            total.add(r.counts)
        applied = {
            "inserts": total.inserts,
            "updates": total.updates,
            "deletes": total.deletes,
            "late": total.late,
            "truncated": total.truncated,
            "toast_unresolved": total.toast_unresolved,
            "toast_filled": total.toast_filled,
            # Source events applied by op (each once; tombstones and late ones excluded).
            "events_r": total.events_r,
            "events_c": total.events_c,
            "events_u": total.events_u,
            "events_d": total.events_d,
            "events_t": plan.truncates,
            "bad": bad,
            # With a schema change topic: its events; else batches that changed the schema.
            "ddl": plan.ddl_events if rt.progress.ddl.used else int(plan.schema_changed),
        }
        faults.point("before_commit")
        writer.commit(
            plan.instant,
            [r.slice for r in results],
            plan.schema,
            rt.topic,
            plan.offsets,
            {**plan.extra, COUNTS_KEY: json.dumps(applied, separators=(",", ":"))},
        )
        faults.point("after_commit")
        shutil.rmtree(self.staging / rt.name / plan.instant, ignore_errors=True)
        rt.progress.committed = plan.offsets
        if plan.ddl_items:
            rt.uncommitted_ddl = [i for i in rt.uncommitted_ddl if i not in plan.ddl_items]
        self._commits += 1
        c = rt.counters
        add_commit_counts(c, applied)
        c.last_source_ts_ms = rt.progress.max_source_ts  # as of this commit
        streamed = total.events_c + total.events_u + total.events_d + plan.truncates
        if rt.incident is not None:
            self._table_recovered(rt)
        if rt.state in (TableState.REPLICATING, TableState.SNAPSHOTTING, TableState.FAILING):
            # Snapshot reads only, the table's last one not among them: still snapshotting.
            snapshot = total.events_r > 0 and not streamed and not plan.snapshot_ended
            rt.state = TableState.SNAPSHOTTING if snapshot else TableState.REPLICATING
            rt.error = None
        if self.recorder is not None:
            sample = source_ts if source_ts is not None else np.empty(0, np.int64)
            self.recorder.committed(rt.name, plan.instant, applied, sample)
            if plan.schema_changed:
                self.recorder.event(rt.name, "schema", f"schema changed at {plan.instant}")
            for note in plan.schema_notes:
                self.recorder.event(rt.name, "schema", note)
        for note in plan.schema_notes:
            log.warning("%s: %s", rt.name, note)
        if c.commits % CLEAN_EVERY_COMMITS == 0:
            h, policy = self.cfg.hudi, retention(self.cfg)
            writer.clean(policy)
            writer.archive(
                h.keep_min_commits, h.keep_max_commits, h.archive_retention_hours, policy
            )
        return applied

    # -- dead letters ----------------------------------------------------------------------
    def replay(self, table: str) -> ReplayOutcome:
        """Re-apply a table's dead letters with no replicator running (``cdcctl deadletters
        replay``): the work folder's and the table's writer locks are held meanwhile.

        Raises:
            WriterLockError: a replicator runs on the work folder (send it a request).
        """
        locks = self.tables.locks = Locks()
        try:
            locks.take(self.work / LOCK_NAME, f"the work folder {self.work}")
            return self._replay(table)
        finally:
            locks.release_all()
            self.tables.locks = None

    def _replay(self, name: str) -> ReplayOutcome:
        """Decode a table's pending dead letters again and apply those that decode.

        In source order (partition, offset), through the same merge rules as any batch (a
        stale event is late), as one Hudi instant that leaves the checkpoint where it is
        and lists the letters it applied in its extra metadata (:data:`REPLAYED_KEY`), so
        that a crash before the replay log records them is reconciled next time. Dead
        letters at or after the checkpoint are left to the replicator, which reads them.
        """
        letters = self.dead_letters.letters(name)
        if not letters:
            raise TableNameError(
                f"table {name!r} has no dead letters",
                hint="`cdcctl deadletters` lists the tables that have some",
            )
        topic = letters[0].topic
        rt = self.tables.get(topic)
        if rt is None or rt.name != name:
            raise TableNameError(
                f"topic {topic!r} of table {name!r} is not replicated by this config",
                hint="check source.topics and source.include_tables / exclude_tables",
            )
        if rt.state.stopped or rt.state is TableState.FAILING:
            raise TableNameError(
                f"table {name} is {rt.state.value}: {rt.error}",
                hint="fix the cause and restart the replicator, then replay",
            )
        outcome = ReplayOutcome(name, failed={})
        writer = rt.writer
        if writer is not None:
            self.tables.lock(rt)
            outcome.reconciled = self.dead_letters.reconcile(
                name,
                (
                    (i, writer.table.commit_metadata(i).get("extraMetadata") or {})
                    for i in writer.completed_instants()
                ),
            )
        todo = []
        for letter in self.dead_letters.pending(name):
            if letter.topic != topic:
                continue
            if letter.offset >= rt.progress.committed.get(letter.partition, 0):
                outcome.waiting += 1
            else:
                todo.append(letter)
        if not todo:
            return outcome
        keys = [d.key for d in todo]
        values = [d.value for d in todo]
        parts = [d.partition for d in todo]
        offs = [d.offset for d in todo]
        result = self._decode(topic, keys, values, parts, offs)
        failed = {(b.topic, b.partition, b.offset): b.reason for b in result.bad}
        applied = [d.where for d in todo if d.where not in failed]
        outcome.failed = failed
        if applied:
            batch = result.batch
            if batch is not None and self.cfg.source.mysql_gtid_ordering:
                batch = gtid_positions(batch, rt.progress.gtid_lineages)
            if batch is not None and epochs.screened(self.cfg):  # letters of an accepted epoch
                batch, _ = epochs.mapped(batch, rt.progress.epoch, snapshot_ended=False)
            prepared = _Prepared(count=len(todo), started=time.monotonic())
            prepared.tables.append(
                _Decoded(rt, batch, result.key_fields, {}, replayed=applied,
                         row_schemas=result.row_schemas)
            )  # fmt: skip
            pending = self._launch(prepared, background=False)
            instant = pending.plans[0].instant if pending.plans else None
            self._finish(pending)
            if rt.state.stopped or rt.state is TableState.FAILING or instant is None:
                raise HudiError(f"table {name}: the replay was not committed: {rt.error}")
            outcome.applied, outcome.instant = len(applied), instant
            log.info("%s: replayed %d dead letter(s) in instant %s", name, len(applied), instant)
        self.dead_letters.record_replay(name, applied, outcome.instant, failed)
        if self.recorder is not None:
            self.recorder.event(rt.name, "replay", outcome.describe())
        return outcome

    # -- state store and control -------------------------------------------------------
    def _adopt(self) -> None:
        """Hand tables the state store has not taken on yet to it (counters loaded and
        reconciled with the commits it missed); a table the store says is paused stays so."""
        recorder = self.recorder
        if recorder is None:
            return
        for rt in list(self.tables):
            if self._store_name(rt) in recorder.adopted:
                continue
            writer = rt.writer
            stored = recorder.adopt(
                self._store_name(rt),
                rt.topic,
                rt.counters,
                writer.completed_instants() if writer is not None else [],
                functools.partial(_commit_counts, writer),
            )
            if stored is TableState.PAUSED and not rt.state.stopped:
                self._pause(rt)

    def _control(self, *, merging: bool = False) -> None:
        """Answer control requests, measure lag when due, and sync the state store.

        ``merging``: called while a batch merges; a resume waits until it is committed
        (a table's partitions are assigned again at its checkpoint, which that commit
        may still move).
        """
        if not merging:
            self._retry_tables()
        recorder = self.recorder
        if recorder is None:
            return
        self._adopt()
        requests = recorder.requests()
        if any(r.kind.startswith("resync") for r in requests):
            if merging:  # a resync waits for the batch merging now to be committed
                requests = [r for r in requests if not r.kind.startswith("resync")]
            elif self._pending is not None:  # the batch in flight may write the table
                self._settle()
                requests = recorder.requests()
        for request in requests:
            if not (merging and request.kind in ("resume", "replay")):
                recorder.answer(request, self._handle(request))
        if all(rt.state is TableState.PAUSED for rt in self.tables) and any(self.tables):
            recorder.replicator_state("paused")
        elif recorder.state == "paused":
            recorder.replicator_state("running")
        lag = None
        if time.monotonic() - self._last_lag >= LAG_EVERY_SECONDS:
            lag = self._lag()
        self._sync(lag)

    def _sync(self, lag: dict[str, int] | None = None, *, force: bool = False) -> None:
        """Hand the state store every table's status (and ``lag``, when measured) and
        the topics that hold no rows, with the records each had skipped."""
        if self.recorder is not None:
            self.recorder.sync(
                self._store_statuses(), lag, force=force, controls=self.control_topics()
            )

    def _store_name(self, rt: TableRuntime) -> str:
        """A table's name in the state store (a second topic mapping to a taken name,
        which fails, is told apart by its topic)."""
        return rt.name if self.tables.owner(rt.name) == rt.topic else f"{rt.name} ({rt.topic})"

    def _store_statuses(self) -> list[TableStatus]:
        return [dataclasses.replace(rt.status(), table=self._store_name(rt)) for rt in self.tables]

    def _handle(self, request: Request) -> str:
        """Carry out one control request; its outcome, in words."""
        if request.kind == "stop":
            self._stop = True
            return "stopping after the batch in flight"
        if request.kind == "replay":
            self._settle()  # its commit comes first: replays plan after it
            try:
                outcome = self._replay(request.table or "")
            except CdcError as exc:
                return f"error: {exc.message}"
            return f"incomplete: {outcome.describe()}" if outcome.failed else outcome.describe()
        if request.kind.startswith("resync") or request.kind == "epoch":
            found = [rt for rt in self.tables if self._store_name(rt) == request.table]
            if not found:
                return f"error: no table named {request.table!r}"
            if request.kind == "epoch":
                return self._epoch(found[0])
            return self._resync(found[0], force=request.kind == "resync-force")
        troubled = (TableState.FAILED, TableState.FAILING)
        if request.table is None:
            targets = [rt for rt in self.tables if rt.state not in troubled]
        else:
            targets = [rt for rt in self.tables if self._store_name(rt) == request.table]
            if not targets:
                return f"error: no table named {request.table!r}"
            if targets[0].state in troubled:
                return f"error: {request.table} is {targets[0].state.value}: {targets[0].error}"
        act = self._pause if request.kind == "pause" else self._resume
        changed = [rt.name for rt in targets if act(rt)]
        verb = "paused" if request.kind == "pause" else "resumed"
        return f"{verb} {', '.join(changed)}" if changed else f"already {verb}"

    def _pause(self, rt: TableRuntime) -> bool:
        """Stop reading a table; its positions stay at its last commit. False if paused."""
        if rt.state is TableState.PAUSED:
            return False
        rt.state = TableState.PAUSED
        self._stop_reading(rt)
        log.info("%s: paused", rt.name)
        return True

    def _stop_reading(self, rt: TableRuntime) -> None:
        """Unassign a table's partitions and forget how far they were read (they are read
        again from its checkpoint when assigned again)."""
        if self.source is not None:
            self.source.unassign([(rt.topic, p) for p in rt.partitions])
        for p in rt.partitions:
            self._consumed.pop((rt.topic, p), None)

    def _resume(self, rt: TableRuntime) -> bool:
        """Read a paused table again from its last commit. False if it was not paused."""
        if rt.state is not TableState.PAUSED:
            return False
        rt.state = TableState.REPLICATING
        if self.source is not None:
            self.source.assign({(rt.topic, p): rt.progress.committed.get(p) for p in rt.partitions})
        log.info("%s: resumed", rt.name)
        return True

    def _settle(self) -> None:
        """Finish and commit the batch in flight now (before a resync or a replay)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._report(self._finish(pending))

    def _resync(self, rt: TableRuntime, force: bool = False) -> str:
        """Drop a table's replica and read its topic again from its start; the outcome.

        Carried out between batches (nothing of the table is merging): its partitions
        are unassigned, its folder emptied (:func:`engine.replicator.reset.drop_replica`:
        only that table's folder in the target; its writer lock is kept held), its staged
        files dropped, its progress and counters start over, and its partitions are
        assigned again from the beginning. Works on a paused or stopped table too; it
        replicates afterwards. The other tables go on. Refused (nothing done) when the
        topic was trimmed past what rebuilds the table whole, unless ``force``
        (:func:`engine.replicator.trimmed.guard`).
        """
        owner = self.tables.owner(rt.name)
        if owner != rt.topic:
            return f"error: the folder of {rt.name} belongs to topic {owner}"
        found = ownership.findings(rt.path)
        if found:  # another writer's data may be there: never removed
            return (
                f"error: table {rt.name}: another Hudi writer made or changed {rt.path} "
                f"({'; '.join(found)}); resync will not remove it. {ownership.advice(rt.name)}"
            )
        try:
            note = trimmed.guard(
                self.cfg, rt.name, rt.topic, rt.path, force=force, decode=self.decode
            )
            self.tables.lock(rt)
        except CdcError as exc:
            return f"error: {exc}"
        parts = [(rt.topic, p) for p in rt.partitions]
        self._stop_reading(rt)
        # The store forgets the table's counters first: a crash before the replica is
        # gone leaves the store counting its commits again at the next start.
        rt.writer = None
        rt.progress = TableProgress()
        rt.counters = TableCounters()
        rt.state, rt.error = TableState.REPLICATING, None
        rt.incident, rt.held = None, False  # a retried storage error of the old replica ends
        self._stopping.discard(rt.name)
        if self.recorder is not None:
            self.recorder.reset(self._store_name(rt))
            self._sync(force=True)
        try:
            drop_replica(self.target, rt.name, keep_lock=self.tables.locks is not None)
            shutil.rmtree(self.staging / rt.name, ignore_errors=True)
        except (TableNameError, OSError) as exc:
            self._fail(rt, f"resync: could not remove the replica: {exc}")
            return f"error: {exc}"
        if self.source is not None:
            self.source.assign(dict.fromkeys(parts))
        log.info("%s: resync: replica dropped, reading %s from the beginning", rt.name, rt.topic)
        said = f" ({note})" if note else ""
        return f"resyncing {rt.name}: replica dropped, reading {rt.topic} from the beginning{said}"

    def _epoch(self, rt: TableRuntime) -> str:
        """Accept the new position epoch a table stopped at (:func:`.epochs.accept`) and
        read it again from its checkpoint; the outcome."""
        if rt.state is not TableState.FAILED or epochs.MARK not in (rt.error or ""):
            return f"error: table {rt.name} did not stop at a position epoch change"
        try:
            assert rt.writer is not None  # it failed at an event of a table it wrote
            instant, _ = epochs.accept(rt.writer, rt.topic)
            self.tables.reopen(rt)
        except (HudiError, WriterLockError, OSError) as exc:
            return f"error: {exc}"
        rt.state, rt.error = TableState.REPLICATING, None
        self._stopping.discard(rt.name)
        if self.source is not None:
            self.source.assign({(rt.topic, p): rt.progress.committed.get(p) for p in rt.partitions})
        if self.recorder is not None:
            message = f"new position epoch accepted at {instant}"
            self.recorder.event(self._store_name(rt), "epoch", message)
        log.info("%s: new position epoch accepted at %s", rt.name, instant)
        return f"new position epoch accepted at {instant}; reading {rt.topic} from its checkpoint"

    def _lag(self) -> dict[str, int] | None:
        """Messages waiting per table: end offsets minus its committed positions (None
        when the broker does not answer: the figures shown stay as they were)."""
        self._last_lag = time.monotonic()
        if self.source is None:
            return None
        assigned = self.source.assigned
        parts = [(rt.topic, p) for rt in self.tables for p in rt.partitions]
        try:
            ends = self.source.end_offsets([tp for tp in parts if tp in assigned], cached=True)
            ends.update(self.source.end_offsets([tp for tp in parts if tp not in assigned]))
        except SourceError as exc:
            log.debug("lag not measured: %s", exc.message)
            return None
        lag: dict[str, int] = {}
        for rt in self.tables:
            lag[self._store_name(rt)] = sum(
                max(0, ends[(rt.topic, p)] - rt.progress.committed.get(p, 0))
                for p in rt.partitions
                if ends.get((rt.topic, p), -1) >= 0
            )
        return lag

    def failing(self) -> list[TableStatus]:
        """Tables that stopped replicating (FAILED), with their errors."""
        return [rt.status() for rt in self.tables if rt.state.stopped]

    def status(self) -> list[TableStatus]:
        """A snapshot of every table's state and counters."""
        return [rt.status() for rt in self.tables]
