"""Schemaless JSON typed by the source database's catalog (``source.catalog_types``).

Real tables in the session's scratch PostgreSQL and MariaDB; Debezium-shaped schemaless messages
(``schemas.enable=false``: base64 decimals, integer timestamps, days and times, base64
bytes) replicated by the real engine (Spark merge, Hudi writer) and read back by hudi-rs:
the columns have the database's types. A column added at the source after the start is
typed by a second catalog read; a ``[tables.<name>.columns]`` hint wins over the catalog.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from engine.config import config_from_dict
from engine.decode import RecordBatch
from engine.hudi.table import HudiTable
from engine.replicator import Replicator
from tests.engine.test_properties import Msg
from tests.integration.replicas import read_replica

pytestmark = [pytest.mark.spark]

D = decimal.Decimal
EPOCH = dt.datetime(1970, 1, 1)
TS = dt.datetime(2024, 3, 4, 5, 6, 7, 654321)


def _b64_unscaled(value: str, scale: int) -> str:
    n = int(D(value).scaleb(scale))
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def _us(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(microseconds=1)


def _message(topic: str, offset: int, source: dict, after: dict) -> Msg:
    value = {"before": None, "after": after, "source": source, "op": "c", "ts_ms": 1}
    key = json.dumps({"id": after["id"]}).encode()
    return Msg(topic, key, json.dumps(value).encode(), offset)


def _replicator(tmp_path: Path, spark: Any, dsn: str, tables: dict) -> Replicator:
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "database_dsn": dsn,
                "catalog_types": True,
            },
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 1},
            "replicator": {"work_dir": str(tmp_path / "work")},
            "tables": tables,
        }
    )
    return Replicator(cfg, spark=spark)


def _read(path: Path) -> tuple[dict, dict[str, str]]:
    schema = HudiTable.open(path).arrow_schema()
    return read_replica(path), {f.name: str(f.type) for f in schema}


@pytest.fixture
def pg(scratch_postgres) -> str:
    """The scratch PostgreSQL's URL without a database."""
    return f"postgresql://postgres@127.0.0.1:{scratch_postgres.port}"


@pytest.fixture
def pg_database(pg):
    name = f"cdcctl_ct_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def mariadb_database(scratch_mariadb):
    name = f"cdcctl_ct_{uuid.uuid4().hex[:10]}"
    conn = scratch_mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.close()


def test_postgres_catalog_types_schemaless_columns(
    spark, tmp_path: Path, pg: str, pg_database: str
) -> None:
    dsn = f"{pg}/{pg_database}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.orders (id int PRIMARY KEY, price numeric(12,2), "
            "price_text numeric(12,2), created timestamp, created_ms timestamp(3), "
            "at timestamptz, day date, tod time, tod_ms time(3), ttz timetz, raw bytea, "
            "uid uuid, doc jsonb, n bigint, free numeric, label text)"
        )
    # The hint wins: this connector sends price_text as text (decimal.handling.mode=string).
    hints = {"public_orders": {"columns": {"price_text": "decimal(12,2,string)"}}}
    replicator = _replicator(tmp_path, spark, dsn, hints)
    topic = "pg.public.orders"
    source = {"connector": "postgresql", "db": pg_database, "schema": "public",
              "table": "orders", "ts_ms": 1}  # fmt: skip
    after = {
        "id": 1,
        "price": _b64_unscaled("1234.56", 2),
        "price_text": "99.50",
        "created": _us(TS),
        "created_ms": _us(TS) // 1000,
        "at": "2024-03-04T05:06:07.654321Z",
        "day": 19737,
        "tod": 3_600_000_001,
        "tod_ms": 3_600_001,
        "ttz": "09:15:30.5Z",
        "raw": base64.b64encode(b"\x00\xff").decode(),
        "uid": "7C9E6679-7425-40DE-944B-E07FC1F90AE7",
        "doc": '{"a": 1}',
        "n": 5,
        "free": {"scale": 1, "value": _b64_unscaled("1.5", 1)},
        "label": "x",
    }
    replicator.apply([_message(topic, 0, {**source, "lsn": 10}, after)])
    assert not replicator.failing(), [s.error for s in replicator.failing()]

    # A column added at the source after the start: the catalog is read again.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.orders ADD COLUMN extra numeric(6,3)")
    later = {**after, "id": 2, "extra": _b64_unscaled("-1.5", 3)}
    replicator.apply([_message(topic, 1, {**source, "lsn": 20}, later)])
    assert not replicator.failing(), [s.error for s in replicator.failing()]

    rows, types = _read(tmp_path / "lake" / "public_orders")
    assert {k: types[k] for k in after} | {"extra": types["extra"]} == {
        "id": "int64",
        "price": "decimal128(12, 2)",
        "price_text": "decimal128(12, 2)",
        "created": "timestamp[us]",
        "created_ms": "timestamp[us]",
        "at": "timestamp[us, tz=UTC]",
        "day": "date32[day]",
        "tod": "time64[us]",
        "tod_ms": "time64[us]",
        "ttz": "time64[us]",
        "raw": "binary",
        "uid": "string",
        "doc": "string",
        "n": "int64",
        "free": "struct<scale: int64, value: string>",  # numeric without precision: as sent
        "label": "string",
        "extra": "decimal128(6, 3)",
    }
    first = rows["1"]
    assert first["price"] == D("1234.56") and first["price_text"] == D("99.50")
    assert first["created"] == TS and first["created_ms"] == TS.replace(microsecond=654000)
    assert first["at"] == TS.replace(tzinfo=dt.UTC)
    assert first["day"] == dt.date(2024, 1, 15)
    assert first["tod"] == dt.time(1, 0, 0, 1) and first["tod_ms"] == dt.time(1, 0, 0, 1000)
    assert first["ttz"] == dt.time(9, 15, 30, 500000)
    assert first["raw"] == b"\x00\xff" and first["uid"] == "7c9e6679-7425-40de-944b-e07fc1f90ae7"
    assert first["extra"] is None
    assert rows["2"]["extra"] == D("-1.500")


def test_mariadb_catalog_types_schemaless_columns(
    spark, tmp_path: Path, mariadb_database, scratch_mariadb
) -> None:
    db = mariadb_database
    conn = scratch_mariadb.connect()
    with conn, conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {db}.items (id int PRIMARY KEY, amount decimal(10,2), "
            "dt0 datetime, dt6 datetime(6), ts timestamp NULL, d date, t time(6), "
            "blob_col blob, bits bit(12), flag bit(1), n int, name varchar(10))"
        )
    replicator = _replicator(tmp_path, spark, scratch_mariadb.dsn, {})
    topic = f"my.{db}.items"
    source = {"connector": "mysql", "db": db, "table": "items", "file": "mysql-bin.000001",
              "pos": 100, "row": 0, "server_id": 1, "ts_ms": 1}  # fmt: skip
    after = {
        "id": 1,
        "amount": _b64_unscaled("-12.34", 2),
        "dt0": _us(TS) // 1000,
        "dt6": _us(TS),
        "ts": "2024-03-04T05:06:07Z",
        "d": 0,  # a NOT NULL zero date arrives as the epoch
        "t": 1,
        "blob_col": base64.b64encode(b"\x01\x02").decode(),
        "bits": base64.b64encode(b"\xff\x0f").decode(),
        "flag": True,
        "n": 3,
        "name": "a",
    }
    replicator.apply([_message(topic, 0, source, after)])
    assert not replicator.failing(), [s.error for s in replicator.failing()]
    rows, types = _read(tmp_path / "lake" / f"{db}_items")
    assert {k: types[k] for k in after} == {
        "id": "int64",
        "amount": "decimal128(10, 2)",
        "dt0": "timestamp[us]",
        "dt6": "timestamp[us]",
        "ts": "timestamp[us, tz=UTC]",
        "d": "date32[day]",
        "t": "time64[us]",
        "blob_col": "binary",
        "bits": "binary",
        "flag": "bool",
        "n": "int64",
        "name": "string",
    }
    row = rows["1"]
    assert row["amount"] == D("-12.34")
    assert row["dt0"] == TS.replace(microsecond=654000) and row["dt6"] == TS
    assert row["ts"] == dt.datetime(2024, 3, 4, 5, 6, 7, tzinfo=dt.UTC)
    assert row["d"] == dt.date(1970, 1, 1) and row["t"] == dt.time(0, 0, 0, 1)
    assert row["blob_col"] == b"\x01\x02" and row["bits"] == b"\xff\x0f"


def test_a_new_column_whose_catalog_cannot_be_read_again_makes_bad_messages(
    pg: str, pg_database: str
) -> None:
    from engine.decode import decoder_for

    dsn = f"{pg}/{pg_database}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY, price numeric(6,2))")
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "database_dsn": dsn,
                "catalog_types": True,
            },  # fmt: skip
            "target": {"path": "lake"},
        }
    )
    decode = decoder_for(cfg)  # reads the catalog now
    source = {"connector": "postgresql", "schema": "public", "table": "t", "lsn": 1, "ts_ms": 1}
    known = _message("pg.public.t", 0, source, {"id": 1, "price": _b64_unscaled("1.25", 2)})
    # The database goes away; a row with a column the first read did not list arrives.
    with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {pg_database} WITH (FORCE)")
    new = _message("pg.public.t", 1, source, {"id": 2, "price": None, "extra": "AQ=="})
    result = decode(
        RecordBatch(
            "pg.public.t", [known.key(), new.key()], [known.value(), new.value()], [0, 0], [0, 1]
        )
    )
    assert result.batch is not None and result.batch.column("id").to_pylist() == [1]
    assert result.batch.column("price").to_pylist() == [D("1.25")]
    (bad,) = result.bad
    assert (bad.partition, bad.offset) == (0, 1)
    assert "extra" in bad.reason and "reading them again failed" in bad.reason
    assert "replay the dead letters" in bad.reason
