"""Real Debezium end to end for MariaDB: a scratch MariaDB (binlog ROW, FULL row images)
-> Debezium's MariaDB connector in Kafka Connect standalone -> a real Apache Kafka broker
-> ``cdcctl start --until-caught-up`` (the CLI in a child process) -> Hudi replicas, once
per ``source.ddl`` policy (``fail``, ``apply``, ``ignore``) over the same topics, judged by
``cdcctl validate`` against the database, by direct SQL against hudi-rs's read of the
replicas, by the counters and by what each policy does to each table
(docs/guide/formats.md, "MySQL and schema changes").

Debezium 3.6.1's MySQL connector refuses MariaDB 10.11 (it sends ``SHOW BINARY LOG
STATUS``) and Maven Central serves the separate MariaDB connector only up to 3.5.0.Final:
that one is the pinned set ``interop/debezium-mariadb``, loaded through the worker's
``plugin.path``, and the worker's class path is ``interop/kafka`` without its Debezium
jars (their service files would otherwise leak into the plugin's class loader).

One MariaDB database, one connector (schema change topic, schema history topic,
transaction metadata), one Connect worker for the module. Snapshot, then streaming:
inserts, updates, deletes, a primary-key change, a multi-table transaction, and DDL
mid-stream: ADD COLUMN, DROP COLUMN, RENAME COLUMN, TRUNCATE, RENAME TABLE, each on its
own table so one table's verdict never hides another's.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import struct
import time
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from engine.naming import table_name_for_topic
from tests.integration.replicas import (
    read_replica,
    run_cli,
    status_tables,
    validate_tables,
    write_config,
)
from tests.peers.connect import (
    ConnectStandalone,
    consume_all,
    payload,
    topic_names,
    wait_for_record,
    wait_snapshot_done,
)
from tests.peers.jars import lib_dir

#: One worker runs the module's MariaDB and connector (xdist_group), not both.
pytestmark = [pytest.mark.peers, pytest.mark.xdist_group("mariadb_run")]

CONNECTOR = "io.debezium.connector.mariadb.MariaDbConnector"
FLUSH_MS = 2000
#: Tables of the source database (new_name appears with the RENAME TABLE).
TABLES = ("every_type", "items", "dropper", "renamer", "scratch", "old_name", "marker")

SCHEMA = [
    """CREATE TABLE every_type (
        id INT PRIMARY KEY,
        price DECIMAL(10, 2),
        big_dec DECIMAL(38, 10),
        price_double DOUBLE,
        ubig BIGINT UNSIGNED,
        tiny1 TINYINT(1),
        tiny_min TINYINT,
        small SMALLINT,
        med MEDIUMINT,
        int_u INT UNSIGNED,
        big BIGINT,
        small_u SMALLINT UNSIGNED,
        flt FLOAT,
        yr YEAR,
        d DATE,
        tm TIME(6),
        tm0 TIME,
        dt0 DATETIME,
        dt6 DATETIME(6),
        tstamp TIMESTAMP(6) NULL,
        zero_date_null DATE NULL,
        zero_date DATE NOT NULL DEFAULT '1970-01-01',
        zero_datetime DATETIME NOT NULL DEFAULT '1970-01-01 00:00:00',
        js JSON,
        en ENUM('s', 'm', 'l'),
        st SET('a', 'b', 'c'),
        bit1 BIT(1),
        bits BIT(12),
        blob_col BLOB,
        vb VARBINARY(16),
        bin BINARY(4),
        ch CHAR(5),
        vc VARCHAR(40),
        txt TEXT,
        shape GEOMETRY,
        pt POINT
    )""",
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT, "
    "price DECIMAL(10, 2))",
    "CREATE TABLE dropper (id INT PRIMARY KEY, a VARCHAR(20), gone INT)",
    "CREATE TABLE renamer (id INT PRIMARY KEY, old_col VARCHAR(20), n INT)",
    "CREATE TABLE scratch (id INT PRIMARY KEY, v VARCHAR(20))",
    "CREATE TABLE old_name (id INT PRIMARY KEY, v VARCHAR(20))",
    "CREATE TABLE marker (id INT PRIMARY KEY, note VARCHAR(20))",
]

EVERY_TYPE_ROW = """
INSERT INTO every_type VALUES (
    %(id)s, 99.99, 1234567890123456789012345678.0123456789, 99.99, 18446744073709551615,
    1, -128, -32768, -8388608, 4294967295, -9223372036854775808, 65535, 0.1, 2024,
    '2024-02-29', '13:14:15.123456', '23:59:59', '2024-03-04 05:06:07',
    '2024-03-04 05:06:07.654321', '2024-03-04 05:06:07.654321', '0000-00-00', '0000-00-00',
    '0000-00-00 00:00:00', '{"a": [1, 2]}', 'm', 'a,c', b'1', b'111100001111',
    x'000162696e617279', x'fbff00', x'01020304', 'ab', 'varchar é', 'text "q" \\\\ ,:',
    ST_GeomFromText('LINESTRING(0 0, 1 1, 2 0)', 4326), ST_GeomFromText('POINT(1.5 -2)')
)
"""

EVERY_TYPE_NULLS = "INSERT INTO every_type (id) VALUES (%(id)s)"

EVERY_TYPE_EDGE = """
INSERT INTO every_type (id, price, big_dec, price_double, ubig, tiny1, tiny_min, small, med,
    int_u, big, small_u, flt, yr, d, tm, tm0, dt0, dt6, tstamp, zero_date, zero_datetime,
    js, en, st, bit1, bits, blob_col, vb, bin, ch, vc, txt)
VALUES (%(id)s, -12345678.90, -0.0000000001, -0.5, 0, 0, 127, 32767, 8388607, 0,
    9223372036854775807, 0, -2.5, 1901, '1000-01-01', '00:00:00', '00:00:01',
    '1970-01-01 00:00:00', '9999-12-31 23:59:59.999999', '1970-01-01 00:00:01', '2000-01-01',
    '2000-01-01 00:00:00', 'null', 's', '', b'0', b'000000000000', x'', x'', x'00000000', '',
    '', '')
"""


def connector_props(db, dbname: str, prefix: str, broker) -> dict[str, str]:
    return {
        "connector.class": CONNECTOR,
        "database.hostname": "127.0.0.1",
        "database.port": str(db.port),
        "database.user": "dbz",
        "database.password": "dbz-secret",
        "database.server.id": "5401",
        "database.include.list": dbname,
        "topic.prefix": prefix,
        "snapshot.mode": "initial",
        "include.schema.changes": "true",
        "provide.transaction.metadata": "true",
        "bigint.unsigned.handling.mode": "precise",
        # TRUNCATE TABLE reaches Kafka only as an op=t event on the table's topic (the
        # connector writes no schema change record for it); the default skips it.
        "skipped.operations": "none",
        "schema.history.internal.kafka.bootstrap.servers": broker.bootstrap_servers,
        "schema.history.internal.kafka.topic": f"{prefix}-schemahistory",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }


def worker_class_path() -> str:
    """interop/kafka without its Debezium 3.6.1 jars: the MariaDB connector's 3.5.0 jars
    come from plugin.path, and a service file of a 3.6.1 jar on the class path would name
    a class the plugin's loader sees as another type ("not a subtype")."""
    jars = sorted(lib_dir("kafka").glob("*.jar"))
    return os.pathsep.join(str(j) for j in jars if not j.name.startswith("debezium-"))


class Workload:
    """The SQL the test runs, and what it did per table as Debezium reports it (a
    primary-key change is a delete and a create)."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.did: dict[str, Counter] = {t: Counter() for t in (*TABLES, "new_name")}
        self.snapshot_rows: dict[str, int] = {}

    def sql(self, statement: str, params: Any = None) -> None:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)

    def run(self, statement: str, params: Any = None, *, table: str, op: str, n: int = 1) -> None:
        with self.conn.cursor() as cur:
            changed = cur.execute(statement, params)
        assert changed == n, (statement, changed, n)
        self.did[table][op] += n

    def snapshot_data(self) -> None:
        s = self.sql
        for i in (1, 2):
            s(EVERY_TYPE_ROW, {"id": i})
        s(EVERY_TYPE_NULLS, {"id": 3})
        s(EVERY_TYPE_EDGE, {"id": 4})
        for i in range(1, 31):
            s("INSERT INTO items VALUES (%s, %s, %s, %s)", (i, f"item {i}", i, Decimal(i) / 4))
        for i in range(1, 6):
            s("INSERT INTO dropper VALUES (%s, %s, %s)", (i, f"a{i}", i * 10))
            s("INSERT INTO renamer VALUES (%s, %s, %s)", (i, f"o{i}", i))
            s("INSERT INTO old_name VALUES (%s, %s)", (i, f"v{i}"))
        for i in range(1, 11):
            s("INSERT INTO scratch VALUES (%s, %s)", (i, f"v{i}"))
        s("INSERT INTO marker VALUES (0, 'snapshot')")
        self.snapshot_rows = {
            "every_type": 4, "items": 30, "dropper": 5, "renamer": 5, "scratch": 10,
            "old_name": 5, "marker": 1, "new_name": 0,
        }  # fmt: skip

    def stream(self) -> None:
        r = self.run
        for i in (10, 11):
            r(EVERY_TYPE_ROW, {"id": i}, table="every_type", op="c")
        r(EVERY_TYPE_NULLS, {"id": 12}, table="every_type", op="c")
        r(EVERY_TYPE_EDGE, {"id": 13}, table="every_type", op="c")
        r("UPDATE every_type SET price = price + 1, txt = 'updated', js = '[7]' "
          "WHERE id IN (1, 10)", table="every_type", op="u", n=2)  # fmt: skip
        r("DELETE FROM every_type WHERE id = 2", table="every_type", op="d")
        r("INSERT INTO items VALUES (31, 'item 31', 31, 7.75), (32, 'item 32', 32, 8.00)",
          table="items", op="c", n=2)  # fmt: skip
        r("UPDATE items SET qty = qty + 100 WHERE id <= 10", table="items", op="u", n=10)
        r("DELETE FROM items WHERE id BETWEEN 21 AND 25", table="items", op="d", n=5)
        # A primary-key change: Debezium sends a delete of the old key and a create.
        r("UPDATE items SET id = 1000 WHERE id = 3", table="items", op="d")
        self.did["items"]["c"] += 1
        # A multi-table transaction.
        self.conn.begin()
        r("INSERT INTO items VALUES (2000, 'tx', 1, 9.99)", table="items", op="c")
        r("UPDATE every_type SET int_u = 7 WHERE id = 1", table="every_type", op="u")
        r("INSERT INTO scratch VALUES (100, 'tx')", table="scratch", op="c")
        r("UPDATE dropper SET a = 'tx' WHERE id = 1", table="dropper", op="u")
        self.conn.commit()
        # DDL mid-stream, with rows before and after each statement.
        self.sql("ALTER TABLE items ADD COLUMN extra VARCHAR(20)")
        r("INSERT INTO items VALUES (3000, 'new col', 1, 1.00, 'extra value')",
          table="items", op="c")  # fmt: skip
        r("UPDATE items SET extra = 'changed' WHERE id BETWEEN 11 AND 15", table="items", op="u",
          n=5)  # fmt: skip
        r("UPDATE dropper SET gone = 99 WHERE id = 2", table="dropper", op="u")
        self.sql("ALTER TABLE dropper DROP COLUMN gone")
        r("INSERT INTO dropper VALUES (6, 'after drop'), (7, 'after drop')", table="dropper",
          op="c", n=2)  # fmt: skip
        r("UPDATE dropper SET a = 'upd after drop' WHERE id = 3", table="dropper", op="u")
        self.sql("ALTER TABLE renamer RENAME COLUMN old_col TO new_col")
        r("INSERT INTO renamer VALUES (6, 'after rename', 6)", table="renamer", op="c")
        r("UPDATE renamer SET new_col = 'upd', n = n + 1 WHERE id = 2", table="renamer", op="u")
        r("INSERT INTO scratch VALUES (101, 'before truncate')", table="scratch", op="c")
        self.sql("TRUNCATE TABLE scratch")
        self.did["scratch"]["t"] += 1
        r("INSERT INTO scratch VALUES (1, 'after truncate'), (2, 'after truncate')",
          table="scratch", op="c", n=2)  # fmt: skip
        r("UPDATE old_name SET v = 'before rename' WHERE id = 1", table="old_name", op="u")
        self.sql("RENAME TABLE old_name TO new_name")
        r("INSERT INTO new_name VALUES (6, 'after rename')", table="new_name", op="c")
        r("UPDATE new_name SET v = 'upd after rename' WHERE id = 2", table="new_name", op="u")
        r("DELETE FROM new_name WHERE id = 3", table="new_name", op="d")

    def mark(self, n: int) -> None:
        self.run("INSERT INTO marker VALUES (%s, 'mark')", (n,), table="marker", op="c")


@pytest.fixture(scope="module")
def mariadb_run(scratch_mariadb, kafka_broker, tmp_path_factory):
    """The database, changed while Debezium's MariaDB connector streams it to Kafka."""
    tmp = tmp_path_factory.mktemp("debezium_mariadb")
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    dbname = f"shop_{tag}"
    scratch_mariadb.create_replication_user("dbz", "dbz-secret")
    conn = scratch_mariadb.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{dbname}`")
        cur.execute(f"USE `{dbname}`")
        cur.execute("SET time_zone = '+00:00', sql_mode = ''")
        for statement in SCHEMA:
            cur.execute(statement)
    work = Workload(conn)
    work.snapshot_data()
    prefix = f"mdb{tag}"
    props = connector_props(scratch_mariadb, dbname, prefix, kafka_broker)
    connect = ConnectStandalone(
        tmp / "connect", kafka_broker, {"mariadb": props}, schemas=True,
        worker={
            "offset.flush.interval.ms": str(FLUSH_MS),
            "plugin.path": str(lib_dir("debezium-mariadb").parent),
        },
        class_path=worker_class_path(),
    )  # fmt: skip
    connect.start()
    try:
        wait_snapshot_done(
            kafka_broker, [f"{prefix}.{dbname}.{t}" for t in TABLES], connect, timeout=180
        )
        time.sleep(2 * FLUSH_MS / 1000)
        work.stream()
        work.mark(1)
        wait_for_record(
            kafka_broker, f"{prefix}.{dbname}.marker",
            lambda k, v: ((v or {}).get("after") or {}).get("id") == 1, connect=connect,
        )  # fmt: skip
        produced = time.monotonic() - started
        yield {
            "db": scratch_mariadb,
            "dbname": dbname,
            "dsn": f"mysql://dbz:dbz-secret@127.0.0.1:{scratch_mariadb.port}/{dbname}",
            "conn": conn,
            "work": work,
            "prefix": prefix,
            "connect": connect,
            "tmp": tmp,
            "produced_s": round(produced, 1),
        }
    finally:
        connect.stop()
        conn.close()


# ----------------------------------------------------------------------------- helpers


def replicate(broker, run: dict, policy: str) -> tuple[Path, Path, float, Any]:
    """``cdcctl start --until-caught-up`` over the connector's topics (the schema change
    topic included) with ``source.ddl = policy``."""
    prefix = run["prefix"]
    folder = run["tmp"] / f"cdcctl_{policy}"
    folder.mkdir()
    target = folder / "lake"
    config = write_config(
        folder / "cdcctl.toml", broker.bootstrap_servers, f"^{prefix}(\\..*)?$", target,
        source={"ddl": policy},
    )  # fmt: skip
    started = time.monotonic()
    done = run_cli("start", "--config", str(config), "--until-caught-up", timeout=300)
    took = time.monotonic() - started
    (folder / "start.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    return config, target, took, done


def message_counts(broker, prefix: str) -> dict[str, Counter]:
    """Per topic, the records Debezium wrote: row events by op, tombstones, schema changes
    and transaction markers."""
    topics = sorted(t for t in topic_names(broker) if t == prefix or t.startswith(prefix))
    out: dict[str, Counter] = {}
    for topic, records in consume_all(broker, topics).items():
        counts: Counter = Counter()
        for _, value in records:
            value = payload(value)
            if value is None:
                counts["tombstone"] += 1
            elif value.get("op"):
                counts[value["op"]] += 1
            elif "ddl" in value:
                counts["ddl"] += 1
            elif value.get("status"):
                counts[value["status"]] += 1
            else:
                counts["other"] += 1
        out[topic] = counts
    return out


def source_count(conn, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM `{table}`")
        return int(cur.fetchone()[0])


# ----------------------------------------------------------------------------- direct SQL

#: every_type columns read from MariaDB as the replica holds them (Debezium's mapping).
SOURCE_EXPR = {
    "bit1": "bit1 + 0",
    "bits": "bits + 0",
    "shape": "ST_AsWKB(shape), ST_SRID(shape)",
    "pt": "ST_AsWKB(pt), ST_SRID(pt)",
    "yr": "yr + 0",
}


NOT_NULL_ZERO = {"zero_date": dt.date(1970, 1, 1), "zero_datetime": dt.datetime(1970, 1, 1)}


def _from_source(column: str, v: Any, extra: Any = None) -> Any:
    """A value as pymysql reads it, in the form Debezium gives the replica."""
    if column in ("shape", "pt"):
        return None if v is None else {"wkb": bytes(v), "srid": extra}
    if isinstance(v, str) and v.startswith("0000-00-00"):
        # A zero date: Debezium sends null for a nullable column, the epoch otherwise.
        return NOT_NULL_ZERO.get(column)
    if v is None:
        return None
    if column == "bit1":
        return bool(v)
    if column == "bits":  # Debezium's Bits: the value's bytes, least significant first
        return int(v).to_bytes(2, "little")
    if column == "tstamp":
        return v.replace(tzinfo=dt.UTC)
    if column == "flt":  # FLOAT is single precision: compare its float32 bits
        return struct.pack("<f", v)
    return v


def _from_replica(column: str, v: Any) -> Any:
    if v is None:
        return None
    if column in ("shape", "pt"):  # Geometry (wkb, srid) / Point (x, y, wkb, srid)
        return {"wkb": v["wkb"], "srid": v["srid"] or 0}
    if column in ("tm", "tm0"):
        return dt.timedelta(
            hours=v.hour, minutes=v.minute, seconds=v.second, microseconds=v.microsecond
        )
    if column == "flt":
        return struct.pack("<f", v)
    return v


def direct_sql_diffs(run: dict, target: Path, table: str, policy: str) -> tuple[int, list]:
    """The replica read by hudi-rs against ``SELECT`` of the source table, column by
    column: the rows compared and every (key, column, source, replica) that differs."""
    prefix, dbname, conn = run["prefix"], run["dbname"], run["conn"]
    replica = read_replica(target / table_name_for_topic(f"{prefix}.{dbname}.{table}"))
    with conn.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position",
            (dbname, table),
        )
        names = [r[0] for r in cur.fetchall()]
        sample = next(iter(replica.values()))
        missing_cols = [n for n in names if n not in sample]
        assert not missing_cols, (table, policy, missing_cols, sorted(sample))
        exprs = ", ".join(SOURCE_EXPR.get(n, f"`{n}`") for n in names)
        cur.execute(f"SELECT {exprs} FROM `{table}` ORDER BY id")
        rows = cur.fetchall()
    assert len(rows) == len(replica), (table, policy, len(rows), len(replica))
    diffs = []
    for row in rows:
        values = list(row)
        key = str(values[0])
        got = replica.get(key)
        assert got is not None, f"{table}: key {key} missing from the replica"
        for name in names:
            v = values.pop(0)
            extra = values.pop(0) if name in ("shape", "pt") else None
            want = _from_source(name, v, extra)
            have = _from_replica(name, got[name])
            if want != have:
                diffs.append((key, name, want, have))
    return len(rows), diffs


# ----------------------------------------------------------------------------- the tests

COUNTERS = ("rows", "snapshot_rows", "inserts", "updates", "deletes", "truncates", "bad")


def counters(tables: dict, name: str) -> dict[str, int]:
    return {k: tables[name][k] for k in COUNTERS}


def want_counters(run: dict, t: str, rows: int | None = None) -> dict[str, int]:
    did, work = run["work"].did[t], run["work"]
    return {
        "rows": source_count(run["conn"], t) if rows is None else rows,
        "snapshot_rows": work.snapshot_rows[t], "inserts": did["c"], "updates": did["u"],
        "deletes": did["d"], "truncates": did["t"], "bad": 0,
    }  # fmt: skip


def check_common(run: dict, broker, policy: str) -> dict[str, Any]:
    """Replicate with ``policy`` and check what every policy shares: zero dead letters and
    bad messages; the tables whose DDL every policy takes alike (the full types table,
    ADD COLUMN, the truncate) equal to the source by counters, ``cdcctl validate`` and
    direct SQL against hudi-rs; the renamed table's new replica holding exactly the
    events after the rename."""
    config, target, took, done = replicate(broker, run, policy)
    # Under "fail" tables stop, and the run says so by its exit code.
    assert done.returncode == (3 if policy == "fail" else 0), done.stderr[-4000:]
    tables = status_tables(config)
    prefix, dbname = run["prefix"], run["dbname"]
    name = {t: table_name_for_topic(f"{prefix}.{dbname}.{t}") for t in (*TABLES, "new_name")}
    for t in ("every_type", "items", "scratch", "marker"):
        want = want_counters(run, t)
        assert counters(tables, name[t]) == want, (policy, t, tables[name[t]], want)
        assert tables[name[t]]["state"] == "STOPPED", tables[name[t]]
    # new_name: its own topic's events only (the old rows are not copied, docs/guide/formats.md).
    assert counters(tables, name["new_name"]) == want_counters(run, "new_name", rows=2)
    work_dir = target.parent / "work"
    dead = [p for p in work_dir.rglob("*") if p.is_file() and "deadletter" in str(p)]
    assert not dead, f"dead letters under {policy}: {dead}"
    assert all(t["bad"] == 0 for t in tables.values()), {k: t["bad"] for k, t in tables.items()}
    reports = validate_tables(config, run["dsn"])
    (config.parent / "validate.json").write_text(json.dumps(reports, indent=1, default=str))
    for t in ("every_type", "items", "scratch", "marker"):
        r = reports[name[t]]
        assert r["status"] == "equal", (policy, t, r)
        assert r["source_rows"] == r["replica_rows"] == source_count(run["conn"], t)
    r = reports[name["new_name"]]
    assert (r["missing"], r["extra"], r["differing"]) == (3, 0, 0), r  # ids 1, 4, 5
    compared = 0
    for t in ("every_type", "items", "scratch", "marker"):
        rows, diffs = direct_sql_diffs(run, target, t, policy)
        assert not diffs, (policy, t, diffs[:8])
        compared += rows
    return {
        "config": config, "target": target, "tables": tables, "reports": reports,
        "name": name, "cdcctl_s": round(took, 1), "direct_sql_rows": compared,
        "validate_rows": sum(r.get("source_rows") or 0 for r in reports.values()),
        "stderr": done.stderr,
    }  # fmt: skip


def replica_rows(found: dict, run: dict, table: str) -> dict[str, dict]:
    return read_replica(found["target"] / found["name"][table])


def summary(found: dict) -> dict[str, Any]:
    return {
        "cdcctl_s": found["cdcctl_s"],
        "validate_rows": found["validate_rows"],
        "direct_sql_rows": found["direct_sql_rows"],
        "tables": {
            k: (t["state"], t["rows"], t["ddl"]) for k, t in sorted(found["tables"].items())
        },
    }


REPORT: dict[str, Any] = {}


def test_messages_debezium_wrote(mariadb_run, kafka_broker) -> None:
    """What Debezium's MariaDB connector put in Kafka agrees with the workload: the
    snapshot's reads, the streamed ops per table, the schema change topic's DDL."""
    run = mariadb_run
    counts = message_counts(kafka_broker, run["prefix"])
    work: Workload = run["work"]
    prefix, dbname = run["prefix"], run["dbname"]
    for t in (*TABLES, "new_name"):
        c = counts.get(f"{prefix}.{dbname}.{t}", Counter())
        did = work.did[t]
        assert c["r"] == work.snapshot_rows[t], (t, c)
        assert (c["c"], c["u"], c["d"], c["t"]) == (did["c"], did["u"], did["d"], did["t"]), (
            t,
            c,
            did,
        )
    # The schema change topic: per table the snapshot's DROP and CREATE, and the four
    # statements streamed (ADD, DROP and RENAME COLUMN, RENAME TABLE); no TRUNCATE.
    ddl_records = [
        payload(v)["ddl"] for _, v in consume_all(kafka_broker, [prefix])[prefix] if v is not None
    ]
    assert not [d for d in ddl_records if "TRUNCATE" in d.upper()], ddl_records
    ddl = counts[prefix]
    assert ddl["ddl"] >= 5 + len(TABLES), ddl
    REPORT["messages"] = {
        "total": sum(sum(c.values()) for c in counts.values()),
        "by_topic": {k: dict(v) for k, v in counts.items()},
        "produced_s": run["produced_s"],
    }
    print(f"\nDebezium MariaDB messages: {REPORT['messages']}")


def test_ddl_fail(mariadb_run, kafka_broker) -> None:
    """source.ddl = "fail": ADD COLUMN applied; DROP COLUMN, RENAME COLUMN and RENAME
    TABLE stop their table at the change with a message saying what to set; the rows
    before the change are in the replica; every other table goes on."""
    run = mariadb_run
    found = check_common(run, kafka_broker, "fail")
    tables, name = found["tables"], found["name"]
    for t, words in (
        ("dropper", "ALTER TABLE dropper DROP COLUMN gone': dropped gone"),
        ("renamer", "renamed old_col->new_col"),
        ("old_name", f"renamed to 'new_name' (replica {name['new_name']})"),
    ):
        status = tables[name[t]]
        assert status["state"] == "FAILED", status
        assert words in status["last_error"], status["last_error"]
        assert 'set source.ddl = "apply"' in status["last_error"], status["last_error"]
        assert f"[tables.{name[t]}]" in status["last_error"]
        assert f"error: {name[t]}: FAILED: " in found["stderr"]
    # Stopped at the change: the rows before it (snapshot, the updates) are there, none after.
    dropper = replica_rows(found, run, "dropper")
    assert sorted(dropper, key=int) == ["1", "2", "3", "4", "5"]
    assert dropper["2"]["gone"] == 99 and dropper["1"]["a"] == "tx" and dropper["3"]["a"] == "a3"
    renamer = replica_rows(found, run, "renamer")
    assert sorted(renamer, key=int) == ["1", "2", "3", "4", "5"] and "new_col" not in renamer["1"]
    old = replica_rows(found, run, "old_name")
    assert old["1"]["v"] == "before rename" and len(old) == 5
    REPORT["fail"] = summary(found)
    print(f"\nDebezium MariaDB, ddl=fail: {REPORT['fail']}")


def test_ddl_apply(mariadb_run, kafka_broker) -> None:
    """source.ddl = "apply": the dropped column leaves the replica, the renamed column
    keeps its values under the new name (validate and direct SQL equal); the renamed
    table's replica keeps its rows as of the rename."""
    run = mariadb_run
    found = check_common(run, kafka_broker, "apply")
    tables, name, reports = found["tables"], found["name"], found["reports"]
    for t in ("dropper", "renamer"):
        assert tables[name[t]]["state"] == "STOPPED", tables[name[t]]
        assert counters(tables, name[t]) == want_counters(run, t), tables[name[t]]
        assert tables[name[t]]["ddl"] >= 1
        assert reports[name[t]]["status"] == "equal", reports[name[t]]
        rows, diffs = direct_sql_diffs(run, found["target"], t, "apply")
        assert not diffs and rows == source_count(run["conn"], t), diffs[:8]
        found["direct_sql_rows"] += rows
    assert "gone" not in replica_rows(found, run, "dropper")["1"]
    old = replica_rows(found, run, "old_name")
    assert tables[name["old_name"]]["state"] == "STOPPED"
    assert len(old) == 5 and old["1"]["v"] == "before rename"
    REPORT["apply"] = summary(found)
    print(f"\nDebezium MariaDB, ddl=apply: {REPORT['apply']}")


def _kept(report: dict) -> list[str]:
    """The replica's columns the source no longer has, as validate reports them: listed
    as replica-only, or (once a batch of the table's rows without them was judged
    against the replica, which depends on how the events fell into batches) noted as
    kept by ``schema_changes = "keep"`` and not compared."""
    noted = [
        c
        for n in report["notes"]
        if "no longer in the source are kept" in n
        for c in n.split(" no longer")[0].removeprefix("column(s) ").split(", ")
    ]
    return sorted([*report["replica_only_columns"], *noted])


def test_ddl_ignore(mariadb_run, kafka_broker) -> None:
    """source.ddl = "ignore": the schema change topic changes nothing; the tables evolve
    from their rows: a dropped column stays (null in later rows), a renamed column looks
    like a new one (the old one stays, earlier rows have no value under the new name)."""
    run = mariadb_run
    found = check_common(run, kafka_broker, "ignore")
    tables, name, reports = found["tables"], found["name"], found["reports"]
    for t in ("dropper", "renamer", "old_name"):
        assert tables[name[t]]["state"] == "STOPPED", tables[name[t]]
        assert tables[name[t]]["ddl"] >= 1, tables[name[t]]
    for t in ("dropper", "renamer"):
        assert counters(tables, name[t]) == want_counters(run, t), tables[name[t]]
    r = reports[name["dropper"]]
    assert _kept(r) == ["gone"] and r["differing"] == r["missing"] == 0, r
    dropper = replica_rows(found, run, "dropper")
    assert dropper["2"]["gone"] == 99 and dropper["6"]["gone"] is None
    r = reports[name["renamer"]]
    assert _kept(r) == ["old_col"], r
    assert sorted(d["key"] for d in r["differing_rows"]) == ["1", "3", "4", "5"], r
    assert {c["column"] for d in r["differing_rows"] for c in d["columns"]} == {"new_col"}
    renamer = replica_rows(found, run, "renamer")
    assert renamer["1"]["old_col"] == "o1" and renamer["1"]["new_col"] is None
    assert renamer["2"]["new_col"] == "upd" and renamer["6"]["new_col"] == "after rename"
    old = replica_rows(found, run, "old_name")
    assert len(old) == 5 and old["1"]["v"] == "before rename"
    REPORT["ignore"] = summary(found)
    print(f"\nDebezium MariaDB, ddl=ignore: {REPORT['ignore']}")


def _put(url: str) -> None:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10) as r:
        assert r.status in (200, 202, 204), r.status


def test_the_source_side_shows_the_connector_and_how_far_it_is_behind_the_binlog(
    mariadb_run, kafka_broker
) -> None:
    """Kafka Connect's REST API (status, info and the connector's offsets) and MariaDB's
    ``SHOW BINARY LOGS``. Debezium records where to restart: the start of the last
    transaction it read, so a caught-up connector is that transaction's bytes behind the
    end. Paused, a write moves the end and not the connector: it is behind by exactly
    the bytes written more; resumed, its position moves to that write or later. (Last in
    the module: it pauses the connector.)"""
    from engine.config import load_config
    from engine.upstream import SourceWatch
    from tests.waiting import wait_until

    run = mariadb_run
    connect = run["connect"]
    rest = f"http://127.0.0.1:{connect.port}"
    config = write_config(
        run["tmp"] / "source-side.toml",
        kafka_broker.bootstrap_servers,
        f"^{run['prefix']}\\.",
        run["tmp"] / "source-side" / "lake",
        source={"connect_url": rest},
    )
    cfg = load_config(config)
    topic = f"{run['prefix']}.{run['dbname']}.marker"

    def look():
        watch = SourceWatch(cfg, dsn=run["dsn"])
        try:
            view = watch.check()
        finally:
            watch.close()
        assert not view.errors, view.errors
        return view

    last: list = []

    def settled():
        """Two looks a flush apart with the connector at the same place, one
        transaction (well under 4 KiB here) from the end."""
        view = look()
        (binlog,) = view.binlogs
        same = last and last[0] == binlog
        last[:] = [binlog]
        small = binlog.behind_bytes is not None and 0 < binlog.behind_bytes < 4096
        return view if same and small else None

    view = wait_until(settled, "the connector settled at the binlog's end", 60, interval=2.5)
    (connector,) = view.connectors or ()
    assert (connector.name, connector.state, connector.kind) == ("mariadb", "RUNNING", "mysql")
    assert connector.prefix == run["prefix"] and view.problems_for(topic) == []
    before = view.binlogs[0]
    assert before.connector_file == before.server_file, before

    _put(f"{rest}/connectors/mariadb/pause")
    try:
        wait_until(
            lambda: (connect.status("mariadb") or {}).get("connector", {}).get("state") == "PAUSED",
            "the connector PAUSED",
            60,
        )
        run["work"].mark(2)
        paused = look()
        after = paused.binlogs[0]
        assert after.server_file == before.server_file, (before, after)  # no rotation
        grown = after.server_pos - before.server_pos
        assert grown > 0, (before, after)
        assert after.behind_bytes == before.behind_bytes + grown, (before, after)
        assert (after.connector_file, after.connector_pos) == (
            before.connector_file,
            before.connector_pos,
        )
        assert paused.problems_for(topic) == ["connector mariadb is PAUSED"]
    finally:
        _put(f"{rest}/connectors/mariadb/resume")

    def moved_on():
        (binlog,) = look().binlogs
        return binlog.connector_pos is not None and binlog.connector_pos >= before.server_pos

    wait_until(moved_on, "the resumed connector's position at the new write", 90, interval=1)
