"""`cdcctl status`, `pause`, `resume`, `stop` against real `cdcctl start` processes.

The state store's counters must equal the events sent, by op, across runs and across a
SIGKILL; a paused table must not move while the others replicate; `stop` must end the
replicator cleanly; the replicas must equal the oracle throughout.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

import engine
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from engine.state import StateRecorder
from tests.integration.replicas import CliChild, assert_replicas_match, run_cli, write_config
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

Message = tuple[str, bytes | None, bytes | None]
#: Status counter of each Debezium op.
OP_COUNTERS = {"r": "snapshot_rows", "c": "inserts", "u": "updates", "d": "deletes"}


def _ops(messages: list[Message]) -> dict[str, dict[str, int]]:
    """Events sent per table and counter (tombstones are not events)."""
    out: dict[str, dict[str, int]] = {}
    for topic, _, value in messages:
        table = out.setdefault(table_name_for_topic(topic), dict.fromkeys(OP_COUNTERS.values(), 0))
        if value is not None:
            op = re.search(rb'"op":"(\w)"', value)
            assert op is not None
            table[OP_COUNTERS[op.group(1).decode()]] += 1
    return out


def _counters(tables: list[dict], key: str | None = None) -> dict[str, dict[str, int]]:
    return {
        t["table"]: {c: (t[key][c] if key else t[c]) for c in OP_COUNTERS.values()} for t in tables
    }


def _checkpoint(target: Path, topic: str) -> str | None:
    path = target / table_name_for_topic(topic)
    return HudiTable.open(path).checkpoint() if HudiTable.exists(path) else None


def _config(tmp_path: Path, broker, prefix: str) -> tuple[Path, Path]:
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(prefix)}\\.",
        target,
        max_batch_events=1_000,
        max_batch_seconds=0.3,
    )
    return config, target


def test_counters_are_the_events_sent_across_runs_and_a_sigkill(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=21, prefix=topic_prefix, schemas=True).events(8_000))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    config, target = _config(tmp_path, broker, topic_prefix)
    half = len(messages) // 2
    produce_messages(broker.bootstrap_servers, messages[:half])

    # Killed right after a commit, before the store counted it.
    crashed = run_cli(
        "start",
        "--config",
        str(config),
        "--until-caught-up",
        env={"CDCCTL_CRASH_AT": "after_commit:4"},
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    after_crash = run_cli("status", "--config", str(config), "--json")
    assert after_crash.returncode == 0, after_crash.stderr
    rep = json.loads(after_crash.stdout)["replicator"]
    assert rep["state"] == "failed" and rep["alive"] is False
    assert "without stopping cleanly" in rep["error"]

    first = run_cli("start", "--config", str(config), "--until-caught-up")
    assert first.returncode == 0, first.stderr
    produce_messages(broker.bootstrap_servers, messages[half:])
    second = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["replicator"]["state"] == "stopped"
    tables = summary["tables"]
    assert _counters(tables) == _ops(messages)
    assert _counters(tables, "this_run") == _ops(messages[half:])
    for t in tables:
        assert set(engine.STATUS_FIELDS) <= set(t)
        assert t["state"] == "STOPPED" and t["last_error"] is None  # the run has ended
        assert t["lag_messages"] == 0 and t["lag_seconds"] == 0
        assert t["late"] == 0 and t["bad"] == 0 and t["truncates"] == 0
        assert t["commits"] == len(HudiTable.open(target / t["table"]).completed_instants())
        assert t["latency_p50_s"] <= t["latency_p95_s"] <= t["latency_p99_s"]
    # `status` prints the same, whether or not the replicator runs.
    status = run_cli("status", "--config", str(config), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tables"] == tables
    assert_replicas_match(target, fold(messages))


def test_pause_resume_stop_a_live_replicator(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    workload = InventoryWorkload(seed=22, prefix=topic_prefix, schemas=True)
    messages: list[Message] = list(workload.events(3_000))
    topics = sorted({t for t, _, _ in messages})
    orders = next(t for t in topics if t.endswith(".orders"))
    broker.create_topics(topics)
    config, target = _config(tmp_path, broker, topic_prefix)
    produce_messages(broker.bootstrap_servers, messages)
    work = target.parent / "work"

    def caught_up(sent: list[Message], which: list[str]) -> Callable[[], bool]:
        ends = {t: sum(1 for m in sent if m[0] == t) for t in which}
        return lambda: all(_checkpoint(target, t) == f"{t},0:{ends[t]}" for t in which)

    def stop(child: CliChild) -> str:
        stopped = run_cli("stop", "--config", str(config))
        assert stopped.returncode == 0, stopped.stderr
        assert "stopping after the batch in flight" in stopped.stdout
        assert stopped.stdout.endswith("\nstopped\n")  # it waited for the exit
        assert child.wait() == 0, child.describe()
        assert "replicator: stopped" in child.stdout  # the exit summary is `status`'s
        return child.stdout

    def orders_row() -> engine.TableRecord:
        found = engine.read_status(work)
        assert found is not None
        row = found.table(table_name_for_topic(orders))
        assert row is not None
        return row

    proc = replicator(config)
    wait_until(caught_up(messages, topics), "the first events", 180, child=proc)
    running = run_cli("status", "--config", str(config), "--json")
    assert running.returncode == 0, running.stderr
    status = json.loads(running.stdout)
    assert status["replicator"]["state"] == "running" and status["replicator"]["alive"]
    assert status["replicator"]["pid"] == proc.pid
    assert {t["table"] for t in status["tables"]} == {table_name_for_topic(t) for t in topics}

    paused = run_cli("pause", "--config", str(config), table_name_for_topic(orders))
    assert paused.returncode == 0, paused.stderr
    assert f"paused {table_name_for_topic(orders)}" in paused.stdout
    held = _checkpoint(target, orders)
    orders_path = target / table_name_for_topic(orders)
    instants = HudiTable.open(orders_path).completed_instants()

    more = list(workload.stream(2_000))
    produce_messages(broker.bootstrap_servers, more)
    sent = messages + more
    others = [t for t in topics if t != orders]
    wait_until(caught_up(sent, others), "the other tables", child=proc)
    wait_until(
        lambda: (orders_row().lag_messages or 0) > 0, "the paused table's lag", 20, child=proc
    )
    row = orders_row()
    assert row.state == "PAUSED" and row.lag_seconds is not None and row.lag_seconds > 0
    assert _checkpoint(target, orders) == held
    assert instants == HudiTable.open(orders_path).completed_instants()
    assert_replicas_match(
        target, {orders: fold([m for m in messages if m[0] == orders]).get(orders, {})}
    )

    # A pause outlives the replicator: stopped and started again, the table stays put.
    stop(proc)
    proc = replicator(config)

    def looped(seconds: float) -> Callable[[], bool]:  # the new replicator's loop ran so long
        def check() -> bool:
            found = engine.read_status(work)
            assert found is not None
            rep = found.replicator
            if not rep.alive or rep.pid != proc.pid or rep.state != "running":
                return False
            assert rep.started_at is not None and rep.updated_at is not None
            since = dt.datetime.fromisoformat(rep.started_at)
            ran = dt.datetime.fromisoformat(rep.updated_at) - since
            return ran > dt.timedelta(seconds=seconds)

        return check

    wait_until(looped(1), "the restart", child=proc)
    # Two seconds more of its loop, in which a forgotten pause would have applied orders.
    wait_until(looped(3), "three seconds of the new replicator's loop", child=proc)
    assert orders_row().state == "PAUSED"
    assert _checkpoint(target, orders) == held
    assert HudiTable.open(target / table_name_for_topic(orders)).completed_instants() == instants

    resumed = run_cli("resume", "--config", str(config))
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {table_name_for_topic(orders)}" in resumed.stdout
    wait_until(caught_up(sent, topics), "the resumed table", child=proc)
    stop(proc)
    assert_replicas_match(target, fold(sent))

    after = run_cli("status", "--config", str(config), "--json")
    assert after.returncode == 0, after.stderr
    final = json.loads(after.stdout)
    assert final["replicator"]["state"] == "stopped" and not final["replicator"]["alive"]
    # Under a stopped replicator no table reads REPLICATING; the pause was resumed.
    assert all(t["state"] == "STOPPED" for t in final["tables"]), final["tables"]
    assert _counters(final["tables"]) == _ops(sent)
    # Once it is gone, a request says so instead of waiting for nobody.
    nobody = run_cli("pause", "--config", str(config))
    assert nobody.returncode == 1 and "no replicator runs" in nobody.stderr


def test_status_of_a_work_folder_without_state_is_a_clear_message(tmp_path: Path) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "^x\\.", tmp_path / "lake")
    for command in (["status"], ["status", "--json"], ["stop"], ["pause"], ["resume"]):
        r = run_cli(*command, "--config", str(config))
        assert r.returncode == 1, (command, r.stderr)
        assert "Traceback" not in r.stderr and r.stdout == ""
        assert ("no replicator state in" if command[0] == "status" else "no replicator runs") in (
            r.stderr
        )
    # A table named where none is known is the unknown-table error (issue 24: exit 2; it
    # was exit 1, "no replicator runs").
    r = run_cli("pause", "a", "--config", str(config))
    assert r.returncode == 2 and "error: no table `a`; no table is known yet" in r.stderr
    # A replicator that started, matched no topic and was killed: said plainly.
    StateRecorder(tmp_path / "work").started()
    r = run_cli("status", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("replicator: failed (not running; last update 20")
    assert "ended without stopping cleanly" in r.stdout and "table  state" in r.stdout
    assert "recent events:" in r.stdout and "replicator started (pid" in r.stdout
