"""Make the README's screenshot of the dashboard (docs/dashboard.svg) with the app itself.

The recorded store (tests/data/recorded_store.py) as a running replicator leaves it, its
writer lock held meanwhile so the dashboard sees it alive, shown at 170x40 (every column) on a clock
frozen half a minute after the recording:

    .venv/bin/python -m tests.data.dashboard_screenshot docs/dashboard.svg
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import engine
from engine.lock import LOCK_NAME, WriterLock
from tests.data.recorded_store import END, build
from tests.tui.conftest import loaded
from tui.app import DashboardApp

SIZE = (170, 40)


async def _shoot(cfg: engine.Config, out: Path) -> None:
    app = DashboardApp(cfg.work_path(), cfg, now=lambda: END + 30)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app, 60)
        app.save_screenshot(out.name, str(out.parent))


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        cfg = engine.load_config(build(Path(folder), stopped=False, target="/srv/cdc/lake"))
        lock = WriterLock(cfg.work_path() / LOCK_NAME, "the recorded work folder").acquire()
        try:
            asyncio.run(_shoot(cfg, out.resolve()))
        finally:
            lock.release()
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/dashboard.svg"))
