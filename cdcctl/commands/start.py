"""``cdcctl start``: run the replicator."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

import engine
from cdcctl import exit_codes
from cdcctl.commands.status import print_status
from cdcctl.console import drop_output, err, log_to_file, quiet_terminal_logging

#: The per-batch progress lines: on stderr, and in the log file.
progress = logging.getLogger("cdcctl.progress")
#: How the run began and ended, for the log file (the terminal says it its own way).
run_log = logging.getLogger("cdcctl.start")

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]


def _progress_line(report: engine.BatchReport) -> str:
    tables = ", ".join(
        f"{name} +{c['inserts']}/~{c['updates']}/-{c['deletes']}"
        for name, c in sorted(report.tables.items())
    )
    rate = report.messages / max(report.seconds, 1e-9)
    phases = " ".join(f"{k} {v:.2f}s" for k, v in report.phases.items())
    return (
        f"batch {report.number}: {report.messages} msgs in {report.seconds:.2f}s "
        f"({rate:,.0f}/s), lag {report.lag_messages} | {tables} | {phases}"
    )


def start(
    config: ConfigOpt = Path("cdcctl.toml"),
    until_caught_up: Annotated[
        bool,
        typer.Option(
            "--until-caught-up",
            help="exit 0 once every topic is applied up to its end offset at start",
        ),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the final summary (as `status --json`)")
    ] = False,
    tui: Annotated[
        bool,
        typer.Option(
            "--tui", help="show the dashboard while replicating (quitting asks whether to stop)"
        ),
    ] = False,
) -> int:
    """Run the replicator.

    Ctrl-C or SIGTERM stops it after the batch in flight; a restart resumes from the
    last commit, exactly once. With --tui the dashboard runs in front (see `cdcctl
    dashboard`) and its log lines go to the log file only.
    """
    cfg = engine.load_config(config)
    if tui:
        replicator = run_with_dashboard(cfg, config, until_caught_up=until_caught_up)
        return _finish(cfg, replicator, json_out, said=False)  # the errors went to the log
    rep = cfg.replicator
    log_to_file(cfg.log_path(), rep.log_format, rep.log_max_bytes, rep.log_backups)
    stop = threading.Event()
    # Until the exit, SIGINT and SIGTERM ask for a stop (also while Spark boots: the run
    # then ends as it begins, and during the exit summary: nothing is left to stop).
    with engine.stop_on_signals(stop.set):
        engine.start_for(cfg)  # the JVM boots while the engine loads and the 1st batch is read
        return _run_headless(cfg, config, _replicator(cfg, config, stop), until_caught_up, json_out)


def _run_headless(
    cfg: engine.Config,
    config: Path,
    replicator: engine.Replicator,
    until_caught_up: bool,
    json_out: bool,
) -> int:
    run_log.info(
        "replicating %s -> %s (config %s, pid %d)",
        cfg.source.kafka.topics,
        cfg.target_store().url,
        config.resolve(),
        os.getpid(),
        extra={"file_only": True},
    )
    if sys.stderr.isatty():
        err.print(
            f"replicating {cfg.source.kafka.topics} -> {cfg.target_store().url} (Ctrl-C to stop)",
            markup=False,
        )
    try:
        replicator.run(until_caught_up=until_caught_up)
    except engine.CdcError as exc:  # printed by main; the log file says why the run ended
        hint = f" (hint: {exc.hint})" if exc.hint else ""
        run_log.error("replicator ended: %s%s", exc.message, hint, extra={"file_only": True})
        raise
    run_log.info("replicator stopped", extra={"file_only": True})
    return _finish(cfg, replicator, json_out)


def _replicator(
    cfg: engine.Config, config: Path, stop: threading.Event | None = None
) -> engine.Replicator:
    return engine.Replicator(
        cfg,
        on_batch=lambda report: progress.info(_progress_line(report)),
        config_path=str(config.resolve()),
        stop=stop,
    )


def _finish(
    cfg: engine.Config, replicator: engine.Replicator, json_out: bool, *, said: bool = True
) -> int:
    """The exit summary (as `status`) and exit code of a run that ended; with each
    table's error and the recent events unless the terminal showed them as they came
    (``said``: not so under the dashboard, whose log lines went to the log file only)."""
    summary = engine.read_status(cfg.work_path())
    if summary is not None:
        try:
            print_status(summary, json_out, after_run=said)
        except BrokenPipeError:  # stdout's reader has gone (Ctrl-C also ended `| tee`)
            drop_output(sys.stdout)
    failing = replicator.failing()
    for s in failing:
        err.print(f"FAILED {s.table} (topic {s.topic})", style="red", markup=False)
    return exit_codes.RUNTIME if failing else exit_codes.OK


def run_with_dashboard(
    cfg: engine.Config, config: Path, *, until_caught_up: bool = False
) -> engine.Replicator:
    """The replicator in a background thread, the dashboard in front (``--tui``); the
    replicator once both have ended (an error that ended the run is raised).

    Quitting the dashboard asks whether to stop the replicator; yes stops it after the
    batch in flight and waits for that, no keeps the dashboard (a process cannot go on
    replicating without it: `cdcctl start` without --tui runs headless).
    """
    from tui.app import DashboardApp  # Textual loads only for the dashboard
    from tui.background import BackgroundReplicator

    rep = cfg.replicator
    log_to_file(cfg.log_path(), rep.log_format, rep.log_max_bytes, rep.log_backups)
    quiet_terminal_logging()  # the dashboard owns the terminal; the log file has every line
    engine.start_for(cfg)
    replicator = _replicator(cfg, config)
    run_log.info(
        "replicating %s -> %s (config %s, pid %d, with the dashboard)",
        cfg.source.kafka.topics,
        cfg.target_store().url,
        config.resolve(),
        os.getpid(),
        extra={"file_only": True},
    )
    background = BackgroundReplicator(replicator, until_caught_up=until_caught_up)
    background.start()
    try:
        DashboardApp(cfg.work_path(), cfg, replicator=background).run()
    finally:
        if background.is_alive():  # the dashboard ended another way (an error in it)
            err.print("stopping the replicator after the batch in flight…", markup=False)
            background.stop()
        background.join()
    if background.error is not None:
        exc = background.error
        message = getattr(exc, "message", str(exc))
        run_log.error("replicator ended: %s", message, extra={"file_only": True})
        raise exc
    run_log.info("replicator stopped", extra={"file_only": True})
    return replicator
