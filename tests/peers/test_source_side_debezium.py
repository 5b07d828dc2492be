"""The source side in view with the real connector: PostgreSQL -> Debezium 3.6.1 (Kafka
Connect standalone, its REST API, heartbeats every 0.5 s) -> real Apache Kafka -> a
running replicator (the CLI in a child process).

While the connector runs, ``status`` names it RUNNING, its slot read, and an idle
table's lag is seconds (the time since the connector's newest heartbeat). Paused through
Kafka Connect's REST API, the connector is the table's source problem in ``status`` (text
and ``--json``) and the event log, ``test-connection`` fails its check with the way
back, and the idle table's lag grows; resumed, all of it clears.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from pathlib import Path

import pytest

import engine
from tests.integration.replicas import checks_of, run_cli, write_config
from tests.peers.connect import ConnectStandalone
from tests.peers.kafka import KafkaBroker
from tests.peers.test_debezium_postgres import connector_props
from tests.waiting import wait_until

pytestmark = [pytest.mark.peers]


def _put(url: str) -> None:
    request = urllib.request.Request(url, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 202, 204), response.status


def test_a_paused_connector_is_its_tables_loud_problem_and_its_lag(
    scratch_postgres, kafka_broker: KafkaBroker, tmp_path: Path, replicator
) -> None:
    dbname = f"src_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    with scratch_postgres.connect(dbname) as conn:
        conn.execute("CREATE TABLE public.items (id integer PRIMARY KEY, name text NOT NULL)")
        conn.execute("INSERT INTO public.items SELECT g, 'row ' || g FROM generate_series(1, 20) g")
    tag = uuid.uuid4().hex[:6]
    prefix, slot = f"srcside{tag}", f"src_{tag}"
    props = connector_props(
        scratch_postgres, dbname, prefix, slot,
        **{"heartbeat.interval.ms": "500", "provide.transaction.metadata": "false"},
    )  # fmt: skip
    connect = ConnectStandalone(tmp_path / "connect", kafka_broker, {"src": props})
    connect.start()
    rest = f"http://127.0.0.1:{connect.port}"
    try:
        config = write_config(
            tmp_path / "cdcctl.toml",
            kafka_broker.bootstrap_servers,
            f"^{re.escape(prefix)}\\.public\\.items$",
            tmp_path / "lake",
            source={
                "connect_url": rest,
                "database_dsn": f"postgresql://postgres@127.0.0.1:{scratch_postgres.port}/{dbname}",
            },
            max_batch_seconds=0.3,
            source_check_seconds=1,
        )
        work = tmp_path / "work"
        table = "public_items"
        proc = replicator(config)

        def status() -> engine.StatusRecord:
            found = engine.read_status(work)
            assert found is not None
            return found

        def row() -> engine.TableRecord | None:
            found = engine.read_status(work)
            return None if found is None else found.table(table)

        def well() -> bool:
            t, s = row(), engine.read_status(work)
            return (
                t is not None
                and s is not None
                and t.counters.rows == 20
                and t.lag_messages == 0
                and t.lag_seconds is not None
                and 0 < t.lag_seconds < 3
                and not t.source_problems
                and s.source is not None
                and prefix in s.source.heartbeats
                and [(c.name, c.state) for c in s.source.connectors or ()] == [("src", "RUNNING")]
                and any(x.name == slot and x.active for x in s.source.slots or ())
            )

        try:
            wait_until(well, "the snapshot applied, the connector RUNNING and beating", 180,
                       child=proc)  # fmt: skip
        except AssertionError as waited:
            raise AssertionError(f"{waited}\n{status().to_json()}") from None
        view = status().source
        assert view is not None and view.connectors is not None
        (connector,) = view.connectors
        assert connector.prefix == prefix and connector.slot == slot, connector
        assert [(t.id, t.state) for t in connector.tasks] == [(0, "RUNNING")], connector

        _put(f"{rest}/connectors/src/pause")

        def paused() -> bool:
            t = row()
            return (
                t is not None
                and "connector src is PAUSED" in t.source_problems
                and (t.lag_seconds or 0) > 4
                and t.lag_messages == 0
            )

        wait_until(paused, "the paused connector named and the idle table's lag growing", 60,
                   child=proc)  # fmt: skip
        text = run_cli("status", "--config", str(config))
        assert text.returncode == 0, text.stderr
        assert f"{table}: SOURCE: connector src is PAUSED" in text.stdout, text.stdout
        assert "PROBLEM: connector src is PAUSED" in text.stdout, text.stdout
        as_json = json.loads(run_cli("status", "--config", str(config), "--json").stdout)
        (entry,) = as_json["tables"]
        assert "connector src is PAUSED" in entry["source_problems"], entry
        assert "connector src is PAUSED" in as_json["source"]["problems"], as_json["source"]
        events = [(e.table, e.kind, e.message) for e in status().events]
        assert (table, "source", "connector src is PAUSED") in events, events

        checked = run_cli("test-connection", "--config", str(config), "--json")
        found = checks_of(checked)
        assert checked.returncode == 1, checked.stdout
        check = found["source.connector src"]
        assert check["status"] == "fail" and "is PAUSED" in check["detail"], check
        assert f"PUT {rest}/connectors/src/resume" in check["fix"], check
        assert found["source.heartbeats"]["status"] == "pass", found["source.heartbeats"]

        _put(f"{rest}/connectors/src/resume")
        wait_until(well, "the resumed connector's problems cleared", 90, child=proc)
        events = [(e.table, e.kind, e.message) for e in status().events]
        assert (table, "source", "the source side is well again") in events, events

        # The whole worker ends, its REST API with it: not "well", but unreachable.
        connect.stop()

        def gone() -> bool:
            t = row()
            problems = t.source_problems if t is not None else []
            return any(f"Kafka Connect at {rest} is unreachable" in p for p in problems) and any(
                f"replication slot {slot} has no reader" in p for p in problems
            )

        wait_until(gone, "the worker's end a problem of its table", 60, child=proc)
        events = [(e.table, e.kind, e.message) for e in status().events]
        assert events.count((table, "source", "the source side is well again")) == 1, events
        stopped = run_cli("stop", "--config", str(config))
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait() == 0, proc.describe()
    finally:
        connect.stop()
