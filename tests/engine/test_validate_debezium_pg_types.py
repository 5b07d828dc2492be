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
