"""The source side in view, on a real broker and a real PostgreSQL (the real connector's
side: tests/peers/test_source_side_debezium.py).

Debezium's heartbeats, written here as its connectors write them, make an idle table's
lag the time since its connector was last alive: small while they come, growing once
they stop, where it read 0 before. Replication slots that lost WAL or have no reader are
named, with what to do, by ``test-connection``'s checks and the watcher's look.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import engine
from engine.checks.upstream import source_checks
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from engine.upstream import SourceWatch
from tests.integration.replicas import run_cli, write_config
from tests.peers.kafka import free_port
from tests.scratch_postgres import start_scratch_postgres
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _heartbeat(prefix: str) -> tuple[str, bytes, bytes]:
    """A heartbeat as Debezium's JSON converter writes it without schemas."""
    key = json.dumps({"serverName": prefix}).encode()
    value = json.dumps({"ts_ms": int(time.time() * 1000)}).encode()
    return (f"__debezium-heartbeat.{prefix}", key, value)


def test_heartbeats_tell_an_idle_table_from_a_stopped_connector(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    messages = list(InventoryWorkload(seed=3, prefix=topic_prefix, schemas=True).events(300))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics([*topics, f"__debezium-heartbeat.{topic_prefix}"])
    produce_messages(broker.bootstrap_servers, messages)
    port = free_port()
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        tmp_path / "lake",
        max_batch_seconds=0.3,
        source_check_seconds=1,
        metrics_port=port,
        slo={"percent": 80, "within_seconds": 2.5, "window": "20s"},
    )
    work = tmp_path / "work"
    beating = threading.Event()
    beating.set()

    def beat() -> None:
        while beating.is_set():
            produce_messages(broker.bootstrap_servers, [_heartbeat(topic_prefix)])
            time.sleep(0.4)

    beats = threading.Thread(target=beat, daemon=True)
    beats.start()
    try:
        proc = replicator(config)

        def tables() -> list[engine.TableRecord]:
            found = engine.read_status(work)
            return [] if found is None else found.tables

        wait_until(
            lambda: _fresh(tables(), len(topics)),
            "caught up, within seconds of the heartbeats",
            120,
            child=proc,
        )
        status = engine.read_status(work)
        assert status is not None and status.source is not None
        assert topic_prefix in status.source.heartbeats, status.source
        assert not status.source.problems(), status.source.problems()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert f'cdcctl_source_heartbeat_timestamp_seconds{{prefix="{topic_prefix}"}}' in metrics
        for t in status.tables:
            assert f'cdcctl_table_source_problems{{table="{t.table}"}} 0.0' in metrics

        beating.clear()  # the connector stops: an idle table falls behind
        beats.join()
        wait_until(
            lambda: (
                all((t.lag_seconds or 0) > 5 for t in tables()) and len(tables()) == len(topics)
            ),
            "the idle tables' lag growing without heartbeats",
            60,
            child=proc,
        )
        for t in tables():
            assert t.lag_messages == 0, t  # nothing waits in Kafka: the lag is the source's

        # The SLO (80% of 20 s within 2.5 s): out once the lag stays past its goal ...
        def slo_events(kind: str) -> set[str]:
            found = engine.read_status(work)
            return {e.table for e in found.events if e.kind == "slo" and kind in e.message}

        names = {t.table for t in tables()}
        wait_until(lambda: slo_events("out of its SLO") == names, "the SLO missed", 60, child=proc)
        text = run_cli("status", "--config", str(config))
        assert text.returncode == 0, text.stderr
        assert f"heartbeat of {topic_prefix}: " in text.stdout, text.stdout
        assert "SLO 80% of the time within 2.5 s over 20s: MISSED" in text.stdout, text.stdout
        as_json = json.loads(run_cli("status", "--config", str(config), "--json").stdout)
        assert as_json["slo"]["met"] is False and as_json["slo"]["compliance"] < 0.8
        assert all(t["slo_met"] is False for t in as_json["tables"]), as_json["tables"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        for name in names:
            assert f'cdcctl_slo_met{{table="{name}"}} 0.0' in metrics

        # ... and back within it once the heartbeats come again and the window moves on.
        beating.set()
        beats = threading.Thread(target=beat, daemon=True)
        beats.start()
        wait_until(
            lambda: slo_events("back within its SLO") == names, "the SLO met again", 90, child=proc
        )
        as_json = json.loads(run_cli("status", "--config", str(config), "--json").stdout)
        assert as_json["slo"]["met"] is True, as_json["slo"]
        stopped = run_cli("stop", "--config", str(config))
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait() == 0, proc.describe()
    finally:
        beating.clear()


def _fresh(rows: list[engine.TableRecord], count: int) -> bool:
    """Every table caught up, committed, and within 3 s of its connector's heartbeat."""
    return len(rows) == count and all(
        t.lag_messages == 0
        and t.counters.commits > 0
        and t.lag_seconds is not None
        and 0 < t.lag_seconds < 3
        for t in rows
    )


def test_slots_that_lost_wal_or_have_no_reader_are_named_with_the_fix(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    """A scratch server of its own: max_slot_wal_keep_size is set on it."""
    messages = list(InventoryWorkload(seed=4, prefix=topic_prefix, schemas=True).events(30))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    pg = start_scratch_postgres()
    try:
        with pg.connect() as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('cdc_lost', 'pgoutput')")
            conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE TABLE filler (x int, pad text)")
            for _ in range(4):  # WAL past the slot's allowance, then recycled
                conn.execute(
                    "INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g"
                )
                conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            conn.execute("SELECT pg_create_logical_replication_slot('cdc_idle', 'pgoutput')")
            conn.execute("CREATE DATABASE elsewhere")
        with pg.connect("elsewhere") as conn:  # another database's slot is not ours
            conn.execute("SELECT pg_create_logical_replication_slot('theirs', 'pgoutput')")
        config = write_config(
            tmp_path / "cdcctl.toml",
            broker.bootstrap_servers,
            f"^{re.escape(topic_prefix)}\\.",
            tmp_path / "lake",
            source={"database_dsn": pg.dsn},
        )
        cfg = engine.load_config(config)
        checks = {c.name: c for c in source_checks(cfg, None, lambda: topics)}
        lost, idle = checks["postgres.slot cdc_lost"], checks["postgres.slot cdc_idle"]
        assert lost.status == "fail", lost
        assert "lost WAL it still needed" in lost.detail, lost
        assert "pg_drop_replication_slot('cdc_lost')" in lost.fix, lost
        assert idle.status == "warn" and "no connector reads it" in idle.detail, idle
        beats = checks["source.heartbeats"]
        assert beats.status == "warn" and "heartbeat.interval.ms" in beats.fix, beats

        watch = SourceWatch(cfg)
        try:
            view = watch.check()
        finally:
            watch.close()
        assert {s.name: (s.active, s.wal_status) for s in view.slots or ()} == {
            "cdc_idle": (False, "reserved"),
            "cdc_lost": (False, "lost"),
        }
        problems = view.problems()
        assert any("cdc_lost lost WAL" in p for p in problems), problems
        assert any("cdc_idle has no reader" in p for p in problems), problems
        # A table's problems are its connector's: with no Kafka Connect named, none.
        assert view.problems_for(topics[0]) == []
    finally:
        pg.stop()
