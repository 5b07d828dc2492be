"""The broker a benchmark runs against: the embedded one (Tansu) or Apache Kafka.

``--broker tansu`` (the default) is the demo's embedded broker. ``--broker kafka`` is a
real single-node Apache Kafka (KRaft) from the pinned jars of ``interop/kafka``, the one
the ``peers`` tests run (resolve it first with ``./bootstrap.sh peers``). On a 2-core
machine the choice matters: at 5,000 events/s with a producer and two consumers Tansu
uses ~0.8 of a core, which the replicator's merges then lack; Kafka serves the same in a
few percent of one (docs/performance.md).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from engine.playground.broker import EmbeddedBroker, ensure_topics

CHOICES = ("tansu", "kafka")


def add_argument(ap: argparse.ArgumentParser) -> None:
    """The ``--broker`` option of the benchmarks that take it."""
    ap.add_argument(
        "--broker",
        choices=CHOICES,
        default="tansu",
        help="tansu: the embedded broker; kafka: Apache Kafka (./bootstrap.sh peers)",
    )


@dataclass
class Kafka:
    """A running Apache Kafka broker, as much of :class:`EmbeddedBroker` as benchmarks use."""

    bootstrap_servers: str

    def create_topics(self, names: Iterable[str], partitions: int = 1) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        ensure_topics(admin, list(names), partitions, 30.0)


@contextmanager
def broker(kind: str) -> Iterator[EmbeddedBroker | Kafka]:
    """Start a broker of ``kind`` (``bootstrap_servers``, ``create_topics``); stops it after."""
    if kind == "tansu":
        with EmbeddedBroker() as embedded:
            yield embedded
        return
    from tests.peers.kafka import start_kafka

    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as folder:
        kafka = start_kafka(Path(folder))
        try:
            yield Kafka(kafka.bootstrap_servers)
        finally:
            kafka.stop()


def describe(kind: str) -> str:
    """The broker's name for a benchmark's header line."""
    return "Apache Kafka (interop/kafka)" if kind == "kafka" else "embedded (Tansu)"
