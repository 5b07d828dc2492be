"""Replicator configuration: one TOML file, validated as a whole before anything runs.

Layering, lowest first: defaults in the models below < the TOML file < ``CDCCTL_*``
environment variables (``CDCCTL_BOOTSTRAP_SERVERS``, ``CDCCTL_TARGET``) < command-line
flags (applied by the caller through :func:`load_config` overrides).

Secrets never live in the file. The Kafka SASL password, the TLS key password, the
source database password and the schema registry's basic-auth password come from the
environment or a file: either a reference (``sasl_password = "${env:NAME}"`` /
``"${file:PATH}"``, also ``ssl_key_password``, ``database_password`` and
``[source.schema_registry] basic_auth_password``), resolved when the config is loaded, or
the older ``sasl_password_env`` / ``sasl_password_file`` / ``ssl_key_password_env`` /
``database_password_env`` keys. A literal value is refused. Each resolved secret is
held as a ``SecretStr`` and registered with :mod:`engine.redaction`, so it is never
logged, stored or printed.
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import tomlkit
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from engine.column_types import parse_column_type
from engine.errors import ConfigError
from engine.naming import DEFAULT_NAMING, check_naming, table_name_for_topic
from engine.redaction import register as register_secret

SUPPORTED_FORMATS = ("debezium-json", "debezium-avro", "debezium-flat", "cdc-json")
#: The log file's name in the work folder (rotated files add ``.1``, ``.2``, ...).
LOG_NAME = "cdcctl.log"
PLANNED_FORMATS: tuple[str, ...] = ()

#: ``hudi.clean_retain_hours`` by default: longer than queries on a replica run and than
#: an hourly incremental pull's interval, short enough that the active timeline (every
#: commit of the window stays on it) and the slices compactions replaced stay small at
#: one commit a second (3,600 instants). Hudi's own default for the policy is 24.
DEFAULT_CLEAN_RETAIN_HOURS = 1.0

#: URL schemes of ``source.database_dsn``.
DATABASE_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb")

#: A secret reference: ``${env:NAME}`` or ``${file:PATH}``.
SECRET_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
#: The keys that take a secret reference, with the older key(s) they replace.
SECRET_KEYS = {
    "sasl_password": ("sasl_password_env", "sasl_password_file"),
    "ssl_key_password": ("ssl_key_password_env",),
    "database_password": ("database_password_env",),
}

#: What ``source.ddl`` / ``[tables.<name>] ddl`` may be.
DdlPolicy = Literal["fail", "apply", "ignore"]
#: What ``source.schema_changes`` / ``[tables.<name>] schema_changes`` may be.
SchemaChangePolicy = Literal["keep", "apply", "fail"]

#: Topics Debezium writes that never hold row changes; excluded unless the user overrides.
DEFAULT_EXCLUDE = r"(\.transaction$|^__debezium-heartbeat|^__|^_schemas$|^_confluent)"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CdcJsonConfig(_Section):
    """``[source.cdc_json]``: how a generic (non-Debezium) CDC JSON event is read
    (``source.format = "cdc-json"``); every key can be overridden per table under
    ``[tables.<name>]``. See docs/guide/formats.md "Generic CDC JSON"."""

    #: The event field holding the operation.
    op_field: str = Field(default="_action", min_length=1)
    #: Values of ``op_field`` meaning insert / update / delete.
    insert_values: list[str] = Field(default_factory=lambda: ["_insert"])
    update_values: list[str] = Field(default_factory=lambda: ["_update"])
    delete_values: list[str] = Field(default_factory=lambda: ["_delete"])
    #: The event field whose value orders the events of a key (newest wins): integers,
    #: decimals, or timestamps (ISO 8601 text).
    order_field: str = Field(default="_timestamp", min_length=1)
    #: The kind of the order values: ``auto`` (any), or ``integer`` / ``decimal`` /
    #: ``timestamp`` only (a value of another kind is a bad message, never mis-ordered).
    order_type: Literal["auto", "integer", "decimal", "timestamp"] = "auto"
    #: Record-key fields; empty: the fields of the message key (a JSON object).
    key_fields: list[str] = Field(default_factory=list)
    #: ``full``: an event carries the whole row (absent columns are null); ``partial``:
    #: absent columns are unchanged, each column's newest value wins by the order field.
    images: Literal["full", "partial"] = "full"
    #: A field holding an array of events per message; empty: a message is one event.
    records_field: str = ""

    @model_validator(mode="after")
    def _ops(self) -> CdcJsonConfig:
        _check_cdc_json(self.model_dump())
        return self


def _check_cdc_json(values: dict[str, Any]) -> None:
    """The op values must not overlap, and every op needs at least one value."""
    seen: dict[str, str] = {}
    for kind in ("insert_values", "update_values", "delete_values"):
        listed = values.get(kind)
        if listed is None:
            continue
        if not listed:
            raise ValueError(f"{kind} is empty: list at least one value of the op field")
        for value in listed:
            if value in seen and seen[value] != kind:
                raise ValueError(
                    f"{value!r} is in both {seen[value]} and {kind}: an op value must mean one "
                    "operation"
                )
            seen[value] = kind
    names = [values.get("op_field"), values.get("order_field")]
    if names[0] is not None and names[0] == names[1]:
        raise ValueError("op_field and order_field name the same field: they must differ")


class FlattenedConfig(_Section):
    """``[source.flattened]``: events written by Debezium's ExtractNewRecordState SMT
    (``source.format = "debezium-flat"``), docs/guide/formats.md "Flattened events"."""

    #: Prefix of the fields the SMT adds (its ``add.fields.prefix``).
    field_prefix: str = Field(default="__", min_length=1)
    #: Order by this field when an event has no ``__lsn`` / ``__file`` + ``__pos``: a
    #: row column or an added field (e.g. ``"__source_ts_ms"``), holding integers below
    #: 2**62 or ISO timestamps. Newest value wins per key.
    order_field: str | None = Field(default=None, min_length=1)
    #: Without any ordering field: order by Kafka offset (arrival order). Opt-in, since
    #: it is only right while each key stays in one partition and the producer never
    #: reorders.
    arrival_order: bool = False


class SchemaRegistryConfig(_Section):
    """``[source.schema_registry]``: the Confluent-compatible registry holding the Avro
    writer schemas (``source.format = "debezium-avro"``)."""

    #: ``http://host:8081`` or ``https://...``.
    url: str = Field(min_length=1)
    #: HTTP basic authentication (Confluent Cloud: the API key and secret).
    basic_auth_user: str | None = None
    #: ``${env:NAME}`` or ``${file:PATH}``: the basic-auth password (never the value).
    basic_auth_password: str | None = None
    #: The CA certificate(s) (PEM file) that signed an https registry's certificate;
    #: unset: the system's CA store.
    ssl_ca_location: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        if parts.password is not None:
            raise ValueError(
                "a password must not be in the URL: set basic_auth_user and "
                'basic_auth_password = "${env:NAME}"'
            )
        return value

    @field_validator("basic_auth_password")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and not SECRET_REFERENCE.fullmatch(value):
            raise ValueError(
                "a password must not be in the file: write a reference, "
                '"${env:NAME}" (an environment variable) or "${file:PATH}" (a file holding it)'
            )
        return value

    @model_validator(mode="after")
    def _auth_pair(self) -> SchemaRegistryConfig:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ValueError("basic_auth_user and basic_auth_password go together: set both")
        return self

    def password_value(self) -> SecretStr | None:
        """The basic-auth password (registered for redaction), if configured."""
        if self.basic_auth_password is None:
            return None
        key = "source.schema_registry.basic_auth_password"
        value = resolve_reference(key, self.basic_auth_password)
        register_secret(value)
        return SecretStr(value)


class SourceConfig(_Section):
    """Where the Debezium topics are and how to read them."""

    bootstrap_servers: str = Field(min_length=1)
    topics: str = Field(min_length=1, description="regular expression over topic names")
    exclude_topics: str = DEFAULT_EXCLUDE
    format: str = "debezium-json"
    group_id: str = "cdcctl"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    #: ``${env:NAME}`` or ``${file:PATH}`` (never the password itself).
    sasl_password: str | None = None
    sasl_password_env: str | None = None
    sasl_password_file: str | None = None
    #: TLS (security_protocol SSL / SASL_SSL): the CA certificate(s) that signed the
    #: brokers' certificates (PEM file); unset: the system's CA store.
    ssl_ca_location: str | None = None
    #: A client certificate and its private key (PEM), for brokers that require one.
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    #: Environment variable holding the password of an encrypted private key.
    ssl_key_password_env: str | None = None
    #: ``${env:NAME}`` or ``${file:PATH}``: the password of an encrypted private key.
    ssl_key_password: str | None = None
    #: Check that the broker's certificate names the host connected to (turn off only
    #: for certificates without the right names, never on an untrusted network).
    ssl_endpoint_identification: bool = True
    #: Glob patterns over table names (after topic -> name mapping); empty: every table.
    include_tables: list[str] = Field(default_factory=list)
    exclude_tables: list[str] = Field(default_factory=list)
    #: Order streamed MySQL/MariaDB events by GTID (per origin lineage) instead of binlog
    #: coordinates, which are not comparable across a fail-over between servers.
    mysql_gtid_ordering: bool = False
    #: Debezium's unavailable.value.placeholder (``hex:...`` for a bytes placeholder).
    toast_placeholder: str = Field(default="__debezium_unavailable_value", min_length=1)
    #: Extra librdkafka settings (no secrets: use the *_env / *_file keys for those).
    kafka_options: dict[str, str | int | float | bool] = Field(default_factory=dict)
    #: The source database, for ``cdcctl test-connection``: ``postgresql://user@host:port/db``
    #: or ``mysql://user@host:port[/db]``, without a password.
    database_dsn: str | None = None
    #: Environment variable holding the database password (else PGPASSWORD / MYSQL_PWD).
    database_password_env: str | None = None
    #: ``${env:NAME}`` or ``${file:PATH}``: the database password.
    database_password: str | None = None
    #: Read the column types of schemaless (``schemas.enable=false``) tables from the
    #: catalog (information_schema) of ``database_dsn``: at start, and again when a batch
    #: has a column or table the catalog did not list.
    catalog_types: bool = False
    #: Messages (key plus value) larger than this many bytes are not decoded: they are
    #: bad messages (see ``errors.tolerance``). None: no limit.
    max_message_bytes: int | None = Field(default=None, ge=1)
    #: How generic CDC JSON events are read (``format = "cdc-json"``).
    cdc_json: CdcJsonConfig = CdcJsonConfig()
    #: MySQL/MariaDB schema changes (the schema change topic) that cannot be applied in
    #: place: a column drop or rename, a narrowing, a table drop or rename. ``fail``
    #: stops that table (others go on), ``apply`` applies them, ``ignore`` only logs and
    #: counts them. Column adds and widenings are applied unless ``ignore``;
    #: ``[tables.<name>] ddl`` overrides this per table.
    ddl: DdlPolicy = "fail"
    #: What a change seen in the events' own schemas (Debezium JSON with schemas, Avro;
    #: PostgreSQL has no DDL topic) does: a column no longer in the source is kept
    #: (``keep``: null from then on), removed (``apply``) or stops the table (``fail``);
    #: a narrowed column keeps the wider type (``keep``, ``apply``) or stops it
    #: (``fail``); a change of kind always stops it. ``[tables.<name>] schema_changes``
    #: overrides this per table (docs/guide/formats.md "Schema changes seen in events").
    schema_changes: SchemaChangePolicy = "keep"
    #: A column added with a DEFAULT the events' schema carries: set it on the rows the
    #: replica holds from before it (True), or leave them null (False).
    fill_defaults: bool = False
    #: PostgreSQL logical decoding messages (``op=m``, ``pg_logical_emit_message``):
    #: ``skip`` counts and skips them, ``table`` keeps them in an append-only table per
    #: message topic.
    logical_messages: Literal["skip", "table"] = "skip"
    #: Settings of ``format = "debezium-flat"``.
    flattened: FlattenedConfig = FlattenedConfig()
    #: The schema registry (``source.format = "debezium-avro"`` only).
    schema_registry: SchemaRegistryConfig | None = None
    #: Keys and values whose JSON objects and arrays nest deeper than this are bad
    #: messages, refused before any parser sees them (see engine/decode/limits.py; the
    #: bounds are its DEFAULT_MAX_NESTING_DEPTH and MAX_NESTING_DEPTH_CEILING).
    max_nesting_depth: int = Field(default=64, ge=8, le=256)

    @field_validator("database_dsn")
    @classmethod
    def _dsn(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in DATABASE_SCHEMES:
            raise ValueError(
                f"{value.split('://')[0]!r} is not a database URL scheme: use postgresql:// "
                "or mysql://"
            )
        if parts.password is not None:
            raise ValueError(
                "a password must not be in the file: remove it from the URL and write "
                'source.database_password = "${env:NAME}" (or set PGPASSWORD / MYSQL_PWD)'
            )
        return value

    @field_validator("sasl_password", "ssl_key_password", "database_password")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and not SECRET_REFERENCE.fullmatch(value):
            raise ValueError(
                "a password must not be in the file: write a reference, "
                '"${env:NAME}" (an environment variable) or "${file:PATH}" (a file holding it)'
            )
        return value

    @model_validator(mode="after")
    def _flattened_only_when_flat(self) -> SourceConfig:
        if self.format != "debezium-flat" and self.flattened != FlattenedConfig():
            raise ValueError(
                f'[source.flattened] is only read with format = "debezium-flat" (format is '
                f'"{self.format}"): set the format, or remove the section'
            )
        return self

    @model_validator(mode="after")
    def _registry(self) -> SourceConfig:
        if self.format == "debezium-avro" and self.schema_registry is None:
            raise ValueError(
                'format "debezium-avro" needs the schema registry: add [source.schema_registry] '
                'with url = "http://host:8081"'
            )
        return self

    @model_validator(mode="after")
    def _one_source(self) -> SourceConfig:
        for key, older in SECRET_KEYS.items():
            both = [o for o in older if getattr(self, o)]
            if getattr(self, key) is not None and both:
                raise ValueError(
                    f"source.{key} and source.{both[0]} both name the password: keep one"
                )
        if self.catalog_types and not self.database_dsn:
            raise ValueError(
                "source.catalog_types reads column types from the source database: set "
                "source.database_dsn (postgresql://user@host:5432/db or mysql://user@host:3306)"
            )
        return self

    @field_validator("topics", "exclude_topics")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc})") from exc
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, value: str) -> str:
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{server.strip()!r} is not host:port")
        return value

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value in PLANNED_FORMATS:
            raise ValueError(f"format {value!r} is not supported yet")
        if value not in SUPPORTED_FORMATS:
            raise ValueError(f"unknown format {value!r}")
        return value

    @field_validator("kafka_options")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if "password" in key or "secret" in key:
                raise ValueError(f"{key!r} looks like a secret and must not be in the file")
        return value

    @property
    def typed_messages(self) -> bool:
        """Whether messages carry their own column types and keys (Avro), so that the
        JSON-only table keys (``key_fields``, ``keyless``) do not apply."""
        return self.format == "debezium-avro"

    def secret(self, key: str) -> SecretStr | None:
        """The secret ``key`` (``sasl_password``, ``ssl_key_password``,
        ``database_password``) from its reference or its older ``*_env`` / ``*_file``
        key; None when neither is set (for the database: the caller falls back on
        PGPASSWORD / MYSQL_PWD). Registered for redaction.

        Raises:
            ConfigError: the variable is not set or the file cannot be read.
        """
        reference = getattr(self, key)
        env, file = f"{key}_env", f"{key}_file"
        if reference is None and getattr(self, env, None):
            reference = "${env:" + getattr(self, env) + "}"
            key = env
        elif reference is None and getattr(self, file, None):
            reference = "${file:" + getattr(self, file) + "}"
            key = file
        if reference is None:
            return None
        value = resolve_reference(f"source.{key}", reference)
        register_secret(value)
        return SecretStr(value)

    def sasl_password_value(self) -> SecretStr | None:
        """The SASL password, if configured."""
        return self.secret("sasl_password")

    def ssl_key_password_value(self) -> SecretStr | None:
        """The password of the TLS private key, if configured."""
        return self.secret("ssl_key_password")

    def database_password_value(self) -> SecretStr | None:
        """The database password, if configured (else PGPASSWORD / MYSQL_PWD apply)."""
        return self.secret("database_password")

    def resolve_secrets(self) -> None:
        """Resolve every secret reference now, so a missing one fails at load time (the
        older ``*_env`` / ``*_file`` keys are read when used, as before)."""
        for key in SECRET_KEYS:
            if getattr(self, key) is not None:
                self.secret(key)
        if self.schema_registry is not None:
            self.schema_registry.password_value()


def resolve_reference(key: str, reference: str) -> str:
    """The value ``${env:NAME}`` or ``${file:PATH}`` points at (a file's text without
    its trailing newline).

    Raises:
        ConfigError: naming the key and the reference, never a value.
    """
    match = SECRET_REFERENCE.fullmatch(reference)
    if match is None:  # pragma: no cover - the model refuses anything else
        raise ConfigError(f"{key} is not a secret reference", hint='use "${env:NAME}"')
    kind, name = match.groups()
    if kind == "env":
        value = os.environ.get(name)
        if value is None:
            raise ConfigError(
                f"{key} = {reference}: environment variable {name} is not set",
                hint=f"export {name}=... before running cdcctl, or change {key}",
            )
        return value
    path = Path(name).expanduser()
    try:
        return path.read_text().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(
            f"{key} = {reference}: cannot read {path}: {reason}",
            hint=f"create the file (readable by this user only: chmod 600) or change {key}",
        ) from None


class TargetConfig(_Section):
    """The folder that holds one Hudi table per source table."""

    path: str = Field(min_length=1)
    #: How a topic maps to a table name: ``schema_table`` (``inventory_customers``),
    #: ``prefix_schema_table`` (``dbserver1_inventory_customers``), or a template over
    #: ``{prefix}``, ``{database}``, ``{schema}`` and ``{table}``.
    table_naming: str = DEFAULT_NAMING

    @field_validator("table_naming")
    @classmethod
    def _naming(cls, value: str) -> str:
        return check_naming(value)


class HudiConfig(_Section):
    """Hudi writer settings. ``num_buckets`` and ``table_type`` are fixed for a table once
    it exists."""

    num_buckets: int = Field(default=8, ge=1, le=4096)
    #: Cleaning by time (Hudi's KEEP_LATEST_BY_HOURS, hoodie.cleaner.hours.retained):
    #: every commit of the last clean_retain_hours stays readable — time travel,
    #: incremental pulls, and a query pinned at an instant keeps its files this long
    #: after that instant, however many commits and compactions follow.
    clean_retain_hours: float = Field(default=DEFAULT_CLEAN_RETAIN_HOURS, gt=0)
    #: Or by count (KEEP_LATEST_COMMITS, hoodie.cleaner.commits.retained): the newest N
    #: commits stay readable. Set instead of clean_retain_hours, never with it.
    clean_retain_commits: int | None = Field(default=None, ge=1)
    #: MERGE_ON_READ: a batch appends a log file to each touched file group, which is
    #: compacted into a new base file when its logs grow; COPY_ON_WRITE: a batch
    #: rewrites every file group it touches.
    table_type: Literal["MERGE_ON_READ", "COPY_ON_WRITE"] = "MERGE_ON_READ"
    #: Compact a file group once it has this many log files...
    compaction_max_log_files: int = Field(default=16, ge=1)
    #: ...or once its log files add up to this fraction of its base file's size.
    compaction_max_log_ratio: float = Field(default=0.5, gt=0)
    #: Archiving (Hudi's hoodie.keep.min.commits / hoodie.keep.max.commits): once more
    #: than keep_max_commits completed commits are on the active timeline, the oldest
    #: move to .hoodie/archived/, leaving keep_min_commits.
    keep_min_commits: int = Field(default=20, ge=2)
    keep_max_commits: int = Field(default=30, ge=3)
    #: Archive files whose newest instant is older than this are deleted. 0 (the
    #: default): never, as Hudi, whose archiver never deletes them and whose readers
    #: (archived timeline, incremental queries from archived instants) expect them.
    archive_retention_hours: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _archiving(self) -> HudiConfig:
        if self.keep_min_commits >= self.keep_max_commits:
            raise ValueError(
                f"keep_min_commits ({self.keep_min_commits}) must be less than "
                f"keep_max_commits ({self.keep_max_commits})"
            )
        if self.clean_retain_commits is not None:
            if "clean_retain_hours" in self.model_fields_set:
                raise ValueError(
                    "set clean_retain_hours (retain by time) or clean_retain_commits (by "
                    "count), not both"
                )
            if self.keep_min_commits <= self.clean_retain_commits:
                raise ValueError(
                    f"keep_min_commits ({self.keep_min_commits}) must be greater than "
                    f"clean_retain_commits ({self.clean_retain_commits}), as Hudi requires"
                )
        elif 0 < self.archive_retention_hours < self.clean_retain_hours:
            raise ValueError(
                f"archive_retention_hours ({self.archive_retention_hours:g}) must be 0 or at "
                f"least clean_retain_hours ({self.clean_retain_hours:g}): archived instants "
                "are deleted no sooner than the data files of their time"
            )
        return self


class ReplicatorConfig(_Section):
    """Micro-batch sizing and bookkeeping."""

    max_batch_events: int = Field(default=100_000, ge=1)
    max_batch_seconds: float = Field(default=1.0, gt=0)
    topic_refresh_seconds: float = Field(default=10.0, gt=0)
    work_dir: str = ".cdcctl"
    #: Delete tombstones are kept this long in source time (and while their commit is
    #: retained by hudi.clean_retain_hours / _commits) so late events cannot resurrect rows.
    tombstone_retention_hours: float = Field(default=168.0, ge=0)
    #: Tables (glob patterns over table names) that accept a gap in their topic — a
    #: checkpoint before the log's start or past its end — and go on from the log's
    #: start; each accepted gap is recorded in the table's next commit. Empty: a gap
    #: stops the table (FAILED).
    accept_offset_gaps: list[str] = Field(default_factory=list)
    #: Port of the Prometheus endpoint (``/metrics``; 0: any free port); None: off.
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = Field(default="127.0.0.1", min_length=1)
    #: The log file ``<work_dir>/cdcctl.log`` (written by ``cdcctl start``): one line per
    #: record, ``plain`` text or ``json`` (one object a line); rotated past
    #: ``log_max_bytes``, keeping ``log_backups`` older files.
    log_format: Literal["plain", "json"] = "plain"
    log_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    log_backups: int = Field(default=5, ge=1)
    #: How long one incident of a transient failure (broker unreachable, a storage
    #: error, a failed Spark job) is retried, with backoff, before the replicator stops.
    retry_max_seconds: float = Field(default=600.0, gt=0)


#: What ``errors.tolerance`` may be.
TOLERANCES = ("none", "all")


class ErrorsConfig(_Section):
    """What happens to a message that cannot be decoded (a bad message).

    ``tolerance = "none"``: the table stops (FAILED) at its first bad message, which is
    written to the dead-letter file; its checkpoint stays at that message. ``"all"``:
    every bad message goes to the dead-letter file and is counted; the rest applies.
    """

    tolerance: str = "none"

    @field_validator("tolerance")
    @classmethod
    def _tolerance(cls, value: str) -> str:
        if value not in TOLERANCES:
            raise ValueError(
                f'{value!r} is not a tolerance: use "none" (a bad message stops its '
                'table) or "all" (bad messages go to the dead-letter file, the rest applies)'
            )
        return value


class SparkConfig(_Section):
    """Local Spark session settings (the only place Spark is configured)."""

    master: str = "local[2]"
    driver_memory: str = "1g"
    options: dict[str, str] = Field(default_factory=dict)


class TableConfig(_Section):
    """Settings of one table, under ``[tables.<name>]`` (the replica's table name, as
    ``cdcctl status`` shows it). Each format and feature adds the keys it reads here."""

    #: ``[tables.<name>.columns]``: column name -> type hint (``decimal(12,2)``,
    #: ``timestamp``, ``bytes(hex)``, ...; see :mod:`engine.column_types`). A hint wins
    #: over the catalog and over the type the message gives.
    columns: dict[str, str] = Field(default_factory=dict)

    @field_validator("columns")
    @classmethod
    def _columns(cls, value: dict[str, str]) -> dict[str, str]:
        problems = []
        for column, text in value.items():
            try:
                parse_column_type(text)
            except ValueError as exc:
                problems.append(f"column {column!r}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    # -- generic CDC JSON: overrides of [source.cdc_json] (None: the source's value) --
    op_field: str | None = Field(default=None, min_length=1)
    insert_values: list[str] | None = None
    update_values: list[str] | None = None
    delete_values: list[str] | None = None
    order_field: str | None = Field(default=None, min_length=1)
    order_type: Literal["auto", "integer", "decimal", "timestamp"] | None = None
    images: Literal["full", "partial"] | None = None
    records_field: str | None = None

    @model_validator(mode="after")
    def _cdc_json_values(self) -> TableConfig:
        _check_cdc_json(self.model_dump())
        return self

    def cdc_json(self, base: CdcJsonConfig) -> CdcJsonConfig:
        """``base`` (``[source.cdc_json]``) with this table's overrides applied."""
        overrides = {
            name: value
            for name in CdcJsonConfig.model_fields
            if (value := getattr(self, name, None)) is not None
        }
        return base.model_copy(update=overrides) if overrides else base

    #: This table's ``source.ddl`` policy (None: ``source.ddl``).
    ddl: DdlPolicy | None = None
    #: This table's ``source.schema_changes`` / ``source.fill_defaults`` (None: the
    #: source's).
    schema_changes: SchemaChangePolicy | None = None
    fill_defaults: bool | None = None

    #: Record key built from these row fields instead of the Kafka message key (for a
    #: source table without a primary key, or to override it; for cdc-json it overrides
    #: source.cdc_json.key_fields). docs/guide/tables.md "Tables without a primary key".
    key_fields: list[str] | None = None
    #: ``"full-row"``: a table without a key where every row is its own identity (needs
    #: full before images). Default (None): records without a key are refused.
    keyless: Literal["full-row"] | None = None

    @field_validator("key_fields")
    @classmethod
    def _key_fields(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value or any(not f for f in value):
                raise ValueError("key_fields must name at least one column, none empty")
            if len(set(value)) != len(value):
                raise ValueError("key_fields names a column twice")
        return value

    @model_validator(mode="after")
    def _one_identity(self) -> TableConfig:
        if self.key_fields is not None and self.keyless is not None:
            raise ValueError(
                "key_fields and keyless both define the row identity: keep one "
                '(key_fields if some columns identify a row, keyless = "full-row" if none)'
            )
        return self


class Config(_Section):
    """The whole replicator configuration."""

    source: SourceConfig
    target: TargetConfig
    hudi: HudiConfig = HudiConfig()
    replicator: ReplicatorConfig = ReplicatorConfig()
    errors: ErrorsConfig = ErrorsConfig()
    spark: SparkConfig = SparkConfig()
    #: Per-table settings by replica table name.
    tables: dict[str, TableConfig] = Field(default_factory=dict)
    #: Folder of the config file; relative paths in the file are resolved against it.
    base_dir: str = "."

    @model_validator(mode="after")
    def _table_cdc_json(self) -> Config:
        for name, table in self.tables.items():
            try:
                CdcJsonConfig.model_validate(table.cdc_json(self.source.cdc_json).model_dump())
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
                raise ValueError(f"tables.{name} with source.cdc_json: {reason}") from None
        return self

    @model_validator(mode="after")
    def _json_only_table_keys(self) -> Config:
        # Avro messages carry their own keys; these settings rewrite JSON records. (Column
        # type hints apply to Avro too: they convert what the writer schema decoded.)
        if not self.source.typed_messages:
            return self
        for name, table in self.tables.items():
            used = [k for k in ("key_fields", "keyless") if getattr(table, k)]
            if used:
                raise ValueError(
                    f'tables.{name}.{used[0]} is not read with format "debezium-avro" (Avro '
                    "messages carry their keys): remove it"
                )
        return self

    def target_path(self) -> Path:
        """Absolute path of the target folder."""
        return (Path(self.base_dir) / self.target.path).resolve()

    def work_path(self) -> Path:
        """Absolute path of the work folder (state store, dead letters, staging)."""
        return (Path(self.base_dir) / self.replicator.work_dir).resolve()

    def log_path(self) -> Path:
        """The replicator's log file (in the work folder)."""
        return self.work_path() / LOG_NAME

    def table_config(self, name: str) -> TableConfig:
        """The ``[tables.<name>]`` settings of a replica table (defaults if it has none)."""
        return self.tables.get(name) or TableConfig()

    def ddl_policy(self, name: str) -> str:
        """The schema-change policy of a replica table: its own, else ``source.ddl``."""
        return self.table_config(name).ddl or self.source.ddl

    def schema_policy(self, name: str) -> tuple[str, bool, bool]:
        """A replica table's policy for schema changes seen in its events: the
        ``schema_changes`` value, whether a narrowed column keeps the wider type, and
        whether ``fill_defaults`` is on. A narrowing applied by the MySQL schema change
        topic (``ddl = "apply"``) is kept wider whatever ``schema_changes`` says: its
        rows arrive narrower afterwards."""
        table = self.table_config(name)
        changes = table.schema_changes or self.source.schema_changes
        keep_wider = changes != "fail" or self.ddl_policy(name) == "apply"
        fill = table.fill_defaults if table.fill_defaults is not None else self.source.fill_defaults
        return changes, keep_wider, fill

    def table_name(self, topic: str) -> str:
        """The replica table name of a topic under ``target.table_naming``."""
        return table_name_for_topic(topic, self.target.table_naming)


_FIXES = {
    "missing": "add this key",
    "extra_forbidden": "remove this key (it is not a known setting)",
}

#: Keys that were replaced: the problem and its fix, instead of "not a known setting".
_REPLACED = {
    "replicator.max_bad_fraction": (
        "replaced by errors.tolerance",
        'remove it and set [errors] tolerance = "none" (a bad message stops its table) or '
        '"all" (bad messages go to the dead-letter file, the rest applies)',
    ),
}

_ENV_OVERRIDES = {
    "CDCCTL_BOOTSTRAP_SERVERS": ("source", "bootstrap_servers"),
    "CDCCTL_TOPICS": ("source", "topics"),
    "CDCCTL_TARGET": ("target", "path"),
}


def _problems(exc: ValidationError) -> list[tuple[str, str, str]]:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden" and key in _REPLACED:
            problems.append((key, *_REPLACED[key]))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        problems.append((key, msg, _FIXES.get(err["type"], "")))
    return problems


def _folder_problem(path: Path) -> tuple[str, str] | None:
    """Why ``path`` cannot be (or become) a folder the replicator writes to, with the fix.

    An existing folder must accept a new file (tried: permission bits say nothing for
    root, a read-only mount says it only on write); a missing one is created later, so
    its nearest existing ancestor must be a folder that accepts one.
    """
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder", "point it at a folder (created if missing)"
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return (
            f"{path} cannot be created: {probe} is a file",
            "point it at a folder (created if missing)",
        )
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        where = "" if probe == path else f" ({probe}, where it would be created)"
        return (
            f"{path} is not writable{where}: {exc.strerror or exc}",
            "choose a folder this user can write, or fix its permissions",
        )
    return None


def _path_problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Problems with the folders the config names (target, work folder)."""
    base = Path(str(data.get("base_dir") or "."))
    folders = {
        "target.path": (data.get("target") or {}).get("path"),
        "replicator.work_dir": (data.get("replicator") or {}).get("work_dir", ".cdcctl"),
    }
    problems = []
    for key, value in folders.items():
        if isinstance(value, str) and value:
            problem = _folder_problem((base / value).resolve())
            if problem is not None:
                problems.append((key, *problem))
    return problems


def _absolute_secret_files(data: dict[str, Any]) -> dict[str, Any]:
    """``${file:PATH}`` references with a relative path made relative to the config
    file's folder, like every path in the file."""
    source = data.get("source")
    if not isinstance(source, dict):
        return data
    base = Path(str(data.get("base_dir") or "."))
    changed = dict(source)
    for key in SECRET_KEYS:
        match = SECRET_REFERENCE.fullmatch(str(source.get(key, "")))
        if match and match.group(1) == "file":
            path = Path(match.group(2)).expanduser()
            if not path.is_absolute():
                changed[key] = "${file:" + str(base / path) + "}"
    registry = source.get("schema_registry")
    if isinstance(registry, dict):
        registry = dict(registry)
        match = SECRET_REFERENCE.fullmatch(str(registry.get("basic_auth_password", "")))
        if match and match.group(1) == "file":
            path = Path(match.group(2)).expanduser()
            if not path.is_absolute():
                registry["basic_auth_password"] = "${file:" + str(base / path) + "}"
        ca = registry.get("ssl_ca_location")
        if isinstance(ca, str) and ca and not Path(ca).expanduser().is_absolute():
            registry["ssl_ca_location"] = str(base / Path(ca).expanduser())
        changed["schema_registry"] = registry
    return {**data, "source": changed}


def config_from_dict(data: dict[str, Any], *, source_name: str = "<config>") -> Config:
    """Validate a config mapping, reporting every problem at once.

    Besides the values themselves, the target and work folders must be folders this
    user can write (or create): a file there is refused before anything runs.
    """
    problems = []
    config = None
    data = _absolute_secret_files(data)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
    problems += _path_problems(data)
    if problems or config is None:
        raise ConfigError(f"{source_name} is not a valid cdcctl config", problems=problems)
    config.source.resolve_secrets()
    return config


def load_config(path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Read, layer and validate a config file.

    Args:
        path: the TOML file.
        overrides: section -> key -> value, applied last (command-line flags).

    Raises:
        ConfigError: the file is missing, not TOML, or invalid (every problem listed).
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"config file {file} does not exist",
            hint="create one with `cdcctl init --output " + str(file) + "`",
        )
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}", hint="fix the syntax") from None
    for env, (section, key) in _ENV_OVERRIDES.items():
        if env in os.environ:
            data.setdefault(section, {})[key] = os.environ[env]
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    data["base_dir"] = str(file.resolve().parent)
    return config_from_dict(data, source_name=str(file))


def render_config(
    *,
    bootstrap_servers: str,
    topics: str,
    target: str,
    fmt: str = "debezium-json",
    schema_registry_url: str | None = None,
    num_buckets: int = 8,
    base_dir: Path | None = None,
    database_dsn: str | None = None,
) -> str:
    """The annotated TOML `cdcctl init` writes (validated before it is returned).

    ``base_dir`` is the folder the file will be written to: relative paths in it are
    relative to that folder, and are checked there. With ``database_dsn`` the source
    database is named and schemaless columns are typed from its catalog.
    """
    doc = tomlkit.document()
    doc.add(tomlkit.comment("cdcctl replicator configuration (see docs/guide/configuration.md)"))
    doc.add(
        tomlkit.comment(
            'Secrets never go here: reference them, e.g. sasl_password = "${env:KAFKA_PASSWORD}"'
        )
    )
    src = tomlkit.table()
    src.add("bootstrap_servers", bootstrap_servers)
    src.add("topics", topics)
    src["topics"].comment("regular expression over topic names; new matching topics are picked up")
    src.add("format", fmt)
    src.add("group_id", "cdcctl")
    src["group_id"].comment("offsets are committed here for lag tools only; recovery uses Hudi")
    if database_dsn:
        src.add("database_dsn", database_dsn)
        src["database_dsn"].comment("password: PGPASSWORD / MYSQL_PWD or database_password")
        flag = tomlkit.item(True)
        flag.comment("type schemaless JSON columns from the database's catalog")
        src.add("catalog_types", flag)
    if schema_registry_url is not None or fmt == "debezium-avro":
        registry = tomlkit.table()
        registry.add("url", schema_registry_url or "http://localhost:8081")
        registry["url"].comment("Confluent-compatible schema registry holding the Avro schemas")
        registry.add(tomlkit.comment('basic_auth_user = "..."'))
        registry.add(tomlkit.comment('basic_auth_password = "${env:SCHEMA_REGISTRY_PASSWORD}"'))
        src.add("schema_registry", registry)
    doc.add("source", src)
    tgt = tomlkit.table()
    tgt.add("path", target)
    tgt["path"].comment("one Hudi table per source table is created under this folder")
    doc.add("target", tgt)
    hudi = tomlkit.table()
    hudi.add("num_buckets", num_buckets)
    hudi["num_buckets"].comment("bucket index size per table; fixed once a table exists")
    hudi.add("clean_retain_hours", DEFAULT_CLEAN_RETAIN_HOURS)
    hudi["clean_retain_hours"].comment(
        "history kept readable (time travel, incremental pulls, long queries)"
    )
    hudi.add("table_type", "MERGE_ON_READ")
    hudi["table_type"].comment("or COPY_ON_WRITE; fixed once a table exists")
    doc.add("hudi", hudi)
    rep = tomlkit.table()
    rep.add("max_batch_events", 100_000)
    rep.add("max_batch_seconds", 1.0)
    rep.add("work_dir", ".cdcctl")
    doc.add("replicator", rep)
    errors = tomlkit.table()
    errors.add("tolerance", "none")
    errors["tolerance"].comment(
        'a bad message stops its table; "all": dead-letter bad messages, apply the rest'
    )
    doc.add("errors", errors)
    spark = tomlkit.table()
    spark.add("master", "local[2]")
    spark.add("driver_memory", "1g")
    doc.add("spark", spark)
    doc.add(
        tomlkit.comment(
            'Column types per table, e.g. [tables.inventory_orders.columns] price = "decimal(12,2)"'
        )
    )
    text = tomlkit.dumps(doc)
    data = tomllib.loads(text)
    data["base_dir"] = str(base_dir or Path.cwd())
    config_from_dict(data, source_name="the generated config")
    return text
