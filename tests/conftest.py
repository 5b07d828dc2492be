"""Shared pytest fixtures.

* ``broker``: one embedded Kafka-compatible broker for the whole session (it starts in
  a fraction of a second, but there is no reason to start one per test).
* ``topic_prefix``: a unique Debezium ``topic.prefix`` per test, so tests sharing the
  session broker never see each other's topics.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator

import pytest

from engine.playground.broker import EmbeddedBroker


@pytest.fixture(autouse=True)
def _engine_logs_reach_caplog() -> Iterator[None]:
    """Undo what an in-process CLI run does to the ``cdcctl`` logger (its own handler,
    ``propagate = False``), so that a later test's ``caplog`` sees the engine's lines."""
    yield
    root = logging.getLogger("cdcctl")
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.propagate = True
    root.setLevel(logging.NOTSET)
    logging.getLogger("cdcctl.kafka").setLevel(logging.NOTSET)


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running :class:`EmbeddedBroker`, shared by the session and stopped at its end."""
    embedded = EmbeddedBroker()
    embedded.start()
    try:
        yield embedded
    finally:
        embedded.stop()


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    """A Debezium ``topic.prefix`` unique to this test, e.g. ``t_test_name_1a2b3c4d``.

    It is a valid Kafka topic name component and readable in broker listings.
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40]
    return f"t_{name}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def spark():
    """One local SparkContext for every in-process test of the session (startup costs seconds)."""
    from engine.spark import get_spark, stop_spark

    session = get_spark("local[2]", "1g")
    yield session
    stop_spark()


@pytest.fixture(scope="session")
def scratch_postgres():
    """A PostgreSQL cluster with ``wal_level = logical``, for the session (see
    tests/scratch_postgres.py)."""
    from tests.scratch_postgres import start_scratch_postgres

    cluster = start_scratch_postgres()
    yield cluster
    cluster.stop()
