"""``[source]``: where the Debezium topics are and how to read them.

In the file every key below is written directly under ``[source]`` (the keys never
changed); in Python they are grouped into sections: ``source.kafka`` (brokers, topics),
``source.security`` (TLS, SASL), ``source.database`` (the source database),
``source.limits`` (bad-message bounds), beside ``source.schema_registry`` and the
format sections (``[source.cdc_json]``, ``[source.flattened]``), which are tables of
their own in the file too. :meth:`SourceConfig._sections` is the one place that maps the
file's flat keys to the sections; :data:`FLAT_SECTION` (their alias) marks them.
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from engine.config.base import FLAT_SECTION, Section, flat_sections, http_url, init
from engine.config.formats import (
    PLANNED_FORMATS,
    SUPPORTED_FORMATS,
    CdcJsonConfig,
    FlattenedConfig,
)
from engine.config.references import (
    REFERENCE_DOC,
    REGISTRY_SECRET,
    SECRET_KEYS,
    reference_only,
    secret_value,
    section_secret,
)

#: URL schemes of ``source.database_dsn``.
DATABASE_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb")

#: What ``source.ddl`` / ``[tables.<name>] ddl`` may be.
DdlPolicy = Literal["fail", "apply", "ignore"]
#: What ``source.schema_changes`` / ``[tables.<name>] schema_changes`` may be.
SchemaChangePolicy = Literal["keep", "apply", "fail"]

#: Topics Debezium writes that never hold row changes; excluded unless the user overrides.
DEFAULT_EXCLUDE = r"(\.transaction$|^__debezium-heartbeat|^__|^_schemas$|^_confluent)"


class KafkaConfig(Section):
    """The brokers and the topics read from them."""

    bootstrap_servers: str = Field(
        min_length=1, description="Kafka `host:port[,host:port]`", json_schema_extra=init()
    )
    topics: str = Field(
        min_length=1,
        description="regular expression (Python `re.search`) over topic names; topics created "
        "later are picked up within `replicator.topic_refresh_seconds`",
        json_schema_extra=init(
            "regular expression over topic names; new matching topics are picked up"
        ),
    )
    exclude_topics: str = Field(
        default=DEFAULT_EXCLUDE,
        description="regular expression of topics never replicated (the default: Debezium's "
        "transaction, heartbeat and internal topics)",
    )
    group_id: str = Field(
        default="cdcctl",
        description="consumer group whose offsets are committed *after* each Hudi commit, for "
        "lag tools only",
        json_schema_extra=init("offsets are committed here for lag tools only; recovery uses Hudi"),
    )
    kafka_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="extra librdkafka settings; keys that look like secrets are refused",
    )

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

    @field_validator("kafka_options")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if "password" in key or "secret" in key:
                raise ValueError(f"{key!r} looks like a secret and must not be in the file")
        return value


class SecurityConfig(Section):
    """TLS and SASL towards the brokers."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT", description="`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`"
    )
    sasl_mechanism: str | None = Field(default=None, description="SASL mechanism")
    sasl_username: str | None = Field(default=None, description="SASL user name")
    sasl_password: str | None = Field(
        default=None,
        description=f"the SASL password, {REFERENCE_DOC} (see [Secrets](sources.md#secrets)); a "
        "literal is refused",
    )
    sasl_password_env: str | None = Field(
        default=None,
        description="older form: an environment variable holding the SASL password. Passwords "
        "are never stored in the config, never logged",
    )
    sasl_password_file: str | None = Field(
        default=None, description="older form: a file holding the SASL password"
    )
    ssl_ca_location: str | None = Field(
        default=None,
        description="TLS (`SSL`, `SASL_SSL`): PEM file of the CA certificate(s) that signed "
        "the brokers' certificates; unset: the system's CA store",
    )
    ssl_certificate_location: str | None = Field(
        default=None,
        description="a client certificate (PEM), for brokers that require one",
    )
    ssl_key_location: str | None = Field(
        default=None, description="the client certificate's private key (PEM)"
    )
    ssl_key_password: str | None = Field(
        default=None, description=f"the password of an encrypted private key, {REFERENCE_DOC}"
    )
    ssl_key_password_env: str | None = Field(
        default=None,
        description="older form: environment variable holding that password (never in the file)",
    )
    ssl_endpoint_identification: bool = Field(
        default=True,
        description="check that the broker's certificate names the host in "
        "`source.bootstrap_servers`; `false` skips only that check (the CA is still checked; "
        "never on an untrusted network)",
    )

    _reference = field_validator("sasl_password", "ssl_key_password")(reference_only)

    @model_validator(mode="after")
    def _one_source(self) -> SecurityConfig:
        _one_password(self, "sasl_password", "ssl_key_password")
        return self

    def sasl_password_value(self) -> SecretStr | None:
        """The SASL password, if configured."""
        return section_secret(self, "sasl_password")

    def ssl_key_password_value(self) -> SecretStr | None:
        """The password of the TLS private key, if configured."""
        return section_secret(self, "ssl_key_password")


def _one_password(section: Section, *keys: str) -> None:
    for key in keys:
        both = [o for o in SECRET_KEYS[key] if getattr(section, o)]
        if getattr(section, key) is not None and both:
            raise ValueError(f"source.{key} and source.{both[0]} both name the password: keep one")


class SchemaRegistryConfig(Section):
    """``[source.schema_registry]``: the Confluent-compatible registry holding the Avro
    writer schemas (``source.format = "debezium-avro"``)."""

    url: str = Field(
        min_length=1,
        description="the Confluent-compatible schema registry, `http://host:8081` or "
        "`https://...` (a password in the URL is refused)",
        json_schema_extra={
            **init("Confluent-compatible schema registry holding the Avro schemas"),
            "shown_default": "required for `debezium-avro`",
        },
    )
    basic_auth_user: str | None = Field(
        default=None,
        description="HTTP basic authentication user, with the password below (Confluent "
        "Cloud: the API key)",
    )
    basic_auth_password: str | None = Field(
        default=None,
        description=f"its password, {REFERENCE_DOC} (see [Secrets](sources.md#secrets)); "
        "resolved at load, redacted like every password",
    )
    ssl_ca_location: str | None = Field(
        default=None,
        description="PEM file of the CA that signed an `https` registry's certificate; unset: "
        "the system's CA store",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = http_url(value)
        if parts.password is not None:
            raise ValueError(
                "a password must not be in the URL: set basic_auth_user and "
                'basic_auth_password = "${env:NAME}"'
            )
        return value

    _reference = field_validator(REGISTRY_SECRET)(reference_only)

    @model_validator(mode="after")
    def _auth_pair(self) -> SchemaRegistryConfig:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ValueError("basic_auth_user and basic_auth_password go together: set both")
        return self

    def password_value(self) -> SecretStr | None:
        """The basic-auth password (registered for redaction), if configured."""
        key = f"source.schema_registry.{REGISTRY_SECRET}"
        return secret_value(key, self.basic_auth_password)


class DatabaseConfig(Section):
    """The source database behind the topics (``cdcctl test-connection``, ``validate``,
    the catalog's column types)."""

    database_dsn: str | None = Field(
        default=None,
        description="the source database for `cdcctl test-connection` and "
        "`source.catalog_types`: `postgresql://user@host:5432/db` or `mysql://user@host:3306`; "
        "a URL holding a password is refused",
        json_schema_extra=init("password: PGPASSWORD / MYSQL_PWD or database_password", given=True),
    )
    database_password_env: str | None = Field(
        default=None, description="older form: environment variable holding that password"
    )
    database_password: str | None = Field(
        default=None,
        description=f"that database's password, {REFERENCE_DOC} (otherwise `PGPASSWORD` / "
        "`MYSQL_PWD`)",
    )
    catalog_types: bool = Field(
        default=False,
        description="type the columns of schemaless JSON (`schemas.enable=false`) from the "
        "catalog (`information_schema`) of `source.database_dsn` (required then): at start, "
        "and again when a batch has a column or table the catalog did not list; a "
        "`numeric(12,2)` becomes a decimal, a `timestamp` a timestamp; see "
        "[Types from the source catalog](types.md#types-from-the-source-catalog)",
        json_schema_extra=init(
            "type schemaless JSON columns from the database's catalog", given=True
        ),
    )

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

    _reference = field_validator("database_password")(reference_only)

    @model_validator(mode="after")
    def _one_source(self) -> DatabaseConfig:
        _one_password(self, "database_password")
        if self.catalog_types and not self.database_dsn:
            raise ValueError(
                "source.catalog_types reads column types from the source database: set "
                "source.database_dsn (postgresql://user@host:5432/db or mysql://user@host:3306)"
            )
        return self

    def database_password_value(self) -> SecretStr | None:
        """The database password, if configured (else PGPASSWORD / MYSQL_PWD apply)."""
        return section_secret(self, "database_password")


class LimitsConfig(Section):
    """Bounds past which a message is bad, refused before any parser sees it."""

    max_message_bytes: int | None = Field(
        default=None,
        ge=1,
        description="a message whose key and value add up to more bytes is not decoded: it is "
        "a bad message (see `errors.tolerance`); raise the limit and `cdcctl deadletters "
        "replay` to apply it later. Unset: no limit",
    )
    max_nesting_depth: int = Field(
        default=64,
        ge=8,
        le=256,
        description="a key or value whose JSON objects and arrays nest deeper is not parsed: "
        "it is a bad message (8 to 256; the bounds are engine/decode/limits.py's "
        "DEFAULT_MAX_NESTING_DEPTH and MAX_NESTING_DEPTH_CEILING; see "
        "[Hostile input](tables.md#hostile-input))",
    )


class UpstreamConfig(Section):
    """What feeds the topics, watched while the replicator runs (``cdcctl status``, the
    dashboard, metrics, ``test-connection``): Kafka Connect's connectors and Debezium's
    heartbeats; the database's replication slots come from ``source.database_dsn``."""

    connect_url: str | None = Field(
        default=None,
        description="Kafka Connect's REST API (`http://connect:8083`): each connector's and "
        "task's state, shown beside the tables its `topic.prefix` names; a FAILED task or a "
        "PAUSED connector is a problem of its tables. Unset: not watched. See "
        "[The source side](operating.md#the-source-side)",
    )
    heartbeat_topic_prefix: str = Field(
        default="__debezium-heartbeat",
        min_length=1,
        description="Debezium's `topic.heartbeat.prefix`: the newest record of "
        "`<this>.<topic.prefix>` tells when the connector was last alive, so an idle "
        "table's lag grows when it stops (set `heartbeat.interval.ms` on the connector)",
    )

    @field_validator("connect_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")) or "@" in value.split("/")[2]:
            raise ValueError(
                "source.connect_url is Kafka Connect's REST address, "
                "http(s)://host:port, without a user or password in it"
            )
        return value.rstrip("/")


def _flat(section: type[Section]) -> Any:
    """A section whose keys sit directly under ``[source]`` in the file."""
    name = section.__name__.removesuffix("Config").lower()
    alias = FLAT_SECTION.format(name)
    if any(field.is_required() for field in section.model_fields.values()):
        return Field(alias=alias)
    return Field(default_factory=section, alias=alias)


class SourceConfig(Section):
    """``[source]``: where the Debezium topics are and how to read them."""

    kafka: KafkaConfig = _flat(KafkaConfig)
    security: SecurityConfig = _flat(SecurityConfig)
    database: DatabaseConfig = _flat(DatabaseConfig)
    upstream: UpstreamConfig = _flat(UpstreamConfig)
    limits: LimitsConfig = _flat(LimitsConfig)
    format: str = Field(
        default="debezium-json",
        description="message format: `debezium-json` (Debezium envelopes, JsonConverter with or "
        "without schemas), `debezium-avro` (Confluent AvroConverter with a schema registry, see "
        "[Debezium Avro](formats.md#debezium-avro-schema-registry)), `debezium-flat` (rows "
        "flattened by ExtractNewRecordState, see [Flattened events](formats.md#flattened-events)) "
        "or `cdc-json` for producers that are not Debezium (see "
        "[Generic CDC JSON](formats.md#generic-cdc-json))",
        json_schema_extra=init(),
    )
    schema_registry: SchemaRegistryConfig | None = Field(
        default=None,
        description='the schema registry (`format = "debezium-avro"` only)',
        json_schema_extra={"shown_default": "unset"},
    )
    cdc_json: CdcJsonConfig = Field(
        default_factory=CdcJsonConfig,
        description='how generic CDC JSON events are read (`format = "cdc-json"`)',
    )
    flattened: FlattenedConfig = Field(
        default_factory=FlattenedConfig,
        description='settings of `format = "debezium-flat"`',
    )
    include_tables: list[str] = Field(
        default_factory=list,
        description="glob patterns over table names (after topic -> name mapping) selecting "
        "tables; empty: every table",
    )
    exclude_tables: list[str] = Field(
        default_factory=list, description="glob patterns over table names of tables left out"
    )
    mysql_gtid_ordering: bool = Field(
        default=False,
        description="order streamed MySQL/MariaDB events by GTID (per origin lineage; survives "
        "fail-over) instead of binlog coordinates, which are not comparable across servers",
    )
    toast_placeholder: str = Field(
        default="__debezium_unavailable_value",
        min_length=1,
        description="Debezium's `unavailable.value.placeholder` (`hex:...` for bytes)",
    )
    ddl: DdlPolicy = Field(
        default="fail",
        description="MySQL/MariaDB schema changes (the schema change topic) that cannot be "
        "applied in place — a column drop, rename or narrowing, a table drop or rename: "
        "`fail` stops that table (others go on), `apply` applies them, `ignore` only logs and "
        "counts them; column adds and widenings are applied unless `ignore` (see "
        "[MySQL and schema changes](formats.md#mysql-and-schema-changes))",
    )
    schema_changes: SchemaChangePolicy = Field(
        default="keep",
        description="schema changes seen in the events' own schemas (PostgreSQL, which has no "
        "DDL topic; JSON with schemas and Avro): a column no longer sent is kept (`keep`, null "
        "in rows changed from then on), removed from the replica (`apply`) or stops the table "
        "(`fail`); a narrowed column keeps the wider type unless `fail`; a change of kind "
        "always stops the table (see "
        "[Schema changes seen in events](formats.md#schema-changes-seen-in-events))",
    )
    fill_defaults: bool = Field(
        default=False,
        description="when a column is added with a DEFAULT the events' schema carries, set it "
        "on the rows the replica already holds (`true`) or leave them null until they change "
        "(`false`)",
    )
    logical_messages: Literal["skip", "table"] = Field(
        default="skip",
        description="PostgreSQL logical decoding messages (`op=m`, "
        "`pg_logical_emit_message`): `skip` counts and skips them, `table` keeps each message "
        "topic as an append-only table (see "
        "[Topics that are not tables](tables.md#topics-that-are-not-tables))",
    )

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, data: Any) -> Any:
        """The file's flat ``[source]`` keys, each moved into its section."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, section in flat_sections(cls).items():
            data[alias] = {k: data.pop(k) for k in section.model_fields if k in data}
        return data

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        if value in PLANNED_FORMATS:
            raise ValueError(f"format {value!r} is not supported yet")
        if value not in SUPPORTED_FORMATS:
            raise ValueError(f"unknown format {value!r}")
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

    @property
    def typed_messages(self) -> bool:
        """Whether messages carry their own column types and keys (Avro), so that the
        JSON-only table keys (``key_fields``, ``keyless``) do not apply."""
        return self.format == "debezium-avro"
