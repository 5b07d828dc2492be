"""`cdcctl start` without --until-caught-up: new topics picked up live, clean stop, safe names."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import (
    assert_replicas_match,
    replica_rows,
    run_cli,
    write_config,
)
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_new_topic_is_picked_up_and_sigterm_stops_cleanly(
    broker, topic_prefix: str, tmp_path: Path, replicator
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
    child = replicator(config)
    expected_early = fold(early)
    first_path = target / table_name_for_topic(first_topic)
    wait_until(
        lambda: replica_rows(first_path) == expected_early[first_topic],
        "the first topic's replica",
        child=child,
    )
    # Topics that did not exist when the replicator started.
    produce_messages(broker.bootstrap_servers, late)
    expected = fold(messages)
    paths = {t: target / table_name_for_topic(t) for t in expected}
    wait_until(
        lambda: all(replica_rows(p) == expected[t] for t, p in paths.items()),
        "every topic's replica",
        child=child,
    )
    assert child.stop(signal.SIGTERM) == 0, child.describe()
    assert "inventory_orders" in child.stdout  # the exit summary lists every table
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
    proc = run_cli("start", "--config", str(config), "--until-caught-up", timeout=300)
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
