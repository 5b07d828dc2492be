"""`cdcctl validate` against real databases: a scratch PostgreSQL whose changes reach the
broker through its own logical decoding, and a scratch MariaDB (tests/scratch_mariadb.py).

Replicas are built the real way (Debezium messages on the embedded broker, `cdcctl start
--until-caught-up` in a child process) and validated with the real CLI.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from engine.hudi import LEASE_FILE
from engine.lock import LOCK_NAME
from engine.playground.broker import produce_messages
from engine.storage import LocalStorage, open_storage
from engine.storage.lease import Lease
from engine.validate import canonical as cn
from engine.validate.compare import make_plan
from engine.validate.replica import Replica
from engine.validate.report import TableReport
from engine.validate.source import TableRef, connect
from tests.integration.replicas import config_text, run_cli, write_config
from tests.pg_logical import LogicalSlot
from tests.s3_support import S3_ENV, s3_settings, s3_target_keys

#: One worker builds the module's PostgreSQL replica (xdist_group), not both.
pytestmark = pytest.mark.xdist_group("validate")

SMALL_SEGMENTS = {"CDCCTL_VALIDATE_SEGMENT_ROWS": "40"}

ITEMS = """
CREATE TABLE public.items (
    id integer PRIMARY KEY,
    small smallint,
    big bigint,
    price numeric(10, 2),
    ratio numeric,
    name varchar(40),
    note text,
    flag boolean,
    day date,
    at_local timestamp,
    at_zone timestamptz,
    clock time,
    doc jsonb,
    raw_doc json,
    blob bytea,
    tags text[],
    nums integer[],
    ident uuid,
    score double precision,
    weight real,
    body text
);
ALTER TABLE public.items REPLICA IDENTITY DEFAULT;
CREATE TABLE public.pairs (a integer, b text, v text, PRIMARY KEY (a, b));
"""

INSERT_ITEMS = """
INSERT INTO public.items
SELECT g, (g %% 300)::smallint, g::bigint * 1000003, round((g * 1.37)::numeric, 2),
       (g::numeric / 7)::numeric(20, 9) * 1.0,
       'name ' || g, CASE WHEN g %% 5 = 0 THEN NULL ELSE 'note é ' || g || ' "q" \\ ,:' END,
       g %% 2 = 0, date '2024-01-01' + g,
       timestamp '2024-03-01 10:00:00.123456' + g * interval '1 hour',
       timestamptz '2024-03-01 10:00:00.654321+02' + g * interval '1 minute',
       time '08:00:00.000001' + g * interval '1 second',
       jsonb_build_object('n', g, 'tag', 'x' || g, 'nested', jsonb_build_array(1.50, 'é', NULL)),
       ('{"b": 1, "a": [1, 2.0], "s": "x\\ny"}')::json,
       decode(md5(g::text), 'hex'), ARRAY['a' || g, 'b,c', NULL, 'd"e'], ARRAY[g, -g, NULL],
       md5(g::text)::uuid, g / 3.0, (g / 7.0)::real,
       (SELECT string_agg(md5(g::text || s::text), '') FROM generate_series(1, 80) s)
FROM generate_series(1, %s) g
"""


def _pg_setup(cluster, prefix: str, rows: int) -> tuple[str, LogicalSlot]:
    dbname = f"v_{uuid.uuid4().hex[:10]}"
    with cluster.connect() as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    conn = cluster.connect(dbname)
    conn.execute("SET TIME ZONE 'UTC'")
    conn.execute(ITEMS)
    slot = LogicalSlot(conn, prefix, slot=f"s_{dbname}")
    conn.execute(INSERT_ITEMS, (rows,))
    conn.execute(
        "INSERT INTO public.pairs SELECT g % 7, 'k' || g, 'v' || g FROM generate_series(1, 120) g"
    )
    dsn = f"postgresql://postgres@127.0.0.1:{cluster.port}/{dbname}"
    return dsn, slot


def _replicate(broker, prefix: str, tmp_path: Path, messages: list) -> Path:
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, f"^{re.escape(prefix)}\\.", target
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr[-3000:]
    return config


def _validate(config: Path, dsn: str, *extra: str, env: dict | None = None) -> tuple[int, dict]:
    run = run_cli("validate", "--config", str(config), "--source", dsn, "--json", *extra, env=env)
    assert run.returncode in (0, 1), run.stderr[-3000:]
    return run.returncode, {r["table"]: r for r in json.loads(run.stdout)}


@pytest.fixture(scope="module")
def pg_replica(scratch_postgres, broker, tmp_path_factory):
    """A scratch database changed by SQL, replicated through logical decoding."""
    prefix = f"pgv_{uuid.uuid4().hex[:8]}"
    tmp = tmp_path_factory.mktemp("validate_pg")
    dsn, slot = _pg_setup(scratch_postgres, prefix, 400)
    conn = slot.conn
    # Updates that leave the TOASTed body unchanged (placeholder), and some that change it.
    conn.execute("UPDATE public.items SET name = 'renamed ' || id WHERE id % 10 = 3")
    conn.execute(
        "UPDATE public.items SET body = repeat(md5(id::text), 70) || 'x', score = -score "
        "WHERE id % 25 = 4"
    )
    conn.execute("DELETE FROM public.items WHERE id % 17 = 0")
    conn.execute("TRUNCATE public.pairs")
    conn.execute(
        "INSERT INTO public.pairs SELECT g % 9, 'k' || g, 'w' || g FROM generate_series(1, 150) g"
    )
    conn.execute("DELETE FROM public.pairs WHERE a = 3")
    messages = slot.changes()
    assert any(b"__debezium_unavailable_value" in (v or b"") for _, _, v in messages)
    config = _replicate(broker, prefix, tmp, messages)
    yield dsn, conn, config
    slot.drop()
    conn.close()


def test_canonical_hash_equal_on_every_type(pg_replica) -> None:
    """Every row's canonical text and hash, computed in PostgreSQL's SQL and over the
    replica, are identical for every column type the replica holds."""
    dsn, _, config = pg_replica
    target = config.parent / "lake"
    replica = Replica.open(target / "public_items")
    db = connect(dsn)
    try:
        report = TableReport("public_items", "", "error")
        ref = TableRef(db.database(), "public", "items")
        plan = make_plan(db, replica, ref, report)
        assert plan is not None, report.error
        kinds = {c.name: c.kind for c in plan.columns}
        assert kinds == {
            "id": cn.INT, "small": cn.INT, "big": cn.INT, "price": cn.DECIMAL,
            "ratio": cn.DECIMAL, "name": cn.TEXT, "note": cn.TEXT, "flag": cn.BOOL,
            "day": cn.DATE, "at_local": cn.TS, "at_zone": cn.TSTZ, "clock": cn.TIME,
            "doc": cn.JSON, "raw_doc": cn.JSON, "blob": cn.BYTES, "tags": cn.ARRAY,
            "nums": cn.ARRAY, "ident": cn.TEXT, "score": cn.FLOAT64, "weight": cn.FLOAT32,
            "body": cn.TEXT,
        }  # fmt: skip
        texts = [db.text_expr(c) for c in plan.hashed]
        rows = db.query(
            f"SELECT t.id, {', '.join(texts)}, {db.hash_expr(db.row_text(texts))} "
            "FROM public.items AS t ORDER BY t.id"
        )
        source = {r[0]: (list(r[1:-1]), int(r[-1])) for r in rows}
        table = pa.concat_tables(list(replica.slices([c.name for c in plan.columns])))
        replica_texts = [cn.replica_text(table.column(c.name), c.kind) for c in plan.hashed]
        hashes = cn.row_hashes(cn.row_texts(replica_texts)).to_pylist()
        ids = table.column("id").to_pylist()
        columns = [t.to_pylist() for t in replica_texts]
        assert sorted(ids) == sorted(source)
        for i, key in enumerate(ids):
            mine = [col[i] for col in columns]
            for c, a, b in zip(plan.hashed, source[key][0], mine, strict=True):
                assert a == b, f"id {key} column {c.name} ({c.kind}): source {a!r} replica {b!r}"
            assert hashes[i] == source[key][1]
    finally:
        db.close()


def test_validate_postgres_end_to_end(pg_replica) -> None:
    dsn, conn, config = pg_replica
    code, reports = _validate(config, dsn)
    assert code == 0, reports
    items, pairs = reports["public_items"], reports["public_pairs"]
    assert items["status"] == "equal" and pairs["status"] == "equal"
    assert items["identity"] == "commit"
    assert items["source_table"].endswith(".public.items")
    live = conn.execute("SELECT count(*) FROM public.items").fetchone()[0]
    assert items["source_rows"] == items["replica_rows"] == live
    assert items["replica_position"].startswith("LSN ")
    assert items["method"] == "rows" and items["rows_compared_row_by_row"] == live

    # Key ranges and key-hash buckets with range hashes: equal too.
    code, reports = _validate(config, dsn, env=SMALL_SEGMENTS)
    assert code == 0, reports
    assert reports["public_items"]["method"] == "ranges"
    assert reports["public_pairs"]["method"] == "key-hash"
    assert reports["public_items"]["ranges_differing"] == 0

    # The replicator is stopped; the source changes: one update, one delete, one insert.
    conn.execute("UPDATE public.items SET note = 'changed', price = 1.50 WHERE id = 7")
    conn.execute("DELETE FROM public.items WHERE id = 11")
    conn.execute("INSERT INTO public.items (id, name) VALUES (100000, 'new')")
    conn.execute("UPDATE public.pairs SET v = 'changed' WHERE a = 1 AND b = 'k10'")
    for env in (None, SMALL_SEGMENTS):
        code, reports = _validate(config, dsn, env=env)
        assert code == 1
        items = reports["public_items"]
        assert items["status"] == "different"
        assert (items["missing"], items["extra"], items["differing"]) == (1, 1, 1)
        assert items["missing_keys"] == ["100000"]
        assert items["extra_keys"] == ["11"]
        [row] = items["differing_rows"]
        assert row["key"] == "7"
        assert {c["column"]: (c["source"], c["replica"]) for c in row["columns"]} == {
            "note": ("changed", 'note é 7 "q" \\ ,:'),
            "price": ("1.5", "9.59"),
        }
        pairs = reports["public_pairs"]
        assert [r["key"] for r in pairs["differing_rows"]] == ["a=1, b=k10"]
        assert pairs["missing"] == pairs["extra"] == 0
    assert 1 <= reports["public_items"]["ranges_differing"] <= 3

    # --recheck with no replicator running: read again at once, still different.
    code, reports = _validate(config, dsn, "--recheck", "--recheck-wait", "5")
    assert code == 1
    recheck = reports["public_items"]["recheck"]
    assert recheck["reached"] is False and recheck["waited_seconds"] < 5
    assert recheck["missing"] == ["100000"] and recheck["extra"] == ["11"]
    assert [d["key"] for d in recheck["differing"]] == ["7"]

    # Passwords never printed; a bad scheme is bad usage.
    run = run_cli("validate", "--config", str(config), "--source", "oracle://u:secret@h/db")
    assert run.returncode == 2 and "secret" not in run.stderr + run.stdout
    run = run_cli(
        "validate", "--config", str(config), "--source", "postgresql://u:secret@127.0.0.1:1/x"
    )
    assert run.returncode == 3 and "secret" not in run.stderr + run.stdout, run.stderr
    run = run_cli("validate", "--config", str(config), "--source", dsn, "--table", "nope")
    assert run.returncode == 2


def test_parallel_and_kept_slices_find_what_rows_find(pg_replica, monkeypatch) -> None:
    """Range hashes over slices read two at a time, with the rows of differing ranges taken
    from the slices kept from the hashing pass or read again, report exactly what the
    comparison of every row by key reports (the slow path, one segment)."""
    from engine.validate import compare

    dsn, conn, config = pg_replica
    target = config.parent / "lake"
    old = conn.execute("SELECT note, price FROM public.items WHERE id = 2").fetchone()
    conn.execute("UPDATE public.items SET note = 'parallel', price = 2.5 WHERE id = 2")
    conn.execute("INSERT INTO public.items (id, name) VALUES (200000, 'new')")
    conn.execute("UPDATE public.pairs SET v = 'parallel' WHERE a = 2 AND b = 'k2'")

    def reports(segment_rows: int, threads: int, keep_bytes: int) -> dict:
        monkeypatch.setattr(compare, "SEGMENT_ROWS", segment_rows)
        monkeypatch.setattr(compare, "READ_THREADS", threads)
        monkeypatch.setattr(compare, "KEEP_BYTES", keep_bytes)
        db = connect(dsn)
        out = {}
        try:
            for name in ("public_items", "public_pairs"):
                replica = Replica.open(target / name)
                report = TableReport(name, "", "error")
                ref = TableRef(db.database(), "public", name.split("_", 1)[1])
                compare.compare_table(db, replica, ref, report)
                big = segment_rows > 10_000
                assert (report.method == "rows") == big, report.method
                out[name] = (
                    report.status, report.source_rows, report.replica_rows, report.missing,
                    report.extra, report.differing, report.missing_keys, report.extra_keys,
                    report.differing_rows, report.replica_position,
                )  # fmt: skip
        finally:
            db.close()
        return out

    keep_all = compare.KEEP_BYTES
    try:
        slow = reports(10**9, 1, 0)
        assert slow["public_items"][0] == slow["public_pairs"][0] == "different"
        assert "200000" in slow["public_items"][6]
        for threads, keep_bytes in ((2, keep_all), (2, 0), (1, keep_all), (2, 20_000)):
            assert reports(40, threads, keep_bytes) == slow, (threads, keep_bytes)
    finally:
        conn.execute("DELETE FROM public.items WHERE id = 200000")
        conn.execute("UPDATE public.items SET note = %s, price = %s WHERE id = 2", old)
        conn.execute("UPDATE public.pairs SET v = 'w2' WHERE a = 2 AND b = 'k2'")


def test_validate_reads_replicas_in_a_bucket(pg_replica, s3, tmp_path: Path) -> None:
    """The same replicas copied byte for byte into a bucket validate as they do in their
    folder (read by hudi-rs from the bucket); a table whose lease is held is reported
    as being written, naming the holder."""
    dsn, _, config = pg_replica
    local = LocalStorage(config.parent / "lake")
    url = f"s3://lake/{tmp_path.name}/lake"
    bucket = open_storage(s3_settings(s3, url))
    for info in local.list():
        if not info.path.endswith(LOCK_NAME):
            bucket.write(info.path, local.read(info.path))
    on_s3 = tmp_path / "cdcctl.toml"
    on_s3.write_text(
        config_text(
            "127.0.0.1:1",
            "^x\\.",
            url,
            target_keys=s3_target_keys(s3.endpoint),
            work_dir=tmp_path / "work",
        )  # fmt: skip
    )

    def essentials(reports: dict) -> dict:
        keys = ("status", "source_rows", "replica_rows", "missing", "extra", "differing",
                "replica_instant", "replica_position", "replicator")  # fmt: skip
        return {name: {k: r.get(k) for k in keys} for name, r in reports.items()}

    _, in_folder = _validate(config, dsn)
    code, in_bucket = _validate(on_s3, dsn, env=S3_ENV)
    assert essentials(in_bucket) == essentials(in_folder)
    assert set(in_bucket) == {"public_items", "public_pairs"}
    assert in_bucket["public_pairs"]["replicator"] is None

    lease = Lease.acquire(bucket.under("public_pairs"), LEASE_FILE, "test")
    try:
        _, in_bucket = _validate(on_s3, dsn, "--table", "public_pairs", env=S3_ENV)
    finally:
        lease.release()
    holder = in_bucket["public_pairs"]["replicator"]
    assert holder and f"pid {os.getpid()}" in holder, in_bucket["public_pairs"]


# ----------------------------------------------------------------------------- MariaDB


def _mysql_events(prefix: str, db: str, table: str, rows: list[dict]) -> list:
    fields = [
        {"type": "int32", "optional": False, "field": "id"},
        {
            "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"},
            "field": "amount",
        },
        {"type": "string", "optional": True, "field": "name"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1, "field": "day"},  # noqa: E501
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "at"},  # noqa: E501
        {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1, "field": "stamp"},  # noqa: E501
        {"type": "string", "optional": True, "field": "doc"},
        {"type": "bytes", "optional": True, "field": "payload"},
        {"type": "double", "optional": True, "field": "score"},
        {"type": "int16", "optional": True, "field": "flag"},
    ]  # fmt: skip
    row_schema = {
        "type": "struct",
        "fields": fields,
        "optional": True,
        "name": f"{prefix}.{db}.{table}.Value",
    }
    source_schema = {
        "type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source",
        "field": "source",
        "fields": [
            {"type": "string", "optional": False, "field": "connector"},
            {"type": "int64", "optional": False, "field": "ts_ms"},
            {"type": "string", "optional": True, "field": "snapshot"},
            {"type": "string", "optional": False, "field": "db"},
            {"type": "string", "optional": True, "field": "table"},
            {"type": "string", "optional": False, "field": "file"},
            {"type": "int64", "optional": False, "field": "pos"},
            {"type": "int32", "optional": False, "field": "row"},
        ],
    }  # fmt: skip
    envelope = {
        "type": "struct", "optional": False, "name": f"{prefix}.{db}.{table}.Envelope",
        "fields": [
            {**row_schema, "field": "before"}, {**row_schema, "field": "after"}, source_schema,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }  # fmt: skip
    key_schema = {
        "type": "struct",
        "fields": [fields[0]],
        "optional": False,
        "name": f"{prefix}.{db}.{table}.Key",
    }
    epoch = dt.datetime(1970, 1, 1)
    topic = f"{prefix}.{db}.{table}"
    out = []
    for i, r in enumerate(rows):
        unscaled = int(r["amount"] * 100)
        after = {
            "id": r["id"],
            "amount": base64.b64encode(unscaled.to_bytes(8, "big", signed=True)).decode(),
            "name": r["name"],
            "day": (r["day"] - dt.date(1970, 1, 1)).days,
            "at": (r["at"] - epoch) // dt.timedelta(microseconds=1),
            "stamp": r["stamp"].strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "doc": r["doc"],
            "payload": base64.b64encode(r["payload"]).decode(),
            "score": r["score"],
            "flag": r["flag"],
        }
        source = {
            "connector": "mysql", "ts_ms": 1_700_000_000_000, "snapshot": "true", "db": db,
            "table": table, "file": "mysql-bin.000003", "pos": 4567, "row": 0,
        }  # fmt: skip
        value = {
            "before": None,
            "after": after,
            "source": source,
            "op": "r",
            "ts_ms": 1_700_000_000_000 + i,
        }
        out.append(
            (
                topic,
                json.dumps({"schema": key_schema, "payload": {"id": r["id"]}}).encode(),
                json.dumps({"schema": envelope, "payload": value}).encode(),
            )
        )
    return out


def test_validate_mariadb(broker, tmp_path: Path, scratch_mariadb) -> None:
    db = f"cdcctl_v_{uuid.uuid4().hex[:8]}"
    conn = scratch_mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(
                f"CREATE TABLE `{db}`.orders (id int PRIMARY KEY, amount decimal(10,2), "
                "name varchar(50), day date, at datetime(6), stamp timestamp(6) NULL, doc json, "
                "payload blob, score double, flag tinyint(1))"
            )
            for i in range(1, 121):
                cur.execute(
                    f"INSERT INTO `{db}`.orders VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        i, Decimal(i) * Decimal("1.25"), f"name é {i}",
                        dt.date(2024, 1, 1) + dt.timedelta(days=i),
                        dt.datetime(2024, 5, 1, 12, 0, 0, 123456) + dt.timedelta(minutes=i),
                        dt.datetime(2024, 5, 2, 8, 0, 0, 5) + dt.timedelta(seconds=i),
                        json.dumps({"n": i, "s": "x"}), bytes([i % 256, 0, 255]), i / 3, i % 2,
                    ),
                )  # fmt: skip
            cur.execute(
                "SELECT id, amount, name, day, at, stamp, doc, payload, score, flag "
                f"FROM `{db}`.orders"
            )
            names = [
                "id",
                "amount",
                "name",
                "day",
                "at",
                "stamp",
                "doc",
                "payload",
                "score",
                "flag",
            ]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        prefix = f"my_{uuid.uuid4().hex[:8]}"
        config = _replicate(broker, prefix, tmp_path, _mysql_events(prefix, db, "orders", rows))
        dsn = scratch_mariadb.dsn
        name = f"{db}_orders"
        code, reports = _validate(config, dsn)
        assert code == 0, reports
        assert reports[name]["status"] == "equal"
        assert reports[name]["source_table"] == f"{db}.orders"
        assert reports[name]["source_rows"] == reports[name]["replica_rows"] == 120
        assert reports[name]["row_only_columns"] == ["score"]
        assert reports[name]["replica_position"] == "binlog 000003:4567"
        code, reports = _validate(config, dsn, env=SMALL_SEGMENTS)
        assert code == 0 and reports[name]["method"] == "ranges", reports

        with conn.cursor() as cur:
            cur.execute(f"UPDATE `{db}`.orders SET name = 'changed', score = 99 WHERE id = 42")
        for env in (None, SMALL_SEGMENTS):
            code, reports = _validate(config, dsn, env=env)
            assert code == 1
            r = reports[name]
            assert (r["missing"], r["extra"], r["differing"]) == (0, 0, 1)
            [row] = r["differing_rows"]
            assert row["key"] == "42"
            assert {c["column"] for c in row["columns"]} == {"name", "score"}

        # A copy of the database under another name, without row 1: --database-map reads it.
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}_copy`")
            cur.execute(f"CREATE TABLE `{db}_copy`.orders LIKE `{db}`.orders")
            cur.execute(f"INSERT INTO `{db}_copy`.orders SELECT * FROM `{db}`.orders WHERE id > 1")
        code, reports = _validate(config, dsn, "--database-map", f"{db}={db}_copy")
        r = reports[name]
        assert code == 1 and r["source_table"] == f"{db}_copy.orders", r
        assert (r["missing"], r["extra"], r["differing"], r["extra_keys"]) == (0, 1, 1, ["1"])
        # A typo in the original is refused: it used to be ignored, and the original
        # itself (on the same server) was read instead of the copy.
        typo = f"{db[:-1]}={db}_copy"
        refused = run_cli("validate", "--config", str(config), "--source", dsn,
                          "--database-map", typo)  # fmt: skip
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        assert (
            f"error: --database-map {typo}: no replica validated comes from database "
            f"{db[:-1]!r}; they come from {db}\n"
        ) in refused.stderr
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}_copy`")
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()


def test_validate_a_restored_copy_under_another_name(
    scratch_postgres, broker, tmp_path: Path
) -> None:
    """A replica of database D compared with a copy of D named otherwise (issue 24 item 7):
    refused without a word, compared with ``--database-map D=COPY``."""
    prefix = f"pgr_{uuid.uuid4().hex[:8]}"
    dsn, slot = _pg_setup(scratch_postgres, prefix, 60)
    original = slot.db
    config = _replicate(broker, prefix, tmp_path, slot.changes())
    slot.drop()
    slot.conn.close()
    restored = f"{original}_restored"
    with scratch_postgres.connect() as admin:  # a copy of the whole database, as a restore is
        admin.execute(f'CREATE DATABASE "{restored}" TEMPLATE "{original}"')
    copy_dsn = dsn.rsplit("/", 1)[0] + f"/{restored}"
    try:
        code, reports = _validate(config, copy_dsn)
        assert code == 1
        for r in reports.values():
            assert r["status"] == "error"
            assert r["error"] == (
                f"the replica comes from database {original!r}, --source names {restored!r}; "
                "if that database is a copy of it (a restore, a clone), say so: "
                f"--database-map {original}={restored}"
            )
        mapping = f"{original}={restored}"
        code, reports = _validate(config, copy_dsn, "--database-map", mapping)
        assert code == 0, reports
        items = reports["public_items"]
        assert items["status"] == reports["public_pairs"]["status"] == "equal"
        assert items["source_table"] == f"{restored}.public.items"
        assert items["source_rows"] == items["replica_rows"] == 60
        assert f"(--database-map {mapping})" in " ".join(items["notes"])
        # It reads the copy: a change there is found.
        with scratch_postgres.connect(restored) as conn:
            conn.execute("UPDATE public.items SET name = 'restored' WHERE id = 5")
        code, reports = _validate(config, copy_dsn, "--database-map", mapping)
        assert code == 1
        assert [r["key"] for r in reports["public_items"]["differing_rows"]] == ["5"]
        # A map to another database than --source names is refused per table; a
        # malformed map is bad usage.
        code, reports = _validate(config, copy_dsn, "--database-map", f"{original}=elsewhere")
        assert (
            code == 1
            and "read as 'elsewhere' by --database-map" in (reports["public_items"]["error"])
        )
        bad = run_cli("validate", "--config", str(config), "--source", copy_dsn,
                      "--database-map", original)  # fmt: skip
        assert bad.returncode == 2, bad.stderr
        assert f"error: --database-map {original!r} is not ORIGINAL=COPY" in bad.stderr
        # An original no replica comes from (a typo) is bad usage, naming the databases
        # the replicas come from; nothing is compared.
        typo = run_cli("validate", "--config", str(config), "--source", copy_dsn,
                       "--database-map", f"{original}x={restored}")  # fmt: skip
        assert typo.returncode == 2 and typo.stdout == "", typo.stderr
        assert typo.stderr.splitlines()[-2:] == [
            f"error: --database-map {original}x={restored}: no replica validated comes from "
            f"database '{original}x'; they come from {original}",
            "  hint: the name before = is the database in the replicas' source blocks",
        ], typo.stderr
    finally:
        with scratch_postgres.connect() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{restored}"')
            admin.execute(f'DROP DATABASE IF EXISTS "{original}"')
