"""One-off bounded reads of a topic, beside the replicator's own consumer: resync's check
of what a trimmed topic still holds (:mod:`engine.replicator.trimmed`) and ``cdcctl
explain``'s read of a key's events (:mod:`engine.explain.topic`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, KafkaException

from engine.config import SourceConfig
from engine.source.kafka import close_quietly, consumer_settings, creation_error


@contextmanager
def scan_consumer(cfg: SourceConfig, purpose: str, chunk: int) -> Iterator[Consumer]:
    """A consumer of its own for one bounded read of a topic (its group
    ``<group_id>-<purpose>`` never commits; each partition's end is reported as
    ``_PARTITION_EOF``: an end may be a transaction marker no record sits at), closed
    after.

    Raises:
        ConfigError: librdkafka refuses the settings.
    """
    settings = {
        **consumer_settings(cfg, chunk),
        "group.id": f"{cfg.kafka.group_id}-{purpose}",
        "enable.partition.eof": True,
    }
    try:
        consumer = Consumer(settings)
    except KafkaException as exc:
        raise creation_error(exc) from None
    try:
        yield consumer
    finally:
        close_quietly(consumer)
