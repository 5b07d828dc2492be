"""Debezium's heartbeats: the newest record of each ``<heartbeat prefix>.<topic.prefix>``
topic says when that connector was last alive, whether or not its tables change.

The record's Kafka timestamp is used, not its payload: it is there whatever the
converter (JSON with or without schemas, Avro), and Kafka Connect stamps it when the
connector hands the heartbeat over.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

#: Seconds a round of metadata, watermarks and reads may take.
TIMEOUT_S = 3.0


class HeartbeatReader:
    """Reads the newest heartbeat of every connector (one consumer, no group: it only
    assigns partitions and never commits)."""

    def __init__(self, settings: dict[str, Any], topic_prefix: str) -> None:
        self._settings = {
            **settings,
            "client.id": "cdcctl-source-watch",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
        self.topic_prefix = topic_prefix
        self._consumer: Consumer | None = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._settings)
        return self._consumer

    def read(self, timeout: float = TIMEOUT_S) -> dict[str, float]:
        """``topic.prefix`` -> when its newest heartbeat was written (epoch seconds), for
        every heartbeat topic holding one.

        Raises:
            KafkaException: the broker could not be asked.
        """
        consumer = self._client()
        deadline = time.monotonic() + timeout
        start = self.topic_prefix + "."
        metadata = consumer.list_topics(timeout=timeout)
        newest: list[TopicPartition] = []
        for topic, meta in metadata.topics.items():
            if not topic.startswith(start) or meta.error is not None:
                continue
            for partition in meta.partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=max(deadline - time.monotonic(), 0.1)
                )
                if high > low:
                    newest.append(TopicPartition(topic, partition, high - 1))
        found: dict[str, float] = {}
        if not newest:
            return found
        consumer.assign(newest)
        try:
            waiting = {(tp.topic, tp.partition) for tp in newest}
            while waiting and time.monotonic() < deadline:
                msg = consumer.poll(0.1)
                if msg is None or msg.error() is not None:
                    continue
                waiting.discard((msg.topic(), msg.partition()))
                kind, ms = msg.timestamp()
                if ms is None or ms <= 0:
                    continue
                prefix = str(msg.topic())[len(start) :]
                found[prefix] = max(found.get(prefix, 0.0), ms / 1000.0)
        finally:
            consumer.unassign()
        return found

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError):
                pass
            self._consumer = None
