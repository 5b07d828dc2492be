"""The whole configuration (:class:`Config`) and the per-table ``[tables.<name>]`` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator

from engine.column_types import parse_column_type
from engine.config.base import INTERNAL, Section, file_fields, section_of
from engine.config.formats import CdcJsonConfig, check_cdc_json
from engine.config.references import TARGET_SECRETS, secret_value
from engine.config.sections import (
    LOG_NAME,
    ErrorsConfig,
    HudiConfig,
    LineageConfig,
    ReplicatorConfig,
    S3Config,
    SparkConfig,
    TargetConfig,
)
from engine.config.source import DdlPolicy, SchemaChangePolicy, SourceConfig
from engine.errors import ConfigError
from engine.naming import table_name_for_topic
from engine.storage import LocalStorage, S3Settings, Storage, is_object_url, open_storage

_OVERRIDE = "per-table override of `source.cdc_json` (unset: the source's value)"
_NO_KEY = "[Tables without a primary key](tables.md#tables-without-a-primary-key)"


class TableConfig(Section):
    """Settings of one table, under ``[tables.<name>]`` (the replica's table name, as
    ``cdcctl status`` shows it). Each format and feature adds the keys it reads here."""

    columns: dict[str, str] = Field(
        default_factory=dict,
        description='column type hints of the table: column = `"decimal(12,2)"`, '
        '`"timestamp"`, `"bytes(hex)"`, ...; a hint wins over the catalog and over the type the '
        "message gives; see [Column type hints](types.md#column-type-hints). A hint that is not "
        "one of the forms is refused, naming the table and column",
    )

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

    op_field: str | None = Field(default=None, min_length=1, description=_OVERRIDE)
    insert_values: list[str] | None = Field(default=None, description=_OVERRIDE)
    update_values: list[str] | None = Field(default=None, description=_OVERRIDE)
    delete_values: list[str] | None = Field(default=None, description=_OVERRIDE)
    order_field: str | None = Field(default=None, min_length=1, description=_OVERRIDE)
    order_type: Literal["auto", "integer", "decimal", "timestamp"] | None = Field(
        default=None, description=_OVERRIDE
    )
    images: Literal["full", "partial"] | None = Field(default=None, description=_OVERRIDE)
    records_field: str | None = Field(default=None, description=_OVERRIDE)

    @model_validator(mode="after")
    def _cdc_json_values(self) -> TableConfig:
        check_cdc_json(self.model_dump())
        return self

    def cdc_json(self, base: CdcJsonConfig) -> CdcJsonConfig:
        """``base`` (``[source.cdc_json]``) with this table's overrides applied."""
        overrides = {
            name: value
            for name in CdcJsonConfig.model_fields
            if (value := getattr(self, name, None)) is not None
        }
        return base.model_copy(update=overrides) if overrides else base

    ddl: DdlPolicy | None = Field(
        default=None, description="the `source.ddl` policy for this table (unset: `source.ddl`)"
    )
    schema_changes: SchemaChangePolicy | None = Field(
        default=None, description="`source.schema_changes` for this table (unset: the source's)"
    )
    fill_defaults: bool | None = Field(
        default=None, description="`source.fill_defaults` for this table (unset: the source's)"
    )
    key_fields: list[str] | None = Field(
        default=None,
        description="record key built from these row columns instead of the Kafka key: for a "
        "source table without a primary key, or to override it (see "
        f"{_NO_KEY}); for `cdc-json` it overrides `source.cdc_json.key_fields`",
    )
    keyless: Literal["full-row"] | None = Field(
        default=None,
        description='`"full-row"`: a table without any identifying columns, every row its own '
        f"identity (needs full before images; see {_NO_KEY}); cannot be combined with "
        "`key_fields`. Unset: records without a key are refused",
    )

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


class Config(Section):
    """The whole replicator configuration."""

    source: SourceConfig
    target: TargetConfig
    hudi: HudiConfig = HudiConfig()
    replicator: ReplicatorConfig = ReplicatorConfig()
    errors: ErrorsConfig = ErrorsConfig()
    spark: SparkConfig = SparkConfig()
    lineage: LineageConfig = LineageConfig()
    tables: dict[str, TableConfig] = Field(
        default_factory=dict, description="per-table settings by replica table name"
    )
    base_dir: str = Field(
        default=".",
        description="folder of the config file; relative paths in the file are resolved "
        "against it (set by the loader)",
        json_schema_extra=INTERNAL,
    )

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

    def target_on_object_storage(self) -> bool:
        """Whether ``target.path`` is an ``s3://`` bucket and prefix."""
        return is_object_url(self.target.path)

    def target_path(self) -> Path:
        """Absolute path of the target folder (what only a folder has: free space, the
        demo's files, a cluster's shared folders).

        Raises:
            ConfigError: The target is on object storage: use :meth:`target_store`.
        """
        if self.target_on_object_storage():
            raise ConfigError(
                f"target.path = {self.target.path} is on object storage, and this needs a folder",
                hint="set target.path to a folder for this (docs/guide/tables.md#object-storage)",
            )
        return (Path(self.base_dir) / self.target.path).resolve()

    def lineage_file(self) -> Path | None:
        """Absolute path of ``lineage.file`` (None: unset)."""
        if self.lineage.file is None:
            return None
        return (Path(self.base_dir) / self.lineage.file).resolve()

    def lineage_api_key(self) -> SecretStr | None:
        """The bearer token of ``lineage.url`` (resolved, registered for redaction)."""
        return secret_value("lineage.api_key", self.lineage.api_key)

    def target_s3(self) -> S3Settings:
        """The bucket, endpoint and credentials of an ``s3://`` target (secrets resolved
        and registered for redaction)."""
        s3 = self.target.s3 or S3Config()
        secrets = {
            key: secret_value(f"target.s3.{key}", getattr(s3, key)) for key in TARGET_SECRETS
        }
        return S3Settings(
            self.target.path,
            endpoint=s3.endpoint,
            region=s3.region,
            path_style=s3.path_style,
            **secrets,
        )

    def target_store(self, *, patient: bool = True) -> Storage:
        """The target's store: its folder, or its bucket and prefix (``patient``: see
        :class:`~engine.storage.ObjectStorage`)."""
        if self.target_on_object_storage():
            return open_storage(self.target_s3(), patient=patient)
        return LocalStorage((Path(self.base_dir) / self.target.path).resolve())

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


def config_default(key: str) -> Any:
    """The default of a key of the file, named as in it (``"hudi.num_buckets"``)."""
    model: type[Section] = Config
    *tables, name = key.split(".")
    for table in tables:
        section = section_of(model.model_fields[table])
        assert section is not None, key
        model = section
    return dict(file_fields(model))[name].get_default(call_default_factory=True)
