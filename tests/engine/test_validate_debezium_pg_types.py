"""`cdcctl validate`'s canonical text of PostgreSQL types whose replica form is what
Debezium's PostgreSQL connector makes of them, pinned to what Debezium 3.6.1.Final really
sent in the ``peers`` tier (tests/peers/test_debezium_postgres.py): the source's SQL
rendering and the replica's rendering must give the same text."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from engine.validate import canonical as cn

# (source type, SQL literal, replica type, replica value as Debezium 3.6.1 sent it, decoded)
CASES = [
    ("money", "99.95::money", pa.decimal128(38, 2), Decimal("99.95")),
    ("money", "'-1'::money", pa.decimal128(38, 2), Decimal("-1.00")),
    ("timetz", "'09:15:30.5+00'::timetz", pa.time64("us"), dt.time(9, 15, 30, 500000)),
    ("timetz", "'11:15:30.5+02'::timetz", pa.time64("us"), dt.time(9, 15, 30, 500000)),
    # MicroDuration: 14 months of 30.4375 days, 3 days, 04:05:06.78
    ("interval", "'1 year 2 months 3 days 04:05:06.78'::interval", pa.int64(), 37091106780000),
    ("interval", "'-1 microsecond'::interval", pa.int64(), -1),
    ("hstore", "'k=>v, none=>NULL'::hstore", pa.string(), '{"k":"v","none":null}'),
    ("bit", "B'1000000010'::bit(10)", pa.binary(), b"\x02\x02"),
    ("bit", "B'0000000011'::bit(10)", pa.binary(), b"\x03"),
    ("varbit", "B'101'::varbit", pa.binary(), b"\x05"),
    ("varbit", "B'1000000000000001'::varbit", pa.binary(), b"\x01\x80"),
    ("bit", "B'1'::bit(1)", pa.bool_(), True),
    ("bit", "B'0'::bit(1)", pa.bool_(), False),
    ("timestamp", "'infinity'::timestamp", pa.timestamp("us"), dt.datetime.max),
    ("timestamp", "'-infinity'::timestamp", pa.timestamp("us"), dt.datetime(1, 1, 1)),
    ("ltree", "'a.b.c'::ltree", pa.string(), "a.b.c"),
    ("tsvector", "'a:1 b:2'::tsvector", pa.string(), "'a':1 'b':2"),
    ("inet", "'192.168.0.1/24'::inet", pa.string(), "192.168.0.1/24"),
    ("cidr", "'10.0.0.0/8'::cidr", pa.string(), "10.0.0.0/8"),
    ("macaddr", "'08:00:2b:01:02:03'::macaddr", pa.string(), "08:00:2b:01:02:03"),
    ("int4range", "'[1,5)'::int4range", pa.string(), "[1,5)"),
]  # fmt: skip


@pytest.fixture(scope="module")
def pg(scratch_postgres):
    conn = scratch_postgres.connect()
    conn.execute("SET TIME ZONE 'UTC'")
    conn.execute("CREATE EXTENSION IF NOT EXISTS hstore")
    conn.execute("CREATE EXTENSION IF NOT EXISTS ltree")
    yield conn
    conn.close()


@pytest.mark.parametrize(("source_type", "literal", "replica_type", "value"), CASES)
def test_source_and_replica_render_alike(pg, source_type, literal, replica_type, value) -> None:
    kind = cn.column_kind("postgresql", cn.SourceColumn("c", source_type), replica_type)
    assert kind != cn.ROW, f"{source_type} as {replica_type} should be hashed"
    sql = f"SELECT {cn.pg_text('c', kind, source_type)} FROM (SELECT {literal} AS c) t"
    source = pg.execute(sql).fetchone()[0]
    replica = cn.replica_text(pa.array([value], replica_type), kind).to_pylist()[0]
    assert source == replica


def test_null_bits_stay_null(pg) -> None:
    sql = f"SELECT {cn.pg_text('c', cn.BYTES, 'varbit')} FROM (SELECT NULL::varbit AS c) t"
    assert pg.execute(sql).fetchone()[0] is None


def test_point_compared_by_coordinates() -> None:
    replica = {"x": 1.0, "y": 2.0, "wkb": b"\x01", "srid": None}
    assert cn.same_value("point", "(1,2)", replica)
    assert not cn.same_value("point", "(1,2.5)", replica)


def test_row_only_values_as_each_decimal_mode_sends_them(pg) -> None:
    # numeric(10,2)[] under precise, double and string; money read as a number.
    source = [Decimal("1.50"), None]
    assert cn.same_value("_numeric", source, [Decimal("1.50"), None])
    assert cn.same_value("_numeric", source, [1.5, None])
    assert cn.same_value("_numeric", source, ["1.50", None])
    assert not cn.same_value("_numeric", source, ["1.51", None])
    assert not cn.same_value("_numeric", source, ["1.50"])
    sql = f"SELECT {cn.pg_raw('c', 'money')} FROM (SELECT 99.95::money AS c) t"
    assert cn.same_value("money", pg.execute(sql).fetchone()[0], 99.95)


# PostGIS values and the Geometry/Geography struct Debezium 3.6.1 sent for them (wkb as
# hex): the wkb is PostgreSQL's EWKB, SRID flag and SRID (and the Z flag) included.
POSTGIS_CASES = [
    ("geometry", "'SRID=4326;POINT(13.4 52.5)'::geometry(Point, 4326)",
     "0101000020e6100000cdcccccccccc2a400000000000404a40", 4326),
    ("geometry", "'LINESTRING(0 0, 1 1, 2 0.5)'::geometry",
     "01020000000300000000000000000000000000000000000000000000000000f03f000000000000f03f"
     "0000000000000040000000000000e03f", None),
    ("geometry", "'SRID=3857;POINT Z (1 2 3)'::geometry",
     "01010000a0110f0000000000000000f03f00000000000000400000000000000840", 3857),
    ("geography", "'SRID=4326;POINT(-71.06 42.36)'::geography(Point, 4326)",
     "0101000020e6100000a4703d0ad7c351c0ae47e17a142e4540", 4326),
    ("geography", "'MULTIPOINT((0 0), (1 1))'::geography",
     "0104000020e6100000020000000101000000000000000000000000000000000000000101000000000000"
     "000000f03f000000000000f03f", 4326),
]  # fmt: skip


@pytest.fixture(scope="module")
def pg_postgis(scratch_postgres):
    """A database of its own with PostGIS (its tables stay out of the shared one)."""
    from tests.scratch_postgres import create_postgis

    with scratch_postgres.connect() as admin:
        admin.execute("DROP DATABASE IF EXISTS validate_postgis")
        admin.execute("CREATE DATABASE validate_postgis")
    conn = scratch_postgres.connect("validate_postgis")
    create_postgis(conn)
    yield conn
    conn.close()
    with scratch_postgres.connect() as admin:
        admin.execute("DROP DATABASE validate_postgis")


@pytest.mark.parametrize(("source_type", "literal", "wkb", "srid"), POSTGIS_CASES)
def test_postgis_against_debezium_struct(pg_postgis, source_type, literal, wkb, srid) -> None:
    struct_type = pa.struct([("wkb", pa.binary()), ("srid", pa.int32())])
    assert cn.column_kind("postgresql", cn.SourceColumn("c", source_type), struct_type) == cn.ROW
    sql = f"SELECT {cn.pg_raw('c', source_type)}, ST_AsBinary(c) FROM (SELECT {literal} AS c) t"
    source, ogc_wkb = pg_postgis.execute(sql).fetchone()
    replica = {"wkb": bytes.fromhex(wkb), "srid": srid}
    assert cn.same_value(source_type, source, replica)
    assert not cn.same_value(source_type, source, {**replica, "srid": (srid or 0) + 1})
    if bytes(ogc_wkb) != replica["wkb"]:  # OGC WKB is another value's bytes
        assert not cn.same_value(source_type, source, {**replica, "wkb": bytes(ogc_wkb)})
    moved = replica["wkb"][:-1] + bytes([replica["wkb"][-1] ^ 1])
    assert not cn.same_value(source_type, source, {**replica, "wkb": moved})
    assert cn.same_value(source_type, None, None)
    assert not cn.same_value(source_type, source, None)


def test_ewkb_srid() -> None:
    assert cn.ewkb_srid(bytes.fromhex("0101000020e6100000cdcccccccccc2a400000000000404a40")) == 4326
    assert cn.ewkb_srid(bytes.fromhex("01010000a0110f0000000000000000f03f")) == 3857
    assert cn.ewkb_srid(bytes.fromhex("0020000001000010e6")) == 4326  # big endian (XDR)
    assert cn.ewkb_srid(bytes.fromhex("010100000000")) == 0
    assert cn.ewkb_srid(b"\x01") == 0
