"""Fixtures of the dashboard tests: the recorded state store, a clock frozen after it,
and helpers to wait for the app's first reading and to read the screen as text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot

import engine
from engine.lock import LOCK_NAME, WriterLock
from tests.data.recorded_store import END, build
from tests.waiting import await_until
from tui.app import DashboardApp

#: The dashboard's clock in these tests: half a minute after the recording ends.
NOW = END + 30
#: The target folder the snapshots show (the same on every machine; nothing is written).
SHOWN_TARGET = "/srv/cdc/lake"


def frozen() -> float:
    return NOW


@pytest.fixture
def recorded(tmp_path: Path) -> engine.Config:
    """The recorded store (replicator stopped cleanly at its end); its config."""
    return engine.load_config(build(tmp_path / "recorded"))


@pytest.fixture
def recorded_stopped_shown(tmp_path: Path) -> engine.Config:
    """The recorded store, stopped, with :data:`SHOWN_TARGET` as its target."""
    return engine.load_config(build(tmp_path / "recorded", target=SHOWN_TARGET))


@pytest.fixture
def recorded_running(tmp_path: Path) -> Iterator[engine.Config]:
    """The recorded store as a running replicator leaves it, its writer lock held (by
    this process, as a live replicator holds it): the dashboard sees it alive."""
    cfg = engine.load_config(build(tmp_path / "recorded", stopped=False, target=SHOWN_TARGET))
    lock = WriterLock(cfg.work_path() / LOCK_NAME, "the recorded work folder").acquire()
    try:
        yield cfg
    finally:
        lock.release()


def make_app(cfg: engine.Config, **kwargs) -> DashboardApp:
    return DashboardApp(cfg.work_path(), cfg, now=frozen, **kwargs)


async def loaded(pilot: Pilot, app: DashboardApp, timeout: float = 10.0) -> None:
    """Wait until the app shows its first reading of the store."""
    await await_until(
        lambda: app.snapshot is not None,
        "the dashboard's first reading",
        lambda: pilot.pause(0.05),
        timeout,
    )
    await pilot.pause()


async def detail_loaded(pilot: Pilot) -> None:
    """Wait until the detail screen shows both its reads (store and replica, broker)."""
    from tui.detail import TableDetailScreen

    screen = pilot.app.screen
    assert isinstance(screen, TableDetailScreen)
    await await_until(
        lambda: screen.detail is not None and screen.offsets is not None,
        "both reads on the detail screen",
        lambda: pilot.pause(0.05),
        30,
    )
    await pilot.pause()


def screen_text(app: DashboardApp) -> str:
    """What the terminal shows, as text (no colours)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def shown_tables(app: DashboardApp) -> list[str]:
    """The tables in the replicas table, top to bottom."""
    from tui.app import TablesTable

    table = app.query_one(TablesTable)
    return [str(row.key.value) for row in table.ordered_rows]
