"""``spark.master = "spark://..."``: the merges run on a Spark standalone cluster's
executors (a master and two one-core workers started from the pyspark installation's own
classes), the driver keeps the consumer and the state; the replicas equal the oracle's
fold of the same messages, over two runs, with inserts, updates and deletes.

A target folder is on this machine's disk, which the executors share (the cluster is on
the same machine); a target in a bucket (moto's S3 server) is what executors elsewhere
would use: the run into it stages nothing in the work folder (each batch travels with
its tasks), so no executor needs a folder of the driver's.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from engine.playground.children import free_port
from engine.playground.objectstore import S3Server
from engine.playground.spark_cluster import StandaloneCluster
from engine.playground.workload import InventoryWorkload
from engine.storage import open_storage
from tests.integration.replicas import (
    assert_replicas_match,
    checks_of,
    config_text,
    produced_config,
    run_cli,
    with_replayed_windows,
    write_config,
)
from tests.oracle import fold
from tests.s3_support import S3_ENV, S3_SECRET, s3_settings, s3_target_keys

#: One worker starts the module's cluster (xdist_group), not both.
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.xdist_group("spark_cluster"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    folder = tmp_path_factory.mktemp("cluster")
    with StandaloneCluster(folder, workers=2, cores=1, memory="1g") as started:
        yield started


def _spark(master: str, memory: str = "512m") -> dict:
    """The ``[spark]`` section of a run on ``master`` (executors of ``memory``)."""
    return {"master": master, "options": {"spark.executor.memory": memory}}


def _spark_check(tmp_path: Path, master: str, memory: str = "512m") -> dict:
    """The ``engine.spark`` check of ``cdcctl test-connection`` with ``master``."""
    config = write_config(
        tmp_path / "cdcctl.toml",
        "127.0.0.1:1",
        "x",
        tmp_path / "lake",
        spark=_spark(master, memory),
    )
    r = run_cli("test-connection", "--config", str(config), "--json", timeout=300)
    return checks_of(r)["engine.spark"]


def _executors(cluster: StandaloneCluster, n: int, app: str = "app-*") -> list[Path]:
    """The executor folders worker ``n`` made (``<app>/<id>/``), by executor id."""
    found = [p for p in cluster.worker_dir(n).glob(f"{app}/*") if p.is_dir()]
    return sorted(found, key=lambda p: (p.parent.name, int(p.name)))


def test_merges_on_a_two_worker_standalone_cluster(
    cluster: StandaloneCluster, broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=5, prefix=topic_prefix).events(12_000))
    half = len(messages) // 2
    config = produced_config(
        broker,
        topic_prefix,
        tmp_path,
        messages[:half],
        max_batch_events=3_000,
        spark=_spark(cluster.url),
    )
    target = tmp_path / "lake"
    earlier = {a["id"] for a in cluster.state()["completedapps"]}

    def run_until(upto: int) -> None:
        run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
        assert run.returncode == 0, run.stderr
        counts = assert_replicas_match(target, fold(messages[:upto]))
        assert sum(counts.values()) > 1_000

    run_until(half)
    produce_messages(broker.bootstrap_servers, messages[half:])
    run_until(len(messages))
    # One application per run, each with an executor on each worker: the merges ran
    # there, not in the driver. (At an application's end the master may start one more
    # executor, killed at once, when one exits before the application is unregistered:
    # the first of each application's executors is the one that ran its tasks.)
    apps = [a["id"] for a in cluster.state()["completedapps"] if a["id"] not in earlier]
    assert len(apps) == 2, apps
    for n in (1, 2):
        for app in apps:
            executors = _executors(cluster, n, app)
            assert executors, (n, app, _executors(cluster, n))
            # They run with the engine's JVM flags (C1 only, serial GC), as the driver.
            launched = (executors[0] / "stderr").read_text()
            assert "-XX:TieredStopAtLevel=1" in launched and "-XX:+UseSerialGC" in launched


def test_merges_on_the_cluster_into_a_bucket(
    cluster: StandaloneCluster, s3: S3Server, broker, topic_prefix: str, tmp_path: Path
) -> None:
    """The disorder and crash checks on the cluster: windows of earlier events sent again
    (as a restarted connector does) are late and change nothing; the driver SIGKILLed
    after a batch's files were written, after its lease decided a commit (the next start
    completes it) and right after a commit, each start goes on to the same replicas."""
    clean = list(InventoryWorkload(seed=6, prefix=topic_prefix).events(6_000))
    topics = sorted({t for t, _, _ in clean})
    messages, stale = [], 0
    for n, t in enumerate(topics):
        replayed, count = with_replayed_windows([m for m in clean if m[0] == t], 0.02, seed=n)
        messages += replayed
        stale += count
    assert stale > 50
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    url = f"s3://lake/{tmp_path.name}/lake"
    config = tmp_path / "cdcctl.toml"
    config.write_text(
        config_text(
            broker.bootstrap_servers,
            f"^{re.escape(topic_prefix)}\\.",
            url,
            target_keys=s3_target_keys(s3.endpoint),
            work_dir=tmp_path / "work",
            hudi={"num_buckets": 2},
            max_batch_events=2_000,
            spark=_spark(cluster.url),
        )  # fmt: skip
    )
    for point in ("files_written:1", "lease_swapped:2", "after_commit:3"):
        killed = run_cli(
            "start", "--config", str(config), "--until-caught-up",
            env={**S3_ENV, "CDCCTL_CRASH_AT": point}, timeout=600,
        )  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
    earlier = {a["id"] for a in cluster.state()["completedapps"]}
    run = run_cli(
        "start", "--config", str(config), "--until-caught-up", "--json", env=S3_ENV, timeout=600
    )
    assert run.returncode == 0, run.stderr
    counts = assert_replicas_match(open_storage(s3_settings(s3, url)), fold(clean))
    assert sum(counts.values()) > 1_000
    assert sum(t["late"] for t in json.loads(run.stdout)["tables"]) == stale
    # Nothing was staged in the work folder: the events went to the executors in the
    # tasks, the files to the bucket.
    assert (tmp_path / "work").is_dir() and not (tmp_path / "work" / "staging").exists()
    # The last run's application (the killed ones' may be listed completed only now).
    app = max(a["id"] for a in cluster.state()["completedapps"] if a["id"] not in earlier)
    assert _executors(cluster, 1, app) and _executors(cluster, 2, app)


def test_test_connection_asks_the_executors(cluster: StandaloneCluster, tmp_path: Path) -> None:
    spark = _spark_check(tmp_path, cluster.url)
    assert spark["status"] == "pass", spark
    answered = r"\d executors on .+ answered, run cdcctl \S+ and see and can write"
    assert re.search(answered, spark["detail"])
    assert str(tmp_path / "lake") in spark["detail"]
    # The work folder stays the driver's: the batch travels with its tasks.
    assert str(tmp_path / "work") not in spark["detail"]


def test_test_connection_executors_reach_the_bucket(
    cluster: StandaloneCluster, s3: S3Server, tmp_path: Path
) -> None:
    url = f"s3://lake/{tmp_path.name}/lake"
    config = tmp_path / "cdcctl.toml"
    config.write_text(
        config_text(
            "127.0.0.1:1",
            "x",
            url,
            target_keys=s3_target_keys(s3.endpoint),
            work_dir=tmp_path / "work",
            spark=_spark(cluster.url),
        )  # fmt: skip
    )
    r = run_cli("test-connection", "--config", str(config), "--json", env=S3_ENV, timeout=300)
    assert S3_SECRET not in r.stdout + r.stderr
    spark = checks_of(r)["engine.spark"]
    assert spark["status"] == "pass", spark
    assert re.search(
        rf"executors on .+ answered, run cdcctl \S+ and reach and can write {url}", spark["detail"]
    ), spark
    target = open_storage(s3_settings(s3, url))
    assert target.list() == []  # the probe objects are gone


def test_test_connection_without_a_master(tmp_path: Path) -> None:
    spark = _spark_check(tmp_path, f"spark://127.0.0.1:{free_port()}")
    assert spark["status"] == "fail"
    assert spark["detail"].startswith("cannot reach the Spark master spark://127.0.0.1:")
    assert "start the cluster's master" in spark["fix"]


def test_test_connection_a_remote_master_needs_a_reachable_driver(tmp_path: Path) -> None:
    spark = _spark_check(tmp_path, "spark://192.0.2.1:7077")  # TEST-NET-1: never reached
    assert spark["status"] == "fail"
    assert "cannot reach this driver at 127.0.0.1 (spark.driver.host)" in spark["detail"]
    assert '"spark.driver.host"' in spark["fix"]


def test_test_connection_a_cluster_without_room_for_an_executor(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    spark = _spark_check(tmp_path, cluster.url, memory="64g")  # the workers have 1g each
    assert spark["status"] == "fail", spark
    assert "but no executor ran a task within 15 s" in spark["detail"]
    assert "spark.executor.memory" in spark["fix"]
