"""``cdcctl pause``, ``resume`` and ``stop``: requests to the running replicator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import engine
from cdcctl import exit_codes
from cdcctl.console import err

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]
TablesArg = Annotated[
    list[str] | None, typer.Argument(metavar="[TABLE]...", help="tables (default: all)")
]
#: How long to wait for the replicator to pick a request up.
WAIT_SECONDS = 5.0


def _send(config: Path, kind: str, tables: list[str]) -> None:
    cfg = engine.load_config(config)
    answers = engine.send_request(cfg.work_path(), kind, tables, WAIT_SECONDS)
    if answers is None:
        err.print(
            f"error: no replicator runs on {cfg.work_path()}: nothing to {kind}",
            markup=False,
        )
        err.print("  hint: `cdcctl status` shows its last state", markup=False)
        exit_codes.exit_now(exit_codes.CHECK_FAILED)
    failed = False
    for a in answers:
        outcome = a.outcome or "no answer"
        failed = failed or a.done_at is None or outcome.startswith(("error", "not picked"))
        print(f"{kind} {a.table or 'all tables'}: {outcome}")
    exit_codes.exit_now(exit_codes.CHECK_FAILED if failed else exit_codes.OK)


def pause(config: ConfigOpt = Path("cdcctl.toml"), tables: TablesArg = None) -> None:
    """Pause tables of the running replicator.

    A paused table is not read: its replica and checkpoint stay where they are while the
    other tables go on. Without TABLE every table is paused.
    """
    _send(config, "pause", tables or [])


def resume(config: ConfigOpt = Path("cdcctl.toml"), tables: TablesArg = None) -> None:
    """Resume paused tables (default: all).

    A resumed table is read again from its last commit.
    """
    _send(config, "resume", tables or [])


def stop(config: ConfigOpt = Path("cdcctl.toml")) -> None:
    """Stop the running replicator cleanly.

    It finishes the batch in flight, commits it and exits 0.
    """
    _send(config, "stop", [])
