"""The annotated TOML ``cdcctl init`` writes, generated from the models.

Which keys are written, their default values and their comments come from the fields'
``init`` / ``init_given`` marks (:mod:`engine.config.base`); only the values init is
given (the flags) are named here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import BaseModel
from tomlkit.items import Table

from engine.config.base import file_fields, marks, section_of
from engine.config.load import config_from_dict
from engine.config.model import Config
from engine.config.source import SchemaRegistryConfig

#: The registry's URL init writes for ``debezium-avro`` without one given.
DEFAULT_REGISTRY_URL = "http://localhost:8081"


def _table(model: type[BaseModel], prefix: str, given: dict[str, Any]) -> Table:
    """``model``'s keys init writes, with their comments: a given value, else the default."""
    table = tomlkit.table()
    for key, field in file_fields(model):
        mark = marks(field)
        name = f"{prefix}.{key}"
        if "init" in mark:
            comment = mark["init"]
            value = given[name] if name in given else field.get_default(call_default_factory=True)
        elif "init_given" in mark and name in given:
            comment, value = mark["init_given"], given[name]
        else:
            continue
        item = tomlkit.item(value)
        if comment:
            item.comment(str(comment))
        table.add(key, item)
    return table


def render_config(
    *,
    bootstrap_servers: str,
    topics: str,
    target: str,
    fmt: str | None = None,
    schema_registry_url: str | None = None,
    num_buckets: int | None = None,
    base_dir: Path | None = None,
    database_dsn: str | None = None,
) -> str:
    """The annotated TOML `cdcctl init` writes (validated before it is returned).

    ``base_dir`` is the folder the file will be written to: relative paths in it are
    relative to that folder, and are checked there. With ``database_dsn`` the source
    database is named and schemaless columns are typed from its catalog. ``fmt`` and
    ``num_buckets`` left None: the models' defaults.
    """
    given: dict[str, Any] = {
        "source.bootstrap_servers": bootstrap_servers,
        "source.topics": topics,
        "target.path": target,
    }
    if fmt is not None:
        given["source.format"] = fmt
    if num_buckets is not None:
        given["hudi.num_buckets"] = num_buckets
    if database_dsn:
        given |= {"source.database_dsn": database_dsn, "source.catalog_types": True}
    doc = tomlkit.document()
    doc.add(tomlkit.comment("cdcctl replicator configuration (see docs/guide/configuration.md)"))
    doc.add(
        tomlkit.comment(
            'Secrets never go here: reference them, e.g. sasl_password = "${env:KAFKA_PASSWORD}"'
        )
    )
    for name, field in Config.model_fields.items():
        section = section_of(field)
        if section is None or name == "tables":
            continue
        table = _table(section, name, given)
        if name == "source" and (schema_registry_url is not None or fmt == "debezium-avro"):
            url = {"source.schema_registry.url": schema_registry_url or DEFAULT_REGISTRY_URL}
            registry = _table(SchemaRegistryConfig, "source.schema_registry", url)
            registry.add(tomlkit.comment('basic_auth_user = "..."'))
            registry.add(tomlkit.comment('basic_auth_password = "${env:SCHEMA_REGISTRY_PASSWORD}"'))
            table.add("schema_registry", registry)
        doc.add(name, table)
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
