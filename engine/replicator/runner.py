"""The Spark runner: the Spark context, and the merge job of the batch in flight.

Spark starts in the background (the JVM boots while Kafka is read and decoded); a
context whose JVM died is started anew after a failure. A planned batch's merge tasks
run as one Spark job, in a thread while the next batch is polled and decoded
(:meth:`SparkRunner.launch`); :meth:`SparkRunner.wait` joins it and raises what the job's
failure means (:func:`engine.replicator.retry.job_error`). At most one batch is in flight
(``pending``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from engine.config import Config
from engine.merge import run_merge_job
from engine.replicator.batches import PendingBatch
from engine.replicator.retry import job_error

log = logging.getLogger("cdcctl.replicator")

#: How often control requests are looked for while a batch merges.
CONTROL_EVERY_SECONDS = 0.5


class SparkRunner:
    """Runs each batch's merge job on the replicator's Spark context."""

    def __init__(self, config: Config, spark: Any = None) -> None:
        self.cfg = config
        self._spark = spark
        self._boot: Future[Any] | None = None
        #: The batch whose merge job runs (or ran) and is not committed yet.
        self.pending: PendingBatch | None = None

    def start(self) -> None:
        """Start Spark in the background: the JVM boots while Kafka is read and decoded."""
        if self._spark is not None or self._boot is not None:
            return
        from engine.spark import start_for

        self._boot = start_for(self.cfg)

    def context(self) -> Any:
        if self._spark is None:
            self.start()
            if self._boot is None:
                raise RuntimeError("Spark was not started")
            self._spark = self._boot.result()
        return self._spark

    def restart_if_gone(self) -> None:
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
        self._spark, self._boot = None, None
        self.start()

    def launch(self, pending: PendingBatch, *, background: bool) -> PendingBatch:
        """Start a planned batch's merge job: in a thread (``background``: it becomes
        the batch in flight) or here."""
        pending.merge_started = time.monotonic()
        if pending.tasks:
            if background:
                pending.thread = threading.Thread(
                    target=self._run_job, args=(pending,), name="spark-merge", daemon=True
                )
                pending.thread.start()
            else:
                self._run_job(pending)
        if background:
            self.pending = pending
        return pending

    def _run_job(self, pending: PendingBatch) -> None:
        try:
            pending.results = run_merge_job(self.context(), pending.tasks)
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait in the main thread
            pending.error = exc
        finally:
            pending.merge_ended = time.monotonic()

    def merged(self) -> bool:
        """A batch is in flight and its merge job has ended."""
        return self.pending is not None and self.pending.merged()

    def take(self) -> PendingBatch | None:
        """The batch in flight, which the caller now finishes (None: there is none)."""
        pending, self.pending = self.pending, None
        return pending

    def wait(self, pending: PendingBatch, while_merging: Callable[[], None]) -> None:
        """Wait for a batch's merge job (calling ``while_merging`` every
        :data:`CONTROL_EVERY_SECONDS` of a long one) and raise what its failure means."""
        if pending.thread is not None:
            pending.thread.join(CONTROL_EVERY_SECONDS)
            while pending.thread.is_alive():  # a long merge: requests are still answered
                while_merging()
                pending.thread.join(CONTROL_EVERY_SECONDS)
        if pending.error is not None:
            failure = job_error(
                pending.error, pending.number, str(self.cfg.work_path() / "spark.log")
            )
            if failure is pending.error:
                raise failure
            raise failure from pending.error

    def discard(self) -> None:
        """Drop the batch in flight once its Spark job has ended."""
        pending, self.pending = self.pending, None
        if pending is not None and pending.thread is not None:
            while pending.thread.is_alive():
                pending.thread.join(CONTROL_EVERY_SECONDS)
