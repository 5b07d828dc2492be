"""The replication loop: a sequence of collaborators, batch after batch.

Exactly once: a batch becomes visible only when a table's completed commit appears, and
that commit carries the Kafka positions that produced it. On start every table rolls
back instants that never completed and the consumer is positioned at each table's own
checkpoint. Kafka group offsets are committed after the Hudi commits, for lag tools only.

Each turn of :meth:`Replicator.run` is: control (:mod:`.control_plane`, and the held
tables' retries, :mod:`.recovery`) -> intake (poll and decode the next batch,
:mod:`.intake`, schema changes by :mod:`.ddl_router`) -> commit the previous batch once
its merge ended (:mod:`.runner`, :mod:`.committer`) -> report it (group offsets, lag,
``on_batch``) -> launch the next (plan it, start its Spark job). Between control and
intake the topics are refreshed when due (:meth:`.offsets.Offsets.refresh`, new tables
adopted by the control plane); a turn ends with :meth:`.recovery.Recovery.end_turn`.
Batch N+1 is thus polled and decoded while Spark merges batch N,
and N is committed before N+1 is planned (planning reads the file slices N wrote). Where
each partition is read lives in :mod:`.offsets`; the records a batch travels in, in
:mod:`.batches`. :meth:`Replicator.apply` runs one batch from given messages (no Kafka),
which is how the property tests drive the real engine.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from engine.config import DEFAULT_CLEAN_RETAIN_HOURS, Config
from engine.decode import decoder_for
from engine.errors import StorageError, TableNameError
from engine.files import private_dir
from engine.lineage import Lineage, TableLineage
from engine.lock import LOCK_NAME, Locks
from engine.replicator.batches import BatchReport, PendingBatch, PreparedBatch, TableShare
from engine.replicator.committer import Committer, table_lineage
from engine.replicator.control_plane import ControlPlane
from engine.replicator.ddl_router import SchemaChangeRouter
from engine.replicator.deadletter import DeadLetters, ReplayOutcome
from engine.replicator.intake import Intake
from engine.replicator.offsets import Offsets
from engine.replicator.recovery import Recovery
from engine.replicator.retry import lost_to_a_stop, storage_cause, transient_cause
from engine.replicator.runner import SparkRunner
from engine.replicator.tables import TableRuntime, Tables
from engine.signals import stop_on_signals
from engine.source import Record, group_by_topic
from engine.state import StateRecorder, TableState, TableStatus
from engine.state.metrics import MetricsServer, serve_metrics
from engine.state.slo import SloGoal
from engine.upstream import SourceWatcher

log = logging.getLogger("cdcctl.replicator")


class Replicator:
    """Runs micro-batches until stopped or, with ``until_caught_up``, caught up."""

    def __init__(
        self,
        config: Config,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        spark: Any = None,
        config_path: str | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.cfg = config
        self.config_path = config_path
        #: The Prometheus endpoint (``replicator.metrics_port``), once started.
        self.metrics: MetricsServer | None = None
        self.target = config.target_store()
        self.work = config.work_path()
        self.on_batch = on_batch
        #: Set to stop after the batch in flight (``stop``: an event the caller may set
        #: before :meth:`run` begins, e.g. from a signal while Spark boots).
        self._stop = stop if stop is not None else threading.Event()
        self.tables = Tables(config, self.work / "staging")
        self.dead_letters = DeadLetters(self.work / "deadletter")
        self.offsets = Offsets(config, self.tables)
        self.router = SchemaChangeRouter(
            config, self.tables, self.offsets, self.dead_letters, decoder_for(config)
        )
        self.intake = Intake(config, self.tables, self.offsets, self.dead_letters, self.router)
        self.runner = SparkRunner(config, spark)
        self.recovery = Recovery(
            config,
            self.tables,
            self.offsets,
            self.intake,
            self.runner,
            refresh=self._refresh_topics,
            control=self._control,
            stopping=self._stop.is_set,
        )
        self.committer = Committer(config, self.tables, self.offsets, self.recovery)
        self.control = ControlPlane(
            config,
            self.tables,
            self.offsets,
            self.intake,
            self.dead_letters,
            settle=self._settle,
            apply=self._apply_now,
            stop=self.request_stop,
        )
        self._recorder: StateRecorder | None = None
        #: Why a run ended that did not stop by request (every table FAILED), if one did.
        self._ended_by: str | None = None

    @property
    def recorder(self) -> StateRecorder | None:
        """The state store's writer, while :meth:`run` runs."""
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: StateRecorder | None) -> None:
        self._recorder = recorder
        parts = (self.intake, self.router, self.recovery, self.committer, self.control)
        for part in (*parts, self.offsets):
            part.recorder = recorder

    # -- lifecycle -------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop after the batch in flight (SIGINT, SIGTERM, a stop request, the dashboard);
        before :meth:`run` has begun, it ends as soon as it has started."""
        self._stop.set()

    def run(self, until_caught_up: bool = False, max_batches: int | None = None) -> None:
        """Replicate. Returns when stopped, caught up, or after ``max_batches``; SIGINT
        and SIGTERM stop it (in the main thread) from its first moment."""
        with stop_on_signals(self.request_stop):
            self._run_locked(until_caught_up, max_batches)

    def _run_locked(self, until_caught_up: bool, max_batches: int | None) -> None:
        self._ended_by = None
        locks = self.tables.locks = Locks(self.cfg.replicator.lease_seconds)
        try:
            try:
                self.target.make_folders("")
                private_dir(self.work)  # owner-only: state, logs, dead letters
                locks.take(self.work / LOCK_NAME, f"the work folder {self.work}")
                slo = self.cfg.replicator.slo
                goal = (
                    None
                    if slo is None
                    else SloGoal(slo.percent, slo.within_seconds, slo.window_seconds)
                )
                recorder = self.recorder = StateRecorder(self.work, self.config_path, goal)
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
            metrics = lineage = None
            ended_with: str | None = "stopped by an error"
            try:
                lineage = self.committer.lineage = Lineage.from_config(self.cfg)
                metrics = self._serve_metrics(recorder)
                self._run(until_caught_up, max_batches)
            except BaseException as exc:
                ended_with = str(exc) or type(exc).__name__
                recorder.replicator_state("failed", ended_with)
                raise
            else:  # a run that ended as no table could run failed (status says why)
                ended_with = ended_by = self._ended_by
                recorder.replicator_state(*(("failed", ended_by) if ended_by else ("stopped",)))
            finally:
                if lineage is not None:
                    self._lineage_failures()
                    lineage.close(ended_with)
                    self.committer.lineage = None
                self.control.sync(force=True)
                if self.control.watcher is not None:
                    self.control.watcher.close()
                    self.control.watcher = None
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
        # At start a broker that cannot be reached is an error at once (most likely a
        # wrong address), before Spark's JVM takes the CPU; once running, Kafka failures
        # are retried (Recovery.retry).
        self.offsets.connect().topics()
        self.control.watcher = SourceWatcher(self.cfg).start()  # Kafka answers: look around
        self.runner.start()  # the JVM boots while the tables open and Kafka is read
        self._refresh_topics()
        self.offsets.probe_goal(until_caught_up)
        try:
            while not self._stop.is_set():
                try:
                    if not self._turn(max_batches):
                        break
                except Exception as exc:
                    cause = transient_cause(exc)
                    if cause is None:
                        raise
                    self.recovery.retry(cause, exc)
            if self.recorder is not None and self._stop.is_set():
                self.recorder.replicator_state("stopping")
                self.control.sync(force=True)
            self._settle_last()
            if self.recorder is not None:  # the lag as the run ends
                self.control.sync(self.offsets.lag(), force=True)
        finally:
            self.offsets.close()

    def _turn(self, max_batches: int | None) -> bool:
        """One turn: control -> intake -> commit previous -> report it -> launch next.
        False when the run is over."""
        commits = self.committer.commits
        self._control()
        if self._stop.is_set():
            return False
        if self.runner.pending is None and self._nothing_can_run():
            return False
        if self.runner.pending is None and self.offsets.caught_up():
            return False
        if max_batches is not None and self.committer.batches >= max_batches:
            return False
        if self.offsets.refresh_due():
            self._refresh_topics()
        consumed = self.intake.consume(self._poll_until())
        report = None
        if self.runner.merged():  # committed at once: the decode has nothing to overlap
            report = self._commit_previous()
        polled, prepared = self.intake.decode_polled(consumed)
        if report is None:
            report = self._commit_previous()
        if report is not None:  # before the next is planned: its lag and group offsets
            self._report(report)  # are the committed batch's own
        if prepared is not None:
            self.runner.launch(self.committer.plan(prepared), background=True)
        idle = not polled and self.runner.pending is None
        self.recovery.end_turn(self.committer.commits > commits, idle)
        self._lineage_failures()
        return True

    def _lineage_failures(self) -> None:
        """A table that stopped (FAILED) ends its lineage run as failed."""
        lineage = self.committer.lineage
        if lineage is None:
            return
        for rt in self.tables:
            if rt.state is TableState.FAILED and lineage.live(rt.name):
                lineage.failed_table(
                    rt.name, rt.error or "failed", functools.partial(_described, rt)
                )

    def _poll_until(self) -> Callable[[int], bool]:
        """When a poll ends (adaptive batching), besides ``max_batch_events`` read or
        ``max_batch_seconds`` gone: with a batch in flight, as soon as its merge has ended
        (it is committed right away; what was read meanwhile is the next batch, so a
        batch holds what arrived during the previous one's merge: small while caught up,
        full while behind); with none in flight, as soon as something was read."""
        pending = self.runner.pending
        if pending is None:
            return lambda read: read > 0
        return lambda read: pending.merged()

    def _nothing_can_run(self) -> bool:
        """Every table is FAILED (each said why as it failed): the run ends (exit 3)
        instead of idling with nothing it may write."""
        tables = list(self.tables)
        if not tables or not all(rt.state.stopped for rt in tables):
            return False
        self._ended_by = (
            f"no table can replicate: all {len(tables)} FAILED (each error is printed with "
            "its table's name); stopping, fix them and start again"
        )
        log.error("%s", self._ended_by)
        return True

    def _settle_last(self) -> None:
        """The batch in flight as the run ends: finished and committed, never dropped,
        unless a stop was asked and its Spark job failed (a service manager that signals
        every process of the service also stops Spark's Python workers,
        :func:`lost_to_a_stop`): then it is not retried, and the next start reads it again
        from the checkpoints. Any other failure fails the run."""
        try:
            self._settle()
        except Exception as exc:
            cause = transient_cause(exc)
            if cause is None or not self._stop.is_set() or not lost_to_a_stop(exc):
                raise
            log.warning(
                "the batch in flight did not finish as the run stopped (%s); the next start "
                "reads it again",
                cause,
            )

    def _control(self, *, merging: bool = False) -> None:
        """Between batches: retry the held tables whose wait is over; always: answer
        control requests and sync the state store (``merging``: while a batch merges)."""
        if not merging:
            self.recovery.retry_tables()
        self.control.poll(merging=merging)

    def _refresh_topics(self) -> None:
        """Find topics and partitions (tables whose storage failed as they were opened
        are held), then hand new tables to the state store."""
        self.offsets.refresh(lambda rt, exc: self.recovery.table_trouble(rt, exc, committed=True))
        self.control.adopt()

    # -- the batch in flight ---------------------------------------------------------------
    def _finish(self, pending: PendingBatch) -> BatchReport:
        """Wait for a batch's merge (answering requests meanwhile), then commit it."""
        self.runner.wait(pending, lambda: self._control(merging=True))
        return self.committer.finish(pending)

    def _commit_previous(self) -> BatchReport | None:
        """Commit the batch in flight, if any; what it did."""
        pending = self.runner.take()
        return None if pending is None else self._finish(pending)

    def _settle(self) -> bool:
        """Finish, commit and report the batch in flight now (before a resync or a
        replay, and as the run ends). False if there was none."""
        report = self._commit_previous()
        if report is not None:
            self._report(report)
        return report is not None

    def _report(self, report: BatchReport) -> None:
        report.lag_messages = self.offsets.after_batch()
        if self.on_batch:
            self.on_batch(report)

    def _apply_now(self, prepared: PreparedBatch) -> str | None:
        """Plan, merge and commit one batch here (a replay); the instant of its first
        table (None: nothing was planned)."""
        pending = self.runner.launch(self.committer.plan(prepared), background=False)
        self._finish(pending)
        return pending.plans[0].instant if pending.plans else None

    # -- without Kafka -----------------------------------------------------------------------
    def apply(self, messages: Sequence[Record], *, started: float | None = None) -> BatchReport:
        """Decode, merge and commit one micro-batch of messages; return what it did."""
        started = time.monotonic() if started is None else started
        prepared = self.intake.prepare(group_by_topic(messages), len(messages), started)
        return self._finish(self.runner.launch(self.committer.plan(prepared), background=False))

    def merge_batch(
        self, topic: str, batch: pa.Table, key_fields: list[str], offsets: dict[int, int]
    ) -> dict[str, int]:
        """Merge and commit one already-decoded change batch into a table.

        The apply path without Kafka and decoding: what benchmarks of the merge use.
        """
        rt = self.tables.get(topic)
        if rt is None:
            raise TableNameError(f"topic {topic!r} is not replicated")
        prepared = PreparedBatch(count=batch.num_rows, started=time.monotonic())
        prepared.tables.append(TableShare(rt, batch, key_fields, offsets))
        pending = self.runner.launch(self.committer.plan(prepared), background=False)
        return self._finish(pending).tables.get(rt.name, {})

    def replay(self, table: str) -> ReplayOutcome:
        """Re-apply a table's dead letters with no replicator running (``cdcctl deadletters
        replay``): the work folder's and the table's writer locks are held meanwhile.

        Raises:
            WriterLockError: a replicator runs on the work folder (send it a request).
        """
        locks = self.tables.locks = Locks(self.cfg.replicator.lease_seconds)
        try:
            locks.take(self.work / LOCK_NAME, f"the work folder {self.work}")
            return self.control.replay(table)
        finally:
            locks.release_all()
            self.tables.locks = None

    # -- status ------------------------------------------------------------------------------
    def control_topics(self) -> dict[str, tuple[str, int]]:
        """Topics recognised as holding no rows: topic -> (kind, records skipped)."""
        return self.control.control_topics()

    def failing(self) -> list[TableStatus]:
        """Tables that stopped replicating (FAILED), with their errors."""
        return [rt.status() for rt in self.tables if rt.state.stopped]

    def status(self) -> list[TableStatus]:
        """A snapshot of every table's status and counters."""
        return [rt.status() for rt in self.tables]


def _described(rt: TableRuntime) -> TableLineage | None:
    """What lineage says of a table that failed before its first commit of the run (its
    schema read from its newest commit; None without a writer)."""
    if rt.writer is None:
        return None
    return table_lineage(rt, rt.writer.schema() or pa.schema([]), rt.writer.location)
