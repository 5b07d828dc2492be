"""``cdcctl query``: SQL over the replicas with DuckDB."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import engine
from cdcctl.console import print_csv, print_json, print_rows


def query(
    sql: Annotated[str, typer.Argument(metavar="SQL", hidden=True)],  # described above
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
    ] = Path("cdcctl.toml"),
    json_out: Annotated[
        bool, typer.Option("--json", help="print the rows as a JSON array of objects")
    ] = False,
    csv_out: Annotated[
        bool, typer.Option("--csv", help="print the rows as CSV with a header line")
    ] = False,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="INSTANT",
            help="read each replica as of this instant (17 digits) or ISO time (UTC by default)",
        ),
    ] = None,
    meta: Annotated[
        bool, typer.Option("--meta", help="include Hudi's _hoodie_* meta columns")
    ] = False,
) -> None:
    """Query the replicas with SQL (DuckDB).

    SQL reads the newest committed state of every replica under target.path (or the
    state at --as-of). Each replica is a view named after it (e.g. inventory_customers),
    with its real column types. A bad query is one error (exit 1); a table that is no
    replica is one error naming the replicas (exit 2).
    """
    if json_out and csv_out:
        raise typer.BadParameter("choose one of --json and --csv")
    cfg = engine.load_config(config)
    result = engine.query(cfg, sql, as_of=as_of, meta=meta)
    rows = result.to_pylist()
    if json_out:
        print_json(rows)
    elif csv_out:
        print_csv(result.column_names, [list(r.values()) for r in rows])
    else:
        print_rows(None, result.column_names, [list(r.values()) for r in rows])
