"""``cdcctl start`` with ``target.path = "s3://..."``: the real CLI in child processes
replicates Debezium topics (Tansu) into moto's S3 server, and the replicas, read by
hudi-rs from the bucket itself, equal the oracle's fold of the same messages, over two
runs. Every commit was decided by the run's lease (its epoch is in the commit), and the
lease is left released, so the next run takes it at once.

The commands read and drop replicas there (query, the dashboard's detail,
test-connection, resync offline and live, delete --purge). SIGKILLs during commits to a
bucket are tests/integration/test_crash_recovery.py's walk, run on a folder and a
bucket."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engine.config import load_config
from engine.detail import TableDetailReader
from engine.errors import CdcError
from engine.hudi import LEASE_FILE, HudiView
from engine.hudi.options import LEASE_EPOCH_KEY
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.objectstore import S3Server
from engine.playground.workload import InventoryWorkload
from engine.storage import Storage, open_storage
from tests.integration.replicas import (
    assert_replicas_match,
    checks_of,
    config_text,
    run_cli,
)
from tests.oracle import fold
from tests.s3_support import S3_ENV, S3_SECRET, s3_settings, s3_target_keys
from tests.waiting import wait_until

ENV, SECRET = S3_ENV, S3_SECRET

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _config(tmp_path: Path, broker, prefix: str, url: str, endpoint: str) -> Path:
    path = tmp_path / "cdcctl.toml"
    path.write_text(
        config_text(
            broker.bootstrap_servers,
            f"^{prefix}\\.",
            url,
            target_keys=s3_target_keys(endpoint),
            work_dir=tmp_path / "work",
            hudi={"num_buckets": 2},
            max_batch_events=2_000,
        )
    )
    return path


def test_start_replicates_into_a_bucket(
    s3: S3Server, broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=26, prefix=topic_prefix).events(6_000))
    half = len(messages) // 2
    broker.create_topics(sorted({t for t, _, _ in messages}))
    produce_messages(broker.bootstrap_servers, messages[:half])
    url = f"s3://lake/{tmp_path.name}/lake"
    config = _config(tmp_path, broker, topic_prefix, url, s3.endpoint)
    target = open_storage(s3_settings(s3, url))

    def run_until(upto: int) -> dict[str, int]:
        run = run_cli("start", "--config", str(config), "--until-caught-up", env=ENV)
        assert run.returncode == 0, run.stderr
        assert SECRET not in run.stdout + run.stderr
        return assert_replicas_match(target, fold(messages[:upto]))

    assert sum(run_until(half).values()) > 500
    produce_messages(broker.bootstrap_servers, messages[half:])
    counts = run_until(len(messages))
    assert len(counts) == 3 and sum(counts.values()) > 1_000

    # Nothing was written beside the target: the work folder is local, the tables are not.
    assert not (tmp_path / "lake").exists() and not (tmp_path / "s3:").exists()
    for topic in counts:
        table = target.under(table_name_for_topic(topic))
        view = HudiView.open(table)
        instants = view.completed_instants()
        assert instants
        # Each commit went through a lease of its run: epochs 1, then 2 (the second run
        # took the released lease over).
        epochs = {view.extra_metadata(i).get(LEASE_EPOCH_KEY) for i in instants}
        assert epochs <= {"1", "2"} and "2" in epochs, epochs
        lease = json.loads(table.read(".hoodie/.cdcctl/lease.json"))
        assert lease["released"] and lease["epoch"] == 2
        assert not table.entries(".hoodie/.cdcctl/staged")


def _produced(
    s3: S3Server, broker, prefix: str, tmp_path: Path, seed: int, count: int
) -> tuple[list, str, Path, Storage]:
    """``count`` workload messages on the broker, and a config replicating them into a
    prefix of the bucket of its own: the messages, the URL, the config and the store."""
    messages = list(InventoryWorkload(seed=seed, prefix=prefix).events(count))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    produce_messages(broker.bootstrap_servers, messages)
    url = f"s3://lake/{tmp_path.name}/lake"
    config = _config(tmp_path, broker, prefix, url, s3.endpoint)
    return messages, url, config, open_storage(s3_settings(s3, url))


def test_commands_read_and_drop_replicas_in_a_bucket(
    s3: S3Server, broker, topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """query, the dashboard's table detail, test-connection's table checks, an offline
    resync and ``delete --purge`` work on replicas in a bucket as in a folder."""
    messages, url, config, target = _produced(s3, broker, topic_prefix, tmp_path, 28, 3_000)
    run = run_cli("start", "--config", str(config), "--until-caught-up", env=ENV)
    assert run.returncode == 0, run.stderr
    expected = fold(messages)
    counts = assert_replicas_match(target, expected)
    names = sorted(table_name_for_topic(t) for t in counts)
    first = names[0]

    def cli(*args: str) -> subprocess.CompletedProcess:
        done = run_cli(*args, "--config", str(config), env=ENV, timeout=300)
        assert "Traceback" not in done.stderr and SECRET not in done.stdout + done.stderr
        return done

    # query: every replica is a view, read by hudi-rs from the bucket.
    union = " UNION ALL ".join(f"SELECT '{n}' AS t, count(*) AS n FROM {n}" for n in names)
    done = cli("query", union, "--json")
    assert done.returncode == 0, done.stderr
    by_name = {table_name_for_topic(t): c for t, c in counts.items()}
    assert {r["t"]: r["n"] for r in json.loads(done.stdout)} == by_name
    instants = HudiView.open(target.under(first)).completed_instants()
    done = cli("query", f"SELECT count(*) AS n FROM {first}", "--json", "--as-of", instants[0])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["n"] <= by_name[first]

    # The dashboard's detail of a table reads its timeline and file groups there.
    monkeypatch.setenv("CDCCTL_TEST_S3_KEY", ENV["CDCCTL_TEST_S3_KEY"])
    monkeypatch.setenv("CDCCTL_TEST_S3_SECRET", SECRET)
    cfg = load_config(config)
    detail = TableDetailReader(cfg.work_path(), cfg, first).read()
    assert detail.replica_error is None and detail.replica is not None
    assert detail.replica.path == f"{url}/{first}"
    assert detail.replica.completed == len(instants) and detail.replica.file_groups >= 1

    # test-connection reads each table's checkpoint there.
    checks = checks_of(cli("test-connection", "--json"))
    for name in names:
        check = checks[f"target.table {name}"]
        assert check["status"] == "pass" and "checkpoint" in check["detail"], check
    topic = next(t for t in counts if table_name_for_topic(t) == first)
    check = checks[f"kafka.topic {topic}"]
    assert check["status"] == "pass", check
    assert f"~0 messages waiting since the checkpoint of table {first}" in check["detail"], check

    # An offline resync (holding the table's lease) drops its objects; the lease stays,
    # released, and the next start reads the topic again at the epoch after.
    done = cli("resync", first)
    assert done.returncode == 0, done.stderr
    assert f"removed {url}/{first}" in done.stdout, done.stdout
    table = target.under(first)
    assert [o.path for o in table.list()] == [LEASE_FILE]
    assert json.loads(table.read(LEASE_FILE))["released"]
    done = cli("query", f"SELECT count(*) FROM {first}")
    assert done.returncode == 2 and first in done.stderr, done.stderr
    run = run_cli("start", "--config", str(config), "--until-caught-up", env=ENV)
    assert run.returncode == 0, run.stderr
    assert assert_replicas_match(target, expected) == counts
    view = HudiView.open(table)
    epochs = {view.extra_metadata(i).get(LEASE_EPOCH_KEY) for i in view.completed_instants()}
    assert epochs == {"3"}, epochs  # the first run's 1, the resync's 2, this run's 3

    # delete --purge: the tables go (their released leases stay), so does the state.
    done = cli("delete", "--purge", "--yes")
    assert done.returncode == 0, done.stderr
    for name in names:
        assert f"removed {url}/{name}" in done.stdout
        assert [o.path for o in target.under(name).list()] == [LEASE_FILE]
    assert HudiView.tables_under(target) == []
    assert not (tmp_path / "work").exists()


def test_live_resync_of_a_table_in_a_bucket(
    s3: S3Server, broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """``cdcctl resync`` sent to a running replicator drops a table's objects in the
    bucket (its lease held throughout) and rebuilds it from its topic while it runs."""
    messages, url, config, target = _produced(s3, broker, topic_prefix, tmp_path, 29, 2_000)
    expected = fold(messages)
    name = sorted(table_name_for_topic(t) for t in expected)[0]
    table = target.under(name)

    def caught_up() -> bool:
        return bool(assert_replicas_match(target, expected))

    proc = replicator.cli("start", "--config", str(config), env=ENV)
    wait_until(caught_up, "the first catch-up", 180, child=proc, retry_on=(AssertionError,))
    before = set(HudiView.open(table).completed_instants())
    epoch = json.loads(table.read(LEASE_FILE))["epoch"]
    done = run_cli("resync", name, "--config", str(config), env=ENV)
    assert done.returncode == 0, done.stderr
    assert f"resync {name}: resyncing {name}: replica dropped" in done.stdout, done.stdout

    def rebuilt() -> bool:
        instants = set(HudiView.open(table).completed_instants())
        return bool(instants) and not instants & before and caught_up()

    wait_until(rebuilt, "the rebuilt table", 180, child=proc, retry_on=(AssertionError, CdcError))
    lease = json.loads(table.read(LEASE_FILE))
    assert lease["epoch"] == epoch and not lease["released"]  # held throughout
    stopped = run_cli("stop", "--config", str(config), env=ENV)
    assert stopped.returncode == 0, stopped.stderr
    assert proc.wait() == 0, proc.describe()
    assert_replicas_match(target, expected)


def test_a_run_killed_right_after_a_live_resync_starts_again(
    s3: S3Server, broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """A live resync drops the table's objects, the lease's record of its last commit
    included: a run SIGKILLed right after the drop (``resync_dropped``) starts again
    and rebuilds the table, instead of rolling forward a commit whose files are gone."""
    messages, url, config, target = _produced(s3, broker, topic_prefix, tmp_path, 30, 1_500)
    expected = fold(messages)
    name = sorted(table_name_for_topic(t) for t in expected)[0]

    def caught_up() -> bool:
        return bool(assert_replicas_match(target, expected))

    env = {**ENV, "CDCCTL_CRASH_AT": "resync_dropped:1"}
    proc = replicator.cli("start", "--config", str(config), env=env)
    wait_until(caught_up, "the first catch-up", 180, child=proc, retry_on=(AssertionError,))
    run_cli("resync", name, "--config", str(config), "--wait", "5", env=ENV)
    assert proc.wait(timeout=60) == -9, proc.describe()
    assert not HudiView.exists(target.under(name))  # dropped, not rebuilt
    run = run_cli("start", "--config", str(config), "--until-caught-up", env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    assert_replicas_match(target, expected)
