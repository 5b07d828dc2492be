"""The detail reader (``engine.detail``) against replicas and stores the real engine wrote."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from engine import TableDetailReader
from engine.detail import Column, PartitionOffsets
from engine.hudi import HudiView
from engine.playground.broker import produce_messages
from engine.replicator import Replicator
from engine.state import StateRecorder
from tests import builders
from tests.detail_replica import COLS_V1, SENT, build_detail_replica, detail_config
from tests.waiting import wait_until

TABLE = "app_items"


@pytest.fixture(scope="module")
def replica(broker, spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("detail")
    cfg, topic = build_detail_replica(broker, spark, root, f"d_{uuid.uuid4().hex[:8]}")
    return cfg, topic


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.kafka
@pytest.mark.spark
def test_detail_of_a_replica_the_engine_wrote(replica) -> None:
    cfg, topic = replica
    detail = TableDetailReader(cfg.work_path(), cfg, TABLE).read()
    assert detail.topic == topic
    assert detail.replicator is not None and detail.replicator.alive is False
    status = detail.status
    assert status is not None and status.state == "FAILED"
    assert status.last_error is not None
    assert "qty" in status.last_error and "string" in status.last_error
    counts = status.counters
    assert (counts.inserts, counts.deletes) == (160, 10)
    # Updates of the last run went in, up to the batch holding the incompatible change.
    assert 69 <= counts.updates <= 69 + 80
    applied = counts.inserts + counts.updates + counts.deletes
    assert status.latency_p50_s is not None
    assert status.latency_p95_s is not None and status.latency_p99_s is not None
    assert 0 < status.latency_p50_s <= status.latency_p95_s <= status.latency_p99_s

    path = cfg.target_path() / TABLE
    hudi = HudiView.open(path)
    completed = hudi.completed_instants()
    groups = hudi.file_groups()
    r = detail.replica
    assert r is not None and r.merge_on_read and r.path == str(path)
    assert r.completed == len(completed) == counts.commits
    assert r.last_commit == completed[-1]
    assert r.instants[0].instant >= completed[-1]
    assert [i.instant for i in r.instants] == sorted((i.instant for i in r.instants), reverse=True)
    assert {i.instant for i in r.instants if i.action == "deltacommit"} <= set(completed)
    assert r.file_groups == len(groups) == 2
    assert r.log_files == sum(len(g.log_files) for g in groups.values())
    assert r.last_compaction is not None and r.last_compaction.instant in completed
    assert 1 <= r.last_compaction.file_groups <= 2
    assert r.topic == topic and r.checkpoint == {0: applied}
    assert [c.name for c in r.schema if not c.name.startswith("_")][-1] == "color"
    assert Column("id", "int32", True, True) in r.schema

    # The schema change: the column added, at the commit the event log names.
    change = r.schema_change
    assert change is not None and change.before_known
    assert change.added == (Column("color", "string", True, False),)
    assert change.removed == () and change.changed == ()
    messages = [e["message"] for e in detail.events]
    assert f"schema changed at {change.instant}" in messages
    assert all(e["tbl"] == TABLE for e in detail.events)
    assert any(e["kind"] == "error" and "qty" in e["message"] for e in detail.events)
    assert [e["at"] for e in detail.events] == sorted(e["at"] for e in detail.events)

    offsets = TableDetailReader(cfg.work_path(), cfg, TABLE).offsets(detail)
    assert offsets.reachable and offsets.error is None and offsets.topic == topic
    # The messages from the batch of the incompatible change on wait.
    assert offsets.partitions == (PartitionOffsets(0, applied, SENT),)
    assert offsets.partitions[0].lag == SENT - applied >= 5
    # A broker that answers without the topic (deleted): said, what was applied kept.
    gone = dataclasses.replace(detail, topic=f"{topic}_gone")
    missing = TableDetailReader(cfg.work_path(), cfg, TABLE).offsets(gone)
    assert missing.reachable and missing.error == f"topic {topic}_gone is not on the broker"
    assert missing.partitions == (PartitionOffsets(0, applied, None),)


@pytest.mark.kafka
@pytest.mark.spark
def test_an_unreachable_broker_is_an_answer_within_the_timeout(replica) -> None:
    cfg, topic = replica
    prefix = topic.split(".")[0]
    down = detail_config(cfg.target_path().parent, f"127.0.0.1:{_closed_port()}", prefix)
    reader = TableDetailReader(down.work_path(), down, TABLE)
    detail = reader.read()
    started = time.monotonic()
    offsets = reader.offsets(detail, timeout=1.0)
    assert time.monotonic() - started < 4.0
    assert not offsets.reachable and offsets.error is not None
    assert "did not answer" in offsets.error
    # What was applied is still known; the end is not.
    assert offsets.partitions == (PartitionOffsets(0, detail.replica.checkpoint[0], None),)
    assert offsets.partitions[0].lag is None


def test_a_work_folder_without_store_or_replica(tmp_path: Path) -> None:
    cfg = detail_config(tmp_path, "127.0.0.1:1", "x")
    detail = TableDetailReader(cfg.work_path(), cfg, TABLE).read()
    assert detail.replicator is None and detail.status is None and detail.events == ()
    assert detail.replica is None and "no replica yet" in (detail.replica_error or "")
    # A store with no row for the table (a replicator that saw no topic yet).
    StateRecorder(cfg.work_path()).started()
    detail = TableDetailReader(cfg.work_path(), None, TABLE).read()
    assert detail.replicator is not None and detail.status is None
    assert detail.replica_error == "no config given: the replica's folder is unknown"
    offsets = TableDetailReader(cfg.work_path(), None, TABLE).offsets(detail)
    assert offsets.error is not None and offsets.partitions == ()


@pytest.mark.kafka
@pytest.mark.spark
def test_reads_while_a_replicator_runs(broker, spark, tmp_path: Path) -> None:
    """No lock is taken: every read succeeds while batches commit, and sees them."""
    prefix = f"live_{uuid.uuid4().hex[:8]}"
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
            row = {"id": i % 300, "name": f"n{i}", "qty": i}
            msgs.append((topic, builders.key(i % 300), builders.value("c", lsn, row, COLS_V1)))
        produce_messages(broker.bootstrap_servers, msgs)
        sent += n

    produce(100)
    replicator = Replicator(cfg, spark=spark)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            replicator.run()
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    reader = TableDetailReader(cfg.work_path(), cfg, TABLE)
    seen: list[int] = []
    running = False

    def read_on() -> bool:  # one reading; more changes each time the replica has them all
        nonlocal running
        if failure:
            return True
        detail = reader.read()
        assert detail.replica_error is None or "no replica yet" in detail.replica_error
        if detail.replica is not None:
            seen.append(detail.replica.checkpoint.get(0, 0))
        rep = detail.replicator
        running = running or bool(rep and rep.alive and rep.state == "running")
        if seen and seen[-1] == sent:
            if sent >= 500:
                return True
            produce(100)
        return False

    try:
        wait_until(read_on, "the replica to take all 500 changes", 120, interval=0.05)
    finally:
        replicator.request_stop()
        thread.join(60)
    assert not failure, failure
    assert running and seen[-1] == sent == 500
    assert seen == sorted(seen) and len(set(seen)) > 3
    final = reader.read()
    assert final.status is not None and final.status.counters.inserts == 500
