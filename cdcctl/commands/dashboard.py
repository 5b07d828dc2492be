"""``cdcctl dashboard``: the live dashboard over a work folder's state."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import engine

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]


def dashboard(config: ConfigOpt = Path("cdcctl.toml")) -> None:
    """Watch and steer the replicator in a terminal dashboard.

    Shows the replicator's state and one row per table (state, counters, lag,
    events/s), read from the work folder's state store every second, whether a
    replicator runs or not. Keys: p pause/resume, s stop, r resync, d dead letters,
    Enter detail, arrows/Home/End scroll, w screenshot, ? help, q quit.
    """
    cfg = engine.load_config(config)
    from tui.app import DashboardApp  # Textual loads only for the dashboard

    DashboardApp(cfg.work_path(), cfg).run()
