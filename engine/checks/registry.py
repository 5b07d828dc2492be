"""The schema registry of ``source.format = "debezium-avro"``: reachable, its TLS
certificate trusted, credentials accepted."""

from __future__ import annotations

from engine.checks.result import Check, failed, passed
from engine.config import Config
from engine.errors import CdcError


def registry_checks(cfg: Config) -> list[Check]:
    """One check when the format reads a schema registry, else none."""
    if cfg.source.format != "debezium-avro" or cfg.source.schema_registry is None:
        return []
    from engine.decode.debezium_avro import SchemaCache
    from engine.decode.debezium_avro.registry import settings_from_config

    url = cfg.source.schema_registry.url
    try:
        subjects = SchemaCache(settings_from_config(cfg)).check()
    except CdcError as exc:  # unreachable, TLS refused, credentials refused, bad CA file
        return [failed("registry.reachable", exc.message, exc.hint)]
    return [passed("registry.reachable", f"schema registry {url} answers ({subjects} subjects)")]
