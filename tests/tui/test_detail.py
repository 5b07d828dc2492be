"""The table detail screen (``tui.detail``), driven by Pilot and pinned by SVG snapshots.

It renders ``tests/data/detail``: a replica and state store the real engine wrote
(recorded by ``tests/data/detail/make.py``), copied to a temporary folder, with the
clock frozen a minute after the store's last write. The broker is an address nothing
listens on: the screen says the end offsets are unknown.
"""

from __future__ import annotations

import io
import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Footer, Static, TextArea

from engine.config import Config
from engine.playground.broker import produce_messages
from engine.replicator import Replicator
from tests import builders
from tests.detail_replica import COLS_V1, detail_config
from tests.tui.conftest import detail_loaded
from tests.waiting import await_until
from tui.detail import TableDetailScreen

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "detail"
RECORDED = json.loads((FIXTURE / "fixture.json").read_text())
TABLE = "app_items"
#: Nothing listens there (the port is reserved): the broker is unreachable.
NO_BROKER = "127.0.0.1:1"


class DetailApp(App[None]):
    """A tiny app whose first screen pushes the detail screen."""

    def __init__(
        self,
        work_dir: Path,
        config: Config | None,
        now: Callable[[], float] = lambda: float(RECORDED["now"]),
        **screen: object,
    ) -> None:
        super().__init__()
        self.work_dir, self.config, self.screen_options = work_dir, config, screen
        self.now = now

    def compose(self) -> ComposeResult:
        yield Static("main screen", id="main")
        yield Footer()

    def on_mount(self) -> None:
        self.push_screen(
            TableDetailScreen(
                self.work_dir,
                self.config,
                TABLE,
                now=self.now,
                **self.screen_options,  # type: ignore[arg-type]
            )
        )


@pytest.fixture
def recorded_replica(tmp_path: Path) -> Config:
    for sub in ("lake", "work"):
        shutil.copytree(FIXTURE / sub, tmp_path / sub)
    return detail_config(tmp_path, NO_BROKER, "shop")


def _app(cfg: Config | None, work_dir: Path) -> DetailApp:
    return DetailApp(work_dir, cfg, refresh=3600.0, broker_timeout=0.5)


def _text(screen: TableDetailScreen, selector: str) -> str:
    """What a panel shows, as plain text."""
    widget = screen.query_one(selector, Static)
    console = Console(width=max(widget.size.width, 40), file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


@pytest.mark.asyncio
async def test_the_screen_shows_the_table_copies_its_error_and_goes_back(
    recorded_replica: Config,
) -> None:
    app = _app(recorded_replica, recorded_replica.work_path())
    async with app.run_test(size=(120, 60)) as pilot:
        await detail_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, TableDetailScreen)
        detail = screen.detail
        assert detail is not None and detail.status is not None and detail.replica is not None
        title = _text(screen, "#title")
        assert "app_items" in title and "FAILED" in title and "shop.app.items" in title
        assert "not running" in title
        # Counters, in all and this run, as the store holds them.
        counters = _text(screen, "#counters-table")
        status = detail.status
        words = counters.split()
        for label, key in (("inserts", "inserts"), ("updates", "updates"), ("commits", "commits")):
            at = words.index(label)
            total, this_run = getattr(status.counters, key), getattr(status.this_run, key)
            assert words[at + 1 : at + 3] == [f"{total:,}", f"{this_run:,}"]
        # The timeline, with the newest instant (the clean the recording ran) first.
        hudi = _text(screen, "#hudi-table")
        newest = detail.replica.instants[0]
        assert newest.action == "clean" and newest.instant in hudi
        assert "Merge-on-Read" in hudi and "2 file groups" in hudi
        assert detail.replica.last_compaction is not None
        assert detail.replica.last_compaction.instant in hudi
        schema = _text(screen, "#schema-table")
        assert detail.replica.schema_change is not None
        assert f"at {detail.replica.schema_change.instant}" in schema and "+ color" in schema
        kafka = _text(screen, "#kafka-table")
        assert "broker unreachable (127.0.0.1:1)" in kafka
        assert f"{detail.replica.checkpoint[0]:,}" in kafka
        assert "schema changed at" in _text(screen, "#events-table")

        # The last error, whole, in a read-only text area; `c` copies it.
        error = detail.status.last_error
        area = screen.query_one("#error-text", TextArea)
        assert area.display and area.read_only and area.text == error
        await pilot.press("c")
        assert app.clipboard == error
        await pilot.press("e")
        assert app.focused is area
        app.copy_to_clipboard("")
        await pilot.press("c")  # the keys work from inside the text area too
        assert app.clipboard == error and area.text == error

        # Escape goes back to the screen it came from; so does `q` (a fresh push).
        await pilot.press("escape")
        assert not isinstance(app.screen, TableDetailScreen)
        app.push_screen(TableDetailScreen(recorded_replica.work_path(), recorded_replica, TABLE))
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, TableDetailScreen)
        assert app.is_running


@pytest.mark.asyncio
async def test_a_missing_store_and_replica_and_no_config_are_said(tmp_path: Path) -> None:
    cfg = detail_config(tmp_path, NO_BROKER, "shop")
    app = _app(cfg, cfg.work_path())
    async with app.run_test(size=(80, 24)) as pilot:
        await detail_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, TableDetailScreen)
        assert "no state store in" in _text(screen, "#latency")
        assert "no replica yet" in _text(screen, "#hudi-table")
        assert "the table's topic is not known yet" in _text(screen, "#kafka-table")
        await pilot.press("c")  # nothing to copy: said, no exception
        assert app.clipboard == ""
    app = _app(None, tmp_path / "nowhere")
    async with app.run_test(size=(80, 24)) as pilot:
        await detail_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, TableDetailScreen)
        assert "no config given" in _text(screen, "#hudi-table")


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot(snap_compare, recorded_replica: Config, size: tuple[int, int]) -> None:
    assert snap_compare(
        _app(recorded_replica, recorded_replica.work_path()),
        terminal_size=size,
        run_before=detail_loaded,
    )


def test_snapshot_of_the_error(snap_compare, recorded_replica: Config) -> None:
    """At 80x24 `e` scrolls to the last error."""

    async def to_error(pilot: Pilot) -> None:
        await detail_loaded(pilot)
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(
        _app(recorded_replica, recorded_replica.work_path()),
        terminal_size=(80, 24),
        run_before=to_error,
    )


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.asyncio
async def test_the_screen_follows_a_running_replicator(broker, spark, tmp_path: Path) -> None:
    """Open while a replicator runs: the partitions' applied and end offsets (the broker
    answers) and the timeline follow its commits."""
    prefix = f"tui_{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.app.items"
    broker.create_topics([topic])
    cfg = detail_config(tmp_path, broker.bootstrap_servers, prefix)
    lsn = int(time.time() * 1000) - 1_700_000_000_000
    sent = 0

    def produce(n: int) -> None:
        nonlocal lsn, sent
        msgs = []
        for i in range(sent, sent + n):
            lsn += 1
            row = {"id": i, "name": f"n{i}", "qty": i}
            msgs.append((topic, builders.key(i), builders.value("c", lsn, row, COLS_V1)))
        produce_messages(broker.bootstrap_servers, msgs)
        sent += n

    produce(60)
    replicator = Replicator(cfg, spark=spark)
    thread = threading.Thread(target=replicator.run, daemon=True)
    thread.start()
    app = DetailApp(cfg.work_path(), cfg, time.time, refresh=0.2, offsets_every=0.3)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            screen = app.screen
            assert isinstance(screen, TableDetailScreen)

            def shows_all_sent() -> str | None:
                kafka = _text(screen, "#kafka-table")
                row = [line.split() for line in kafka.splitlines() if line.split()[:1] == ["0"]]
                return kafka if row and row[0][1:] == [f"{sent:,}", f"{sent:,}", "0"] else None

            async def caught_up() -> str:
                return await await_until(
                    shows_all_sent,
                    "partition 0 caught up on the Kafka panel",
                    lambda: pilot.pause(0.1),
                    90,
                )

            kafka = await caught_up()
            assert f"topic {topic}" in kafka and "unreachable" not in kafka
            first = screen.detail
            assert first is not None and first.replica is not None
            assert "REPLICATING" in _text(screen, "#title") and "not running" not in _text(
                screen, "#title"
            )
            produce(60)
            await caught_up()
            later = screen.detail
            assert later is not None and later.replica is not None
            assert later.replica.last_commit is not None
            assert later.replica.last_commit > (first.replica.last_commit or "")
            assert later.replica.last_commit in _text(screen, "#hudi-table")
    finally:
        replicator.request_stop()
        thread.join(60)
