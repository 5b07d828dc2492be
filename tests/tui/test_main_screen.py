"""The main screen, driven with Pilot against state stores the engine wrote: the recorded
store with every state (tests/data/recorded_store.py), a missing and a damaged store."""

from __future__ import annotations

import re
import sqlite3
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
        assert "broker: kafka-1.internal:9092  │  target: " in text
        assert str(recorded.target_path()) in text
        assert "last commit: 30s ago" in text
        # Totals: lag of every table, the largest lag time, events/s of all.
        assert "lag: 7,272 msgs · 4m05s" in text
        assert "events/s: 118.7" in text
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
        # Labels and values apart, a colon after each label (issue 24: they ran together).
        assert "cdcctl: RUNNING  │  up: 10m30s  │  last commit: 30s ago" in text
        assert "broker: kafka-1.internal:9092  │  target: /srv/cdc/lake" in text
        assert "events/s: 140.1 " in text and " lag: 7,272 msgs · 4m03s" in text
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
        await pilot.press("o")  # lag, the largest first
        assert app.sort_key == "lag_messages"
        assert shown_tables(app)[:2] == ["shop_refunds", "inventory_products"]
        assert "sorted by lag (reversed)" in screen_text(app)
        # A click on the "inserts" heading sorts by inserts, the most first; again: reversed.
        # The columns' widths and the click are taken once the re-sorted table is laid out
        # and its header click handled (under load a click could land on the old layout).
        await pilot.pause()
        table = app.query_one(TablesTable)
        x = sum(c.get_render_width(table) for c in table.ordered_columns[:3]) + 2
        await pilot.click(TablesTable, offset=(x, 1))
        await pilot.pause()
        assert app.sort_key == "inserts"
        ins = {t: view.sort_value(r, "inserts")[1] for t, r in _rows(app).items()}
        assert [ins[t] for t in shown_tables(app)] == sorted(ins.values(), reverse=True)
        await pilot.click(TablesTable, offset=(x, 1))
        await pilot.pause()
        assert [ins[t] for t in shown_tables(app)] == sorted(ins.values())


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
    async with app.run_test(size=(80, 24)) as pilot:
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
        # At 80 columns each letter's line is whole: its time to the second, in UTC.
        whole = r"0 +4199 +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +bad JSON +\{\"id\":17\} "
        assert re.search(whole, text), text
        await pilot.press("escape")
        assert not isinstance(app.screen, DeadLettersScreen)
        await pilot.press("ctrl+home", "d")  # a table without any
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert "No dead letters for inventory_customers." in screen_text(app)
        assert "reading…" not in screen_text(app)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
async def test_help_lists_every_key_and_scrolls_where_short(recorded, size) -> None:
    app = make_app(recorded)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        seen = screen_text(app)
        await pilot.press("end")  # to the end of the list, where it does not fit
        await pilot.pause()
        seen += screen_text(app)
        lines = seen.splitlines()
        keys = ["↑ ↓", "← →", "Home End", "⏎"]
        keys += [b.key_display or b.key for b in DashboardApp.BINDINGS]  # type: ignore[union-attr]
        for key in keys:
            assert any(f" {key}  " in line for line in lines), key
        assert "⏎  the selected table's detail" in seen
        assert "Home End  the first columns, the last columns" in seen
        # The last line of the list, whole, inside the dialog's right edge.
        assert any("q  quit (with the replicator in this process: asks" in ln for ln in lines)
        # ... to its last word (wrapped or not).
        q_line = next(i for i, ln in enumerate(lines) if "q  quit (with" in ln)
        assert "stop it)" in lines[q_line] or lines[q_line + 1].strip("█ ") == "it)"
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_w_saves_a_screenshot_and_says_where(recorded, tmp_path: Path) -> None:
    app = make_app(recorded, screenshot_dir=tmp_path / "shots")
    (tmp_path / "shots").mkdir()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press("w")
        await pilot.pause()
        saved = list((tmp_path / "shots").glob("cdcctl-dashboard-*.svg"))
        assert len(saved) == 1
        svg = saved[0].read_text()
        assert svg.startswith("<svg") and "inventory_orders" in svg and "retries" in svg
        messages = [n.message for n in app._notifications]
        assert f"screenshot saved: {saved[0].resolve()}" in messages
        app.screenshot_dir = tmp_path / "gone"  # a folder that is not there: said
        await pilot.press("w")
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        gone = f"cannot save the screenshot in {tmp_path / 'gone'}: "
        assert any(m.startswith(gone) for m in messages), messages


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


async def test_enter_opens_the_selected_tables_detail_its_footer_whole(recorded) -> None:
    app = make_app(recorded)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press("down", "enter")
        await pilot.pause()
        from tui.detail import TableDetailScreen

        assert isinstance(app.screen, TableDetailScreen)
        assert "inventory_orders" in screen_text(app)
        footer = screen_text(app).splitlines()[-1]
        for label in ("esc Back", "c Copy error", "e Error", "r Refresh", "? Help"):
            assert label in footer, footer
        # The main screen's keys are not the detail screen's: not in its footer, and off.
        assert "Dead lett" not in footer and "Pause" not in footer
        await pilot.press("p")
        await pilot.pause()
        assert not any("pause" in n.message for n in app._notifications)


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
        assert "last commit" in screen_text(app)  # the last column is in view


def _headings(app: DashboardApp) -> list[str]:
    """The tables table's headings as the terminal shows them (the sort mark dropped)."""
    line = next(ln for ln in screen_text(app).splitlines() if ln.split()[:2] == ["table", "▲"])
    return line.replace(" ▲", "").replace("last commit", "last_commit").split()


def _row_on_screen(app: DashboardApp, name: str) -> list[str]:
    return next(ln.split() for ln in screen_text(app).splitlines() if ln.split()[:1] == [name])


def _cell_on_screen(app: DashboardApp, name: str, column: int) -> str | None:
    """A word of a table's row on screen; None while the row is not drawn (a resize
    lays the screen out again, and a wait's check must not raise meanwhile)."""
    for line in screen_text(app).splitlines():
        words = line.split()
        if words[:1] == [name] and len(words) > column:
            return words[column]
    return None


#: The headings each width shows whole (README.md and docs/guide/operating.md
#: "Dashboard"): 80 columns what the user names first, 120 late, bad, events/s and the
#: sparkline too, 170 every column.
AT_80 = ["table", "state", "lag", "inserts", "updates", "deletes", "retries"]
AT_120 = [*AT_80, "late", "bad", "events/s", "10", "min"]
AT_170 = [*AT_120, "rows", "snapshot", "commits", "lag", "s", "last_commit"]


@pytest.mark.parametrize(
    ("size", "headings"),
    [((80, 24), AT_80), ((120, 30), AT_120), ((170, 30), AT_170)],
    ids=["80", "120", "170"],
)
async def test_each_width_shows_the_columns_the_guide_says(
    recorded_running, size, headings
) -> None:
    app = make_app(recorded_running)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot, app)
        assert _headings(app) == headings
        orders = _row_on_screen(app, "inventory_orders")
        if size[0] < 120:  # compact counts; the name, state, lag and the counters whole
            assert orders == [
                "inventory_orders",
                "‖",
                "PAUSED",
                "1,512",
                "17.0k",
                "11.3k",
                "0",
                "0",
            ]
            assert orders[-1:] + _row_on_screen(app, "shop_payments")[-1:] == ["0", "3"]
            assert "← → more columns" in screen_text(app)
        else:
            assert orders[3:6] == ["1,512", "17,010", "11,340"]
            assert ("← → more columns" in screen_text(app)) == (size[0] < 170)
        # Every table's row, and its state in words.
        assert shown_tables(app) == ALL
        for name in ALL:
            assert _row_on_screen(app, name)[2] in view.STATE_STYLES


async def test_long_names_and_many_tables_leave_the_first_columns_whole(recorded) -> None:
    """Thirty tables (a vertical scrollbar) with names up to 35 characters at 80x24: the
    names are shortened in their middle (their ends, which tell them apart, stay) and
    the first columns stay whole."""
    db = sqlite3.connect(store_path(recorded.work_path()))
    with db:
        db.execute("UPDATE tables SET name = name || '_of_the_year_2024'")
        for year in range(2019, 2024):
            db.execute("CREATE TEMP TABLE copy AS SELECT * FROM tables WHERE name LIKE '%2024'")
            db.execute("UPDATE copy SET name = substr(name, 1, length(name) - 4) || ?", (year,))
            db.execute("INSERT INTO tables SELECT * FROM copy")
            db.execute("DROP TABLE copy")
    db.close()
    app = make_app(recorded)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        assert len(shown_tables(app)) == 30
        # Once laid out (the names are fitted again to the table's size).
        await await_until(
            lambda: _headings(app) == AT_80, "the first columns", lambda: pilot.pause(0.05), 10
        )
        lines = screen_text(app).splitlines()
        shown = [ln.split()[0] for ln in lines if ln.split()[:1] and "…" in ln.split()[0]]
        assert shown and len(set(shown)) == len(shown), shown  # apart from each other
        full = shown_tables(app)  # the rows' keys: the whole names, in screen order
        on_screen = [ln.split()[0] for ln in lines if ln.split()[:1] and ln.split()[0] in shown]
        for cut, name in zip(on_screen, full, strict=False):
            head, tail = cut.split("…")
            assert name.startswith(head) and name.endswith(tail), (cut, name)
            assert len(head) > len(tail) >= 5 and len(cut) >= view.NAME_MIN  # '_2019' whole
        assert app.selected_table() == "inventory_customers_of_the_year_2019"  # whole


async def test_at_80_columns_the_other_columns_are_a_key_away(recorded_running) -> None:
    app = make_app(recorded_running)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        assert "late" not in _headings(app) and "bad" not in _headings(app)
        for _ in range(20):  # → scrolls sideways
            await pilot.press("right")
            await pilot.pause()
            if "bad" in _headings(app):
                break
        shown = _headings(app)
        assert shown[:2] == ["table", "state"]  # kept in view
        assert "late" in shown and "bad" in shown, shown
        await pilot.press("end")
        await pilot.pause()
        assert _headings(app)[-1] == "last_commit"
        await pilot.press("home")
        await pilot.pause()
        assert _headings(app) == AT_80


async def test_a_resized_terminal_gets_the_counts_of_its_width(recorded_running) -> None:
    app = make_app(recorded_running)
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        assert _row_on_screen(app, "inventory_orders")[4] == "17.0k"
        assert "◆ SNAPSHOTTING " in screen_text(app)
        await pilot.resize_terminal(160, 48)
        await await_until(  # the next reading fits the counts
            lambda: "◆ SNAPSHOTTING 41.7k" in screen_text(app),
            "full counts and the snapshot's rows so far",
            lambda: pilot.pause(0.05),
            10,
        )
        assert _row_on_screen(app, "inventory_orders")[4] == "17,010"
        await pilot.resize_terminal(80, 24)
        await await_until(
            lambda: _cell_on_screen(app, "inventory_orders", 4) == "17.0k",
            "compact counts again",
            lambda: pilot.pause(0.05),
            10,
        )
        assert _headings(app) == AT_80


async def test_a_source_problem_and_a_missed_slo_are_loud(recorded_running) -> None:
    """A paused connector behind every table and a table under its SLO, written into the
    recorded store as a running replicator writes them: ``✗ SOURCE`` beside each state,
    the problem and the SLO in the header."""
    import json
    import time

    from engine.upstream import Connector, ConnectorTask, SourceView
    from tests.data.recorded_store import PREFIX

    now = time.time()
    view = SourceView(
        checked_at=now,
        connectors=(Connector("dbz", "PAUSED", PREFIX, (ConnectorTask(0, "PAUSED"),)),),
    )
    store = StateStore(store_path(recorded_running.work_path()))
    try:
        with store.transaction() as db:
            store.put_source(db, json.dumps(view.to_json()), now)
            store.put_slo_goal(db, 99.0, 60.0, 3600.0)
            store.put_slo_segment(db, "inventory_orders", now - 100, now - 50, True)
            store.put_slo_segment(db, "inventory_orders", now - 50, now, False)
    finally:
        store.close()
    app = make_app(recorded_running)
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot, app)
        text = screen_text(app)
        assert "source: connector dbz is PAUSED" in text, text
        assert "SLO 50.00% MISSED" in text, text  # as of its last judgement: 50 s of 100
        assert text.count("✗ SOURCE") == len(ALL), text
