"""Run every check, the independent ones at the same time, within a time budget."""

from __future__ import annotations

import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from engine.checks.common import in_thread
from engine.checks.database import database_checks, parse_dsn
from engine.checks.kafka import kafka_checks
from engine.checks.registry import registry_checks
from engine.checks.result import Check, failed
from engine.checks.runtime import check_java_version, check_spark, check_work_dir
from engine.checks.target import target_checks
from engine.checks.upstream import source_checks
from engine.config import Config
from engine.spark import SPARK_LOG

#: Every check has finished or is reported as timed out by then (seconds).
BUDGET_S = 25.0


def run_checks(cfg: Config, source_dsn: str | None = None) -> list[Check]:
    """Check everything ``cdcctl start`` needs, and the source database if named.

    Kafka (brokers, topics, offsets, a decoded sample, transaction topics), the target
    folder and its tables, Java, Spark and the work folder, and with ``source_dsn`` (or
    ``source.database_dsn``) the PostgreSQL or MySQL/MariaDB database behind the topics.
    Independent checks run at the same time; each is bounded, and whatever has not
    finished after :data:`BUDGET_S` seconds is reported as a failure.

    Args:
        cfg: the validated config.
        source_dsn: a ``postgresql://`` or ``mysql://`` URL (wins over the config's).

    Returns:
        The checks, grouped by area: Kafka, target, engine, database.

    Raises:
        ConfigError: ``source_dsn`` is not a database URL.
    """
    dsn = source_dsn or cfg.source.database.database_dsn
    if dsn is not None:
        parse_dsn(dsn)  # a bad URL is a usage error, before anything starts
    deadline = time.monotonic() + BUDGET_S
    topics: Future[list[str] | None] = Future()

    def publish(found: list[str] | None) -> None:
        topics.set_result(found)

    def known_topics() -> list[str] | None:
        try:
            return topics.result(timeout=max(deadline - time.monotonic() - 2, 0.1))
        except FutureTimeout:
            return None

    slow = "rerun with -v to see what it waits for"
    spark_log = f"see {cfg.work_path() / SPARK_LOG}"
    jobs: list[tuple[str, str, Future[list[Check]]]] = [
        ("kafka.checks", slow, in_thread("kafka", lambda: kafka_checks(cfg, publish))),
        ("target.checks", slow, in_thread("target", lambda: target_checks(cfg))),
        ("registry.checks", slow, in_thread("registry", lambda: registry_checks(cfg))),
        ("engine.java", slow, in_thread("java", lambda: [check_java_version()])),
        ("engine.spark", spark_log, in_thread("spark", lambda: [check_spark(cfg)])),
        ("engine.work_dir", slow, in_thread("work", lambda: [check_work_dir(cfg)])),
    ]
    if dsn is not None:
        url = dsn
        area = "postgres" if parse_dsn(url).kind == "postgresql" else "mysql"
        work = in_thread(area, lambda: database_checks(cfg, url, known_topics))
        jobs.append((f"{area}.checks", slow, work))
    jobs.append(
        (
            "source.checks",
            slow,
            in_thread("source", lambda: source_checks(cfg, dsn, known_topics)),
        )
    )
    checks: list[Check] = []
    for name, fix, future in jobs:
        try:
            checks += future.result(timeout=max(deadline - time.monotonic(), 0))
        except FutureTimeout:
            checks.append(failed(name, f"did not finish within {BUDGET_S:.0f} s", fix))
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not hide the others
            checks.append(
                failed(name, f"the check itself failed: {type(exc).__name__}: {exc}", "report it")
            )
    return checks
