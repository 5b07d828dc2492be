"""SVG snapshots of the main screen at 80x24 and 160x48, on the recorded store with a
frozen clock (every duration and "ago" is fixed). `pytest --snapshot-update` rewrites
them; look at the SVGs before committing."""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui.conftest import loaded, make_app


async def _loaded(pilot: Pilot) -> None:
    await loaded(pilot, pilot.app)  # type: ignore[arg-type]


def test_main_screen_80x24_running(snap_compare, recorded_running) -> None:
    assert snap_compare(make_app(recorded_running), terminal_size=(80, 24), run_before=_loaded)


def test_main_screen_160x48_running(snap_compare, recorded_running) -> None:
    assert snap_compare(make_app(recorded_running), terminal_size=(160, 48), run_before=_loaded)


def test_main_screen_80x24_stopped(snap_compare, recorded_stopped_shown) -> None:
    app = make_app(recorded_stopped_shown)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_loaded)


def test_main_screen_160x48_sorted_and_filtered(snap_compare, recorded_running) -> None:
    async def sort_and_filter(pilot: Pilot) -> None:
        await _loaded(pilot)
        await pilot.press("o", "slash", "i", "n", "g", "enter")  # by state; the *ING states

    app = make_app(recorded_running)
    assert snap_compare(app, terminal_size=(160, 48), run_before=sort_and_filter)
