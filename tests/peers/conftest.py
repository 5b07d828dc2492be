"""Fixtures of the ``peers`` tier: one real Apache Kafka broker per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers.kafka import KafkaBroker, start_kafka


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A single-node KRaft Apache Kafka broker (PLAINTEXT on a free loopback port) for the
    session; its log is ``server.log`` in its tmp folder. Stopped at the session's end."""
    broker = start_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker
    finally:
        broker.stop()
