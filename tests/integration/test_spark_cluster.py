"""``spark.master = "spark://..."``: the merges run on a Spark standalone cluster's
executors (a master and two one-core workers started from the pyspark installation's own
classes), the driver keeps the consumer and the state; the replicas equal the oracle's
fold of the same messages, over two runs, with inserts, updates and deletes.

The target and work folders are on this machine's disk, which the executors share (the
cluster is on the same machine); a target on object storage, which executors elsewhere
need, is issue 26's next step.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from engine.playground.children import free_port
from engine.playground.spark_cluster import StandaloneCluster
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.oracle import fold

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    folder = tmp_path_factory.mktemp("cluster")
    with StandaloneCluster(folder, workers=2, cores=1, memory="1g") as started:
        yield started


def _with_master(config: Path, master: str) -> Path:
    config.write_text(
        config.read_text()
        + f'[spark]\nmaster = "{master}"\n'
        + '[spark.options]\n"spark.executor.memory" = "512m"\n'
    )
    return config


def _executors(cluster: StandaloneCluster, n: int) -> list[Path]:
    """The executor folders worker ``n`` made (``app-*/<id>/``)."""
    return sorted(p for p in cluster.worker_dir(n).glob("app-*/*") if p.is_dir())


def test_merges_on_a_two_worker_standalone_cluster(
    cluster: StandaloneCluster, broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=5, prefix=topic_prefix).events(12_000))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_events=3_000,
    )
    _with_master(config, cluster.url)
    before = {n: len(_executors(cluster, n)) for n in (1, 2)}
    apps = len(cluster.state()["completedapps"])
    half = len(messages) // 2
    for part, upto in ((messages[:half], half), (messages[half:], len(messages))):
        produce_messages(broker.bootstrap_servers, part)
        run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
        assert run.returncode == 0, run.stderr
        counts = assert_replicas_match(target, fold(messages[:upto]))
        assert sum(counts.values()) > 1_000
    # One application per run, each with an executor on each worker: the merges ran
    # there, not in the driver.
    assert len(cluster.state()["completedapps"]) == apps + 2
    for n in (1, 2):
        assert len(_executors(cluster, n)) == before[n] + 2, (n, _executors(cluster, n))
        # The executors run with the engine's JVM flags (C1 only, serial GC), as the driver.
        launched = (_executors(cluster, n)[-1] / "stderr").read_text()
        assert "-XX:TieredStopAtLevel=1" in launched and "-XX:+UseSerialGC" in launched


def test_test_connection_asks_the_executors(cluster: StandaloneCluster, tmp_path: Path) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "x", tmp_path / "lake")
    _with_master(config, cluster.url)
    r = run_cli("test-connection", "--config", str(config), "--json", timeout=300)
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    spark = checks["engine.spark"]
    assert spark["status"] == "pass", spark
    answered = r"\d executors on .+ answered, run cdcctl \S+ and see and can write"
    assert re.search(answered, spark["detail"])
    assert str(tmp_path / "lake") in spark["detail"] and str(tmp_path / "work") in spark["detail"]


def test_test_connection_without_a_master(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "x", tmp_path / "lake")
    _with_master(config, f"spark://127.0.0.1:{free_port()}")
    r = run_cli("test-connection", "--config", str(config), "--json", timeout=300)
    spark = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["engine.spark"]
    assert spark["status"] == "fail"
    assert spark["detail"].startswith("cannot reach the Spark master spark://127.0.0.1:")
    assert "start the cluster's master" in spark["fix"]


def test_test_connection_a_remote_master_needs_a_reachable_driver(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "x", tmp_path / "lake")
    _with_master(config, "spark://192.0.2.1:7077")  # TEST-NET-1: never reached
    r = run_cli("test-connection", "--config", str(config), "--json", timeout=300)
    spark = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["engine.spark"]
    assert spark["status"] == "fail"
    assert "cannot reach this driver at 127.0.0.1 (spark.driver.host)" in spark["detail"]
    assert '"spark.driver.host"' in spark["fix"]


def test_test_connection_a_cluster_without_room_for_an_executor(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "x", tmp_path / "lake")
    config.write_text(
        config.read_text()
        + f'[spark]\nmaster = "{cluster.url}"\n'
        + '[spark.options]\n"spark.executor.memory" = "64g"\n'  # the workers have 1g each
    )
    r = run_cli("test-connection", "--config", str(config), "--json", timeout=300)
    spark = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["engine.spark"]
    assert spark["status"] == "fail", spark
    assert "but no executor ran a task within 15 s" in spark["detail"]
    assert "spark.executor.memory" in spark["fix"]
