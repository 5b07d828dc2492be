"""How `cdcctl start` stops (issue 24 item 4): Ctrl-C with its output piped (SIGINT to the
process group of `cdcctl start | tee FILE`, which ends tee too) and SIGTERM to its
process group (`timeout -s TERM`) finish the batch in flight and end cleanly: exit 0, no
traceback, the replicator `stopped` and its tables `STOPPED`, nothing left pending; the
next run goes on from there, exactly once.

A trickle of changes is produced while the signal arrives, so a batch is merging in
Spark's JVM then (before the fix, SIGTERM killed that JVM under it: an `EOFError`
traceback from PySpark's accumulator server and the state `failed`).

After each stop Spark's JVM, its Python worker daemon and workers (recorded as the signal
came; the JVM ignores SIGTERM, checked in /proc) are gone within 20 s; a SIGKILLed driver
leaves none of them behind either.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engine.hudi.table import HudiTable
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import (
    CliChild,
    assert_replicas_match,
    produced_config,
    run_cli,
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
    config = produced_config(broker, topic_prefix, tmp_path, messages, max_batch_seconds=0.3)
    target = tmp_path / "lake"
    trickle = Trickle(broker, workload)
    try:
        yield config, target, messages, trickle
    finally:
        trickle.stop()


def _stop_group_while_merging(child: CliChild, sig: int) -> list[psutil.Process]:
    """Once the child has committed batches of the trickle, signal its process group
    (``sig`` 0: no signal); the Spark processes under the child then."""
    wait_until(
        lambda: len(re.findall(r"^batch \d+:", child.stderr + child.stdout, re.M)) >= 3,
        "three batches",
        180,
        child=child,
    )
    jvm, below = _spark_processes(child)
    assert _ignores_sigterm(jvm), "Spark's JVM does not ignore SIGTERM"
    if sig:
        child.signal_group(sig)
    return below


def _spark_processes(child: CliChild) -> tuple[psutil.Process, list[psutil.Process]]:
    """The driver's JVM and every process under the driver (the JVM, Spark's Python worker
    daemon and workers: in process groups of their own, but in the same service)."""
    below = psutil.Process(child.pid).children(recursive=True)
    jvms = [p for p in below if p.name() == "java"]
    assert len(jvms) == 1, [(p.pid, p.name()) for p in below]
    assert len(below) >= 3, f"no Python worker daemon and worker under the JVM: {below}"
    return jvms[0], below


def _ignores_sigterm(process: psutil.Process) -> bool:
    """Whether SIGTERM is in the process's ignored signals (``SigIgn`` in /proc)."""
    status = Path(f"/proc/{process.pid}/status").read_text()
    ignored = int(re.search(r"^SigIgn:\s*([0-9a-f]+)$", status, re.M).group(1), 16)
    return bool(ignored & (1 << (signal.SIGTERM - 1)))


def _assert_all_ended(processes: list[psutil.Process], what: str) -> None:
    """Spark's JVM, its Python worker daemon and workers end within 20 s (no orphan)."""
    _, alive = psutil.wait_procs(processes, timeout=20)
    assert not alive, f"{what}: still running 20 s later: {[(p.pid, p.name()) for p in alive]}"


def _assert_stopped_cleanly(
    child: CliChild,
    config: Path,
    target: Path,
    spark: list[psutil.Process],
    *,
    pending: bool = False,
) -> None:
    assert child.wait(120) == 0, child.describe()
    _assert_all_ended(spark, "after a clean stop")
    said = child.stdout + child.stderr
    assert "Traceback" not in said and "EOFError" not in said, child.describe()
    assert not re.search(r"^error", said, re.M), child.describe()
    status = run_cli("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    assert '"state": "stopped"' in status.stdout, status.stdout[:600]
    tables = {t["table"]: t for t in json.loads(status.stdout)["tables"]}
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
    spark = _stop_group_while_merging(child, signal.SIGINT)
    _assert_stopped_cleanly(child, config, target, spark)
    assert child.tee is not None and child.tee.wait(10) == -signal.SIGINT  # its reader ended
    sent = messages + trickle.stop()
    _assert_the_next_run_goes_on(config, target, sent)


def test_sigterm_to_the_process_group_stops_cleanly(running, replicator, tmp_path) -> None:
    config, target, messages, trickle = running
    child = replicator(config, tee=tmp_path / "f.txt")
    spark = _stop_group_while_merging(child, signal.SIGTERM)
    _assert_stopped_cleanly(child, config, target, spark)
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
    spark = _stop_group_while_merging(child, 0)  # no signal, only the wait
    jvm = next(p for p in spark if p.name() == "java")
    # The JVM ignores SIGTERM (the kernel discards it: without that it dies of it in
    # milliseconds), so the driver stops it in order. Read from the kernel rather than
    # timed: a fast stop of the driver may end the JVM itself within a moment.
    assert _ignores(jvm.pid, signal.SIGTERM), "Spark's JVM does not ignore SIGTERM"
    for process in [psutil.Process(child.pid), *spark]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGTERM)
    _assert_stopped_cleanly(child, config, target, spark, pending=True)
    sent = messages + trickle.stop()
    _assert_the_next_run_goes_on(config, target, sent, pending=True)


def _ignores(pid: int, signum: int) -> bool:
    """Whether process ``pid`` ignores signal ``signum`` (Linux: its SigIgn mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"no SigIgn line for process {pid}")


def test_a_killed_driver_leaves_no_spark_process_behind(running, replicator) -> None:
    """SIGKILL to the driver alone (no clean-up of any kind): its JVM (in a process group
    of its own, ignoring SIGTERM) ends as its gateway's stdin closes, and with it the
    Python worker daemon and workers, within 20 s: no orphan keeps running."""
    config, _, _, _ = running
    child = replicator(config)
    spark = _stop_group_while_merging(child, 0)  # no signal, only the wait
    child.kill()
    _assert_all_ended(spark, "after the driver was SIGKILLed")
