"""Adaptive batching's poll (``KafkaSource.poll(until=...)``) against the real broker.

Without ``until`` a poll of a live topic waits ``max_seconds`` (its messages keep
coming); with it, the poll ends after the first slice at whose end ``until`` holds,
with the messages read so far, and every message is read once, in order, across polls.
"""

from __future__ import annotations

import threading
import time

from engine.config import SourceConfig
from engine.playground.broker import EmbeddedBroker, produce_messages
from engine.source.kafka import POLL_SLICE_SECONDS, KafkaSource


def _source(broker: EmbeddedBroker, topic: str) -> KafkaSource:
    source = KafkaSource(SourceConfig(bootstrap_servers=broker.bootstrap_servers, topics="."), 1000)
    source.assign({(topic, 0): None})
    return source


def test_until_ends_a_poll_early_and_nothing_is_lost(
    broker: EmbeddedBroker, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}.app.t"
    produce_messages(broker.bootstrap_servers, [(topic, b"k", b"%d" % i) for i in range(300)])
    source = _source(broker, topic)
    try:
        # Without until: as many as asked (all there).
        first = source.poll(100, 1.5)
        assert len(first) == 100
        # With until: ends after the slice in which it became true, however few were read.
        done = threading.Event()
        threading.Timer(0.2, done.set).start()
        started = time.monotonic()
        second = source.poll(10_000, 5.0, lambda read: done.is_set())
        took = time.monotonic() - started
        assert 0.2 <= took < 0.2 + 1.0, took
        # Until true once something was read: it ends with what arrived, long before
        # its max_seconds (without until it would wait all of them: nothing more comes).
        produce_messages(
            broker.bootstrap_servers,
            [(topic, b"k", b"%d" % i) for i in range(300, 310)],
            create_topics=False,
        )
        started = time.monotonic()
        third = source.poll(10_000, 10.0, lambda read: read > 0)
        assert third and time.monotonic() - started < 5.0
        rest = []
        while len(first) + len(second) + len(third) + len(rest) < 310:
            more = source.poll(10_000, 2.0, lambda read: read > 0)
            assert more, "a message was lost"
            rest += more
        values = [m.value() for m in [*first, *second, *third, *rest]]
        assert values == [b"%d" % i for i in range(310)]
        # Nothing to read and until never true: max_seconds bounds it, in slices.
        started = time.monotonic()
        assert source.poll(10, 0.3, lambda read: False) == []
        assert 0.3 <= time.monotonic() - started < 0.3 + 20 * POLL_SLICE_SECONDS + 0.5
    finally:
        source.close()
