"""``cdcctl resync`` on a topic whose head was deleted, against a real Apache Kafka broker.

Resync reads a table's topic again from its start. When the broker has already deleted
the head of the topic (the snapshot and early changes: retention, here also Kafka's
``DeleteRecords``, which moves a partition's log start the same way), the rebuilt table
would miss every row nothing later touched. The real CLI in a child process must then
refuse (exit 1, the reason and the way out, the replica left as it was), offline and
through the running replicator alike; ``--force`` goes on and says the table will be
partial; a trimmed topic that still holds a later complete snapshot, and a topic that
was never trimmed, resync as before; so does one whose snapshot's end mark sits in a
partition that was never trimmed. A topic deleted and recreated since the replica was
written is refused the same way until it holds a complete snapshot. A compacted topic
is not checked (the limit the README states). Replicas are read back with hudi-rs and
compared with the oracle (tests/oracle.py) folded over what the topic still holds.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import engine
from engine.config import config_from_dict
from engine.hudi.table import HudiTable
from engine.playground.broker import produce_messages
from engine.replicator.progress import TOPIC_ID_KEY
from engine.replicator.trimmed import check_topic
from tests import builders
from tests.integration.replicas import (
    assert_replicas_match,
    read_replica,
    run_cli,
    status_tables,
    write_config,
)
from tests.oracle import fold
from tests.peers.kafka import KafkaBroker
from tests.waiting import wait_until

pytestmark = [pytest.mark.peers]

COLUMNS = [("id", "int32"), ("name", "string")]
TABLE = "app_items"
Message = tuple[str, bytes, bytes | None]


def _snapshot(topic: str, keys: Sequence[int], lsn: int, names: dict[int, str]) -> list[Message]:
    """A Debezium snapshot of ``keys`` (op r): ``first`` ... ``true`` ... ``last``."""
    out = []
    for i, k in enumerate(keys):
        mark = "first" if i == 0 else "last" if i == len(keys) - 1 else "true"
        row = {"id": k, "name": names.get(k, f"s{lsn}")}
        out.append((topic, builders.key(k), builders.value("r", lsn, row, COLUMNS, snapshot=mark)))
    return out


def _changes(topic: str, op: str, keys: Sequence[int], lsn: int) -> list[Message]:
    """Streamed changes (one LSN apart) of ``keys``: ``c``/``u`` name rows ``v<lsn>``."""
    out = []
    for i, k in enumerate(keys):
        row = None if op == "d" else {"id": k, "name": f"v{lsn}"}
        out.append((topic, builders.key(k), builders.value(op, lsn + i, row, COLUMNS)))
    return out


def _trim(broker: KafkaBroker, topic: str, before: dict[int, int]) -> None:
    """Delete every record of ``topic`` before the offsets given per partition (Kafka's
    DeleteRecords: the partition's log start moves, as retention moves it)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    asked = [TopicPartition(topic, p, off) for p, off in before.items()]
    for future in admin.delete_records(asked, operation_timeout=30).values():
        future.result(60)


def _remaining(broker: KafkaBroker, topic: str) -> list[Message]:
    """What the topic still holds, read back in partition order."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "test-remaining",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        parts = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, -2) for p in parts])  # OFFSET_BEGINNING
        out, ended = [], set()

        def at_the_end() -> bool:
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    out.append((m.partition(), m.offset(), (topic, m.key(), m.value())))
                else:
                    ended.add(m.partition())
            return len(ended) == len(parts)

        wait_until(at_the_end, f"the end of every partition of {topic}", 60, interval=0)
        return [msg for _, _, msg in sorted(out, key=lambda x: (x[0], x[1]))]
    finally:
        consumer.close()


def _config(
    broker: KafkaBroker, prefix: str, tmp_path: Path, source: dict | None = None, **replicator
) -> tuple[Path, Path]:
    lake = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(prefix)}\\.",
        lake,
        source=source,
        max_batch_seconds=0.3,
        **replicator,
    )
    return config, lake


def _caught_up(config: Path) -> None:
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr


def _snapshot_of_folder(folder: Path) -> dict[str, int]:
    """Every file under a table's folder with its size (the replica left as it was)."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _assert_refused(run: subprocess.CompletedProcess, output: str, topic: str, at: int) -> None:
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr, run.stderr
    assert f"resync of {TABLE} refused, it would rebuild a partial table" in output, output
    assert f"{topic}[0] starts at offset {at}" in output, output
    assert "holds no complete snapshot" in output and "nothing was removed" in output, output
    assert "blocking" in output and f"cdcctl resync {TABLE} --force" in output, output


def _checkpoint(lake: Path) -> str | None:
    """The replica's committed Kafka checkpoint, None before its first commit."""
    path = lake / TABLE
    return HudiTable.open(path).checkpoint() if HudiTable.exists(path) else None


def _state(work: Path) -> str | None:
    """The table's state as the running replicator recorded it."""
    found = engine.read_status(work)
    row = found.table(TABLE) if found is not None else None
    return row.state if row is not None else None


def test_resync_of_a_topic_trimmed_into_its_snapshot_is_refused_unless_forced(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """Offline: the snapshot's head is gone; resync refuses and removes nothing;
    ``--force`` rebuilds the partial table the topic still describes."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic)
    messages = (
        _snapshot(topic, range(1, 41), 100, {})  # offsets 0..39
        + _changes(topic, "u", range(1, 11), 1000)  # 40..49
        + _changes(topic, "c", range(41, 51), 2000)  # 50..59
    )
    produce_messages(kafka_broker.bootstrap_servers, messages)
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)
    _caught_up(config)
    assert_replicas_match(lake, fold(messages))
    folder, before = lake / TABLE, _snapshot_of_folder(lake / TABLE)
    counted = status_tables(config)[TABLE]

    _trim(kafka_broker, topic, {0: 20})  # rows 1..20 of the snapshot are gone
    refused = run_cli("resync", "--config", str(config), TABLE)
    _assert_refused(refused, refused.stderr, topic, 20)
    assert refused.stderr.startswith("error: "), refused.stderr
    assert _snapshot_of_folder(folder) == before  # nothing removed
    assert_replicas_match(lake, fold(messages))
    after = status_tables(config)[TABLE]
    assert (after["rows"], after["commits"]) == (counted["rows"], counted["commits"]), after

    forced = run_cli("resync", "--config", str(config), TABLE, "--force")
    assert forced.returncode == 0, forced.stderr
    assert f"forced: {TABLE} will be partial: {topic}[0] starts at offset 20" in forced.stderr
    assert not folder.exists() or not HudiTable.exists(folder)
    _caught_up(config)
    remaining = _remaining(kafka_broker, topic)
    assert len(remaining) == 40
    rows = assert_replicas_match(lake, fold(remaining))
    # Partial, as said: rows 11..20 were only in the deleted part of the snapshot.
    assert rows[topic] == 40 and not {str(k) for k in range(11, 21)} & set(read_replica(folder))


def test_a_running_replicator_refuses_the_same_resync_and_goes_on(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """Live: the request to the running replicator is refused with the same words, the
    table goes on replicating; ``--force`` resyncs it partially."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic)
    messages = _snapshot(topic, range(1, 31), 100, {}) + _changes(topic, "u", range(1, 6), 1000)
    produce_messages(kafka_broker.bootstrap_servers, messages)  # offsets 0..34
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)

    proc = replicator(config)
    wait_until(lambda: _checkpoint(lake) == f"{topic},0:35", "the first rows", child=proc)
    before = read_replica(lake / TABLE)
    _trim(kafka_broker, topic, {0: 10})

    refused = run_cli("resync", "--config", str(config), TABLE)
    _assert_refused(refused, refused.stdout, topic, 10)
    assert refused.stdout.startswith(f"resync {TABLE}: error: resync of {TABLE} refused")
    assert read_replica(lake / TABLE) == before
    assert _state(tmp_path / "work") == "REPLICATING"

    # It goes on replicating the table it kept.
    more = _changes(topic, "c", range(31, 36), 3000)  # offsets 35..39
    produce_messages(kafka_broker.bootstrap_servers, more)
    wait_until(lambda: _checkpoint(lake) == f"{topic},0:40", "the next rows", child=proc)
    assert_replicas_match(lake, fold(messages + more))

    forced = run_cli("resync", "--config", str(config), TABLE, "--force")
    assert forced.returncode == 0, (forced.stdout, forced.stderr)
    assert f"resync {TABLE}: resyncing {TABLE}: replica dropped" in forced.stdout
    assert f"forced: {TABLE} will be partial: {topic}[0] starts at offset 10" in forced.stdout
    wait_until(lambda: _checkpoint(lake) == f"{topic},0:40", "the partial rebuild", child=proc)
    remaining = _remaining(kafka_broker, topic)
    assert len(remaining) == 30
    assert_replicas_match(lake, fold(remaining))
    assert not {str(k) for k in range(6, 11)} & set(read_replica(lake / TABLE))
    assert not proc.exited(), proc.describe()
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    proc.wait(120)
    err = proc.stderr
    assert "Traceback" not in err, err


def test_a_trimmed_topic_holding_a_later_complete_snapshot_resyncs(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """Two partitions: untrimmed, resync goes on as ever; trimmed into the first snapshot
    but holding a second, complete one (a blocking snapshot of the same table), resync
    goes on too and the rebuilt table is the whole table."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic, partitions=2)
    first = _snapshot(topic, range(1, 41), 100, {})
    streamed = (
        _changes(topic, "u", range(1, 11), 1000)
        + _changes(topic, "d", range(11, 15), 2000)
        + _changes(topic, "c", range(41, 51), 3000)
    )
    state = fold(first + streamed)[topic]
    names = {int(k): row["name"] for k, row in state.items()}
    second = _snapshot(topic, sorted(names), 4000, names)  # the table as it is now
    later = _changes(topic, "u", range(41, 46), 5000)
    messages = first + streamed + second + later
    produce_messages(kafka_broker.bootstrap_servers, messages, create_topics=False)
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)
    _caught_up(config)
    assert_replicas_match(lake, fold(messages))

    untrimmed = run_cli("resync", "--config", str(config), TABLE)
    assert untrimmed.returncode == 0, untrimmed.stderr
    assert "warning" not in untrimmed.stderr, untrimmed.stderr
    _caught_up(config)
    assert_replicas_match(lake, fold(messages))

    _trim(kafka_broker, topic, {0: 5, 1: 5})  # both partitions lose snapshot rows
    resync = run_cli("resync", "--config", str(config), TABLE)
    assert resync.returncode == 0, resync.stderr
    assert "refused" not in resync.stderr and "partial" not in resync.stderr, resync.stderr
    assert f"{topic} was trimmed, but holds a complete snapshot ([0] from offset " in (
        resync.stderr
    ), resync.stderr
    _caught_up(config)
    remaining = _remaining(kafka_broker, topic)
    assert len(remaining) == len(messages) - 10
    assert fold(remaining) == fold(messages)  # the second snapshot restores the rest
    assert_replicas_match(lake, fold(messages))


def test_a_trimmed_cdc_json_topic_is_refused(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """Generic CDC JSON carries no snapshot: a trimmed topic alone refuses a resync."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic)
    rows = [
        (
            topic,
            json.dumps({"id": k}).encode(),
            json.dumps({"id": k, "v": k, "_action": "_insert", "_timestamp": k}).encode(),
        )
        for k in range(1, 11)
    ]
    produce_messages(kafka_broker.bootstrap_servers, rows)
    config, lake = _config(kafka_broker, topic_prefix, tmp_path, {"format": "cdc-json"})
    _caught_up(config)
    before = _snapshot_of_folder(lake / TABLE)
    _trim(kafka_broker, topic, {0: 3})
    refused = run_cli("resync", "--config", str(config), TABLE)
    assert refused.returncode == 1, refused.stderr
    assert f"{topic}[0] starts at offset 3" in refused.stderr, refused.stderr
    assert "this format carries no snapshot" in refused.stderr, refused.stderr
    assert _snapshot_of_folder(lake / TABLE) == before


def test_a_deleted_topic_is_refused(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """A topic the broker no longer has would rebuild an empty table: refused too."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic)
    produce_messages(kafka_broker.bootstrap_servers, _snapshot(topic, range(1, 6), 100, {}))
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)
    _caught_up(config)
    before = _snapshot_of_folder(lake / TABLE)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(60)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, "the deletion")
    refused = run_cli("resync", "--config", str(config), TABLE)
    assert refused.returncode == 1, refused.stderr
    assert f"topic {topic} does not exist any more: the table would be empty" in refused.stderr
    assert _snapshot_of_folder(lake / TABLE) == before


def test_an_end_mark_in_an_untrimmed_partition_ends_a_trimmed_partitions_snapshot(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """Two partitions; only the first was trimmed (a quiet partition never rolls a
    segment, so retention never moves its start). The first holds, after a streamed
    change, its share of a blocking snapshot without an end mark; the end mark is in the
    second, untrimmed partition: the topic holds a complete snapshot, resync goes on
    and rebuilds the whole table."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sent: list[tuple[int, Message]] = []

    def send(part: int, op: str, k: int, lsn: int, snapshot: str | None = None) -> None:
        row = {"id": k, "name": f"v{lsn}"}
        extra = {"snapshot": snapshot} if snapshot else {}
        value = builders.value(op, lsn, row, COLUMNS, **extra)
        producer.produce(topic, value, builders.key(k), partition=part)
        producer.flush(30)  # one at a time: the Kafka timestamps follow this order
        sent.append((part, (topic, builders.key(k), value)))

    send(0, "c", 2, 5)  # deleted below
    send(0, "c", 4, 6)
    send(0, "r", 2, 100, "first")
    send(0, "r", 4, 100, "true")
    send(1, "r", 1, 100, "true")  # partition 1 is never trimmed: it holds the end mark
    send(1, "r", 3, 100, "last")
    messages = [m for _, m in sorted(sent, key=lambda x: x[0])]  # partition order
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)
    _caught_up(config)
    assert_replicas_match(lake, fold(messages))

    _trim(kafka_broker, topic, {0: 1})
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": kafka_broker.bootstrap_servers,
                "topics": f"^{re.escape(topic)}$",
            },
            "target": {"path": str(tmp_path / "other")},
        }
    )
    found = check_topic(cfg, topic)
    assert found.trimmed == {0: 1} and found.whole, found.problem()
    assert found.snapshots == {0: 2}

    resync = run_cli("resync", "--config", str(config), TABLE)
    assert resync.returncode == 0, resync.stderr
    assert "refused" not in resync.stderr and "partial" not in resync.stderr, resync.stderr
    assert f"{topic} was trimmed, but holds a complete snapshot ([0] from offset 2)" in (
        resync.stderr
    ), resync.stderr
    _caught_up(config)
    remaining = _remaining(kafka_broker, topic)
    assert len(remaining) == 5
    assert_replicas_match(lake, fold(remaining))
    assert sorted(read_replica(lake / TABLE)) == ["1", "2", "3", "4"]


def test_a_recreated_topic_is_refused_until_it_holds_a_complete_snapshot(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """Deleted and recreated: its offsets start at 0 again, yet the old topic's history
    is gone. Empty, or holding only streamed changes, resync refuses (the replica left
    as it was); once a complete snapshot is there, resync goes on and rebuilds the table
    from the new topic."""
    topic = f"{topic_prefix}.app.items"
    kafka_broker.create_topic(topic)
    old = _snapshot(topic, range(1, 21), 100, {}) + _changes(topic, "u", range(1, 6), 1000)
    produce_messages(kafka_broker.bootstrap_servers, old)
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)
    _caught_up(config)
    assert_replicas_match(lake, fold(old))
    folder, before = lake / TABLE, _snapshot_of_folder(lake / TABLE)
    recorded = HudiTable.open(folder).latest_extra_metadata().get(TOPIC_ID_KEY)
    assert recorded, "the replica records no topic id"

    kafka_broker.recreate_topic(topic)
    empty = run_cli("resync", "--config", str(config), TABLE)
    assert empty.returncode == 1, (empty.stdout, empty.stderr)
    assert "Traceback" not in empty.stderr, empty.stderr
    assert f"topic {topic} was deleted and recreated since the replica was written" in (
        empty.stderr
    ), empty.stderr
    assert f"the replica was read from {recorded}" in empty.stderr, empty.stderr
    assert "holds no records yet" in empty.stderr and "nothing was removed" in empty.stderr

    streamed = _changes(topic, "u", range(1, 4), 2000)  # offsets 0..2: no snapshot
    produce_messages(kafka_broker.bootstrap_servers, streamed, create_topics=False)
    refused = run_cli("resync", "--config", str(config), TABLE)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert f"topic {topic} was deleted and recreated since the replica was written" in (
        refused.stderr
    ), refused.stderr
    assert "holds no complete snapshot" in refused.stderr, refused.stderr
    assert f"cdcctl resync {TABLE} --force" in refused.stderr, refused.stderr
    assert _snapshot_of_folder(folder) == before  # nothing removed
    assert_replicas_match(lake, fold(old))

    names = {k: f"n{k}" for k in range(1, 16)}  # the table now: 15 rows
    fresh = _snapshot(topic, sorted(names), 3000, names)  # offsets 3..17
    produce_messages(kafka_broker.bootstrap_servers, fresh, create_topics=False)
    resync = run_cli("resync", "--config", str(config), TABLE)
    assert resync.returncode == 0, resync.stderr
    assert f"resync of {TABLE} refused" not in resync.stderr, resync.stderr
    assert "partial" not in resync.stderr, resync.stderr
    assert f"{topic} was deleted and recreated, but holds a complete snapshot ([0] from " in (
        resync.stderr
    ), resync.stderr
    _caught_up(config)
    remaining = _remaining(kafka_broker, topic)
    assert len(remaining) == 18
    rows = assert_replicas_match(lake, fold(remaining))
    assert rows[topic] == 15


def test_a_compacted_topic_resyncs_from_each_keys_newest_event_even_when_it_is_not_whole(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """The limit the README states: a compacted topic is not checked. Once the log
    cleaner dropped a row's snapshot read, its newest event (an update carrying the TOAST
    placeholder for an unchanged column) is all resync has: the column comes back null,
    without a refusal."""
    topic = f"{topic_prefix}.app.items"
    compacted = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    kafka_broker.create_topic(topic, config=compacted)
    toast = "__debezium_unavailable_value"
    first = [
        (topic, builders.key(1), builders.value("r", 100, {"id": 1, "name": "big"}, COLUMNS)),
        (topic, builders.key(1), builders.value("u", 200, {"id": 1, "name": toast}, COLUMNS)),
    ]
    produce_messages(kafka_broker.bootstrap_servers, first, create_topics=False)
    config, lake = _config(kafka_broker, topic_prefix, tmp_path)
    _caught_up(config)
    assert read_replica(lake / TABLE)["1"]["name"] == "big"  # filled from the stored row

    def cleaned() -> bool:  # a later record rolls the segment; the cleaner then runs
        row = {"id": 2, "name": f"v{time.monotonic_ns()}"}
        later = [(topic, builders.key(2), builders.value("c", 300, row, COLUMNS))]
        produce_messages(kafka_broker.bootstrap_servers, later, create_topics=False)
        ops = [
            json.loads(v)["payload"]["op"]
            for _, k, v in _remaining(kafka_broker, topic)
            if k == builders.key(1) and v is not None
        ]
        return ops == ["u"]

    wait_until(cleaned, "the log cleaner", 120, interval=1.0)
    resync = run_cli("resync", "--config", str(config), TABLE)
    assert resync.returncode == 0, resync.stderr
    assert "warning" not in resync.stderr, resync.stderr
    _caught_up(config)
    assert read_replica(lake / TABLE)["1"]["name"] is None
    assert status_tables(config)[TABLE]["toast_unresolved"] == 1


def test_a_running_replicator_refuses_to_resync_a_recreated_topic_without_a_snapshot(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """Live: the table stopped at the recreated topic (its own advice: resync once the
    topic holds a fresh snapshot); the request is refused while the new topic holds only
    streamed changes, and goes on once it holds a complete snapshot. A second table keeps
    replicating meanwhile (with every table FAILED the replicator would end, exit 3)."""
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    kafka_broker.create_topic(topic)
    kafka_broker.create_topic(other)
    old = _snapshot(topic, range(1, 11), 100, {})  # offsets 0..9
    produce_messages(
        kafka_broker.bootstrap_servers,
        old + _snapshot(other, range(1, 4), 100, {}),
        create_topics=False,
    )
    config, lake = _config(kafka_broker, topic_prefix, tmp_path, topic_refresh_seconds=1.0)

    proc = replicator(config)
    wait_until(lambda: _checkpoint(lake) == f"{topic},0:10", "the first rows", child=proc)
    kafka_broker.recreate_topic(topic)
    wait_until(lambda: _state(tmp_path / "work") == "FAILED", "the table to stop", child=proc)
    streamed = _changes(topic, "u", range(1, 4), 2000)  # offsets 0..2
    produce_messages(kafka_broker.bootstrap_servers, streamed, create_topics=False)

    refused = run_cli("resync", "--config", str(config), TABLE)
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert refused.stdout.startswith(f"resync {TABLE}: error: resync of {TABLE} refused")
    assert f"topic {topic} was deleted and recreated since the replica was written" in (
        refused.stdout
    ), refused.stdout
    assert "holds no complete snapshot" in refused.stdout, refused.stdout
    assert_replicas_match(lake, fold(old))
    assert _state(tmp_path / "work") == "FAILED"

    names = {k: f"n{k}" for k in range(1, 9)}
    fresh = _snapshot(topic, sorted(names), 3000, names)  # offsets 3..10
    produce_messages(kafka_broker.bootstrap_servers, fresh, create_topics=False)
    resync = run_cli("resync", "--config", str(config), TABLE)
    assert resync.returncode == 0, (resync.stdout, resync.stderr)
    assert f"{topic} was deleted and recreated, but holds a complete snapshot" in (resync.stdout), (
        resync.stdout
    )
    wait_until(lambda: _checkpoint(lake) == f"{topic},0:11", "the rebuild", child=proc)
    rows = assert_replicas_match(lake, fold(streamed + fresh))
    assert rows[topic] == 8
    assert not proc.exited(), proc.describe()
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    proc.wait(120)
    err = proc.stderr
    assert "Traceback" not in err, err
