"""``cdcctl repair TABLE``: fix a replica in place from its source table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

import engine
from cdcctl import exit_codes
from cdcctl.commands.validate import source_dsn
from cdcctl.console import err, out, print_json


def _plan_lines(plan: Any) -> list[str]:
    lines = [
        f"{plan.table} ({plan.source_table}): {plan.missing} missing, {plan.differing} "
        f"differing, {plan.extra} extra (source at {plan.before.source_position or 'unknown'})"
    ]
    if plan.signal is not None:
        what = plan.filter or "the whole table"
        lines.append(
            f"  snapshot again: {plan.data_collection} where {what}"
            + (f" ({plan.ranges} range(s) or key(s))" if plan.ranges else "")
        )
        lines.append(f"  signal: execute-snapshot (incremental) into {plan.signal_table}")
    if plan.extra:
        lines.append(f"  delete: {plan.extra} replica row(s) the source lacks, at {plan.position}")
    if plan.in_flight:
        lines.append(f"  left out: {plan.in_flight} key(s) only in flight (applied meanwhile)")
    lines += [f"  note: {n}" for n in plan.notes]
    return lines


def _result_lines(result: Any) -> list[str]:
    lines = []
    if result.deletes:
        lines.append(f"  deletes: {result.deletes}")
    if result.signal_id:
        lines.append(f"  snapshot signal {result.signal_id} sent")
    if result.equal is not None and not result.dry_run and result.seconds:
        state = "every key fixed" if result.equal else f"still differing: {', '.join(result.left)}"
        lines.append(
            f"  after {result.seconds:.1f} s: {state}; {result.fixed} key(s) fixed, "
            f"{result.deleted} row(s) deleted, {result.snapshot_rows} snapshot read(s) and "
            f"{result.changes} other change(s) applied meanwhile"
        )
    return lines


def repair(
    table: Annotated[str, typer.Argument(metavar="TABLE", help="the replica to repair")],
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar="DSN",
            help="source database (default: source.database_dsn); passwords are never printed",
        ),
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
    ] = Path("cdcctl.toml"),
    signal_table: Annotated[
        str | None,
        typer.Option(
            "--signal-table",
            metavar="SCHEMA.TABLE",
            help="Debezium's signal table (default: the connector's signal.data.collection, "
            "asked of source.connect_url)",
        ),
    ] = None,
    whole: Annotated[
        bool, typer.Option("--whole", help="snapshot the whole table again, not only what differs")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="show the plan; change nothing")
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            metavar="SECONDS",
            help="how long to wait for the replica to equal its source (0: do not wait)",
        ),
    ] = 300.0,
    json_out: Annotated[bool, typer.Option("--json", help="print the outcome as JSON")] = False,
) -> int | None:
    """Fix a replica in place from its source table.

    The keys that differ are snapshotted again; rows the source lacks are deleted.

    Compares the replica with its source table (as validate does), asks Debezium through
    its signal table for an incremental snapshot of exactly the keys that are missing or
    differ, has the running replicator delete the rows the source no longer has (at the
    source position they were found absent at), then validates until the replica equals
    the source or --wait runs out. Changes keep flowing meanwhile.
    """
    cfg = engine.load_config(config)
    dsn = source_dsn(source, cfg)
    say = (lambda _: None) if json_out else (lambda m: err.print(m, markup=False, highlight=False))
    say(f"comparing {table} with {engine.redact_dsn(dsn)}")
    result = engine.repair_table(
        cfg, table, dsn, dry_run=dry_run, whole=whole, signal_table=signal_table,
        wait_seconds=wait, say=say,
    )  # fmt: skip
    if json_out:
        print_json(result.to_dict())
    else:
        lines = _plan_lines(result.plan)
        if result.equal and not result.seconds:
            lines.append("  nothing to repair: the replica equals its source")
        elif dry_run:
            lines.append("  dry run: nothing was changed")
        lines += _result_lines(result)
        for line in lines:
            out.print(line, markup=False, highlight=False)
    if dry_run or result.equal is not False:
        return None
    return exit_codes.CHECK_FAILED
