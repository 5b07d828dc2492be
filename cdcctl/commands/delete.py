"""``cdcctl delete``: remove a replicator's state (and with ``--purge`` its tables)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.prompt import Confirm

import engine
from cdcctl import exit_codes
from cdcctl.console import err

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]


def delete(
    config: ConfigOpt = Path("cdcctl.toml"),
    purge: Annotated[
        bool, typer.Option("--purge", help="also remove the replica tables it wrote")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
) -> int:
    """Remove the replicator's state (--purge: its tables too).

    The state store, staged files, dead letters and logs in the work folder go; with
    --purge also every table under the target that this config replicates. Nothing
    else is touched. Refused while the replicator runs.
    """
    cfg = engine.load_config(config)
    plan = engine.plan_delete(cfg, purge)
    if not plan.paths:
        err.print(f"nothing to delete in {plan.work_dir}", markup=False)
        return exit_codes.OK
    err.print("This removes:", markup=False)
    for path in plan.work_files:
        err.print(f"  {path}", markup=False)
    for name, table in plan.tables.items():
        err.print(f"  {table.url}  (table {name})", markup=False)
    if not yes:
        if not sys.stdin.isatty():
            raise exit_codes.UsageError("not confirmed: pass --yes to delete without a terminal")
        # Rich asks on stderr (click would put part of its prompt on stdout, the data's).
        if not Confirm.ask("Delete these?", console=err, default=False):
            err.print("nothing deleted", markup=False)
            return exit_codes.CHECK_FAILED
    for removed in engine.delete_state(plan):
        print(f"removed {removed}")
    return exit_codes.OK
