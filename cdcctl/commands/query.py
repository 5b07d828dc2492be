"""``cdcctl query``: SQL over the replicas with DuckDB."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import engine
from cdcctl.console import print_json, print_rows


def query(
    sql: Annotated[str, typer.Argument(metavar="SQL", hidden=True)],  # described above
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
    ] = Path("cdcctl.toml"),
    json_out: Annotated[
        bool, typer.Option("--json", help="print the rows as a JSON array of objects")
    ] = False,
) -> None:
    """Query the replicas with SQL (DuckDB).

    SQL reads the newest committed state of every replica under target.path.
    Each replica is a table named after it (e.g. inventory_customers), with its real
    column types. A bad query or an unknown table is one error line (exit 1).
    """
    cfg = engine.load_config(config)
    result = engine.query(cfg.target_path(), sql)
    if json_out:
        print_json(result.to_pylist())
    else:
        print_rows(None, result.column_names, [list(r.values()) for r in result.to_pylist()])
