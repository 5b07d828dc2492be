"""``cdcctl validate``: prove each replica equals its source table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

import engine
from cdcctl import exit_codes
from cdcctl.console import err, out, print_json


def source_dsn(source: str | None, cfg: Any) -> str:
    if source:
        return source
    dsn = cfg.source.database.database_dsn
    if not dsn:
        raise engine.ConfigError(
            "no source database to compare with",
            hint="validate compares the replicas with the database Debezium read: give "
            "--source postgresql://user@host:port/db (or mysql://...), or set "
            "source.database_dsn in the config (the demo has none: its events are generated)",
        )
    password_env = cfg.source.database.database_password_env
    if cfg.source.database.database_password is not None or (
        password_env and os.environ.get(password_env)
    ):
        secret = cfg.source.database.database_password_value()
        scheme = dsn.split("://", 1)[0].lower()
        target = "MYSQL_PWD" if scheme in ("mysql", "mariadb") else "PGPASSWORD"
        os.environ[target] = secret.get_secret_value()
    return str(dsn)


def _print(reports: list[Any]) -> None:
    summary = Table(
        "table", "source", "status", "source rows", "replica rows", "missing", "extra",
        "differing", "replica at", "rows/s", title="cdcctl validate",
    )  # fmt: skip
    for r in reports:
        style = {"equal": "green", "different": "red"}.get(r.status, "yellow")
        summary.add_row(
            r.table, r.source_table, f"[{style}]{r.status}[/{style}]", str(r.source_rows),
            str(r.replica_rows), str(r.missing), str(r.extra), str(r.differing),
            r.replica_position or "", f"{r.rows_per_second:,.0f}",
        )  # fmt: skip
    out.print(summary)
    for r in reports:
        lines: list[str] = []
        if r.error:
            lines.append(f"  error: {r.error}")
        if r.source_only_columns:
            lines.append(f"  columns only in the source: {', '.join(r.source_only_columns)}")
        if r.replica_only_columns:
            lines.append(f"  columns only in the replica: {', '.join(r.replica_only_columns)}")
        if r.missing_keys:
            lines.append(f"  missing (in the source, not the replica): {', '.join(r.missing_keys)}")
        if r.extra_keys:
            lines.append(f"  extra (in the replica, not the source): {', '.join(r.extra_keys)}")
        for d in r.differing_rows:
            cols = "; ".join(
                f"{c.column}: source {c.source!r}, replica {c.replica!r}" for c in d.columns
            )
            lines.append(f"  differing {d.key}: {cols}")
        if r.recheck is not None:
            rc = r.recheck
            state = "reached" if rc.reached else "not reached"
            lines.append(
                f"  recheck after {rc.waited_seconds:.1f} s (source at {rc.source_position}, "
                f"replica at {rc.replica_position}: {state}): {len(rc.resolved)} key(s) now "
                f"equal, still missing {rc.missing or '-'}, extra {rc.extra or '-'}, "
                f"differing {[d.key for d in rc.differing] or '-'}"
            )
        for note in r.notes:
            lines.append(f"  note: {note}")
        if r.method != "rows" or lines:
            lines.insert(
                0,
                f"{r.table}: {r.method} ({r.ranges} range(s), {r.ranges_differing} differing), "
                f"{r.rows_compared_row_by_row} rows compared row by row, {r.seconds:.2f} s; "
                f"source at {r.source_position or 'unknown'}",
            )
        for line in lines:
            out.print(line, markup=False, highlight=False)


def validate(
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar="DSN",
            help="source database: postgresql://user@host:port/db or mysql://user@host:port "
            "(default: source.database_dsn); passwords are never printed",
        ),
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
    ] = Path("cdcctl.toml"),
    table: Annotated[
        list[str] | None,
        typer.Option(
            "--table", "-t", metavar="NAME", help="replica to check (repeatable, globs ok)"
        ),
    ] = None,
    database_map: Annotated[
        list[str] | None,
        typer.Option(
            "--database-map",
            metavar="ORIGINAL=COPY",
            help="compare the replicas of source database ORIGINAL with database COPY "
            "(a restored copy under another name; repeatable)",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    recheck: Annotated[
        bool,
        typer.Option(
            "--recheck",
            help="read differing keys again once the replica has moved past the source's "
            "current position",
        ),
    ] = False,
    recheck_wait: Annotated[
        float,
        typer.Option("--recheck-wait", metavar="SECONDS", help="longest wait before the recheck"),
    ] = 60.0,
) -> int | None:
    """Check each replica against its source table.

    Compares row counts, then rows by primary key with values normalised the same way on
    both sides; large tables by key ranges with per-range hashes, fetching only the
    differing ranges row by row. Each replica is compared with the database its
    changes came from; --database-map names a copy of it under another name.
    """
    cfg = engine.load_config(config)
    mapping = engine.parse_database_map(database_map or [])
    dsn = source_dsn(source, cfg)
    target = cfg.target_store()
    if not json_out:
        err.print(
            f"comparing replicas under {target.url} with {engine.redact_dsn(dsn)}",
            markup=False,
        )
    reports = engine.validate_replicas(
        target,
        dsn,
        table or None,
        recheck=recheck,
        recheck_wait=recheck_wait,
        work_dir=cfg.work_path(),
        database_map=mapping,
    )
    if json_out:
        print_json([r.to_dict() for r in reports])
    else:
        _print(reports)
    return exit_codes.CHECK_FAILED if any(not r.equal for r in reports) else None
