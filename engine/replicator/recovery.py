"""Recovery: every retry path of the replicator (the rule: :mod:`engine.replicator.retry`).

Two kinds of incident. A failure of the whole replicator (Kafka, Spark, storage outside
one table's plan and commit) goes to :meth:`Recovery.retry`: every live table goes
FAILING, the batch in flight is discarded, the consumer closed, and after a backoff
:meth:`Recovery.reset` does what a restart does. A storage error of one table goes to
:meth:`Recovery.table_trouble`: that table alone is held until :meth:`Recovery.retry_tables`
reopens it. An incident ends with the next commit (or an idle turn when nothing was
discarded); past ``replicator.retry_max_seconds`` the replicator raises
:class:`RetriesExhausted`, or the table alone goes FAILED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from engine.config import Config
from engine.errors import HudiError, RetriesExhausted, WriterLockError
from engine.replicator.intake import Intake
from engine.replicator.offsets import Offsets
from engine.replicator.retry import Incident, lost_to_a_stop, storage_cause, transient_cause
from engine.replicator.runner import CONTROL_EVERY_SECONDS, SparkRunner
from engine.replicator.tables import TableRuntime, Tables
from engine.state import StateRecorder, TableState

log = logging.getLogger("cdcctl.replicator")


@dataclass(eq=False)
class Recovery:
    """Retries transient failures, of the whole replicator or of one table."""

    cfg: Config
    tables: Tables
    offsets: Offsets
    intake: Intake
    runner: SparkRunner
    #: Finds topics again with a new consumer (the loop's topic refresh).
    refresh: Callable[[], None]
    #: Answers control requests (while waiting), and tells whether a stop was asked for.
    control: Callable[[], None]
    stopping: Callable[[], bool]
    recorder: StateRecorder | None = None
    #: A transient failure of the whole replicator (Kafka, Spark, storage) being
    #: retried; tables have incidents of their own for their storage errors.
    incident: Incident | None = None

    @property
    def limit(self) -> float:
        return self.cfg.replicator.retry_max_seconds

    def _event(self, table: str | None, message: str) -> None:
        log.warning("%s", message)
        if self.recorder is not None:
            self.recorder.event(table, "retry", message)

    # -- the whole replicator ----------------------------------------------------------------
    def retry(self, cause: str, exc: BaseException) -> None:
        """Retry a failure of the whole replicator (Kafka, Spark, storage outside one
        table's commit): every live table goes FAILING, the batch in flight is dropped,
        and after a backoff the replicator starts over from each table's checkpoint, as a
        restart would. Returns once that worked (the incident ends with the next
        successful batch), or when a stop was asked for; raises past the limit, and
        when stopping raises ``exc`` unless a stop caused it (:func:`lost_to_a_stop`)."""
        if self.stopping():
            if not lost_to_a_stop(exc):
                raise exc
            log.warning("%s; not retried: stopping, the next start reads it again", cause)
            self._discard()
            return
        read_ahead = self.runner.pending is not None or self.offsets.read_ahead()
        incident = self.incident
        if incident is None:
            incident = self.incident = Incident.begin(cause)
            incident.needs_commit = False
        incident.needs_commit = incident.needs_commit or read_ahead
        while True:
            incident.cause = cause
            wait = incident.next_wait(self.limit)
            if wait is None:
                self._give_up(incident)
            for rt in self.tables:
                if not (rt.state.stopped or rt.state is TableState.PAUSED):
                    rt.begin_failing(cause)
            self._event(None, f"{cause}; retry {incident.attempts} in {wait:.1f} s")
            self._discard()
            if not self._wait(wait):
                return  # stopping: each table resumes from its checkpoint at the next start
            try:
                self.reset()
                return
            except Exception as exc:
                again = transient_cause(exc)
                if again is None:
                    raise
                cause = again

    def _give_up(self, incident: Incident) -> NoReturn:
        """The incident outlasted ``replicator.retry_max_seconds``: stop the replicator."""
        message = incident.given_up(self.limit)
        for rt in self.tables:
            if rt.state is TableState.FAILING:
                rt.fail(message, logged=False)
        raise RetriesExhausted(
            message,
            hint="fix the cause and start again: each table resumes from its last commit",
        )

    def end_turn(self, committed: bool, idle: bool) -> None:
        """After a turn that raised nothing: the replicator's incident ends with a commit
        (or an idle turn, when no batch was discarded)."""
        incident = self.incident
        if incident is not None and (committed or (idle and not incident.needs_commit)):
            self._recovered()

    def _recovered(self) -> None:
        """The replicator's incident is over: its tables are back where they were."""
        incident, self.incident = self.incident, None
        if incident is None:
            return
        for rt in self.tables:
            if rt.incident is None:
                rt.recover()
        self._event(None, incident.recovered())

    def _discard(self) -> None:
        """Drop the batch in flight (after its Spark job ended) and close the consumer."""
        self.runner.discard()
        for rt in self.tables.by_topic.values():
            rt.stopping = False  # bad messages of dropped batches are met again when re-read
        self.offsets.disconnect()

    def _wait(self, seconds: float) -> bool:
        """Sleep, answering control requests; False if a stop was asked for meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, CONTROL_EVERY_SECONDS))
            self.control()
        return False

    def reset(self) -> None:
        """Start over as a restart would: every table rolls back its unfinished instants
        and reloads its progress; a new consumer reads from each table's checkpoint."""
        for rt in self.tables:
            if rt.state.stopped or rt.held:
                continue
            self.tables.reopen(rt)
            if rt.state is not TableState.PAUSED:
                rt.partitions = []  # assigned again, at the checkpoint, by the refresh
        for rt in self.tables.by_topic.values():
            if rt.control is not None:  # read again from the start (nothing applies twice)
                rt.partitions, rt.progress.committed = [], {}
        self.offsets.connect()  # nothing read yet
        self.intake.reset_transactions()  # the new consumer reads them from the start
        self.runner.restart_if_gone()
        self.refresh()
        self.offsets.probe_goal_again()

    # -- one table ---------------------------------------------------------------------------
    def table_trouble(self, rt: TableRuntime, exc: OSError, *, committed: bool) -> None:
        """A storage error of one table: it goes FAILING and is held (not read) until its
        next try, when it is opened again and read from its checkpoint; the other
        tables go on. Past ``replicator.retry_max_seconds`` the table alone is FAILED.
        ``committed``: the error came after its commit (cleaning, archiving)."""
        cause = f"{rt.name}: {storage_cause(exc)}"
        incident = rt.incident
        if incident is None:
            incident = rt.incident = Incident.begin(cause)
            incident.needs_commit = not committed
        incident.cause = cause
        wait = incident.next_wait(self.limit)
        if wait is None:
            self.offsets.fail(rt, incident.given_up(self.limit))
            return
        rt.begin_failing(cause)
        rt.held = True
        self.offsets.stop_reading(rt)
        self._event(
            self.tables.store_name(rt), f"{cause}; retry {incident.attempts} in {wait:.1f} s"
        )

    def retry_tables(self) -> None:
        """Try again the held tables whose wait is over: open each again (rolling back
        its unfinished instant) and read it from its checkpoint."""
        now = time.monotonic()
        for rt in list(self.tables):
            incident = rt.incident
            if not rt.held or incident is None or incident.retry_at > now:
                continue
            if self.offsets.source is None:
                return
            try:
                self.tables.reopen(rt)
            except OSError as exc:
                self.table_trouble(rt, exc, committed=not incident.needs_commit)
                continue
            except (HudiError, WriterLockError) as exc:
                self.offsets.fail(rt, str(exc))
                continue
            rt.held = False
            rt.stopping = False  # its batch was dropped: read again from its checkpoint
            self.offsets.read_again(rt)
            if not incident.needs_commit:
                self.table_recovered(rt)

    def table_recovered(self, rt: TableRuntime) -> None:
        """A table's own incident is over (it committed, or had nothing to commit)."""
        incident, rt.incident = rt.incident, None
        if incident is None:
            return
        if self.incident is None:
            rt.recover()
        self._event(self.tables.store_name(rt), incident.recovered())
