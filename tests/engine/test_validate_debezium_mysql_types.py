"""``cdcctl validate``'s canonical texts for what Debezium's MariaDB connector really sends
(seen with 3.5.0.Final in tests/peers/test_debezium_mariadb.py), against a scratch
MariaDB: TIME with a fraction (MariaDB's TIME_TO_SEC keeps it, MySQL's drops it), zero
dates (NULL in a nullable column, the epoch in a NOT NULL one), BIT(1) as a boolean and
BIT(n) least significant byte first, spatial values as Debezium's wkb/srid struct."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa

from engine.validate import canonical as cn


def _text(conn, expr: str, kind: str, nullable: bool = True) -> str | None:
    with conn.cursor() as cur:
        cur.execute(f"SELECT {cn.mysql_text(expr, kind, nullable)}", ())
        return cur.fetchone()[0]


def test_time_date_and_zero_dates_read_as_debezium_sends_them(scratch_mariadb) -> None:
    with scratch_mariadb.connect() as conn:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00', sql_mode = ''")
        # TIME(6) 13:14:15.123456: Debezium's MicroTime is 47655123456 (the fraction once).
        assert _text(conn, "CAST('13:14:15.123456' AS TIME(6))", cn.TIME) == "47655123456"
        assert _text(conn, "CAST('00:00:01' AS TIME)", cn.TIME) == "1000000"
        replica = cn.replica_text(pa.array([dt.time(13, 14, 15, 123456)]), cn.TIME)
        assert replica.to_pylist() == ["47655123456"]
        zero_date, zero_ts = "CAST('0000-00-00' AS DATE)", "CAST('0000-00-00 00:00:00' AS DATETIME)"
        assert _text(conn, zero_date, cn.DATE) is None
        assert _text(conn, zero_date, cn.DATE, nullable=False) == "1970-01-01"
        assert _text(conn, zero_ts, cn.TS, nullable=False) == "1970-01-01T00:00:00.000000"
        assert _text(conn, "CAST('2024-02-29' AS DATE)", cn.DATE, nullable=False) == "2024-02-29"


def test_bits_and_geometry_compare_with_debezium_values() -> None:
    assert cn.same_value("bit", b"\x01", True) and not cn.same_value("bit", b"\x00", True)
    assert cn.same_value("bit", b"\x0f\xff", b"\xff\x0f")  # BIT(12) 0x0fff, as Debezium's Bits
    assert not cn.same_value("bit", b"\x0f\xff", b"\x0f\xff")
    wkb = bytes.fromhex("0101000000000000000000f83f00000000000000c0")  # POINT(1.5 -2)
    assert cn.same_value("point", (0).to_bytes(4, "little") + wkb, {"wkb": wkb, "srid": None})
    assert cn.same_value("geometry", (4326).to_bytes(4, "little") + wkb, {"wkb": wkb, "srid": 4326})
    assert not cn.same_value(
        "geometry", (4326).to_bytes(4, "little") + wkb, {"wkb": wkb, "srid": 0}
    )


def test_small_decimals_read_positionally(scratch_mariadb) -> None:
    # DECIMAL(38,10) -0.0000000001: Arrow's text is "-1E-10", MariaDB's "-0.0000000001".
    values = ["-0.0000000001", "0.0000000000", "12.5000000000", "-99.0000000100"]
    replica = pa.array([Decimal(v) for v in values], pa.decimal128(38, 10))
    with scratch_mariadb.connect() as conn:
        source = [_text(conn, f"CAST('{v}' AS DECIMAL(38, 10))", cn.DECIMAL) for v in values]
    assert cn.replica_text(replica, cn.DECIMAL).to_pylist() == source
    assert source == ["-0.0000000001", "0", "12.5", "-99.00000001"]


def test_exponent_rewrite_leaves_text_that_is_no_number() -> None:
    # Found by the PostgreSQL peers run without schemas: a numeric column the catalog
    # cannot type keeps Debezium's raw JSON (base64 digits may hold an "E"), which the
    # positional rewrite must leave alone instead of failing validate as a whole.
    raw = '{"scale":2,"value":"AEVy"}'
    texts = pa.array(["-1E-10", raw, None, "2E+3", "12.50"])
    assert cn.replica_text(texts, cn.DECIMAL).to_pylist() == [
        "-0.0000000001",
        raw,
        None,
        "2000",
        "12.5",
    ]
