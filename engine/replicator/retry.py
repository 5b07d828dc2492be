"""The retry rule: which failures are transient, how long to wait, when to give up.

A *transient* failure is one a retry can cure: a :class:`~engine.errors.TransientError`
(Kafka unreachable: a :class:`SourceError` from polling, discovering topics, reading end
offsets, seeking; a failed Spark job: a task raised, a Python worker died,
:class:`SparkJobError`) or a storage error (an :class:`OSError` while a table is written
or committed). Everything else — a :class:`~engine.errors.TerminalError` such as a bad
config, a schema conflict, a gap in a topic, a bad message under ``errors.tolerance =
"none"`` — is terminal and never retried. :func:`transient_cause` is the one place that
tells them apart; :func:`job_error` turns a failed Spark job into the one to raise.

An *incident* lasts from the first failure until the first batch that succeeds after it;
its retries wait ``BASE_S * 2**(n-1)`` seconds (at most ``CAP_S``), each wait drawn at
random between half and all of that ("equal jitter", so several replicators that lost
the same broker do not come back in step). Once an incident has lasted
``replicator.retry_max_seconds`` it is given up: the replicator stops (a broker or Spark
failure) or the one table stops (its own storage error).
"""

from __future__ import annotations

import contextlib
import errno
import random
import re
import time
from dataclasses import dataclass

from engine import errors
from engine.errors import CdcError, SparkJobError, SparkStorageError, TransientError

#: First wait, and the longest single wait.
BASE_S = 1.0
CAP_S = 30.0


def backoff(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number ``attempt`` (1, 2, ...)."""
    ceiling = min(CAP_S, BASE_S * 2 ** min(attempt - 1, 30))
    return ceiling * (0.5 + 0.5 * (rng or random).random())


def transient_cause(exc: BaseException) -> str | None:
    """The one-line cause of a transient failure (None: not transient)."""
    if isinstance(exc, TransientError):
        return exc.message
    if isinstance(exc, OSError):
        return storage_cause(exc)
    return None


#: What to do about the storage errors a person must fix (by errno).
STORAGE_ADVICE = {
    errno.ENOSPC: "the file system is full: free space on it (or move target.path or "
    "replicator.work_dir, whichever it holds, to a larger one); each table resumes from its "
    "last commit, nothing is lost",
    errno.EDQUOT: "the disk quota is used up: free space or raise the quota; each table "
    "resumes from its last commit",
    errno.EROFS: "the file system is mounted read-only: remount it read-write (or move "
    "target.path or replicator.work_dir, whichever it holds); each table resumes from its "
    "last commit",
    errno.EACCES: "permission denied: give the user running cdcctl write access to "
    "target.path and replicator.work_dir",
    errno.EPERM: "operation not permitted: give the user running cdcctl write access to "
    "target.path and replicator.work_dir",
    errno.EIO: "an I/O error: check the disk (dmesg); each table resumes from its last commit",
}

#: The text of an OSError raised inside a Spark task (Python's own repr).
_TASK_OS_ERROR = re.compile(
    r"(?:OSError|\w+Error): \[Errno (\d+)\] ([^'\n]+?)(?:: '([^'\n]+)')?$", re.M
)


def storage_cause(exc: OSError) -> str:
    """One line for a storage error: what failed, on which file, and (for the errors a
    person must fix) what to do."""
    where = f" on {exc.filename}" if exc.filename else ""
    reason = exc.strerror or str(exc) or type(exc).__name__
    advice = STORAGE_ADVICE.get(exc.errno or 0)
    return f"storage error{where}: {reason}" + (f"; {advice}" if advice else "")


def task_storage_error(exc: BaseException) -> OSError | None:
    """The storage error a Spark task raised (a full or read-only disk while a merge
    task wrote a data file), from the failed job's text; None if it was something else."""
    found = _TASK_OS_ERROR.search(str(exc))
    if found is None:
        return None
    number = int(found.group(1))
    if number not in STORAGE_ADVICE:
        return None
    return OSError(number, found.group(2).strip(), found.group(3))


def task_error(exc: BaseException) -> CdcError | None:
    """A terminal engine error that a Spark task raised (e.g. a damaged table file), from
    the failed job's text (the Python traceback travels inside the Java exception).
    Such a job failure is not transient: the error itself is raised again."""
    text = str(exc)
    found = re.search(r"engine\.errors\.(\w+): (.+)", text)
    if found is None:
        return None
    cls = getattr(errors, found.group(1), None)
    if not (isinstance(cls, type) and issubclass(cls, CdcError)) or issubclass(cls, TransientError):
        return None
    hint = re.match(r"\s*hint: (.+)", text[found.end() :])
    return cls(found.group(2).strip(), hint.group(1).strip() if hint else "")


def job_error(exc: BaseException, number: int, spark_log: str) -> BaseException:
    """What to raise for a failed Spark job of batch ``number``: an engine error (or a
    non-``Exception``) as it is; a terminal engine error a task raised, again; else a
    (transient) :class:`SparkJobError` with the storage error or the job's telling line."""
    if isinstance(exc, CdcError) or not isinstance(exc, Exception):
        return exc
    terminal = task_error(exc)
    if terminal is not None:
        return terminal
    storage = task_storage_error(exc)
    if storage is not None:  # a merge task could not write its file: the batch is
        # dropped whole (its tables' results were one job) and retried
        return SparkStorageError(
            f"the Spark job of batch {number} failed: {storage_cause(storage)}",
            hint="each table resumes from its last commit once the storage is fixed",
        )
    return SparkJobError(
        f"the Spark job of batch {number} failed: {spark_reason(exc)}",
        hint=f"Spark's own log is {spark_log}",
    )


def lost_to_a_stop(exc: BaseException) -> bool:
    """Whether a failure is what a stop makes of the batch in flight when a service
    manager signals every process of the service (Spark's Python workers or JVM ended
    under the job): a failed Spark job other than a task's storage error. Any other
    failure during a stop (Kafka, storage) is not the stop's doing and fails the run."""
    return isinstance(exc, SparkJobError) and not isinstance(exc, SparkStorageError)


def spark_reason(exc: BaseException) -> str:
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


@dataclass
class Incident:
    """One transient failure being retried (of the whole replicator, or of one table)."""

    cause: str
    started: float
    attempts: int = 0
    #: When the next try is due (time.monotonic()).
    retry_at: float = 0.0
    #: Whether it ends only with a commit (a batch was discarded: its events must be
    #: applied again), or already with a loop turn that runs without an error.
    needs_commit: bool = True

    @classmethod
    def begin(cls, cause: str) -> Incident:
        return cls(cause, time.monotonic())

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def next_wait(self, limit: float) -> float | None:
        """Count a retry and return how long to wait before it; None once past ``limit``."""
        elapsed = self.elapsed
        if elapsed >= limit:
            return None
        self.attempts += 1
        wait = min(backoff(self.attempts), limit - elapsed)
        self.retry_at = time.monotonic() + wait
        return wait

    def recovered(self) -> str:
        """The message of an incident that ended: how many retries, how long, the cause."""
        return (
            f"recovered after {self.attempts} retry(s) over {self.elapsed:.0f} s from: {self.cause}"
        )

    def given_up(self, limit: float) -> str:
        """The message of an incident past its limit: the cause and how long it was retried."""
        return (
            f"{self.cause} (retried {self.attempts} time(s) over {self.elapsed:.0f} s; "
            f"replicator.retry_max_seconds = {limit:g})"
        )
