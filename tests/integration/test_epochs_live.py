"""A position epoch change under a running `cdcctl start` (a child process) over the
embedded broker: the table goes FAILED while the other table goes on, `cdcctl resync
TABLE --new-epoch` is carried out by the running replicator, and the replica becomes the
new cluster's (the oracle's fold of the new epoch alone)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import engine
from engine.playground.broker import produce_messages
from engine.replicator.epochs import MARK
from tests import oracle
from tests.engine.test_epochs import T0, _key, _new_cluster, _old_cluster, _pg, _replay
from tests.integration.replicas import read_replica, run_cli, write_config
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _rows(path: Path) -> dict[str, dict]:
    return {
        k: {c: v for c, v in row.items() if not c.startswith("_")}
        for k, row in read_replica(path).items()
    }


def test_a_running_replicator_stops_the_table_and_accepts_the_new_epoch(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    topic, other = f"{topic_prefix}.public.items", f"{topic_prefix}.public.other"
    old, new = _old_cluster(), _new_cluster()
    before = old + _replay(old)
    produce_messages(broker.bootstrap_servers, [(topic, k, v) for k, v in before])
    produce_messages(broker.bootstrap_servers, [(other, k, v) for k, v in old])
    target, work = tmp_path / "lake", tmp_path / "work"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_seconds=0.3,
    )
    proc = replicator(config)

    def table(name: str) -> engine.TableRecord | None:
        found = engine.read_status(work)
        if found is None or not found.replicator.alive:
            return None
        return found.table(name)

    def figure(name: str, key: str) -> Any:
        """A field of a table's status record (None before it has one)."""
        record = table(name)
        return record.figure(key) if record is not None else None

    wait_until(lambda: figure("public_items", "rows") == 4, "the old cluster", 180, child=proc)
    produce_messages(broker.bootstrap_servers, [(topic, k, v) for k, v in new])
    wait_until(
        lambda: figure("public_items", "state") == "FAILED", "the epoch change", 120, child=proc
    )
    assert MARK in figure("public_items", "last_error")
    assert f"{topic}[0] offset {len(before)}:" in figure("public_items", "last_error")
    assert _rows(target / "public_items") == oracle.fold([(topic, k, v) for k, v in before])[topic]
    # The other table (whose source did not move) goes on.
    more = [(other, _key(k), _pg("c", k, "more", 70_000 + k, T0 + 5000 + k)) for k in (20, 21)]
    produce_messages(broker.bootstrap_servers, more)
    wait_until(lambda: figure("public_other", "inserts") == 3, "the other table", 120, child=proc)
    assert figure("public_other", "state") == "REPLICATING"

    accepted = run_cli("resync", "public_items", "--new-epoch", "--config", str(config))
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "new position epoch accepted at" in accepted.stdout, accepted.stdout
    # The new cluster's delete of row 6 is its last change: the old one deleted once.
    wait_until(lambda: figure("public_items", "deletes") == 2, "the new epoch", 120, child=proc)
    assert figure("public_items", "state") == "REPLICATING"
    again = run_cli("resync", "public_items", "--new-epoch", "--config", str(config))
    assert again.returncode == 1  # nothing to accept any more
    assert "did not stop at a position epoch change" in again.stdout
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert proc.wait() == 0, proc.describe()
    expected = oracle.fold([(topic, k, v) for k, v in new])[topic]
    assert _rows(target / "public_items") == expected
    assert sorted(expected) == ["1", "3", "5", "7"]  # 2 gone, 5 back, 6 deleted
