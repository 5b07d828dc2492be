"""``cdcctl start`` with ``target.path = "s3://..."``: the real CLI in child processes
replicates Debezium topics (Tansu) into moto's S3 server, and the replicas, read by
hudi-rs from the bucket itself, equal the oracle's fold of the same messages, over two
runs. Every commit was decided by the run's lease (its epoch is in the commit), and the
lease is left released, so the next run takes it at once.

SIGKILLs during commits to the bucket (``CDCCTL_CRASH_AT``, engine/faults.py), among
them right after the lease's swap decided a commit and before its completed file exists
(``lease_swapped``): after each, every table equals the fold of exactly the messages
its newest commit's checkpoint covers, and the next start completes what was decided
(rolled forward from the lease) or rolls back what was not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.hudi import HudiView
from engine.hudi.options import LEASE_EPOCH_KEY
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.objectstore import S3Server
from engine.playground.workload import InventoryWorkload
from engine.storage import Storage, open_storage
from tests.integration.replicas import (
    assert_checkpoints_hold,
    assert_replicas_match,
    config_text,
    run_cli,
)
from tests.oracle import fold
from tests.s3_support import S3_ENV, S3_SECRET, s3_settings, s3_target_keys

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


#: Where a run is killed: while merge tasks write, between the files and the commit,
#: between the lease's swap and the completed file (twice), after a commit.
CRASH_POINTS = [
    "task_written:1",
    "lease_swapped:1",
    "after_commit:2",
    "files_written:2",
    "lease_swapped:3",
]


def test_sigkill_during_commits_to_a_bucket(
    s3: S3Server, broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=27, prefix=topic_prefix).events(14_000))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    produce_messages(broker.bootstrap_servers, messages)
    url = f"s3://lake/{tmp_path.name}/lake"
    config = _config(tmp_path, broker, topic_prefix, url, s3.endpoint)
    target = open_storage(s3_settings(s3, url))
    by_topic: dict[str, list] = {}
    for m in messages:
        by_topic.setdefault(m[0], []).append(m)
    rolled_forward: list[str] = []

    def decided_not_made(table: Storage) -> bool:
        """A commit its lease decided whose completed file the next start creates."""
        completing = json.loads(table.read(".hoodie/.cdcctl/lease.json")).get("completing")
        if completing and table.head(completing["path"]) is None:
            rolled_forward.append(completing["path"])
            return True
        return False

    for point in CRASH_POINTS:
        env = {**ENV, "CDCCTL_CRASH_AT": point}
        run = run_cli("start", "--config", str(config), "--until-caught-up", env=env)
        assert run.returncode == -9, (point, run.returncode, run.stderr[-2000:])
        assert_checkpoints_hold(target, by_topic, skip=decided_not_made)
    assert rolled_forward, "no kill fell between a lease's swap and its commit file"
    run = run_cli("start", "--config", str(config), "--until-caught-up", env=ENV)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(target, fold(messages))
    for topic in by_topic:
        table = target.under(table_name_for_topic(topic))
        assert not table.entries(".hoodie/.cdcctl/staged")
        view = HudiView.open(table)
        assert not view.pending_instants()
