"""No silent gaps: a checkpoint outside its partition's log stops the table, or is accepted.

A topic deleted and recreated with fewer records leaves every checkpoint past the new
log's end. Found at start-up and under a running replicator, the table goes FAILED
naming the partition, the offsets and the two fixes; with the table in
``replicator.accept_offset_gaps`` it goes on from the new log's start and its next
commit records the gap.

Two cases cannot run against the embedded broker (Tansu), and what stands in:

- A checkpoint before the log's start (retention or ``DeleteRecords`` removed records):
  Tansu implements neither, so no such log can be made. The same function decides both
  ends (the start is the partition's low watermark); this test covers the end, and
  tests/peers/test_real_kafka.py the start, with segments Apache Kafka's retention
  deleted.
- A topic recreated under a *running* replicator: librdkafka 2.16.0 crashes (SIGSEGV)
  inside ``consume`` once it fetches from a partition Tansu deleted (a Fetch response
  for an unknown topic), with or without cdcctl. The replicator's periodic check (every
  ``replicator.topic_refresh_seconds``) and its handling of out-of-range consumer errors
  run the same gap check; here the restart after the recreation exercises it, and
  tests/peers/test_real_kafka.py recreates a topic under a running replicator on Apache
  Kafka.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

import engine
from engine.errors import SourceError
from engine.hudi.table import HudiTable
from engine.playground.broker import produce_messages
from tests import builders
from tests.integration.replicas import read_replica, run_cli, write_config
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.crash]

COLUMNS = [("id", "int32"), ("name", "string")]


def _rows(topic: str, keys: range, lsn: int) -> list[tuple[str, bytes, bytes]]:
    return [
        (
            topic,
            builders.key(k),
            builders.value("c", lsn + k, {"id": k, "name": f"v{lsn}"}, COLUMNS),
        )
        for k in keys
    ]


def _recreate(broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)
    # The deletion takes effect asynchronously: "already exists" until it is done.
    wait_until(
        lambda: broker.create_topics([topic]) or True,
        f"topic {topic} to be created again",
        30,
        interval=0.5,
        retry_on=(SourceError,),
    )


def test_recreated_topic_stops_the_table_unless_its_gap_is_accepted(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    produce_messages(broker.bootstrap_servers, _rows(topic, range(1, 201), 1000))
    produce_messages(broker.bootstrap_servers, _rows(other, range(1, 11), 1000))
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_seconds=0.3,
        topic_refresh_seconds=1.0,
    )
    first = run_cli("start", "--config", str(config), "--until-caught-up")
    assert first.returncode == 0, first.stderr

    _recreate(broker, topic)
    produce_messages(broker.bootstrap_servers, _rows(topic, range(1, 51), 5000))
    stopped = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert stopped.returncode == 3, stopped.stderr
    status = {s["table"]: s for s in json.loads(stopped.stdout)["tables"]}
    assert status["app_items"]["state"] == "FAILED"
    assert status["app_other"]["state"] == "STOPPED"
    error = status["app_items"]["last_error"]
    assert f"{topic}[0]: the partition now ends at offset 50, before the checkpoint 200" in error
    assert "replicator.accept_offset_gaps" in error and "Rebuild the table" in error
    assert len(read_replica(target / "app_items")) == 200  # nothing applied past the gap

    accepting = tmp_path / "accepting.toml"
    accepting.write_text(config.read_text() + "accept_offset_gaps = ['app_items']\n")
    resumed = run_cli("start", "--config", str(accepting), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr
    assert "accepting a gap" in resumed.stderr
    rows = read_replica(target / "app_items")
    assert {rows[str(k)]["name"] for k in range(1, 51)} == {"v5000"}  # the new topic's rows
    assert {rows[str(k)]["name"] for k in range(51, 201)} == {"v1000"}
    table = HudiTable.open(target / "app_items")
    extra = table.commit_metadata(table.completed_instants()[-1])["extraMetadata"]
    assert json.loads(extra["cdcctl.accepted_gaps"]) == [f"{topic}[0] 200->0"]
    # Not only a log line: an event of the event log (status, the dashboard).
    found = engine.read_status(tmp_path / "work")
    assert found is not None
    gaps = [e.message for e in found.events if e.kind == "gap" and e.table == "app_items"]
    assert len(gaps) == 1 and gaps[0].startswith("accepted: ") and "cdcctl repair" in gaps[0]


def test_a_recreated_topic_longer_than_the_checkpoint_is_a_gap_too(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    """Recreated with more records than the checkpoint, the topic's offsets alone look
    fine: its id (Kafka's topic UUID, recorded in every commit) tells it is another
    topic. Before the fix the new topic's offsets 0..199 were skipped without a word."""
    topic = f"{topic_prefix}.app.items"
    produce_messages(broker.bootstrap_servers, _rows(topic, range(1, 201), 1000))
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_seconds=0.3,
    )
    first = run_cli("start", "--config", str(config), "--until-caught-up")
    assert first.returncode == 0, first.stderr
    table = HudiTable.open(target / "app_items")
    old_id = table.commit_metadata(table.completed_instants()[-1])["extraMetadata"][
        "cdcctl.source.topic_id"
    ]

    _recreate(broker, topic)
    produce_messages(broker.bootstrap_servers, _rows(topic, range(1, 301), 5000))
    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    assert check.returncode == 1, check.stdout
    found = {c["name"]: c for c in json.loads(check.stdout)["checks"]}[f"kafka.topic {topic}"]
    assert found["status"] == "fail", found
    assert "the topic was deleted and recreated" in found["detail"], found
    assert "offsets 0..199 of the new topic would never be read" in found["detail"], found
    stopped = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert stopped.returncode == 3, stopped.stderr
    error = {s["table"]: s for s in json.loads(stopped.stdout)["tables"]}["app_items"]["last_error"]
    assert f"{topic}[0]: the topic was deleted and recreated (its id is " in error, error
    assert f"the checkpoint 200 was read from {old_id}): offsets 0..199 of the new topic" in error
    assert "replicator.accept_offset_gaps" in error
    assert {r["name"] for r in read_replica(target / "app_items").values()} == {"v1000"}

    accepting = tmp_path / "accepting.toml"
    accepting.write_text(config.read_text() + "accept_offset_gaps = ['app_items']\n")
    resumed = run_cli("start", "--config", str(accepting), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr
    rows = read_replica(target / "app_items")
    assert {rows[str(k)]["name"] for k in range(1, 301)} == {"v5000"}
    table = HudiTable.open(target / "app_items")
    extra = table.commit_metadata(table.completed_instants()[-1])["extraMetadata"]
    assert json.loads(extra["cdcctl.accepted_gaps"]) == [f"{topic}[0] 200->0"]
    assert extra["cdcctl.source.topic_id"] not in ("", old_id)
    # The new id is the table's from now on: a later start goes on without a gap.
    again = run_cli("start", "--config", str(config), "--until-caught-up")
    assert again.returncode == 0, again.stderr
