"""SIGKILL the replicator at many points; every restart must end equal to the oracle.

Crashes are injected with CDCCTL_CRASH_AT (engine/faults.py): the process kills itself
with SIGKILL at a named point, so the test is deterministic yet the kill is as real as
`kill -9`. After every crash each table must equal the oracle fold of exactly the
messages up to the checkpoint of its newest completed commit: nothing lost, nothing
applied twice, no half-written instant visible.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from engine.hudi import LEASE_FILE
from engine.hudi.layout import OWN_PATH
from engine.hudi.log_file import LogFileName, log_instant
from engine.hudi.options import LEASE_EPOCH_KEY
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from engine.storage import Storage
from tests.integration.replicas import (
    assert_checkpoints_hold,
    assert_replicas_match,
    read_replica,
    run_cli,
    write_config,
)
from tests.oracle import fold
from tests.s3_support import ReplicaTarget

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.crash, pytest.mark.slow]

CRASH_POINTS = [
    "consumed:1",  # while consuming: batch read, nothing written
    "task_written:1",  # while writing base files: some files of the instant exist
    "files_written:1",  # between the files and the commit
    "before_commit:2",  # one table committed in this batch, the next not
    "after_commit:1",  # right after a commit, before the other tables and group offsets
    "before_commit:3",
]


#: In a bucket: where the run dies between the lease's swap (which decides a commit) and
#: the completed file (the next start creates it from the lease's record), among the
#: points above.
BUCKET_CRASH_POINTS = [
    "task_written:1",
    "lease_swapped:1",
    "files_written:1",
    "before_commit:2",
    "lease_swapped:3",
]


def test_sigkill_at_many_points_then_restart(
    broker, topic_prefix: str, tmp_path: Path, lake: ReplicaTarget
) -> None:
    """In a folder and in a bucket (where each commit goes through the table's lease)."""
    messages = list(InventoryWorkload(seed=5, prefix=topic_prefix, schemas=True).events(24_000))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    by_topic = {t: [m for m in messages if m[0] == t] for t in topics}
    config = lake.config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        max_batch_events=1_500,
        max_batch_seconds=0.5,
    )
    in_bucket = lake.store.local_path("") is None
    points = BUCKET_CRASH_POINTS if in_bucket else CRASH_POINTS
    rolled_forward: list[str] = []

    def decided_not_made(table: Storage) -> bool:
        """A commit its lease decided whose completed file the next start creates."""
        if table.head(LEASE_FILE) is None:
            return False
        completing = json.loads(table.read(LEASE_FILE)).get("completing")
        if completing and table.head(completing["path"]) is None:
            rolled_forward.append(completing["path"])
            return True
        return False

    killed = 0
    for point in points:
        env = {**lake.env, "CDCCTL_CRASH_AT": point}
        run = run_cli("start", "--config", str(config), "--until-caught-up", env=env)
        assert run.returncode in (-signal.SIGKILL, 0), run.stderr
        killed += run.returncode == -signal.SIGKILL
        assert_checkpoints_hold(lake.store, by_topic, skip=decided_not_made)
    assert killed >= len(points) - 2
    if in_bucket:
        assert rolled_forward, "no kill fell between a lease's swap and its commit file"
    final = run_cli("start", "--config", str(config), "--until-caught-up", env=lake.env)
    assert final.returncode == 0, final.stderr
    assert_replicas_match(lake.store, fold(messages))
    for topic in topics:
        table = HudiTable.open(lake.store.under(table_name_for_topic(topic)))
        assert not table.pending_instants()
        if in_bucket:  # every decided commit was completed, and its staged copy removed
            assert not table.store.entries(f"{OWN_PATH}/staged")
            epochs = {
                table.extra_metadata(i).get(LEASE_EPOCH_KEY) for i in table.completed_instants()
            }
            # Each commit recorded the epoch of its run's lease (a table first made by
            # the last run has only epoch 1).
            assert None not in epochs, epochs


def _files_of(path: Path, instant: str) -> list[Path]:
    """Data files an instant wrote: base files end with it, log files carry it in their
    first block's header."""
    return [
        f
        for f in path.iterdir()
        if f.name.endswith(f"_{instant}.parquet")
        or (LogFileName.parse(f.name) is not None and log_instant(f) == instant)
    ]


def test_unfinished_instant_is_invisible_and_rolled_back(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=9, prefix=topic_prefix, schemas=True).events(6_000))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_events=2_000,
    )
    # Let one batch commit, then die after writing the next batch's files.
    run = run_cli(
        "start",
        "--config",
        str(config),
        "--until-caught-up",
        env={"CDCCTL_CRASH_AT": "files_written:2"},
    )
    assert run.returncode == -signal.SIGKILL
    pending = {}
    for topic in topics:
        path = target / table_name_for_topic(topic)
        if not HudiTable.exists(path):
            continue  # its first messages were not consumed before the crash
        table = HudiTable.open(path)
        if table.pending_instants():
            pending[topic] = (path, table.pending_instants()[0], read_replica(path))
    assert pending, "the crash should leave an unfinished instant"
    by_topic = {t: [m for m in messages if m[0] == t] for t in topics}
    for topic, (path, instant, rows) in pending.items():
        assert _files_of(path, instant), "its data files were written"
        checkpoint = HudiTable.open(path).checkpoint()
        applied = int(checkpoint.rsplit(":", 1)[1]) if checkpoint else 0
        expected = fold(by_topic[topic][:applied]).get(topic, {})
        assert set(rows) == set(expected)  # hudi-rs does not see the unfinished instant
    final = run_cli("start", "--config", str(config), "--until-caught-up")
    assert final.returncode == 0, final.stderr
    for path, instant, _ in pending.values():
        assert not _files_of(path, instant)
        assert instant not in HudiTable.open(path).pending_instants()
        assert instant not in HudiTable.open(path).completed_instants()
    assert_replicas_match(target, fold(messages))
