"""Shared pytest fixtures.

* ``broker``: one embedded Kafka-compatible broker for the whole session (it starts in
  a fraction of a second, but there is no reason to start one per test).
* ``topic_prefix``: a unique Debezium ``topic.prefix`` per test, so tests sharing the
  session broker never see each other's topics.
* ``replicator``: starts ``cdcctl start --config ...`` (or, ``replicator.cli(...)``, any
  command) in a child process whose output is drained continuously
  (:class:`tests.integration.replicas.CliChild`), kills what still runs at the test's end
  and adds every child's output to a failed test's report.
* ``scratch_postgres`` / ``scratch_postgres_replica`` / ``scratch_mariadb`` /
  ``scratch_mariadb_no_binlog``: database servers the tests start on free loopback ports
  (tests/scratch_postgres.py, tests/scratch_mariadb.py), started when a test first asks.

Session fixtures are per process: under pytest-xdist each worker has its own broker,
SparkContext and scratch servers (each on its own port and folder).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from engine.playground.broker import EmbeddedBroker
from engine.playground.objectstore import S3Server
from engine.storage import Storage
from tests.s3_support import ReplicaTarget, local_or_s3, replica_target

# Hypothesis judges correctness here, not speed (speed lives in bench/): no per-example
# deadline, which a loaded 2-core machine exceeds on large examples (a flaky failure that
# says nothing about the code).
settings.register_profile("cdcctl", deadline=None)
settings.load_profile("cdcctl")

if TYPE_CHECKING:
    from tests.integration.replicas import CliChild


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


class Children:
    """The ``replicator`` fixture: ``replicator(config, *args)`` runs ``cdcctl start
    --config config *args``; ``replicator.cli(*args)`` any other command (keyword
    arguments as :class:`tests.integration.replicas.CliChild`'s)."""

    def __init__(self) -> None:
        self.started: list[CliChild] = []

    def __call__(self, config: Path, *args: str, **options) -> CliChild:
        return self.cli("start", "--config", str(config), *args, **options)

    def cli(self, *args: str, **options) -> CliChild:
        from tests.integration.replicas import CliChild

        child = CliChild(*args, **options)
        self.started.append(child)
        return child


@pytest.fixture
def replicator(request: pytest.FixtureRequest) -> Iterator[Children]:
    children = Children()
    request.node.cli_children = children.started
    try:
        yield children
    finally:
        for child in children.started:
            child.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report shows what each of its CLI children printed."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for child in getattr(item, "cli_children", ()):
            report.sections.append((f"cdcctl child {child.pid}", child.describe()))


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running :class:`EmbeddedBroker`, shared by the session and stopped at its end."""
    embedded = EmbeddedBroker()
    embedded.start()
    try:
        yield embedded
    finally:
        embedded.stop()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto's S3 server with the bucket ``lake``, shared by the session (each test keeps
    to a prefix of its own)."""
    with S3Server(bucket="lake") as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """A target store, once a folder and once a prefix in the ``s3`` server's bucket."""
    return local_or_s3(request, tmp_path)


@pytest.fixture(params=["folder", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> ReplicaTarget:
    """Where a replicator test writes its replicas: once a folder, once a bucket prefix
    (moto's server); its config, store to read back and CLI environment."""
    return replica_target(request, tmp_path)


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
    tests/scratch_postgres.py). Every test that needs a PostgreSQL uses this one or
    ``scratch_postgres_replica``; none uses a server of the machine."""
    from tests.scratch_postgres import start_scratch_postgres

    cluster = start_scratch_postgres()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def scratch_postgres_replica():
    """A PostgreSQL cluster with ``wal_level = replica`` (never set up for logical
    decoding), for the session."""
    from tests.scratch_postgres import start_scratch_postgres

    cluster = start_scratch_postgres(wal_level="replica")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def scratch_mariadb():
    """A MariaDB server with ``log_bin``, ``binlog_format = ROW``, ``binlog_row_image =
    FULL``, for the session (see tests/scratch_mariadb.py)."""
    from tests.scratch_mariadb import start_scratch_mariadb

    server = start_scratch_mariadb(binlog=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def scratch_mariadb_no_binlog():
    """A MariaDB server without a binlog (never set up for change capture), for the session."""
    from tests.scratch_mariadb import start_scratch_mariadb

    server = start_scratch_mariadb(binlog=False)
    yield server
    server.stop()
