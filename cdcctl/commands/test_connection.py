"""``cdcctl test-connection``: check Kafka, the target, Java/Spark and the source database."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

import engine
from cdcctl import exit_codes
from cdcctl.console import err, out, print_json

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}
_MARK = {"pass": "✓", "warn": "!", "fail": "✗"}


def _print(check: engine.Check) -> None:
    if out.is_terminal:
        line = Text()
        line.append(f"{_MARK[check.status]} {check.status:<4} ", style=_STYLE[check.status])
        line.append(check.name, style="bold")
        line.append(f"  {check.detail}")
        out.print(line)
        if check.fix:
            out.print(Text(f"    fix: {check.fix}", style="cyan"))
    else:
        print(f"{check.status.upper():<4} {check.name}: {check.detail}")
        if check.fix:
            print(f"     fix: {check.fix}")


def test_connection(
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
    ] = Path("cdcctl.toml"),
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar="DSN",
            help="source database, postgresql://user@host:5432/db or mysql://user@host:3306 "
            "(default: source.database_dsn)",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the checks as JSON")] = False,
) -> int:
    """Check Kafka, target, Spark and the database.

    One line per check (pass, warn or fail) with what was found and, for a warning or a
    failure, the fix. Exit 0 when nothing failed, 1 when a check failed.
    """
    cfg = engine.load_config(config)
    started = time.monotonic()
    checks = engine.run_checks(cfg, source)
    took = time.monotonic() - started
    if json_out:
        print_json({"checks": [c.to_dict() for c in checks]})
    else:
        for check in checks:
            _print(check)
    counts = {s: sum(c.status == s for c in checks) for s in ("pass", "warn", "fail")}
    if not (source or cfg.source.database.database_dsn):
        err.print(
            "database: not checked (give --source postgresql://... or mysql://..., "
            "or set source.database_dsn)",
            markup=False,
        )
    err.print(
        f"{counts['pass']} passed, {counts['warn']} warning{'' if counts['warn'] == 1 else 's'}, "
        f"{counts['fail']} failed in {took:.1f} s",
        markup=False,
    )
    # Spark's JVM may still be up: exit without waiting for its teardown.
    return exit_codes.CHECK_FAILED if counts["fail"] else exit_codes.OK
