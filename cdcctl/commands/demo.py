"""``cdcctl demo``: the whole path on an embedded broker, in one command."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

import engine
from cdcctl.console import err, out, print_rows


def _print_results(report: engine.DemoReport) -> None:
    print_rows(
        f"Replicas in {report.target}",
        ["table", "rows"],
        [[name, f"{n:,}"] for name, n in report.row_counts.items()],
    )
    out.print(f"replicated {report.events:,} events in {report.seconds:.1f}s", markup=False)
    sample = report.sample
    print_rows(
        report.sample_sql, sample.column_names, [list(r.values()) for r in sample.to_pylist()]
    )


def invoked_as() -> str:
    """cdcctl as the user ran it, for commands printed to be copied: ``cdcctl`` when
    that name on PATH is this program, else the path typed (``.venv/bin/cdcctl``), or
    the interpreter typed with ``-m cdcctl``."""
    typed = sys.orig_argv
    if len(typed) > 2 and typed[1:3] == ["-m", "cdcctl"]:
        return f"{shlex.quote(typed[0])} -m cdcctl"
    script = sys.argv[0]
    on_path = shutil.which(Path(script).name)
    if on_path and os.path.exists(script) and os.path.samefile(on_path, script):
        return Path(script).name
    return shlex.quote(script)


def _shown(path: Path) -> str:
    """A path as short as it is exact: relative to the current folder when inside it."""
    try:
        return shlex.quote(str(path.relative_to(Path.cwd())))
    except ValueError:
        return shlex.quote(str(path))


def _print_next_steps(report: engine.DemoReport) -> None:
    _print_results(report)
    cdcctl = invoked_as()
    assert report.config is not None  # a kept demo wrote it
    config = _shown(report.config)
    err.print(
        "\nThe demo keeps running: its broker is at "
        f"{report.bootstrap_servers}, writing a few changes per second.\n"
        "In another terminal, replicate them and query the replicas:\n"
        f"  {cdcctl} start --config {config}\n"
        f"  {cdcctl} query --config {config} 'SELECT count(*) FROM inventory_orders'\n"
        "`validate` needs the database Debezium read, and the demo has none (its events "
        "are generated): try it on your own source (README, Production walkthrough, "
        "step 5).\n"
        "Ctrl-C here stops the demo (and its broker).",
        markup=False,
    )


def demo(
    events: Annotated[
        int, typer.Option(metavar="N", help="number of Debezium messages to generate")
    ] = 50_000,
    target: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="where to write the replicas (default: a temporary folder; "
            "with --keep: ./cdcctl-demo/lake)",
        ),
    ] = None,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="keep the broker running afterwards, with live changes and a config "
            "file for `cdcctl start` (Ctrl-C stops it)",
        ),
    ] = False,
    tui: Annotated[
        bool,
        typer.Option(
            "--tui",
            help="watch it in the dashboard: the replicator follows live changes until you quit",
        ),
    ] = False,
) -> None:
    """Replicate a generated workload end to end.

    Runs an embedded broker, writes an inventory workload of Debezium events, replicates
    it into Hudi tables and queries them. With --tui the replicator runs behind the
    dashboard and keeps following a trickle of live changes until the dashboard is quit.
    """
    if tui:
        _demo_in_dashboard(events, target)
        return
    if keep and target is None:
        target = Path("cdcctl-demo") / "lake"
    if keep:  # SIGTERM ends a kept demo as Ctrl-C does: broker stopped, exit 0
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    err.print(
        f"demo: embedded broker, {events:,} Debezium events (customers, products, orders)",
        markup=False,
    )
    report = engine.run_demo(
        events=events,
        target=target,
        on_batch=lambda r: err.print(
            f"  batch {r.number}: {r.messages:,} msgs in {r.seconds:.2f}s, lag {r.lag_messages:,}",
            markup=False,
        ),
        keep=keep,
        on_ready=_print_next_steps,
    )
    if not keep:
        _print_results(report)


def _demo_in_dashboard(events: int, target: Path | None) -> None:
    """The demo's broker and live changes, replicated behind the dashboard."""
    from cdcctl.commands.start import run_with_dashboard

    err.print(
        f"demo: embedded broker, {events:,} Debezium events, then live changes; "
        "starting the dashboard…",
        markup=False,
    )
    with engine.live_demo(events=events, target=target) as (cfg, config):
        run_with_dashboard(cfg, config)
        err.print(
            f"the replicas stay in {cfg.target_path()} (config {config}); the demo's "
            "broker stops now",
            markup=False,
        )
