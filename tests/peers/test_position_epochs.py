"""A real position epoch change: a PostgreSQL cluster restored into a new one behind the
same Debezium connector (same name, topic prefix and offsets), replicated by the real CLI.

Cluster A (its WAL pushed far ahead with segment switches) is snapshotted and streamed by
Debezium's PostgreSQL connector into real Kafka, and replicated; then A's database is
copied with ``pg_dump``/``pg_restore`` into a new cluster B (a fresh ``initdb``: its LSNs
start low), a row is deleted and one updated there before the switch, and the connector is
pointed at B (``snapshot.mode = when_needed``: the recorded LSN is not on B, so a new slot
and a new snapshot) and B is changed.
``cdcctl start`` stops the table FAILED with the epoch change in words; ``cdcctl resync
--new-epoch`` accepts it; the next start makes the replica equal to B (``cdcctl
validate``), the row deleted on B before the switch deleted too.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from engine.replicator.epochs import MARK
from tests.integration.replicas import run_cli, status_tables, validate_tables, write_config
from tests.peers.connect import (
    ConnectStandalone,
    consume_all,
    payload,
    wait_for_record,
    wait_snapshot_done,
)
from tests.scratch_postgres import _bin, start_scratch_postgres

pytestmark = [pytest.mark.peers]

DB = "shop"


def _props(port: int, prefix: str, slot: str, snapshot_mode: str) -> dict[str, str]:
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(port),
        "database.user": "postgres",
        "database.password": "unused",  # trust authentication on loopback
        "database.dbname": DB,
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": f"pub_{slot}",
        "publication.autocreate.mode": "filtered",
        "schema.include.list": "public",
        "table.include.list": "public.items",
        "snapshot.mode": snapshot_mode,
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }


def _lsn(conn) -> int:
    text = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _has_row(key_id: int, note: str):
    def match(_key, value) -> bool:
        after = (value or {}).get("after") or {}
        return after.get("id") == key_id and after.get("note") == note

    return match


@pytest.fixture
def clusters():
    old, new = start_scratch_postgres(), start_scratch_postgres()
    try:
        yield old, new
    finally:
        old.stop()
        new.stop()


def test_restore_into_a_new_cluster_stops_the_table_and_new_epoch_accepts_it(
    clusters, kafka_broker, tmp_path
) -> None:
    old, new = clusters
    tag = uuid.uuid4().hex[:6]
    prefix, slot = f"ep{tag}", f"ep_{tag}"
    topic = f"{prefix}.public.items"
    with old.connect() as admin:
        admin.execute(f"CREATE DATABASE {DB}")
    a = old.connect(DB)
    a.execute("CREATE TABLE items (id integer PRIMARY KEY, note text)")
    a.execute("INSERT INTO items SELECT g, 'a' || g FROM generate_series(1, 8) g")
    # Push A's WAL far ahead (each switch starts a new 16 MB segment), so that the new
    # cluster's LSNs, which start near 0/1000000 after initdb, all compare lower.
    a.execute("CREATE TABLE filler (n integer)")
    for n in range(12):
        a.execute("INSERT INTO filler VALUES (%s)", (n,))
        a.execute("SELECT pg_switch_wal()")

    connect = ConnectStandalone(
        tmp_path / "connect", kafka_broker, {"epoch": _props(old.port, prefix, slot, "initial")}
    )
    connect.start()
    try:
        wait_snapshot_done(kafka_broker, [topic], connect)
        a.execute("UPDATE items SET note = 'a1-changed' WHERE id = 1")
        a.execute("DELETE FROM items WHERE id = 2")
        a.execute("INSERT INTO items VALUES (9, 'a9')")
        wait_for_record(kafka_broker, topic, _has_row(9, "a9"), connect=connect)
        high = _lsn(a)

        config = write_config(
            tmp_path / "cdcctl.toml", kafka_broker.bootstrap_servers, f"^{prefix}\\.",
            tmp_path / "lake",
        )  # fmt: skip
        done = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        assert status_tables(config)["public_items"]["state"] == "STOPPED"
        assert (
            validate_tables(config, f"{old.dsn[: old.dsn.rindex('/')]}/{DB}")["public_items"][
                "status"
            ]
            == "equal"
        )

        # The switch: A's database copied into the new cluster B, changed there before
        # the connector moves (row 3 deleted, row 4 updated), A retired.
        connect.stop()
        dump = tmp_path / "shop.dump"
        pg_dump = [_bin("pg_dump"), "-h", "127.0.0.1", "-p", str(old.port), "-U", "postgres"]
        subprocess.run([*pg_dump, "-Fc", "-f", str(dump), DB], check=True, timeout=120)
        with new.connect() as admin:
            admin.execute(f"CREATE DATABASE {DB}")
        restore = [_bin("pg_restore"), "-h", "127.0.0.1", "-p", str(new.port), "-U", "postgres"]
        subprocess.run([*restore, "-d", DB, str(dump)], check=True, timeout=120)
        a.close()
        b = new.connect(DB)
        b.execute("DELETE FROM items WHERE id = 3")
        b.execute("UPDATE items SET note = 'b4' WHERE id = 4")
        assert _lsn(b) < high, "the new cluster's positions must compare lower"

        # The same connector (name, topic prefix, offsets) now reads B: a new slot there,
        # and a new snapshot.
        connect.connectors["epoch"].update(_props(new.port, prefix, slot, "when_needed"))
        connect.start()
        b.execute("UPDATE items SET note = 'b5' WHERE id = 5")
        b.execute("DELETE FROM items WHERE id = 6")
        b.execute("INSERT INTO items VALUES (10, 'b10')")
        wait_for_record(kafka_broker, topic, _has_row(10, "b10"), connect=connect)
        assert _lsn(b) < high
    finally:
        connect.stop()

    # The restored cluster's events: the table stops, FAILED, and says what it saw.
    done = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-4000:]
    table = status_tables(config)["public_items"]
    assert table["state"] == "FAILED", table
    error = table["last_error"]
    assert MARK in error, error
    assert f"{topic}[0] offset" in error and "high-water LSN" in error, error
    assert "cdcctl resync public_items --new-epoch" in error, error
    b_dsn = f"{new.dsn[: new.dsn.rindex('/')]}/{DB}"
    report = validate_tables(config, b_dsn)["public_items"]
    assert report["status"] == "different", report  # nothing of B applied yet

    # A second run stops at the same place: nothing was applied or skipped.
    again = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert again.returncode == 3, again.stderr[-3000:]
    assert status_tables(config)["public_items"]["last_error"] == error

    accepted = run_cli("resync", "public_items", "--new-epoch", "--config", str(config))
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "new position epoch accepted" in accepted.stdout, accepted.stdout
    done = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    table = status_tables(config)["public_items"]
    assert table["state"] == "STOPPED", table
    # The rows B's snapshot did not have (3, and 2 gone before) were truncated away.
    assert (table["rows"], table["truncates"]) == (7, 1), table
    report = validate_tables(config, b_dsn)["public_items"]
    assert report["status"] == "equal", report
    assert report["source_rows"] == report["replica_rows"] == 7  # 1, 4, 5, 7, 8, 9, 10
    b.close()


def test_a_replay_after_a_connector_crash_never_trips_the_epoch_rule(
    scratch_postgres, kafka_broker, tmp_path
) -> None:
    """Connect killed mid-stream re-sends what it produced since its last offset flush,
    with the original positions: the table keeps replicating."""
    dbname = f"ep_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    conn = scratch_postgres.connect(dbname)
    conn.execute("CREATE TABLE items (id integer PRIMARY KEY, note text)")
    conn.execute("INSERT INTO items SELECT g, 's' || g FROM generate_series(1, 5) g")
    tag = uuid.uuid4().hex[:6]
    prefix = f"rp{tag}"
    topic = f"{prefix}.public.items"
    props = {
        **_props(scratch_postgres.port, prefix, f"rp_{tag}", "initial"),
        "database.dbname": dbname,
    }
    connect = ConnectStandalone(tmp_path / "connect", kafka_broker, {"replay": props})
    connect.start()
    config = write_config(
        tmp_path / "cdcctl.toml", kafka_broker.bootstrap_servers, f"^{prefix}\\.", tmp_path / "lake"
    )
    try:
        wait_snapshot_done(kafka_broker, [topic], connect)
        connect.stop()  # offsets of the snapshot flushed; none again before the kill
        connect.extra_worker["offset.flush.interval.ms"] = "600000"
        connect.start()
        for n in range(1, 201):
            conn.execute("UPDATE items SET note = %s WHERE id = %s", (f"u{n}", n % 5 + 1))
        conn.execute("INSERT INTO items VALUES (100, 'first')")
        wait_for_record(kafka_broker, topic, _has_row(100, "first"), connect=connect)
        done = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        connect.kill()
        time.sleep(1)
        connect.start()  # replays the 201 changes, then streams on
        conn.execute("INSERT INTO items VALUES (101, 'second')")
        wait_for_record(kafka_broker, topic, _has_row(101, "second"), connect=connect)
    finally:
        connect.stop()
    records = [payload(v) for _, v in consume_all(kafka_broker, [topic])[topic]]
    assert sum(1 for v in records if v and v.get("op") == "u") >= 400, "no replay happened"
    done = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    table = status_tables(config)["public_items"]
    assert table["state"] == "STOPPED", table
    assert table["late"] >= 200, table
    assert (
        validate_tables(
            config, f"postgresql://postgres@127.0.0.1:{scratch_postgres.port}/{dbname}"
        )["public_items"]["status"]
        == "equal"
    )
    conn.close()
