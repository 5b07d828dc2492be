"""`cdcctl start` without --until-caught-up: new topics picked up live, clean stop, safe names."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, read_replica, write_config
from tests.oracle import fold

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _wait_for(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"replicator exited early: {proc.stderr.read()}")
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - table may be mid-creation; poll again
            pass
        time.sleep(0.5)
    raise AssertionError("timed out")


def test_new_topic_is_picked_up_and_sigterm_stops_cleanly(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    workload = InventoryWorkload(seed=3, prefix=topic_prefix, schemas=True)
    messages = list(workload.events(3_000))
    first_topic = workload.topic("customers")
    early = [m for m in messages if m[0] == first_topic]
    late = [m for m in messages if m[0] != first_topic]
    produce_messages(broker.bootstrap_servers, early)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        topic_refresh_seconds=1.0,
        max_batch_seconds=0.3,
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcctl", "start", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        expected_early = fold(early)
        first_path = target / table_name_for_topic(first_topic)
        _wait_for(lambda: read_replica(first_path) == expected_early[first_topic], 120, proc)
        # Topics that did not exist when the replicator started.
        produce_messages(broker.bootstrap_servers, late)
        expected = fold(messages)
        paths = {t: target / table_name_for_topic(t) for t in expected}
        _wait_for(lambda: all(read_replica(p) == expected[t] for t, p in paths.items()), 120, proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "inventory_orders" in out  # the exit summary lists every table
    assert_replicas_match(target, fold(messages))
    for path in paths.values():
        assert not HudiTable.open(path).pending_instants()


def test_hostile_topic_names_write_nothing_outside_target(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    base = InventoryWorkload(seed=4, prefix=topic_prefix, schemas=True)
    msgs = [m for m in base.events(400) if m[0] == base.topic("customers")]
    hostile = [f"{topic_prefix}.....", f"{topic_prefix}.x..y", f"{topic_prefix}.-..-"]
    messages = [(t, k, v) for t in hostile for (_, k, v) in msgs]
    broker.create_topics(hostile)
    produce_messages(broker.bootstrap_servers, messages)
    root = tmp_path / "root"
    target = root / "deep" / "lake"
    target.mkdir(parents=True)
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "cdcctl", "start", "--config", str(config), "--until-caught-up"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    work = target.parent / "work"
    for path in root.rglob("*"):
        assert (
            path == target
            or target in path.parents
            or path == work
            or work in path.parents
            or path == target.parent
        ), f"written outside the target: {path}"
    created = sorted(p.name for p in target.iterdir())
    assert created, "at least the safely named topics become tables"
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", name) for name in created)
