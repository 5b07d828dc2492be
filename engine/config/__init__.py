"""Replicator configuration: one TOML file, validated as a whole before anything runs.

Where each rule lives:

* ``base``: what every section shares; the marks the generated files read;
* ``source``: ``[source]`` (its flat keys grouped in Python into ``kafka``,
  ``security``, ``database``, ``limits`` sections, beside ``schema_registry``);
  ``formats``: ``[source.cdc_json]``, ``[source.flattened]``;
* ``sections``: ``[target]``, ``[hudi]``, ``[replicator]``, ``[errors]``, ``[spark]``;
  ``model``: ``[tables.<name>]`` and the whole :class:`Config`;
* ``references``: secret references (``${env:NAME}``, ``${file:PATH}``);
* ``load``: layering (defaults < file < ``CDCCTL_*`` environment < flags) and every
  problem in one error;
* ``render``: ``cdcctl init``'s file; ``reference``: docs/guide/configuration.md's
  reference (``python -m engine.config.reference``), both generated from the models'
  descriptions and defaults.
"""

from engine.config.formats import SUPPORTED_FORMATS, CdcJsonConfig, FlattenedConfig
from engine.config.load import config_from_dict, folder_problem, load_config
from engine.config.model import Config, TableConfig, config_default
from engine.config.render import render_config
from engine.config.sections import (
    DEFAULT_CLEAN_RETAIN_HOURS,
    LOG_NAME,
    HudiConfig,
    ReplicatorConfig,
    TargetConfig,
)
from engine.config.source import (
    DATABASE_SCHEMES,
    DEFAULT_EXCLUDE,
    DatabaseConfig,
    KafkaConfig,
    LimitsConfig,
    SchemaRegistryConfig,
    SecurityConfig,
    SourceConfig,
)

__all__ = [
    "DATABASE_SCHEMES",
    "DEFAULT_CLEAN_RETAIN_HOURS",
    "DEFAULT_EXCLUDE",
    "LOG_NAME",
    "SUPPORTED_FORMATS",
    "CdcJsonConfig",
    "Config",
    "DatabaseConfig",
    "FlattenedConfig",
    "HudiConfig",
    "KafkaConfig",
    "LimitsConfig",
    "ReplicatorConfig",
    "SchemaRegistryConfig",
    "SecurityConfig",
    "SourceConfig",
    "TableConfig",
    "TargetConfig",
    "config_default",
    "config_from_dict",
    "folder_problem",
    "load_config",
    "render_config",
]
