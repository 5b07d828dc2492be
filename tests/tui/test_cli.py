"""`cdcctl dashboard` and `cdcctl start --tui` as a user runs them: real child processes on
a pseudo-terminal, keys typed into it, the screen read back from it."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyte
import pytest

import engine
from engine.lock import WriterLock, table_lock_path
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.data.recorded_store import TABLES, build
from tests.integration.replicas import produced_config, write_config
from tests.waiting import wait_until

#: The recorded store's tables.
ALL_TABLES = list(TABLES)
#: Escape sequences of the terminal output (removed before looking for words).
_ESCAPES = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78MDEc]")


class Terminal:
    """A child process on a pseudo-terminal of a given size."""

    def __init__(self, args: list[str], size: tuple[int, int] = (120, 36)) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(size[0])}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cdcctl", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.size = size
        self.output = b""

    def text(self) -> str:
        return _ESCAPES.sub(b"", self.output).decode(errors="replace")

    def screen(self) -> list[str]:
        """The terminal's lines as a terminal emulator (pyte) shows them now."""
        screen = pyte.Screen(*self.size)
        pyte.ByteStream(screen).feed(self.output)
        return list(screen.display)

    def wait_for_screen(self, check, what: str, timeout: float = 60.0) -> list[str]:
        """Wait until ``check(lines)`` holds for the screen; the lines."""

        def shown() -> list[str] | None:
            self.read()
            lines = self.screen()
            return lines if check(lines) else None

        return wait_until(shown, what, timeout, child=self)

    def read(self, seconds: float = 0.2) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], left)
            if not ready:
                break
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the child has closed the terminal
                break
            if not chunk:
                break
            self.output += chunk

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def describe(self) -> str:
        code = self.proc.poll()
        state = "running" if code is None else f"exit code {code}"
        return f"the terminal's child ({state}) shows:\n{self.text()[-3000:]}"

    def shows(self, words: str) -> bool:
        """Whether ``words`` are on the terminal, after reading what came."""
        self.read()
        return words in self.text()

    def wait_for(self, words: str, timeout: float = 120.0) -> None:
        wait_until(lambda: self.shows(words), f"{words!r} on the terminal", timeout, child=self)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())
        self.read(0.3)

    def wait_exit(self, timeout: float = 90.0) -> int:
        wait_until(lambda: self.read() or self.exited(), f"the exit of {self.describe()}", timeout)
        self.read(0.5)
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def test_dashboard_shows_a_recorded_store_and_quits(tmp_path: Path) -> None:
    config = build(tmp_path / "recorded")
    term = Terminal(["dashboard", "--config", str(config)])
    try:
        term.wait_for("■ STOPPED", timeout=60)  # no replicator runs: not FAILING ×3
        term.wait_for("showing its last known state")
        term.type("q")  # no replicator of its own: quits at once
        assert term.wait_exit() == 0
    finally:
        term.close()


def test_dashboard_at_80x24_shows_what_the_user_names_first(tmp_path: Path) -> None:
    """The real `cdcctl dashboard` on an 80x24 pseudo-terminal, its screen read back by a
    terminal emulator: the header's labels and values apart, and for every table its
    name, state, lag, inserts, updates, deletes and retries, whole."""
    config = build(tmp_path / "recorded", target="/srv/cdc/lake")
    term = Terminal(["dashboard", "--config", str(config)], size=(80, 24))
    try:
        lines = term.wait_for_screen(
            lambda lines: all(any(f" {t} " in ln for ln in lines) for t in ALL_TABLES),
            "every table's name, whole",
            60,
        )
        text = "\n".join(lines)
        assert "cdcctl: STOPPED (not running)  │  last commit: " in text, text
        assert "broker: kafka-1.internal:9092  │  target: /srv/cdc/lake" in text, text
        heading = next(ln for ln in lines if ln.split()[:1] == ["table"])
        # No replicator runs: the live states read STOPPED, whose narrower column leaves
        # room for one more (late).
        assert heading.replace("▲", "").split() == [
            *("table", "state", "lag", "inserts", "updates", "deletes", "retries", "late")
        ], text
        rows = {
            w[0]: w[1:] for w in map(str.split, lines) if w and w[0].startswith(("inv", "shop"))
        }
        orders = ["‖", "PAUSED", "1,512", "17.0k", "11.3k", "0", "0", "48"]
        assert rows["inventory_orders"] == orders
        assert rows["shop_payments"] == ["■", "STOPPED", "800", "2,532", "216", "0", "3", "0"]
        for name in ("inventory_customers", "inventory_products", "shop_refunds"):
            assert len(rows[name]) == 8, rows[name]  # mark, state, six figures: none cut
        term.type("d")  # the dead letters: at once, and "no dead letters" when none
        term.wait_for_screen(
            lambda lines: any("No dead letters for inventory_customers." in ln for ln in lines),
            "the empty dead-letter list",
            10,
        )
        term.type("q")
        term.type("q")
        assert term.wait_exit() == 0
    finally:
        term.close()


@pytest.mark.parametrize("width", [80, 120])
def test_status_on_a_terminal_fits_its_width_and_cuts_no_number(tmp_path: Path, width) -> None:
    config = build(tmp_path / "recorded")
    term = Terminal(["status", "--config", str(config)], size=(width, 40))
    try:
        assert term.wait_exit() == 0, term.text()
        text = term.text()
    finally:
        term.close()
    assert "…" not in text, text
    lines = text.splitlines()
    header = next(line for line in lines if line.split()[:2] == ["table", "state"])
    at = lines.index(header)
    body = [line for line in lines[at + 2 : at + 7]]
    assert all(len(line.rstrip()) <= width for line in [header, *body]), text
    # What the user names first is there, whole: state, lag, inserts, updates, deletes, bad.
    for heading in ("lag", "inserts", "updates", "deletes", "bad"):
        assert heading in header.split(), header
    orders = next(line for line in body if line.split()[0] == "inventory_orders")
    assert orders.split()[1:3] == ["PAUSED", "17,010"], orders
    assert f"(not shown at {width} columns: " in " ".join(text.split()), text


def test_listing_dead_letters_loads_no_replicator() -> None:
    """The cause of `d`'s 3-5 s of "reading…": the listing imported the replicator loop,
    the decoders and polars (about a second of imports, several beside a busy replicator
    in the same process). The dashboard's process loads none of them for it."""
    code = (
        "import sys, engine, tui.app\n"
        "engine.load_config, engine.read_status\n"  # what the dashboard has loaded
        "before = set(sys.modules)\n"
        "engine.list_dead_letters\n"
        "heavy = ('engine.replicator.loop', 'engine.decode', 'polars', 'pyspark')\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith(heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_dashboard_of_a_folder_without_state_says_so(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "^x\\.", tmp_path / "lake")
    term = Terminal(["dashboard", "--config", str(config)])
    try:
        term.wait_for("no state store in", timeout=60)
        term.type("q")
        assert term.wait_exit() == 0
        assert "Traceback" not in term.text()
    finally:
        term.close()


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_start_tui_asks_before_stopping_and_stops_cleanly(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=33, prefix=topic_prefix, schemas=True).events(1_500))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    produce_messages(broker.bootstrap_servers, messages)
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        tmp_path / "lake",
        max_batch_events=500,
        max_batch_seconds=0.3,
    )
    work = engine.load_config(config).work_path()
    term = Terminal(["start", "--tui", "--config", str(config)])
    try:
        term.wait_for("▶ REPLICATING", timeout=180)
        term.wait_for("RUNNING  │  up: ")
        term.type("q")
        term.wait_for("Stop replicating and quit?")
        answered = time.time()
        term.type("n")  # keep replicating, with the dashboard

        def went_on() -> bool:  # the replicator's loop wrote its store since the answer
            term.read()
            found = engine.read_status(work)
            updated = found.replicator.updated_at if found is not None else None
            return (
                updated is not None
                and dt.datetime.fromisoformat(updated).timestamp() > answered + 1
            )

        wait_until(went_on, "the replicator to go on after the answer", 60, child=term)
        assert term.proc.poll() is None
        status = engine.read_status(work)
        assert status is not None and status.replicator.alive
        assert status.replicator.state == "running"
        term.type("q")
        term.wait_for("Stop replicating and quit?")
        term.output = b""
        term.type("y")
        assert term.wait_exit() == 0, term.text()[-3000:]
        assert "replicator: stopped" in term.text()  # `cdcctl start`'s exit summary
    finally:
        term.close()
    status = engine.read_status(work)
    assert status is not None and status.replicator.state == "stopped"
    assert not status.replicator.alive
    assert sum(t.counters.rows for t in status.tables) > 0


@pytest.mark.spark
@pytest.mark.slow
def test_start_tui_says_after_quitting_why_each_table_failed(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    """Under the dashboard the log lines go to the log file only: once it has quit, the
    exit summary says each FAILED table's error and the recent events (before, it left
    them out as if the terminal had shown them, so the reasons were never seen)."""
    messages = list(InventoryWorkload(seed=34, prefix=topic_prefix, schemas=True).events(300))
    config, target = produced_config(broker, topic_prefix, tmp_path, messages), tmp_path / "lake"
    names = sorted({table_name_for_topic(t) for t, _, _ in messages})
    # Another writer holds every table: each fails, and with none left the run ends.
    held = [WriterLock(table_lock_path(target / n), f"table {n}").acquire() for n in names]
    term = Terminal(["start", "--tui", "--config", str(config)])
    try:
        term.wait_for("the replicator has stopped", timeout=180)
        term.output = b""
        term.type("q")
        assert term.wait_exit() == 3, term.text()[-3000:]
        said = term.text()
    finally:
        term.close()
        for lock in held:
            lock.release()
    assert "replicator: failed" in said and f"all {len(names)} FAILED" in said, said
    for name in names:
        assert f"{name}: FAILED: table {name} ({target / name}) is being written by" in said
        assert f"FAILED {name} (topic " in said
    assert "recent events:" in said, said


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_demo_tui_replicates_the_demo_and_its_live_changes(tmp_path: Path) -> None:
    target = tmp_path / "demo" / "lake"
    term = Terminal(["demo", "--tui", "--events", "3000", "--target", str(target)])
    try:
        term.wait_for("inventory_orders", timeout=180)
        term.wait_for("▶ REPLICATING", timeout=180)
        work = target.parent / ".cdcctl"

        def applied() -> int:
            status = engine.read_status(work)
            tables = status.tables if status is not None else []
            return sum(t.counters.inserts + t.counters.updates + t.counters.deletes for t in tables)

        first = applied()
        wait_until(  # the live changes keep coming, and are replicated
            lambda: term.read(0.5) or applied() > first, "live changes replicated", child=term
        )
        term.type("q")
        term.wait_for("Stop replicating and quit?")
        term.type("y")
        assert term.wait_exit() == 0, term.text()[-3000:]
        assert f"the replicas stay in {target}" in term.text()
    finally:
        term.close()
