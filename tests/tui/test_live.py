"""The dashboard against a real `cdcctl start` child process on the embedded broker: its
rows and figures follow the replicator, and the pause, resume and stop keys reach it
(through the control requests the CLI files) and change its state."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

import engine
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, write_config
from tests.oracle import fold
from tests.tui.conftest import loaded, screen_text, shown_tables
from tui.app import DashboardApp, TablesTable
from tui.screens import ConfirmScreen

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.asyncio]


async def _until(pilot: Pilot, what: str, check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.25)


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


async def test_keys_reach_a_running_replicator(broker, topic_prefix: str, tmp_path: Path) -> None:
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcctl", "start", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        app = DashboardApp(cfg.work_path(), cfg, interval=0.3)
        async with app.run_test(size=(160, 48)) as pilot:
            await loaded(pilot, app)
            # Before the replicator writes its store, or while it does: no traceback.
            await _until(
                pilot,
                "every table replicated",
                lambda: (
                    shown_tables(app) == names
                    and all(_lag(app, n) == 0 for n in names)
                    and all(_rows(app, n) > 0 for n in names)
                ),
                timeout=180,
            )
            text = screen_text(app)
            assert "RUNNING  up " in text and "not running" not in text
            assert "▶ REPLICATING" in text
            assert str(target) in text and broker.bootstrap_servers in text

            # p on the orders table: paused by the replicator, shown PAUSED.
            await pilot.press("ctrl+home", *["down"] * names.index(orders))
            assert app.selected_table() == orders
            await pilot.press("p")
            await _until(pilot, "the pause", lambda: _row(app, orders).state == "PAUSED")
            await app.workers.wait_for_complete()
            assert f"pause {orders}: paused {orders}" in _messages(app)
            assert "‖ PAUSED" in screen_text(app)

            # More changes: the others apply them, the paused table's lag grows.
            more = list(workload.stream(500))
            produce_messages(broker.bootstrap_servers, more)
            lagging = lambda: (_row(app, orders).lag_messages or 0) > 0  # noqa: E731
            await _until(pilot, "the paused table's lag", lagging)
            assert _row(app, orders).state == "PAUSED"

            # p again: resumed, and it catches up.
            assert app.selected_table() == orders
            await pilot.press("p")
            await _until(
                pilot,
                "the resume",
                lambda: (
                    _row(app, orders).state == "REPLICATING" and _row(app, orders).lag_messages == 0
                ),
            )
            await app.workers.wait_for_complete()
            assert f"resume {orders}: resumed {orders}" in _messages(app)

            # s, confirmed: the replicator stops cleanly; the dashboard says it is not running.
            await pilot.press("s")
            await pilot.pause(0.2)
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await _until(pilot, "the stop", lambda: proc.poll() is not None, timeout=90)
            await app.workers.wait_for_complete()
            # The state line and the notice come from one reading; the notice, shown
            # again after being hidden, can reach the screen a refresh later.
            await _until(
                pilot,
                "the stopped state and its notice",
                lambda: (
                    "STOPPED (not running)" in (text := screen_text(app))
                    and "showing its last known state" in text
                ),
            )
            assert "stop all tables: stopping after the batch in flight" in _messages(app)
            assert app.query_one(TablesTable).row_count == len(names)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_replicas_match(target, fold(messages + more))
