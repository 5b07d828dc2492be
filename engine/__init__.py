"""cdcctl's headless engine: config, Kafka source, Debezium decoding, merge, Hudi writer.

The CLI (``cdcctl``) and the dashboard (``tui``) are thin layers over the names exported
here. Importing this package has no side effects and pulls in neither Typer, Textual nor
Rich.
"""

from __future__ import annotations

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
