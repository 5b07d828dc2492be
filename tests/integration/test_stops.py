"""How `cdcctl start` stops (issue 24 item 4): Ctrl-C with its output piped (SIGINT to the
process group of `cdcctl start | tee FILE`, which ends tee too) and SIGTERM to its
process group (`timeout -s TERM`) finish the batch in flight and end cleanly: exit 0, no
traceback, the replicator `stopped` and its tables `STOPPED`, nothing left pending; the
next run goes on from there, exactly once.

A trickle of changes is produced while the signal arrives, so a batch is merging in
Spark's JVM then (before the fix, SIGTERM killed that JVM under it: an `EOFError`
traceback from PySpark's accumulator server and the state `failed`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.hudi.table import HudiTable
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import (
    CliChild,
    assert_replicas_match,
    run_cli,
    status_tables,
    write_config,
)
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

Message = tuple[str, bytes | None, bytes | None]


class Trickle:
    """Changes produced in the background, a few dozen a second, until stopped."""

    def __init__(self, broker, workload: InventoryWorkload) -> None:
        self.broker, self.workload = broker, workload
        self.sent: list[Message] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            chunk = list(self.workload.stream(20))
            produce_messages(self.broker.bootstrap_servers, chunk)
            self.sent += chunk
            time.sleep(0.2)

    def stop(self) -> list[Message]:
        self._stop.set()
        self._thread.join(30)
        return self.sent


@pytest.fixture
def running(
    broker, topic_prefix: str, tmp_path: Path
) -> Iterator[tuple[Path, Path, list, Trickle]]:
    """A config over a produced workload and a trickle of more changes meanwhile."""
    workload = InventoryWorkload(seed=41, prefix=topic_prefix, schemas=True)
    messages: list[Message] = list(workload.events(2_000))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    produce_messages(broker.bootstrap_servers, messages)
    target, pattern = tmp_path / "lake", f"^{re.escape(topic_prefix)}\\."
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, pattern, target, max_batch_seconds=0.3
    )
    trickle = Trickle(broker, workload)
    try:
        yield config, target, messages, trickle
    finally:
        trickle.stop()


def _stop_group_while_merging(child: CliChild, sig: int) -> None:
    """Once the child has committed batches of the trickle, signal its process group."""
    wait_until(
        lambda: len(re.findall(r"^batch \d+:", child.stderr + child.stdout, re.M)) >= 3,
        "three batches",
        180,
        child=child,
    )
    child.signal_group(sig)


def _descendants(pid: int) -> list[int]:
    """``pid``'s children, theirs, and so on (Spark's JVM, its Python worker daemon and
    workers: each in a process group of its own, but in the same service)."""
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    children = [int(p) for p in found.stdout.split()]
    return [d for c in children for d in (c, *_descendants(c))]


def _assert_stopped_cleanly(
    child: CliChild, config: Path, target: Path, *, pending: bool = False
) -> None:
    assert child.wait(120) == 0, child.describe()
    said = child.stdout + child.stderr
    assert "Traceback" not in said and "EOFError" not in said, child.describe()
    assert not re.search(r"^error", said, re.M), child.describe()
    status = run_cli("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    assert '"state": "stopped"' in status.stdout, status.stdout[:600]
    tables = status_tables(config)
    assert len(tables) == 3 and all(t["state"] == "STOPPED" for t in tables.values()), tables
    for name in tables if not pending else ():  # the batch in flight was committed
        assert not HudiTable.open(target / name).pending_instants(), name


def _assert_the_next_run_goes_on(
    config: Path, target: Path, sent: list[Message], *, pending: bool = False
) -> None:
    done = run_cli("start", "--config", str(config), "--until-caught-up")
    assert done.returncode == 0, done.stderr
    assert "taking over the lock" not in done.stderr
    assert pending or "rolled back" not in done.stderr, done.stderr
    assert_replicas_match(target, fold(sent))


@pytest.mark.parametrize("piped", ["stdout", "stdout and stderr"])
def test_ctrl_c_with_the_output_piped_stops_cleanly(running, replicator, tmp_path, piped) -> None:
    config, target, messages, trickle = running
    child = replicator(config, tee=tmp_path / "f.txt", tee_stderr=piped != "stdout")
    _stop_group_while_merging(child, signal.SIGINT)
    _assert_stopped_cleanly(child, config, target)
    assert child.tee is not None and child.tee.wait(10) == -signal.SIGINT  # its reader ended
    sent = messages + trickle.stop()
    _assert_the_next_run_goes_on(config, target, sent)


def test_sigterm_to_the_process_group_stops_cleanly(running, replicator, tmp_path) -> None:
    config, target, messages, trickle = running
    child = replicator(config, tee=tmp_path / "f.txt")
    _stop_group_while_merging(child, signal.SIGTERM)
    _assert_stopped_cleanly(child, config, target)
    assert child.tee is not None and child.tee.wait(10) == -signal.SIGTERM
    sent = messages + trickle.stop()
    _assert_the_next_run_goes_on(config, target, sent)


def test_sigterm_to_every_process_of_the_service_stops_cleanly(
    running, replicator, tmp_path
) -> None:
    """As systemd's KillMode=control-group stops a service: SIGTERM to the driver, Spark's
    JVM, its Python worker daemon and workers at once. The JVM waits for the driver; the
    workers end, so the batch in flight may not finish: it is left to the next run, which
    reads it again (exactly once), and the stop is still clean."""
    config, target, messages, trickle = running
    child = replicator(config, tee=tmp_path / "f.txt")
    _stop_group_while_merging(child, 0)  # signal 0: no signal, only the wait
    for pid in [child.pid, *_descendants(child.pid)]:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _assert_stopped_cleanly(child, config, target, pending=True)
    sent = messages + trickle.stop()
    _assert_the_next_run_goes_on(config, target, sent, pending=True)
