"""cdcctl's headless engine: config, Kafka source, Debezium decoding, merge, Hudi writer.

The CLI (``cdcctl``) and the dashboard (``tui``) are thin layers over the names exported
here. Importing this package has no side effects and pulls in neither Typer, Textual nor
Rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.config import Config, load_config, render_config
    from engine.errors import (
        CdcError,
        ConfigError,
        DecodeError,
        EnvironmentProblem,
        HudiError,
        SchemaEvolutionError,
        SourceError,
        TableNameError,
    )

#: Where each exported name lives. Names are imported on first use, so that importing a
#: submodule (a Spark worker imports ``engine.merge``) does not load pydantic for the
#: config (~0.25 s per process).
_EXPORTS = {
    "Config": "engine.config",
    "load_config": "engine.config",
    "render_config": "engine.config",
    "CdcError": "engine.errors",
    "ConfigError": "engine.errors",
    "DecodeError": "engine.errors",
    "EnvironmentProblem": "engine.errors",
    "HudiError": "engine.errors",
    "SchemaEvolutionError": "engine.errors",
    "SourceError": "engine.errors",
    "TableNameError": "engine.errors",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = [
    "CdcError",
    "Config",
    "ConfigError",
    "DecodeError",
    "EnvironmentProblem",
    "HudiError",
    "SchemaEvolutionError",
    "SourceError",
    "TableNameError",
    "load_config",
    "render_config",
]
