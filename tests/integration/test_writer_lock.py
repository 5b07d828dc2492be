"""One writer per target: a second replicator is refused; a killed one's lock is taken over.

Real replicators in child processes against the embedded broker. The first runs live
(no --until-caught-up); a second on the same config, and a third with its own work
folder but the same target, are refused, naming the holder. After the first is
SIGKILLed (no clean-up of any kind), a new run takes the locks over and the replicas
equal the oracle.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from engine.lock import LOCK_NAME, table_lock_path
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.crash]


def test_second_replicator_is_refused_and_a_killed_ones_lock_is_taken_over(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    workload = InventoryWorkload(seed=11, prefix=topic_prefix, schemas=True)
    messages = list(workload.events(4_000))
    produce_messages(broker.bootstrap_servers, messages)
    target = tmp_path / "lake"
    pattern = f"^{re.escape(topic_prefix)}\\."
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, pattern, target, max_batch_seconds=0.3
    )
    first = replicator(config)
    orders = target / table_name_for_topic(workload.topic("orders"))
    wait_until(
        lambda: list((orders / ".hoodie").glob("*.deltacommit")),
        "the first replicator's first commit",
        child=first,
    )
    holder = f"cdcctl pid {first.pid} on host {socket.gethostname()}"

    # The same config: the work folder is locked.
    second = run_cli("start", "--config", str(config), "--until-caught-up", timeout=120)
    assert second.returncode == 3, second.stderr
    assert f"the work folder {tmp_path / 'work'} is being written by {holder}" in second.stderr
    assert "Traceback" not in second.stderr

    # Its own work folder, the same target: every table it would write is locked, so
    # each fails alone and nothing of the first one's is rolled back. With no table left
    # to run, it exits 3 by itself (it idled forever before, issue 24 item 5), each
    # table's error said once, with why it ends.
    other = tmp_path / "other.toml"
    other.write_text(config.read_text().replace(str(tmp_path / "work"), str(tmp_path / "w2")))
    third = run_cli("start", "--config", str(other), timeout=120)
    assert third.returncode == 3, third.stderr
    tables = {table_name_for_topic(t) for t, _, _ in messages}
    for name in tables:
        refused = f"table {name} ({target / name}) is being written by {holder}"
        assert (third.stdout + third.stderr).count(refused) == 1, third.stderr
        assert (third.stdout + third.stderr).count(f"FAILED {name} (topic ") == 1
    assert f"no table can replicate: all {len(tables)} FAILED" in third.stderr
    ended = run_cli("status", "--config", str(other))  # recorded failed, saying why
    assert "replicator: failed (not running; " in ended.stdout, ended.stdout
    assert f"error: no table can replicate: all {len(tables)} FAILED" in ended.stdout
    assert "Traceback" not in third.stderr
    assert not first.exited(), first.describe()
    first.kill()

    # The kernel dropped the dead process's locks; its files still name it.
    assert str(first.pid) in (tmp_path / "work" / LOCK_NAME).read_text()
    assert str(first.pid) in table_lock_path(orders).read_text()
    after = run_cli("start", "--config", str(config), "--until-caught-up", timeout=300)
    assert after.returncode == 0, after.stderr
    assert f"taking over the lock of {holder}" in after.stderr
    assert "which has ended" in after.stderr  # its pid runs no more
    assert_replicas_match(target, fold(messages))
    assert str(first.pid) not in table_lock_path(orders).read_text()  # the new holder's now
    # A run that ended cleanly let its locks go: the next one takes nothing over.
    again = run_cli("start", "--config", str(config), "--until-caught-up", timeout=300)
    assert again.returncode == 0, again.stderr
    assert "taking over the lock" not in again.stderr, again.stderr
