"""The dashboard against a real `cdcctl start` child process on the embedded broker: its
rows and figures follow the replicator, and the pause, resume and stop keys reach it
(through the control requests the CLI files) and change its state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import engine
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, write_config
from tests.oracle import fold
from tests.tui.conftest import loaded, screen_text, shown_tables
from tests.waiting import await_until
from tui.app import DashboardApp, TablesTable
from tui.screens import ConfirmScreen

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.asyncio]


def _row(app: DashboardApp, name: str) -> engine.TableRecord | None:
    if app.snapshot is None or app.snapshot.status is None:
        return None
    return app.snapshot.status.table(name)


def _lag(app: DashboardApp, name: str) -> int | None:
    row = _row(app, name)
    return row.lag_messages if row is not None else None


def _rows(app: DashboardApp, name: str) -> int:
    row = _row(app, name)
    return row.counters.rows if row is not None else 0


def _messages(app: DashboardApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_keys_reach_a_running_replicator(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    workload = InventoryWorkload(seed=31, prefix=topic_prefix, schemas=True)
    messages = list(workload.events(2_000))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_events=1_000,
        max_batch_seconds=0.3,
    )
    cfg = engine.load_config(config)
    names = sorted(table_name_for_topic(t) for t in topics)
    orders = next(n for n in names if n.endswith("orders"))
    proc = replicator(config)

    def pause():
        return pilot.pause(0.25)

    try:
        app = DashboardApp(cfg.work_path(), cfg, interval=0.3)
        async with app.run_test(size=(160, 48)) as pilot:
            await loaded(pilot, app)
            # Before the replicator writes its store, or while it does: no traceback.
            await await_until(
                lambda: (
                    shown_tables(app) == names
                    and all(_lag(app, n) == 0 for n in names)
                    and all(_rows(app, n) > 0 for n in names)
                ),
                "every table replicated",
                pause,
                180,
                child=proc,
            )
            text = screen_text(app)
            assert "cdcctl: RUNNING  │  up: " in text and "not running" not in text
            assert "▶ REPLICATING" in text
            assert str(target) in text and broker.bootstrap_servers in text

            # p on the orders table: paused by the replicator, shown PAUSED.
            await pilot.press("ctrl+home", *["down"] * names.index(orders))
            assert app.selected_table() == orders
            await pilot.press("p")
            await await_until(
                lambda: _row(app, orders).state == "PAUSED", "the pause", pause, child=proc
            )
            await app.workers.wait_for_complete()
            assert f"pause {orders}: paused {orders}" in _messages(app)
            assert "‖ PAUSED" in screen_text(app)

            # More changes: the others apply them, the paused table's lag grows.
            more = list(workload.stream(500))
            produce_messages(broker.bootstrap_servers, more)
            lagging = lambda: (_row(app, orders).lag_messages or 0) > 0  # noqa: E731
            await await_until(lagging, "the paused table's lag", pause, child=proc)
            assert _row(app, orders).state == "PAUSED"

            # p again: resumed, and it catches up.
            assert app.selected_table() == orders
            await pilot.press("p")
            await await_until(
                lambda: (
                    _row(app, orders).state == "REPLICATING" and _row(app, orders).lag_messages == 0
                ),
                "the resume",
                pause,
                child=proc,
            )
            await app.workers.wait_for_complete()
            assert f"resume {orders}: resumed {orders}" in _messages(app)

            # s, confirmed: the replicator stops cleanly; the dashboard says it is not running.
            await pilot.press("s")
            await await_until(
                lambda: isinstance(app.screen, ConfirmScreen), "the confirmation", pause, child=proc
            )
            await pilot.press("y")
            await await_until(proc.exited, "the stop", pause, 90)
            await app.workers.wait_for_complete()
            # The state line and the notice come from one reading; the notice, shown
            # again after being hidden, can reach the screen a refresh later.
            await await_until(
                lambda: (
                    "STOPPED (not running)" in (text := screen_text(app))
                    and "showing its last known state" in text
                ),
                "the stopped state and its notice",
                pause,
            )
            assert "stop all tables: stopping after the batch in flight" in _messages(app)
            assert app.query_one(TablesTable).row_count == len(names)
        assert proc.wait(30) == 0, proc.describe()
    finally:
        proc.close()
    assert_replicas_match(target, fold(messages + more))
