"""SVG snapshots of the main screen at 80x24 and 160x48, the help and the detail screen at
80x24, on the recorded store with a frozen clock (every duration and "ago" is fixed).
`pytest tests/tui/test_snapshots.py --snapshot-update` rewrites them (pytest-textual-snapshot);
look at the SVGs before committing (`pytest` writes a report of the differences)."""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui.conftest import detail_loaded, loaded, make_app


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


def test_help_80x24(snap_compare, recorded_running) -> None:
    async def help_shown(pilot: Pilot) -> None:
        await _loaded(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    app = make_app(recorded_running)
    assert snap_compare(app, terminal_size=(80, 24), run_before=help_shown)


def test_detail_80x24(snap_compare, recorded_running) -> None:
    """The detail screen over the dashboard, its footer whole; taken once the broker
    (an address that does not resolve) has been given up, so that the Kafka panel is
    the same on every run."""

    async def detail_shown(pilot: Pilot) -> None:
        await _loaded(pilot)
        await pilot.press("down", "enter")
        await detail_loaded(pilot)

    app = make_app(recorded_running)
    assert snap_compare(app, terminal_size=(80, 24), run_before=detail_shown)
