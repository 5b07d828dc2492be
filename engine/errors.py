"""Error taxonomy of the engine.

Every error the engine raises on purpose is a :class:`CdcError` with a message that says
what is wrong and a hint that says what to do. Errors are either *transient* (a retry
with backoff can help: broker unreachable, storage hiccup) or *terminal* (retrying will
not help: bad config, incompatible schema change). The CLI renders them without a
traceback and maps them to exit codes.
"""

from __future__ import annotations


class CdcError(Exception):
    """Root of every deliberate engine error."""

    transient: bool = False

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class ConfigError(CdcError):
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


class EnvironmentProblem(CdcError):
    """Something the engine needs on this machine is missing (Java, the broker binary)."""


class SourceError(CdcError):
    """Kafka could not be reached or read."""

    transient = True


class KafkaSecurityError(CdcError):
    """A TLS handshake or SASL authentication with Kafka failed: terminal (retrying with
    the same certificate or password cannot help), unlike an unreachable broker."""


class SourceDatabaseError(CdcError):
    """The source database (PostgreSQL, MySQL) could not be reached or read."""


class DecodeError(CdcError):
    """A message could not be decoded (it is quarantined, never silently dropped)."""


class SchemaEvolutionError(CdcError):
    """A table's new schema is not a safe evolution of the stored one."""


class MergeError(CdcError):
    """The merge of a micro-batch into a table failed."""


class SparkJobError(CdcError):
    """A batch's Spark job failed (a task raised, a Python worker died, the JVM went away)."""

    transient = True


class RetriesExhausted(CdcError):
    """A transient failure outlasted ``replicator.retry_max_seconds``: the replicator stopped."""


class HudiError(CdcError):
    """The Hudi table on disk is unreadable or inconsistent."""


class TableNameError(CdcError):
    """A topic cannot be mapped to a safe table name inside the target folder."""


class QueryError(CdcError):
    """A query over the replicas failed (bad SQL, unknown table)."""


class StateError(CdcError):
    """A request about the replicator's state cannot be carried out as asked (a
    replicator runs where none may, or the table is unknown)."""


class StorageError(CdcError):
    """A file the replicator needs cannot be written (a full or read-only disk,
    permissions) before replication starts; during a run such errors are retried."""


class WriterLockError(CdcError):
    """Another replicator holds the writer lock of the work folder or of a table."""


class KeylessTableError(SchemaEvolutionError):
    """Row events without a record key on a table that is not configured for them."""


class ForeignTableError(HudiError):
    """A table folder holds a table another Hudi writer made or changed: cdcctl refuses to
    write it (or remove it), and reading it stays possible."""
