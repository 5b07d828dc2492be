"""Error taxonomy of the engine.

Every error the engine raises on purpose is a :class:`CdcError` with a message that says
what is wrong and a hint that says what to do. Each is either a :class:`TransientError`
(a retry with backoff can help: broker unreachable, a failed Spark job) or a
:class:`TerminalError` (retrying will not help: bad config, incompatible schema change);
the replicator tells them apart in one place (``transient_cause`` in
:mod:`engine.replicator.retry`, which adds storage errors: an :class:`OSError`). The
CLI renders them without a traceback and maps them to exit codes.
"""

from __future__ import annotations


class CdcError(Exception):
    """Root of every deliberate engine error."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class TransientError(CdcError):
    """Marker base: a retry with backoff can cure it; the replicator retries it."""


class TerminalError(CdcError):
    """Marker base: retrying cannot help; a person must act (the run or the table stops)."""


class ConfigError(TerminalError):
    """The configuration is invalid; nothing was started.

    ``problems`` lists every problem found as ``(key, message, fix)``.
    """

    def __init__(
        self, message: str, hint: str = "", problems: list[tuple[str, str, str]] | None = None
    ) -> None:
        super().__init__(message, hint)
        self.problems = problems or []

    def __str__(self) -> str:
        lines = [self.message]
        for key, msg, fix in self.problems:
            lines.append(f"  - {key}: {msg}" + (f" (fix: {fix})" if fix else ""))
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class EnvironmentProblem(TerminalError):
    """Something the engine needs on this machine is missing (Java, the broker binary)."""


class SourceError(TransientError):
    """Kafka could not be reached or read."""


class KafkaSecurityError(TerminalError):
    """A TLS handshake or SASL authentication with Kafka failed: terminal (retrying with
    the same certificate or password cannot help), unlike an unreachable broker."""


class SourceDatabaseError(TerminalError):
    """The source database (PostgreSQL, MySQL) could not be reached or read."""


class DecodeError(TerminalError):
    """A message could not be decoded (it is quarantined, never silently dropped)."""


class SchemaEvolutionError(TerminalError):
    """A table's new schema is not a safe evolution of the stored one."""


class MergeError(TerminalError):
    """The merge of a micro-batch into a table failed."""


class SparkJobError(TransientError):
    """A batch's Spark job failed (a task raised, a Python worker died, the JVM went away)."""


class SparkStorageError(SparkJobError):
    """A batch's Spark job failed as a merge task could not write its file (a full or
    read-only disk): a storage error, never what a stop makes of the job."""


class RetriesExhausted(TerminalError):
    """A transient failure outlasted ``replicator.retry_max_seconds``: the replicator stopped."""


class HudiError(TerminalError):
    """The Hudi table on disk is unreadable or inconsistent."""


class TableNameError(TerminalError):
    """A topic cannot be mapped to a safe table name inside the target folder."""


class UnknownTableError(TerminalError):
    """A command names a table this replicator does not know (one message for every
    command: :func:`engine.naming.unknown_table`)."""


class QueryError(TerminalError):
    """A query over the replicas failed (bad SQL, unknown table)."""


class StateError(TerminalError):
    """A request about the replicator's state cannot be carried out as asked (a
    replicator runs where none may, or the table is unknown)."""


class RepairError(TerminalError):
    """A replica cannot be repaired as asked (``cdcctl repair``): it cannot be compared,
    no signal table is known, or its extra rows cannot be ordered with its changes."""


class StorageError(TerminalError):
    """A file the replicator needs cannot be written (a full or read-only disk,
    permissions) before replication starts, or an object store refused or failed an
    operation (a missing bucket, refused credentials; ``hint`` says what to change).
    During a run a disk's I/O errors and an unavailable store
    (:class:`~engine.storage.StoreUnavailable`, also an ``OSError``) are retried."""


class WriterLockError(TerminalError):
    """Another replicator holds the writer lock of the work folder or of a table."""


class KeylessTableError(SchemaEvolutionError):
    """Row events without a record key on a table that is not configured for them."""


class ForeignTableError(HudiError):
    """A table folder holds a table another Hudi writer made or changed: cdcctl refuses to
    write it (or remove it), and reading it stays possible."""
