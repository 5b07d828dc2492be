"""A broker crash and restart under a live replicator: topics survive, replicas stay exact.

A real Tansu broker keeps its topics in an S3-compatible store (moto's server, a test
dependency; :mod:`engine.playground.objectstore`), so a SIGKILLed broker comes back with
every topic, message and offset. A live `cdcctl start` (the real CLI in a child process)
replicates; the broker is killed and restarted under it; more events follow. The
replicator must ride through the outage (its Kafka retries) and end with every replica
equal to the oracle, read back by hudi-rs. A second replicator with its own work folder
and target then reads every topic from the start after the restart: the topics kept
everything produced before the crash.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from engine.playground.broker import EmbeddedBroker, produce_messages
from engine.playground.objectstore import S3Server
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.crash]


def test_a_broker_restart_keeps_topics_and_the_replicas_stay_exact(
    topic_prefix: str, tmp_path: Path, replicator
) -> None:
    workload = InventoryWorkload(seed=31, prefix=topic_prefix, schemas=True)
    first = list(workload.events(600))
    second = list(workload.stream(600))
    with S3Server() as store, EmbeddedBroker(storage=store) as broker:
        bootstrap = broker.bootstrap_servers
        produce_messages(bootstrap, first)
        target = tmp_path / "lake"
        pattern = f"^{re.escape(topic_prefix)}\\."
        # Tansu's S3 store answers a fetch that must read back with nothing when the
        # consumer waits at most 50 ms (the replicator's default; docs/performance.md).
        options = {"kafka_options": {"fetch.wait.max.ms": 500}}
        config = write_config(
            tmp_path / "cdcctl.toml",
            bootstrap,
            pattern,
            target,
            source=options,
            max_batch_seconds=0.3,
            retry_max_seconds=300.0,
        )
        proc = replicator(config)
        wait_until(
            lambda: assert_replicas_match(target, fold(first)),
            "the replicas of the first events",
            300,
            interval=1.0,
            child=proc,
            retry_on=(AssertionError,),
        )
        broker.restart(kill=True, down_seconds=2.0)  # a crash, a short outage
        assert broker.bootstrap_servers == bootstrap
        produce_messages(bootstrap, second)
        wait_until(
            lambda: assert_replicas_match(target, fold(first + second)),
            "the replicas of every event, after the restart",
            300,
            interval=1.0,
            child=proc,
            retry_on=(AssertionError,),
        )
        proc.stop(signal.SIGTERM)
        assert "Traceback" not in proc.stderr

        # Everything produced before the crash is still in the topics.
        other = tmp_path / "other"
        other.mkdir()
        fresh = write_config(
            other / "cdcctl.toml",
            bootstrap,
            pattern,
            other / "lake",
            source=options,
            max_batch_seconds=0.3,
        )
        run = run_cli("start", "--config", str(fresh), "--until-caught-up", timeout=600)
        assert run.returncode == 0, run.stderr
        assert_replicas_match(other / "lake", fold(first + second))
