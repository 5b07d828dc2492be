"""Transient failures against real `cdcctl start` processes: retried, then recovered
exactly once, or given up with exit code 3.

The broker outage is real at the network level: the replicator reaches the embedded
broker only through a TCP gate (engine/playground/gate.py); closing it cuts every
connection and refuses new ones, opening it again on the same port brings the broker
back with its log (Tansu's in-memory log would not survive a restart of its process,
and the Tansu build shipped here has no PostgreSQL storage). Storage and Spark failures
are injected at the engine's named fault points (engine/playground/faults.py): an
OSError in one table's commit, a Python worker killed inside a merge task.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import engine
from engine.config import config_from_dict
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import EmbeddedBroker, produce_messages
from engine.playground.gate import TcpGate
from engine.playground.workload import InventoryWorkload
from engine.source.kafka import CLOSE_WAIT_S, KafkaSource
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

Message = tuple[str, bytes | None, bytes | None]
OP_COUNTERS = {"r": "snapshot_rows", "c": "inserts", "u": "updates", "d": "deletes"}


@pytest.fixture
def gated() -> Iterator[tuple[EmbeddedBroker, TcpGate]]:
    """A broker of this test's own, reachable only through a gate (open)."""
    gate = TcpGate()
    broker = EmbeddedBroker(advertised_port=gate.port).start()
    gate.open(broker.port)
    try:
        yield broker, gate
    finally:
        gate.close()
        broker.stop()


def _ops(messages: list[Message]) -> dict[str, dict[str, int]]:
    """Events sent per table and counter (tombstones are not events)."""
    out: dict[str, dict[str, int]] = {}
    for topic, _, value in messages:
        table = out.setdefault(table_name_for_topic(topic), dict.fromkeys(OP_COUNTERS.values(), 0))
        if value is not None:
            op = re.search(rb'"op":"(\w)"', value)
            assert op is not None
            table[OP_COUNTERS[op.group(1).decode()]] += 1
    return out


def _counters(tables: list[dict]) -> dict[str, dict[str, int]]:
    return {t["table"]: {c: t[c] for c in OP_COUNTERS.values()} for t in tables}


def _status(config: Path) -> dict:
    run = run_cli("status", "--config", str(config), "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _events(target: Path, kind: str) -> list[str]:
    """Messages of the newest event-log entries of a kind (`cdcctl status` shows them)."""
    found = engine.read_status(target.parent / "work")
    assert found is not None
    return [e.message for e in found.events if e.kind == kind]


def _caught_up(target: Path, sent: list[Message]) -> Callable[[], bool]:
    ends: dict[str, int] = {}
    for topic, _, _ in sent:
        ends[topic] = ends.get(topic, 0) + 1

    def check() -> bool:
        for topic, end in ends.items():
            path = target / table_name_for_topic(topic)
            if not HudiTable.exists(path):
                return False
            if HudiTable.open(path).checkpoint() != f"{topic},0:{end}":
                return False
        return True

    return check


def _setup(
    tmp_path: Path, broker: EmbeddedBroker, bootstrap: str, prefix: str, seed: int, **replicator
) -> tuple[InventoryWorkload, list[Message], Path, Path]:
    workload = InventoryWorkload(seed=seed, prefix=prefix, schemas=True)
    messages = list(workload.events(1_500))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        bootstrap,
        f"^{re.escape(prefix)}\\.",
        target,
        max_batch_events=400,
        max_batch_seconds=0.3,
        **replicator,
    )
    return workload, messages, config, target


def test_broker_outage_is_retried_and_recovers_exactly_once(
    gated: tuple[EmbeddedBroker, TcpGate], topic_prefix: str, tmp_path: Path, replicator
) -> None:
    broker, gate = gated
    workload, first, config, target = _setup(
        tmp_path, broker, gate.bootstrap_servers, topic_prefix, 31, retry_max_seconds=120
    )
    produce_messages(gate.bootstrap_servers, first)
    proc = replicator(config)
    wait_until(_caught_up(target, first), "the first events", 180, child=proc)
    # More events, and the broker goes away while they are being applied.
    during = list(workload.stream(1_000))
    produce_messages(gate.bootstrap_servers, during)
    gate.close()

    def retrying() -> bool:
        tables = _status(config)["tables"]
        return all(t["state"] == "FAILING" and t["retries"] >= 2 for t in tables)

    wait_until(retrying, "the tables to retry", 60, child=proc)
    down = _status(config)
    assert down["replicator"]["state"] == "running" and down["replicator"]["alive"]
    for t in down["tables"]:
        assert f"Kafka at {gate.bootstrap_servers}" in t["last_error"]
    assert any("; retry 2 in" in m for m in _events(target, "retry"))

    gate.open()
    after = list(workload.stream(1_000))
    produce_messages(gate.bootstrap_servers, after)
    sent = first + during + after
    wait_until(_caught_up(target, sent), "the events after the outage", 180, child=proc)
    wait_until(
        lambda: all(t["state"] == "REPLICATING" for t in _status(config)["tables"]),
        "the tables to recover",
        30,
        child=proc,
    )
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert proc.wait() == 0, proc.describe()
    stderr = proc.stderr
    assert "retry 1 in" in stderr and "recovered after" in stderr, stderr
    assert "Traceback" not in stderr
    final = _status(config)
    assert final["replicator"]["state"] == "stopped"
    assert _counters(final["tables"]) == _ops(sent)  # nothing applied twice, nothing lost
    for t in final["tables"]:
        assert t["state"] == "STOPPED" and t["retries"] >= 2 and t["lag_messages"] == 0
    assert_replicas_match(target, fold(sent))


def test_broker_gone_longer_than_the_limit_stops_with_exit_3(
    gated: tuple[EmbeddedBroker, TcpGate], topic_prefix: str, tmp_path: Path, replicator
) -> None:
    broker, gate = gated
    _, messages, config, target = _setup(
        tmp_path, broker, gate.bootstrap_servers, topic_prefix, 32, retry_max_seconds=8
    )
    produce_messages(gate.bootstrap_servers, messages)
    proc = replicator(config)
    wait_until(_caught_up(target, messages), "the events", 180, child=proc)
    gate.close()
    closed = time.monotonic()
    code = proc.wait(120)
    gone = time.monotonic() - closed
    stderr = proc.stderr
    assert code == 3, stderr
    assert 8 <= gone < 60, gone
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert f"Kafka at {gate.bootstrap_servers}" in errors[0]
    given_up = r"retried \d+ time\(s\) over \d+ s; replicator.retry_max_seconds = 8"
    assert re.search(given_up, errors[0]), errors[0]
    assert "Traceback" not in stderr
    status = _status(config)
    assert status["replicator"]["state"] == "failed" and not status["replicator"]["alive"]
    assert f"Kafka at {gate.bootstrap_servers}" in status["replicator"]["error"]
    for t in status["tables"]:
        assert t["state"] == "FAILED" and t["retries"] >= 1
        assert "replicator.retry_max_seconds" in t["last_error"]
    states = _events(target, "state")
    assert any(m.endswith("FAILING -> FAILED") for m in states), states
    # Nothing was lost: a restart with the broker back applies exactly what was sent.
    gate.open()
    again = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert again.returncode == 0, again.stderr
    assert _counters(json.loads(again.stdout)["tables"]) == _ops(messages)
    assert_replicas_match(target, fold(messages))


@pytest.mark.parametrize(
    ("fault", "scope"),
    [
        ("before_commit:2:oserror", "one table"),  # a storage error in one table's commit
        ("task_written:1:kill-self", "every table"),  # a Python worker dies in the merge
    ],
)
def test_storage_and_spark_failures_are_retried_exactly_once(
    broker: EmbeddedBroker, topic_prefix: str, tmp_path: Path, fault: str, scope: str
) -> None:
    _, messages, config, target = _setup(
        tmp_path, broker, broker.bootstrap_servers, topic_prefix, 33, retry_max_seconds=60
    )
    produce_messages(broker.bootstrap_servers, messages)
    once = tmp_path / "fault-happened"
    run = run_cli(
        "start",
        "--config",
        str(config),
        "--until-caught-up",
        "--json",
        env={"CDCCTL_CRASH_AT": fault, "CDCCTL_CRASH_ONCE": str(once)},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert once.exists()  # the fault did happen
    assert "Traceback" not in run.stderr
    tables = json.loads(run.stdout)["tables"]
    retried = {t["table"] for t in tables if t["retries"]}
    assert all(t["retries"] <= 1 for t in tables)
    if scope == "one table":
        assert len(retried) == 1, tables
        assert "injected I/O error at before_commit" in run.stderr
    else:
        assert retried == {t["table"] for t in tables}, tables
        assert "Spark job of batch" in run.stderr
    assert "recovered after 1 retry(s)" in run.stderr
    for t in tables:
        assert t["state"] == "STOPPED" and t["lag_messages"] == 0
    assert _counters(tables) == _ops(messages)
    assert_replicas_match(target, fold(messages))


def test_closing_a_consumer_never_waits_for_a_broker_gone_away(
    gated: tuple[EmbeddedBroker, TcpGate], topic_prefix: str, tmp_path: Path
) -> None:
    """librdkafka's close waits for group-offset commits in flight, which a broker gone
    away never answers (over two minutes, measured): a retry after an outage waited for
    it. The close is waited for at most CLOSE_WAIT_S now."""
    broker, gate = gated
    topic = f"{topic_prefix}.app.items"
    broker.create_topics([topic])
    produce_messages(gate.bootstrap_servers, [(topic, b"k", b"v")] * 10)
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": gate.bootstrap_servers, "topics": "x"},
            "target": {"path": str(tmp_path / "lake")},
        }
    )
    source = KafkaSource(cfg.source, 100)
    source.assign({(topic, 0): 0})
    read = []
    wait_until(lambda: read.extend(source.poll(100, 0.5)) or len(read) == 10, "the records", 30)
    source.commit_group_offsets({(topic, 0): 10})
    gate.close()
    started = time.monotonic()
    source.close()
    assert time.monotonic() - started < CLOSE_WAIT_S + 2
