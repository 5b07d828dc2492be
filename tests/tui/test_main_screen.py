"""The main screen, driven with Pilot against state stores the engine wrote: the recorded
store with every state (tests/data/recorded_store.py), a missing and a damaged store."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from engine.state import StateStore, store_path
from tests.tui.conftest import loaded, make_app, screen_text, shown_tables
from tests.waiting import await_until
from tui import view
from tui.app import DashboardApp, TablesTable
from tui.screens import ConfirmScreen, DeadLettersScreen, HelpScreen

pytestmark = pytest.mark.asyncio

ALL = [
    "inventory_customers",
    "inventory_orders",
    "inventory_products",
    "shop_payments",
    "shop_refunds",
]


async def test_every_state_shows_as_words_and_a_stopped_replicator_says_so(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot, app)
        text = screen_text(app)
        # No replicator runs: PAUSED and FAILED hold, the live states read STOPPED.
        for state in ("■ STOPPED", "‖ PAUSED", "✖ FAILED"):
            assert state in text
        for state in ("▶ REPLICATING", "◆ SNAPSHOTTING", "! FAILING"):
            assert state not in text
        assert "STOPPED (not running)" in text
        assert "The replicator is not running (stopped, last update 28s ago)" in text
        assert "showing its last known state" in text
        assert "broker kafka-1.internal:9092" in text and str(recorded.target_path()) in text
        assert "last commit 30s ago" in text
        # Totals: lag of every table, the largest lag time, events/s of all.
        assert "lag 7,272 msgs · 4m05s" in text
        assert "events/s 118.7" in text
        assert shown_tables(app) == ALL
        # The newest events of the log, at 48 lines.
        assert "retry 3" in text and "REPLICATING -> PAUSED" in text


async def test_every_live_state_shows_as_words(recorded_running) -> None:
    app = make_app(recorded_running)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot, app)
        text = screen_text(app)
        for state in (
            "▶ REPLICATING",
            "◆ SNAPSHOTTING 41.7k",
            "‖ PAUSED",
            "! FAILING ×3",
            "✖ FAILED",
        ):
            assert state in text
        assert "STOPPED" not in text


async def test_a_live_replicator_shows_its_uptime_and_no_notice(recorded_running) -> None:
    app = make_app(recorded_running)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        text = screen_text(app)
        assert "RUNNING  up 10m30s  last commit 30s ago" in text
        assert "not running" not in text
        assert not app.query_one("#notice").display


async def test_columns_sort_by_key_and_by_heading_click(recorded_running) -> None:
    app = make_app(recorded_running)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot, app)
        await pilot.press("o")  # table -> state: the most troubled first
        assert app.sort_key == "state"
        assert shown_tables(app) == [
            "shop_refunds",  # FAILED
            "shop_payments",  # FAILING
            "inventory_orders",  # PAUSED
            "inventory_products",  # SNAPSHOTTING
            "inventory_customers",  # REPLICATING
        ]
        await pilot.press("O")
        assert shown_tables(app)[0] == "inventory_customers"
        await pilot.press("o")  # events/s, the busiest first
        assert app.sort_key == "events_per_s"
        assert shown_tables(app)[:2] == ["inventory_products", "inventory_customers"]
        assert "sorted by events/s (reversed)" in screen_text(app)
        # A click on the "lag" heading sorts by lag, the largest first; again: reversed.
        # The columns' widths and the click are taken once the re-sorted table is laid out
        # and its header click handled (under load a click could land on the old layout).
        await pilot.pause()
        table = app.query_one(TablesTable)
        x = sum(c.get_render_width(table) for c in table.ordered_columns[:3]) + 2
        await pilot.click(TablesTable, offset=(x, 1))
        await pilot.pause()
        assert app.sort_key == "lag_messages"
        lags = {t: view.sort_value(r, "lag_messages")[1] for t, r in _rows(app).items()}
        assert [lags[t] for t in shown_tables(app)] == sorted(lags.values(), reverse=True)
        await pilot.click(TablesTable, offset=(x, 1))
        await pilot.pause()
        assert [lags[t] for t in shown_tables(app)] == sorted(lags.values())


def _rows(app: DashboardApp) -> dict[str, dict]:
    assert app.snapshot is not None and app.snapshot.status is not None
    return {t.table: t for t in app.snapshot.status.tables}


async def test_typing_slash_filters_by_name_or_state_and_escape_clears(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press("slash", "s", "h", "o", "p")
        assert shown_tables(app) == ["shop_payments", "shop_refunds"]
        assert "matching 'shop' (2 of 5)" in screen_text(app)
        await pilot.press("enter")  # kept; the table has the keys again
        assert app.query_one(TablesTable).has_focus
        assert shown_tables(app) == ["shop_payments", "shop_refunds"]
        await pilot.press("slash", *"\b\b\b\b", "p", "a", "u")
        assert shown_tables(app) == ["inventory_orders"]  # by its state, PAUSED
        await pilot.press("escape")
        assert shown_tables(app) == ALL and app.filter_text == ""


async def test_dead_letters_of_the_selected_table(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(120, 30)) as pilot:
        await loaded(pilot, app)
        await pilot.press("ctrl+end")  # shop_refunds
        await pilot.press("d")
        assert isinstance(app.screen, DeadLettersScreen)
        await app.workers.wait_for_complete()
        await await_until(
            lambda: "Dead letters of shop_refunds" in screen_text(app),
            "the list",
            lambda: pilot.pause(0.05),
            10,
        )
        text = screen_text(app)
        assert "Dead letters of shop_refunds" in text
        assert "2 not yet replayed" in text and "bad JSON" in text and "4199" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, DeadLettersScreen)
        await pilot.press("ctrl+home", "d")  # a table without any
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "No dead letters for inventory_customers." in screen_text(app)


async def test_help_lists_every_key(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for binding in DashboardApp.BINDINGS:
            key = binding.key_display or binding.key
            assert f" {key}  " in text, key
        assert "⏎  the selected table's detail" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_actions_without_a_replicator_say_so_and_file_nothing(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press("p")
        await app.workers.wait_for_complete()
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # not stopped: nothing asked
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any("no replicator runs on" in m and "nothing to pause" in m for m in messages)
    store = StateStore(store_path(recorded.work_path()), create=False)
    try:
        assert store.pending_requests() == []
        assert store._db.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    finally:
        store.close()


async def test_resync_without_a_replicator_drops_the_table_as_the_cli_does(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press("ctrl+end", "r")
        await await_until(
            lambda: isinstance(app.screen, ConfirmScreen),
            "the confirmation",
            lambda: pilot.pause(0.05),
            10,
        )
        assert "Resync shop_refunds?" in screen_text(app)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any(m.startswith("resync shop_refunds: no replicator runs") for m in messages)
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        app.poll()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert _rows(app)["shop_refunds"].state == "STOPPED"  # no longer FAILED; no replicator runs
        assert _rows(app)["shop_refunds"].counters.inserts == 0


async def test_enter_opens_the_selected_tables_detail(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("down", "enter")
        await pilot.pause()
        try:
            from tui.detail import TableDetailScreen
        except ImportError:  # built on its own branch: the key says it is missing
            messages = [n.message for n in app._notifications]
            assert "the detail screen is not part of this build" in messages
        else:
            assert isinstance(app.screen, TableDetailScreen)
            assert "inventory_orders" in screen_text(app)


@pytest.mark.parametrize("damage", ["missing", "not a database"])
async def test_a_missing_or_damaged_store_is_a_message(tmp_path: Path, damage: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if damage != "missing":
        store_path(work).write_bytes(b"this is not a SQLite file" * 100)
    app = DashboardApp(work)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        text = screen_text(app)
        notice = str(app.query_one("#notice", Static).render())
        assert app.query_one("#notice").display and "Traceback" not in text
        if damage == "missing":
            assert notice.startswith(f"no state store in {work}: `cdcctl start` has not run")
        else:
            assert notice.startswith(f"cannot read the state store in {work}: ")
            assert "file is not a database" in notice
        assert shown_tables(app) == []


async def test_no_color_still_reads(recorded_running, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(recorded_running)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        assert app.no_color
        text = screen_text(app)
        for state in ("REPLICATING", "SNAPSHOTTING", "PAUSED", "FAILING ×3", "FAILED"):
            assert state in text


async def test_a_refresh_keeps_the_selection_and_the_sideways_scroll(recorded) -> None:
    app = make_app(recorded, interval=0.1)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        table = app.query_one(TablesTable)
        await pilot.press("down", "down", "end")  # to the last column
        assert app.selected_table() == "inventory_products" and table.scroll_x > 0
        scrolled = table.scroll_x
        reads = app.reads
        await await_until(
            lambda: app.reads >= reads + 3,
            "three more readings of the store",
            lambda: pilot.pause(0.1),
            10,
        )
        assert app.selected_table() == "inventory_products"
        assert table.scroll_x == scrolled
        assert "bad" in screen_text(app)  # the last column is in view


async def test_a_resized_terminal_gets_the_columns_of_its_width(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        narrow = [str(k.value) for k in app.query_one(TablesTable).columns]
        assert "commits" not in narrow
        await pilot.resize_terminal(160, 48)

        def columns() -> list[str]:
            return [str(k.value) for k in app.query_one(TablesTable).columns]

        wide = await await_until(  # the next reading fits the columns
            lambda: "commits" in columns() and columns(),
            "the wide columns",
            lambda: pilot.pause(0.05),
            10,
        )
        assert "commits" in wide
        await pilot.resize_terminal(80, 24)
        back = await await_until(
            lambda: columns() == narrow and columns(),
            "the narrow columns",
            lambda: pilot.pause(0.05),
            10,
        )
        assert back == narrow
