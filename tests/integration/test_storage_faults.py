"""A full disk and a read-only target: reported with what to do, nothing lost, exactly once.

The target is a small tmpfs the test mounts (the suite runs as root, here and on CI:
``mount`` needs CAP_SYS_ADMIN; without it the test fails saying so, it does not skip).
Real replicators (the CLI in a child process) against the embedded broker:

* **Full disk**: after a first run, a ballast file leaves the target a few kB, so a
  batch's instant is requested but its data files cannot be written. The replicator
  retries (a storage error), then stops after ``replicator.retry_max_seconds`` saying the
  file system is full and what to do. No commit became visible that is not whole: every
  completed instant passes the open-time consistency check, hudi-rs reads the replicas
  and they equal the oracle of what their checkpoints say was applied. With the ballast
  gone, the next run ends with every replica equal to the oracle and each event counted
  once (the counters kept with the commits).
* **Read-only**: a read-only target is refused before anything runs (config check);
  remounted read-only under a running replicator, each table is retried, then FAILED
  saying the file system is read-only and what to do, with nothing changed; remounted
  read-write, the next run catches up exactly.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.hudi import HudiWriter
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import (
    applied_counts,
    assert_replicas_match,
    run_cli,
    write_config,
)
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MOUNT_SIZE = "24m"


def _mount(*args: str) -> None:
    out = subprocess.run(["mount", *args], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(
            f"`mount {' '.join(args)}` failed: {out.stderr.strip()} (these tests mount a small "
            "tmpfs as the target and must run as root, as the suite does here and on CI)"
        )


def _read_only(target: Path) -> None:
    """Put a read-only view of ``target`` over it: a bind mount remounted read-only (a
    plain ``remount,ro`` is refused while the replicator holds its lock files open for
    writing; the bind mount has no writers, and new path lookups go through it)."""
    _mount("--bind", str(target), str(target))
    _mount("-o", "remount,bind,ro", str(target))


def _read_write(target: Path) -> None:
    """Take the read-only view away again."""
    out = subprocess.run(["umount", str(target)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _small_tmpfs(folder: Path) -> Iterator[Path]:
    """A size-limited tmpfs mounted at ``folder``, unmounted afterwards."""
    folder.mkdir()
    _mount("-t", "tmpfs", "-o", f"size={MOUNT_SIZE},mode=0755", "tmpfs", str(folder))
    try:
        yield folder
    finally:
        for _ in range(3):  # a read-only view left on top, then the tmpfs itself
            if subprocess.run(["umount", "-l", str(folder)], capture_output=True).returncode:
                break


@pytest.fixture
def small_target(tmp_path: Path) -> Iterator[Path]:
    """A size-limited tmpfs as the target (``tmp_path/lake``)."""
    yield from _small_tmpfs(tmp_path / "lake")


@pytest.fixture
def small_work(tmp_path: Path) -> Iterator[Path]:
    """A size-limited tmpfs as the work folder (``tmp_path/work``, as write_config says)."""
    yield from _small_tmpfs(tmp_path / "work")


def _free_bytes(path: Path) -> int:
    import os

    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _completed(table: Path) -> list[str]:
    return sorted(p.name for p in (table / ".hoodie").glob("*.deltacommit"))


def _applied(table: Path, topic: str) -> int:
    """Messages the newest commit's checkpoint says were applied (one partition)."""
    newest = _completed(table)[-1]
    meta = json.loads((table / ".hoodie" / newest).read_text())
    checkpoint = meta["extraMetadata"]["deltastreamer.checkpoint.key"]
    assert checkpoint.startswith(topic + ",")
    return int(checkpoint.rsplit(":", 1)[1])


def _all_applied(target: Path, sent: list, topics: list[str]) -> Callable[[], bool]:
    """Whether every table's newest commit has applied all of ``sent``."""
    ends = {t: sum(m[0] == t for m in sent) for t in topics}

    def check() -> bool:
        paths = {t: target / table_name_for_topic(t) for t in topics}
        return all(_completed(p) and _applied(p, t) == ends[t] for t, p in paths.items())

    return check


def _check_exact(target: Path, messages: list, topics: list[str]) -> None:
    """Every replica equals the oracle of what its checkpoint says was applied, and its
    commits' counters count each applied event once."""
    for topic in topics:
        path = target / table_name_for_topic(topic)
        HudiWriter.open(path).verify()  # no visible commit is missing or cut short
        mine = [m for m in messages if m[0] == topic]
        rows = assert_replicas_match(target, {topic: fold(mine[: _applied(path, topic)])[topic]})
        done = applied_counts(path)
        live = done.get("inserts", 0) - done.get("deletes", 0) - done.get("truncated", 0)
        assert live == rows[topic], (topic, done, rows)


def _setup(broker, topic_prefix: str, tmp_path: Path, target: Path, seed: int):
    workload = InventoryWorkload(seed=seed, prefix=topic_prefix, schemas=True)
    first = list(workload.events(1_500))
    produce_messages(broker.bootstrap_servers, first)
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_seconds=0.3,
        retry_max_seconds=12.0,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    topics = sorted(workload.topics.values())
    _check_exact(target, first, topics)
    return workload, first, config, topics


def test_a_full_disk_stops_with_what_to_do_and_loses_nothing(
    broker, topic_prefix: str, tmp_path: Path, small_target: Path
) -> None:
    target = small_target
    workload, first, config, topics = _setup(broker, topic_prefix, tmp_path, target, seed=41)
    before = {t: _completed(target / table_name_for_topic(t)) for t in topics}

    # Leave the target 16 kB: instants can be requested, data files cannot be written.
    ballast = target / "ballast"
    with ballast.open("wb") as f:
        f.truncate(0)
        chunk = b"\0" * 65536
        while _free_bytes(target) > 16 * 1024 + len(chunk):
            f.write(chunk)
            f.flush()
    second = list(workload.stream(3_000))
    produce_messages(broker.bootstrap_servers, second)
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode != 0, run.stderr
    assert "Traceback" not in run.stderr
    assert "No space left on device" in run.stderr, run.stderr
    assert "the file system is full: free space on it" in run.stderr, run.stderr
    # Whatever landed is whole: exact up to each table's checkpoint, and nothing was
    # committed past the full disk except whole commits.
    _check_exact(target, first + second, topics)
    stuck = [t for t in topics if _completed(target / table_name_for_topic(t)) == before[t]]
    assert stuck, "the disk never filled up: the ballast left too much room"

    ballast.unlink()
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(target, fold(first + second))
    _check_exact(target, first + second, topics)


def _fill(folder: Path, leave: int) -> Path:
    """A ballast file that leaves ``folder``'s file system about ``leave`` bytes."""
    ballast = folder / "ballast"
    with ballast.open("wb") as f:
        chunk = b"\0" * 65536
        while _free_bytes(folder) > leave + len(chunk):
            f.write(chunk)
            f.flush()
    return ballast


def test_a_full_work_folder_stops_with_what_to_do_and_loses_nothing(
    broker, topic_prefix: str, tmp_path: Path, small_work: Path, replicator
) -> None:
    """The work folder (state store, staging files, logs, dead letters) on a full disk.

    Full before a start: refused at once saying so and what to do, no traceback. Full
    under a running replicator: its state store goes stale (said once), each table's
    staging write fails, is retried, then the table is FAILED with the cause and what to
    do; the replicas keep only whole commits. With room again, the next run catches up
    exactly."""
    target = tmp_path / "lake"
    workload, first, config, topics = _setup(broker, topic_prefix, tmp_path, target, seed=47)
    ballast = _fill(small_work, 8 * 1024)
    second = list(workload.stream(1_500))
    produce_messages(broker.bootstrap_servers, second)
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    assert re.search(
        rf"error: cannot start: storage error on {re.escape(str(small_work))}/state.db: No "
        r"space left on device .*; the file system is full: free space on it",
        run.stderr,
    ), run.stderr
    _check_exact(target, first, topics)  # nothing ran
    ballast.unlink()

    # Full under a running replicator.
    proc = replicator(config)
    names = [table_name_for_topic(t) for t in topics]
    wait_until(
        _all_applied(target, first + second, topics), "the second round, applied", 300, child=proc
    )
    ballast = _fill(small_work, 4 * 1024)
    third = list(workload.stream(1_500))
    produce_messages(broker.bootstrap_servers, third)
    # Each table either FAILED or (its staged batches small enough to fit) applied
    # everything; which depends on how the batches fall.
    produced = {t: sum(m[0] == t for m in first + second + third) for t in topics}

    def settled(name: str, topic: str) -> bool:
        return f"{name}: FAILED:" in proc.stderr or (
            _applied(target / name, topic) == produced[topic]
        )

    wait_until(
        lambda: all(settled(n, t) for n, t in zip(names, topics, strict=True)),
        "every table FAILED or caught up",
        300,
        interval=1.0,
        child=proc,
    )
    proc.stop(signal.SIGTERM, 120)
    text = proc.stderr
    assert "Traceback" not in text
    assert "Logging error" not in text  # the log file shares the full disk
    failed = [n for n in names if f"{n}: FAILED:" in text]
    assert failed, "the work folder never filled up: the ballast left too much room"
    for name in failed:
        assert re.search(
            rf"{name}: FAILED: {name}: storage error.*No space left on device; the file "
            r"system is full: free space on it \(or move target.path or replicator.work_dir",
            text,
        ), text
    _check_exact(target, first + second + third, topics)

    ballast.unlink()
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(target, fold(first + second + third))
    _check_exact(target, first + second + third, topics)


def test_the_state_store_on_a_full_disk_is_written_when_it_can_again(
    small_work: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The recorder's writes are best-effort: a write the full disk refuses is said once
    and kept (nothing raises); once there is room, the next write lands all of it."""
    from engine.state.recorder import StateRecorder
    from engine.state.store import StateStore, store_path

    recorder = StateRecorder(small_work)
    recorder.started()
    ballast = _fill(small_work, 0)
    with ballast.open("ab", buffering=0) as f:  # the last blocks too
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    with caplog.at_level("WARNING", logger="cdcctl.state"):
        for i in range(200):  # far more than a WAL page: needs new blocks
            recorder.event(None, "state", f"event {i} " + "x" * 2000)
        recorder.sync([], force=True)
        recorder.sync([], force=True)
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1 and "No space left on device" in said[0], said
    ballast.unlink()
    with caplog.at_level("INFO", logger="cdcctl.state"):
        recorder.sync([], force=True)
    assert any("is written again" in r.getMessage() for r in caplog.records)
    recorder.close()
    store = StateStore(store_path(small_work), create=False)
    messages = [e["message"] for e in store.events(limit=1000)]
    store.close()
    assert sum(m.startswith("event ") for m in messages) == 200


def test_a_read_only_target_is_refused_or_fails_its_tables_and_catches_up_after(
    broker, topic_prefix: str, tmp_path: Path, small_target: Path, replicator
) -> None:
    target = small_target
    workload, first, config, topics = _setup(broker, topic_prefix, tmp_path, target, seed=43)
    second = list(workload.stream(1_500))
    produce_messages(broker.bootstrap_servers, second)

    # Read-only before the start: refused before anything runs, saying what to do.
    _read_only(target)
    try:
        run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    finally:
        _read_write(target)
    assert run.returncode == 2, run.stderr
    assert f"target.path: {target} is not writable: Read-only file system" in run.stderr
    assert "Traceback" not in run.stderr

    # Read-only under a running replicator: each table is retried, then FAILED with the
    # cause and what to do; nothing of it changes.
    third = list(workload.stream(1_500))
    proc = replicator(config)
    wait_until(
        _all_applied(target, first + second, topics), "the second round, applied", 300, child=proc
    )
    _read_only(target)
    try:
        frozen = {t: _completed(target / table_name_for_topic(t)) for t in topics}
        produce_messages(broker.bootstrap_servers, third)
        names = [table_name_for_topic(t) for t in topics]
        wait_until(
            lambda: all(f"{n}: FAILED:" in proc.stderr for n in names),
            "every table FAILED",
            300,
            interval=1.0,
            child=proc,
        )
        for topic in topics:
            assert _completed(target / table_name_for_topic(topic)) == frozen[topic]
    finally:
        _read_write(target)
    proc.stop(signal.SIGTERM, 120)
    text = proc.stderr
    assert "Traceback" not in text
    for name in names:
        assert re.search(
            rf"{name}: FAILED: {name}: storage error on .*: Read-only file system; the file "
            r"system is mounted read-only: remount it read-write",
            text,
        ), text

    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(target, fold(first + second + third))
    _check_exact(target, first + second + third, topics)
