"""Fixtures of the ``peers`` tier: one real Apache Kafka broker and one Spark session of
each Apache Hudi version per test session (per xdist worker; the tests using them share
one worker through ``xdist_group("hudi_readers")``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers.hudi_reader import VERSIONS, HudiReader
from tests.peers.jars import PeerMissing
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


@pytest.fixture(scope="session")
def hudi_readers() -> Iterator[dict[str, HudiReader]]:
    """One Spark 3.5 session per Hudi version, for the whole test session."""
    readers: dict[str, HudiReader] = {}
    try:
        for version in VERSIONS:
            readers[version] = HudiReader(version)
    except PeerMissing as exc:
        for reader in readers.values():
            reader.close()
        pytest.fail(str(exc))
    for version, reader in readers.items():
        assert (reader.hudi_version, reader.spark_version) == (version, "3.5.1")
    yield readers
    for reader in readers.values():
        reader.close()
