"""Writes the case files of this folder (run: ``python -m tests.cases.types.generate``).

Every column is given once as Python values: the wire form each Debezium setting puts in
the message (Connect schema and JSON value) is computed from them, and so is the
expected replica value (the rendered form of tests/cases/README.md), independently of
the decoder. Each case holds one table per connector with many columns, so the whole
type matrix costs few Spark runs:

* ``pg-every-type.json``: the PostgreSQL connector's shapes (Connect schemas) under each
  ``decimal.handling.mode``, ``time.precision.mode`` and ``binary.handling.mode``;
* ``mysql-every-type.json``: the MySQL connector's shapes, zero dates included;
* ``schemaless-hints.json``: ``schemas.enable=false`` messages of both connectors typed
  by ``[tables.<name>.columns]`` hints, with values that do not fit (bad messages).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
AVRO = HERE.parent / "debezium-avro"
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_DATE = dt.date(1970, 1, 1)
D = decimal.Decimal


# ---------------------------------------------------------------------------------------
# Wire encodings (what Debezium / Kafka Connect's JsonConverter write)
# ---------------------------------------------------------------------------------------


def unscaled_b64(value: D, scale: int) -> str:
    n = int(value.scaleb(scale, context=decimal.Context(prec=100)))
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def days(d: dt.date) -> int:
    return (d - EPOCH_DATE).days


def since_midnight(t: dt.time, unit: str) -> int:
    us = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    return {"ms": us // 1000, "us": us, "ns": us * 1000}[unit]


def since_epoch(ts: dt.datetime, unit: str) -> int:
    us = (ts - EPOCH) // dt.timedelta(microseconds=1)
    return {"ms": us // 1000, "us": us, "ns": us * 1000}[unit]


def zoned(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def url64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


# ---------------------------------------------------------------------------------------
# Rendering of expected replica values (tests/cases/README.md)
# ---------------------------------------------------------------------------------------


def render(v: Any) -> Any:
    if isinstance(v, D):
        return str(v)
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, dict):
        return {k: render(x) for k, x in v.items()}
    if isinstance(v, list):
        return [render(x) for x in v]
    return v


@dataclass
class Col:
    """A column: its Connect schema, and per value set the wire value and expectation."""

    name: str
    schema: dict
    values: list[tuple[Any, Any]]  # (wire, expected python value) per value set
    arrow: str
    hint: str | None = None
    extra: dict = field(default_factory=dict)


def sch(typ: str, name: str | None = None, **params: str) -> dict:
    out: dict[str, Any] = {"type": typ, "optional": True}
    if name:
        out["name"] = name
        out["version"] = 1  # Debezium's and Connect's semantic types are all version 1
    if params:
        out["parameters"] = dict(params)
    return out


def struct_schema(name: str, *fields: tuple[str, dict]) -> dict:
    return {
        "type": "struct",
        "optional": True,
        "name": name,
        "version": 1,
        "fields": [{**s, "field": f} for f, s in fields],
    }


DEC = "org.apache.kafka.connect.data.Decimal"
T = "io.debezium.time."
WKB_POINT = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2)
WKB_LINE = bytes.fromhex(
    "010200000002000000000000000000000000000000000000000000000000000040000000000000f03f"
)
TS_A = dt.datetime(2024, 3, 4, 5, 6, 7, 654321)
TS_B = dt.datetime(1969, 12, 31, 0, 0, 0, 1)  # before 1970: negative integers
TS_A_MS = TS_A.replace(microsecond=654000)
TS_B_MS = dt.datetime(1969, 12, 30, 23, 59, 59, 999000)
TIME_A = dt.time(13, 14, 15, 123456)
TIME_B = dt.time(0, 0, 0, 1)
UTC = dt.UTC


def dec(value: str | None, scale: int) -> tuple[Any, Any]:
    if value is None:
        return None, None
    d = D(value)
    return unscaled_b64(d, scale), d.quantize(
        D(1).scaleb(-scale), context=decimal.Context(prec=100)
    )


def vsd(value: str) -> tuple[Any, Any]:
    d = D(value)
    scale = -d.as_tuple().exponent  # type: ignore[operator]
    return {"scale": scale, "value": unscaled_b64(d, scale)}, value


def same(*values: Any) -> list[tuple[Any, Any]]:
    return [(v, v) for v in values]


def float32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


# ---------------------------------------------------------------------------------------
# PostgreSQL connector: every logical type under every mode
# ---------------------------------------------------------------------------------------

BIG40 = "12345678901234567890123456789012345678.12"  # 40 digits
BIG100 = "9" * 90 + ".0123456789"  # 100 digits: beyond decimal256


def pg_columns() -> list[Col]:
    return [
        # decimal.handling.mode=precise
        Col(
            "num_12_2",
            sch("bytes", DEC, scale="2", **{"connect.decimal.precision": "12"}),
            [dec("1234.56", 2), dec("-0.01", 2)],
            "decimal128(12, 2)",
        ),
        Col(
            "num_40_2",
            sch("bytes", DEC, scale="2", **{"connect.decimal.precision": "40"}),
            [(unscaled_b64(D(BIG40), 2), BIG40), dec("0.5", 2)[:1] + ("0.50",)],
            "string",
        ),
        Col(
            "num_100_10",
            sch("bytes", DEC, scale="10", **{"connect.decimal.precision": "100"}),
            [(unscaled_b64(D(BIG100), 10), BIG100), (unscaled_b64(D("-1"), 10), "-1.0000000000")],
            "string",
        ),
        Col(
            "money",  # money: Decimal with scale money.fraction.digits, no precision
            sch("bytes", DEC, scale="2"),
            [dec("99.95", 2), dec("-1", 2)],
            "decimal128(38, 2)",
        ),
        Col(
            "num_free",  # numeric without precision: VariableScaleDecimal
            struct_schema(
                "io.debezium.data.VariableScaleDecimal",
                ("scale", {"type": "int32", "optional": False}),
                ("value", {"type": "bytes", "optional": False}),
            ),
            [vsd("-1.234"), vsd("100000000000000000000000000000.5")],
            "string",
        ),
        Col(
            "num_free_hinted",  # ...with a hint: a real decimal
            struct_schema(
                "io.debezium.data.VariableScaleDecimal",
                ("scale", {"type": "int32", "optional": False}),
                ("value", {"type": "bytes", "optional": False}),
            ),
            [(vsd("-1.234")[0], D("-1.2340")), (vsd("42")[0], D("42.0000"))],
            "decimal128(20, 4)",
            hint="decimal(20,4)",
        ),
        # decimal.handling.mode=double
        Col("num_double", sch("double"), same(1234.56, -1e-05), "double"),
        # decimal.handling.mode=string: Debezium sends text; a hint gives the decimal
        Col("num_string", sch("string"), same("1234.56", "NAN"), "string"),
        Col(
            "num_string_hinted",
            sch("string"),
            [("1234.56", D("1234.56")), ("-0.01", D("-0.01"))],
            "decimal128(12, 2)",
            hint="decimal(12,2,string)",
        ),
        Col(
            "num_array",
            {
                "type": "array",
                "optional": True,
                "items": sch("bytes", DEC, scale="2", **{"connect.decimal.precision": "10"}),
            },
            [
                ([dec("1.5", 2)[0], None], [D("1.50"), None]),
                ([], []),
            ],
            "list<item: decimal128(10, 2)>",
        ),
        # time.precision.mode=adaptive (PostgreSQL default)
        Col(
            "d",
            sch("int32", T + "Date"),
            [(19737, dt.date(2024, 1, 15)), (-1, dt.date(1969, 12, 31))],
            "date32[day]",
        ),
        Col(
            "time3",
            sch("int32", T + "Time"),
            [
                (since_midnight(dt.time(13, 14, 15, 123000), "ms"), dt.time(13, 14, 15, 123000)),
                (0, dt.time(0)),
            ],
            "time64[us]",
        ),
        Col(
            "time6",  # also every time under adaptive_time_microseconds
            sch("int64", T + "MicroTime"),
            [(since_midnight(TIME_A, "us"), TIME_A), (since_midnight(TIME_B, "us"), TIME_B)],
            "time64[us]",
        ),
        Col(
            "ts3",
            sch("int64", T + "Timestamp"),
            [(since_epoch(TS_A_MS, "ms"), TS_A_MS), (since_epoch(TS_B_MS, "ms"), TS_B_MS)],
            "timestamp[us]",
        ),
        Col(
            "ts6",
            sch("int64", T + "MicroTimestamp"),
            [(since_epoch(TS_A, "us"), TS_A), (since_epoch(TS_B, "us"), TS_B)],
            "timestamp[us]",
        ),
        Col(
            "ts_infinity",  # +/-infinity: the JDBC driver's sentinels
            sch("int64", T + "MicroTimestamp"),
            [
                (9223372036825200000, dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
                (-9223372036832400000, dt.datetime(1, 1, 1)),
            ],
            "timestamp[us]",
        ),
        Col(
            "tstz",
            sch("string", T + "ZonedTimestamp"),
            [
                (zoned(TS_A), TS_A.replace(tzinfo=UTC)),
                ("1969-12-31T00:00:00Z", dt.datetime(1969, 12, 31, tzinfo=UTC)),
            ],
            "timestamp[us, tz=UTC]",
        ),
        Col(
            "timetz",
            sch("string", T + "ZonedTime"),
            [("09:15:30.5Z", dt.time(9, 15, 30, 500000)), ("23:59:59Z", dt.time(23, 59, 59))],
            "time64[us]",
        ),
        # time.precision.mode=connect
        Col(
            "c_date",
            sch("int32", "org.apache.kafka.connect.data.Date"),
            [(19737, dt.date(2024, 1, 15)), (0, EPOCH_DATE)],
            "date32[day]",
        ),
        Col(
            "c_time",
            sch("int32", "org.apache.kafka.connect.data.Time"),
            [
                (since_midnight(dt.time(1, 2, 3, 4000), "ms"), dt.time(1, 2, 3, 4000)),
                (0, dt.time(0)),
            ],
            "time64[us]",
        ),
        Col(
            "c_ts",
            sch("int64", "org.apache.kafka.connect.data.Timestamp"),
            [(since_epoch(TS_A_MS, "ms"), TS_A_MS), (since_epoch(TS_B_MS, "ms"), TS_B_MS)],
            "timestamp[us]",
        ),
        # time.precision.mode=isostring (newest releases): ISO text in UTC
        Col(
            "iso_date",
            sch("string", T + "IsoDate"),
            [("2024-01-15Z", dt.date(2024, 1, 15)), ("1969-12-31", dt.date(1969, 12, 31))],
            "date32[day]",
        ),
        Col(
            "iso_time",
            sch("string", T + "IsoTime"),
            [("13:14:15.123456Z", TIME_A), ("00:00:00Z", dt.time(0))],
            "time64[us]",
        ),
        Col(
            "iso_ts",
            sch("string", T + "IsoTimestamp"),
            [(zoned(TS_A), TS_A), ("1969-12-31T00:00:00.000001Z", TS_B)],
            "timestamp[us]",
        ),
        # nanosecond types (time.precision.mode=nanoseconds)
        Col(
            "time_ns",
            sch("int64", T + "NanoTime"),
            [(since_midnight(TIME_A, "ns") + 789, TIME_A), (0, dt.time(0))],
            "time64[us]",
        ),
        Col(
            "ts_ns",
            sch("int64", T + "NanoTimestamp"),
            [(since_epoch(TS_A, "ns") + 999, TS_A), (since_epoch(TS_B, "ns"), TS_B)],
            "timestamp[us]",
        ),
        # interval.handling.mode numeric / string
        Col("dur", sch("int64", T + "MicroDuration"), same(90_061_000_001, -1), "int64"),
        Col("ival", sch("string", T + "Interval"), same("P1Y2M3DT4H5M6.78S", "PT0S"), "string"),
        # binary.handling.mode=bytes, base64, base64-url-safe, hex
        Col("bin", sch("bytes"), [(b64(b"\x00\xff\x10"), b"\x00\xff\x10"), ("", b"")], "binary"),
        Col("bin_base64", sch("string"), same(b64(b"\x00\xff\x10"), "+/8="), "string"),
        Col("bin_url", sch("string"), same("-_8=", "AP8Q"), "string"),
        Col("bin_hex", sch("string"), same("00ff10", ""), "string"),
        Col(
            "bin_base64_hinted",
            sch("string"),
            [(b64(b"\x00\xff\x10"), b"\x00\xff\x10"), ("+/8=", b"\xfb\xff")],
            "binary",
            hint="bytes",
        ),
        Col(
            "bin_url_hinted",
            sch("string"),
            [("-_8=", b"\xfb\xff"), ("AP8Q", b"\x00\xff\x10")],
            "binary",
            hint="bytes(base64-url-safe)",
        ),
        Col(
            "bin_hex_hinted",
            sch("string"),
            [("00ff10", b"\x00\xff\x10"), ("", b"")],
            "binary",
            hint="bytes(hex)",
        ),
        # strings with meaning
        Col("js", sch("string", "io.debezium.data.Json"), same('{"a": [1, 2]}', "[]"), "string"),
        Col(
            "uid",
            sch("string", "io.debezium.data.Uuid"),
            same("7c9e6679-7425-40de-944b-e07fc1f90ae7", "00000000-0000-0000-0000-000000000000"),
            "string",
        ),
        Col("xml", sch("string", "io.debezium.data.Xml"), same("<a>1</a>", "<b/>"), "string"),
        Col(
            "mood",
            sch("string", "io.debezium.data.Enum", allowed="sad,ok,happy"),
            same("happy", "sad"),
            "string",
        ),
        Col("path", sch("string", "io.debezium.data.Ltree"), same("a.b.c", "a"), "string"),
        Col("hstore", sch("string", "io.debezium.data.Json"), same('{"k":"v"}', "{}"), "string"),
        Col(  # hstore.handling.mode=map
            "hstore_map",
            {
                "type": "map",
                "optional": True,
                "keys": sch("string") | {"optional": False},
                "values": sch("string"),
            },
            [({"k": "v", "none": None}, [("k", "v"), ("none", None)]), ({}, [])],
            "map<string, string>",
        ),
        Col("tsv", sch("string", "io.debezium.data.Tsvector"), same("'a':1 'b':2", ""), "string"),
        # pgvector: vector, halfvec, sparsevec
        Col(
            "vec",
            {
                "type": "array",
                "optional": True,
                "name": "io.debezium.data.DoubleVector",
                "version": 1,
                "items": {"type": "double", "optional": False},
            },
            same([1.0, -2.5, 3e-07], []),
            "list<item: double>",
        ),
        Col(
            "halfvec",
            {
                "type": "array",
                "optional": True,
                "name": "io.debezium.data.FloatVector",
                "version": 1,
                "items": {"type": "float", "optional": False},
            },
            same([101.0, 0.5], [-1.25]),
            "list<item: float>",
        ),
        Col(
            "sparsevec",  # int16 -> float64 map: kept as its entries (a Hudi map has text keys)
            struct_schema(
                "io.debezium.data.SparseVector",
                ("dimensions", {"type": "int16", "optional": False}),
                (
                    "vector",
                    {
                        "type": "map",
                        "optional": False,
                        "keys": {"type": "int16", "optional": False},
                        "values": {"type": "double", "optional": False},
                    },
                ),
            ),
            [
                (
                    {"dimensions": 3000, "vector": [[1, 301.0], [9, 309.0]]},
                    {
                        "dimensions": 3000,
                        "vector": [{"key": 1, "value": 301.0}, {"key": 9, "value": 309.0}],
                    },
                ),
                ({"dimensions": 5, "vector": []}, {"dimensions": 5, "vector": []}),
            ],
            "struct<dimensions: int32, vector: list<item: struct<key: int32, value: double>>>",
        ),
        # time.precision.mode=structured (newest releases): the components as sent
        Col(
            "ts_structured",
            struct_schema(
                T + "StructuredTimestamp",
                ("year", sch("int32")),
                ("month", sch("int8")),
                ("day", sch("int8")),
                ("hour", sch("int8")),
                ("minute", sch("int8")),
                ("second", sch("int8")),
                ("picoseconds", sch("int64")),
                ("specialValue", sch("string")),
                ("precision", sch("int32")),
            ),
            same(
                {
                    "year": 2024,
                    "month": 3,
                    "day": 4,
                    "hour": 5,
                    "minute": 6,
                    "second": 7,
                    "picoseconds": 654_321_000_000,
                    "specialValue": None,
                    "precision": 6,
                },
                {
                    "year": None,
                    "month": None,
                    "day": None,
                    "hour": None,
                    "minute": None,
                    "second": None,
                    "picoseconds": None,
                    "specialValue": "POSITIVE_INFINITY",
                    "precision": 6,
                },
            ),
            "struct<year: int32, month: int32, day: int32, hour: int32, minute: int32, "
            "second: int32, picoseconds: int64, specialValue: string, precision: int32>",
        ),
        # bits
        Col(
            "bits",
            sch("bytes", "io.debezium.data.Bits", length="10"),
            [(b64(b"\x01\x02"), b"\x01\x02"), (b64(b"\x00\x00"), b"\x00\x00")],
            "binary",
        ),
        Col("bit1", sch("boolean"), same(True, False), "bool"),
        # geometry
        Col(
            "geom",
            struct_schema(
                "io.debezium.data.geometry.Geometry",
                ("wkb", {"type": "bytes", "optional": False}),
                ("srid", {"type": "int32", "optional": True}),
            ),
            [
                ({"wkb": b64(WKB_POINT), "srid": 4326}, {"wkb": WKB_POINT, "srid": 4326}),
                ({"wkb": b64(WKB_LINE), "srid": None}, {"wkb": WKB_LINE, "srid": None}),
            ],
            "struct<wkb: binary, srid: int32>",
        ),
        Col(
            "geog",
            struct_schema(
                "io.debezium.data.geometry.Geography",
                ("wkb", {"type": "bytes", "optional": False}),
                ("srid", {"type": "int32", "optional": True}),
            ),
            [
                ({"wkb": b64(WKB_POINT), "srid": 4326}, {"wkb": WKB_POINT, "srid": 4326}),
                ({"wkb": b64(WKB_POINT), "srid": 0}, {"wkb": WKB_POINT, "srid": 0}),
            ],
            "struct<wkb: binary, srid: int32>",
        ),
        Col(
            "pt",
            struct_schema(
                "io.debezium.data.geometry.Point",
                ("x", {"type": "double", "optional": False}),
                ("y", {"type": "double", "optional": False}),
                ("wkb", {"type": "bytes", "optional": True}),
                ("srid", {"type": "int32", "optional": True}),
            ),
            [
                (
                    {"x": 1.0, "y": 2.0, "wkb": b64(WKB_POINT), "srid": None},
                    {"x": 1.0, "y": 2.0, "wkb": WKB_POINT, "srid": None},
                ),
                (
                    {"x": -1.5, "y": 0.25, "wkb": None, "srid": 3857},
                    {"x": -1.5, "y": 0.25, "wkb": None, "srid": 3857},
                ),
            ],
            "struct<x: double, y: double, wkb: binary, srid: int32>",
        ),
        # integers: smallint (int16), integer, bigint
        Col("small", sch("int16"), same(-32768, 32767), "int32"),
        Col("int4", sch("int32"), same(-(2**31), 2**31 - 1), "int32"),
        Col("int8", sch("int64"), same(-(2**63), 2**63 - 1), "int64"),
        Col("real4", sch("float"), [(0.5, 0.5), (-1.25, -1.25)], "float"),
        Col(
            "circ",
            struct_schema(
                "io.debezium.data.geometry.Circle",
                (
                    "center",
                    struct_schema(
                        "io.debezium.data.geometry.Point",
                        ("x", {"type": "double", "optional": False}),
                        ("y", {"type": "double", "optional": False}),
                        ("wkb", {"type": "bytes", "optional": True}),
                        ("srid", {"type": "int32", "optional": True}),
                    )
                    | {"optional": False},
                ),
                ("radius", {"type": "double", "optional": False}),
            ),
            [
                (
                    {
                        "center": {"x": 1.0, "y": 2.0, "wkb": b64(WKB_POINT), "srid": None},
                        "radius": 10.0,
                    },
                    {
                        "center": {"x": 1.0, "y": 2.0, "wkb": WKB_POINT, "srid": None},
                        "radius": 10.0,
                    },
                ),
                (
                    {"center": {"x": 0.0, "y": -3.5, "wkb": None, "srid": None}, "radius": 0.5},
                    {"center": {"x": 0.0, "y": -3.5, "wkb": None, "srid": None}, "radius": 0.5},
                ),
            ],
            "struct<center: struct<x: double, y: double, wkb: binary, srid: int32>, "
            "radius: double>",
        ),
        Col(
            "line",
            struct_schema(
                "io.debezium.data.geometry.Line",
                *((c, {"type": "double", "optional": False}) for c in ("a", "b", "c")),
            ),
            same({"a": -1.0, "b": 0.0, "c": 0.0}, {"a": 1.0, "b": 2.0, "c": -3.0}),
            "struct<a: double, b: double, c: double>",
        ),
        # arrays
        Col(
            "ints",
            {"type": "array", "optional": True, "items": sch("int32")},
            same([1, None, 3], []),
            "list<item: int32>",
        ),
        Col(
            "texts",
            {"type": "array", "optional": True, "items": sch("string")},
            same(["x", "ü"], [None]),
            "list<item: string>",
        ),
        Col(
            "stamps",
            {"type": "array", "optional": True, "items": sch("int64", T + "MicroTimestamp")},
            [([since_epoch(TS_A, "us")], [TS_A]), ([since_epoch(TS_B, "us"), None], [TS_B, None])],
            "list<item: timestamp[us]>",
        ),
    ]


# ---------------------------------------------------------------------------------------
# MySQL connector
# ---------------------------------------------------------------------------------------

MAX_UBIGINT = 18446744073709551615


def mysql_columns() -> list[Col]:
    return [
        Col(
            "price",
            sch("bytes", DEC, scale="2", **{"connect.decimal.precision": "10"}),
            [dec("99.99", 2), dec("-12345678.9", 2)],
            "decimal128(10, 2)",
        ),
        Col("price_double", sch("double"), same(99.99, -0.5), "double"),
        Col("price_string", sch("string"), same("99.99", "-0.50"), "string"),
        Col(
            "ubig",  # BIGINT UNSIGNED, bigint.unsigned.handling.mode=precise
            sch("bytes", DEC, scale="0", **{"connect.decimal.precision": "20"}),
            [(unscaled_b64(D(MAX_UBIGINT), 0), D(MAX_UBIGINT)), dec("0", 0)],
            "decimal128(20, 0)",
        ),
        Col("tiny1", sch("int8"), same(1, 0), "int32"),
        Col("tiny_min", sch("int8"), same(-128, 127), "int32"),
        Col("small", sch("int16"), same(-32768, 32767), "int32"),  # SMALLINT
        Col("med", sch("int32"), same(-8388608, 8388607), "int32"),  # MEDIUMINT
        Col("int_u", sch("int64"), same(4294967295, 0), "int64"),  # INT UNSIGNED
        Col("big_long", sch("int64"), same(-1, 2**63 - 1), "int64"),  # BIGINT UNSIGNED, long
        Col("tiny1_bool", sch("int8"), [(1, True), (0, False)], "bool", hint="boolean"),
        Col("small_u", sch("int32"), same(65535, 0), "int32"),
        Col("flt", sch("float"), [(0.1, float32(0.1)), (-2.5, -2.5)], "float"),
        Col("yr", sch("int32", T + "Year"), same(2024, 1901), "int32"),
        Col(
            "d",
            sch("int32", T + "Date"),
            [(days(dt.date(2024, 2, 29)), dt.date(2024, 2, 29)), (-719162, dt.date(1, 1, 1))],
            "date32[day]",
        ),
        # time.precision.mode=adaptive_time_microseconds (MySQL default)
        Col(
            "tm",
            sch("int64", T + "MicroTime"),
            [(since_midnight(TIME_A, "us"), TIME_A), (0, dt.time(0))],
            "time64[us]",
        ),
        Col(
            "dt0",
            sch("int64", T + "Timestamp"),
            [(since_epoch(TS_A_MS, "ms"), TS_A_MS), (since_epoch(TS_B_MS, "ms"), TS_B_MS)],
            "timestamp[us]",
        ),
        Col(
            "dt6",
            sch("int64", T + "MicroTimestamp"),
            [(since_epoch(TS_A, "us"), TS_A), (since_epoch(TS_B, "us"), TS_B)],
            "timestamp[us]",
        ),
        Col(
            "tstamp",
            sch("string", T + "ZonedTimestamp"),
            [
                ("2024-03-04T05:06:07Z", dt.datetime(2024, 3, 4, 5, 6, 7, tzinfo=UTC)),
                (zoned(TS_A), TS_A.replace(tzinfo=UTC)),
            ],
            "timestamp[us, tz=UTC]",
        ),
        # zero dates: null when nullable, the epoch when NOT NULL
        Col("zero_date_null", sch("int32", T + "Date"), same(None, None), "date32[day]"),
        Col(
            "zero_date", sch("int32", T + "Date"), [(0, EPOCH_DATE), (0, EPOCH_DATE)], "date32[day]"
        ),
        Col(
            "zero_datetime",
            sch("int64", T + "Timestamp"),
            [(0, EPOCH), (0, EPOCH)],
            "timestamp[us]",
        ),
        Col(
            "zero_timestamp",
            sch("string", T + "ZonedTimestamp"),
            [("1970-01-01T00:00:00Z", EPOCH.replace(tzinfo=UTC))] * 2,
            "timestamp[us, tz=UTC]",
        ),
        # time.precision.mode=connect
        Col(
            "c_time",
            sch("int32", "org.apache.kafka.connect.data.Time"),
            [
                (since_midnight(dt.time(23, 59, 59, 999000), "ms"), dt.time(23, 59, 59, 999000)),
                (0, dt.time(0)),
            ],
            "time64[us]",
        ),
        Col(
            "c_ts",
            sch("int64", "org.apache.kafka.connect.data.Timestamp"),
            [(since_epoch(TS_A_MS, "ms"), TS_A_MS), (0, EPOCH)],
            "timestamp[us]",
        ),
        Col("js", sch("string", "io.debezium.data.Json"), same('{"a":[1,2]}', "null"), "string"),
        Col(
            "en", sch("string", "io.debezium.data.Enum", allowed="s,m,l"), same("m", "s"), "string"
        ),
        Col(
            "st",
            sch("string", "io.debezium.data.EnumSet", allowed="a,b,c"),
            same("a,c", ""),
            "string",
        ),
        Col("bit1", sch("boolean"), same(True, False), "bool"),
        Col(
            "bits",
            sch("bytes", "io.debezium.data.Bits", length="12"),
            [(b64(b"\xff\x0f"), b"\xff\x0f"), (b64(b"\x00\x00"), b"\x00\x00")],
            "binary",
        ),
        Col(
            "blob", sch("bytes"), [(b64(b"\x00\x01binary"), b"\x00\x01binary"), ("", b"")], "binary"
        ),
        Col("blob_hex", sch("string"), same("0001ff", "00"), "string"),
        # binary.handling.mode=base64 and base64-url-safe: text as sent, or a hint's bytes
        Col("blob_base64", sch("string"), same(b64(b"\xfb\xff\x00"), ""), "string"),
        Col("blob_url", sch("string"), same(url64(b"\xfb\xff\x00"), "AA=="), "string"),
        Col(
            "blob_base64_hinted",
            sch("string"),
            [(b64(b"\xfb\xff\x00"), b"\xfb\xff\x00"), ("", b"")],
            "binary",
            hint="bytes",
        ),
        Col(
            "blob_url_hinted",
            sch("string"),
            [(url64(b"\xfb\xff\x00"), b"\xfb\xff\x00"), ("AA==", b"\x00")],
            "binary",
            hint="bytes(base64-url-safe)",
        ),
        Col(
            "blob_hex_hinted",
            sch("string"),
            [("0001ff", b"\x00\x01\xff"), ("00", b"\x00")],
            "binary",
            hint="bytes(hex)",
        ),
        Col(
            "shape",  # MySQL spatial types (POINT too): Geometry with the SRID
            struct_schema(
                "io.debezium.data.geometry.Geometry",
                ("wkb", {"type": "bytes", "optional": False}),
                ("srid", {"type": "int32", "optional": True}),
            ),
            [
                ({"wkb": b64(WKB_POINT), "srid": 4326}, {"wkb": WKB_POINT, "srid": 4326}),
                ({"wkb": b64(WKB_LINE), "srid": 0}, {"wkb": WKB_LINE, "srid": 0}),
            ],
            "struct<wkb: binary, srid: int32>",
        ),
    ]


# ---------------------------------------------------------------------------------------
# Envelopes
# ---------------------------------------------------------------------------------------

PG_SOURCE_SCHEMA = [
    ("version", "string"), ("connector", "string"), ("name", "string"), ("ts_ms", "int64"),
    ("snapshot", "string"), ("db", "string"), ("sequence", "string"), ("schema", "string"),
    ("table", "string"), ("txId", "int64"), ("lsn", "int64"), ("xmin", "int64"),
]  # fmt: skip
MYSQL_SOURCE_SCHEMA = [
    ("version", "string"), ("connector", "string"), ("name", "string"), ("ts_ms", "int64"),
    ("snapshot", "string"), ("db", "string"), ("table", "string"), ("server_id", "int64"),
    ("gtid", "string"), ("file", "string"), ("pos", "int64"), ("row", "int32"),
    ("thread", "int64"),
]  # fmt: skip


def source_block(connector: str, ns: str, table: str, n: int) -> dict:
    common = {"version": "2.7.0.Final", "connector": connector, "name": "srv",
              "ts_ms": 1_700_000_000_000 + n, "snapshot": "false", "db": ns}  # fmt: skip
    if connector == "postgresql":
        lsn = 1000 + 10 * n
        sequence = json.dumps([str(lsn - 10), str(lsn)])
        return {**common, "db": "app", "sequence": sequence, "schema": ns, "table": table,
                "txId": 500 + n, "lsn": lsn, "xmin": None}  # fmt: skip
    return {**common, "table": table, "server_id": 1, "gtid": None, "file": "mysql-bin.000003",
            "pos": 1000 + 100 * n, "row": 0, "thread": 7}  # fmt: skip


def envelope_schema(topic: str, id_schema: dict, cols: list[Col], source_fields: list) -> dict:
    row = {
        "type": "struct",
        "optional": True,
        "name": f"{topic}.Value",
        "fields": [{**id_schema, "field": "id"}] + [{**c.schema, "field": c.name} for c in cols],
    }
    source = {
        "type": "struct",
        "optional": False,
        "name": "io.debezium.connector.Source",
        "field": "source",
        "fields": [{"type": t, "optional": True, "field": f} for f, t in source_fields],
    }
    return {
        "type": "struct",
        "optional": False,
        "name": f"{topic}.Envelope",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


class Stream:
    """Builds the messages of one table (with or without Connect schemas)."""

    def __init__(
        self,
        topic: str,
        connector: str,
        cols: list[Col],
        *,
        schemas: bool,
        numeric: bool = False,
        as_multiset: bool = False,
    ) -> None:
        self.numeric = numeric  # decimal.format=NUMERIC
        # Expected rows as a multiset: compared as JSON text, where NaN equals NaN.
        self.as_multiset = as_multiset
        self.topic = topic
        self.connector = connector
        self.cols = cols
        self.schemas = schemas
        _, self.ns, self.table = topic.split(".")
        id_schema = {"type": "int32", "optional": False}
        source = PG_SOURCE_SCHEMA if connector == "postgresql" else MYSQL_SOURCE_SCHEMA
        self.schema = envelope_schema(topic, id_schema, cols, source)
        self.key_schema = {"type": "struct", "optional": False, "name": f"{topic}.Key",
                           "fields": [{**id_schema, "field": "id"}]}  # fmt: skip
        self.n = 0

    def _wrap(self, schema: dict, payload: Any) -> Any:
        return {"schema": schema, "payload": payload} if self.schemas else payload

    def row(self, i: int, which: int | None, overrides: dict | None = None) -> dict:
        after = {"id": i}
        for c in self.cols:
            after[c.name] = None if which is None else c.values[which][0]
        after.update(overrides or {})
        return after

    def event(self, op: str, i: int, after: dict | None) -> dict:
        self.n += 1
        payload = {
            "before": None,
            "after": after,
            "source": source_block(self.connector, self.ns, self.table, self.n),
            "op": op,
            "ts_ms": 1_700_000_000_100 + self.n,
        }
        if op == "d":
            payload["before"] = {"id": i}
        return {
            "topic": self.topic,
            "key": self._wrap(self.key_schema, {"id": i}),
            "value": self._wrap(self.schema, payload),
        }

    def tombstone(self, i: int) -> dict:
        return {"topic": self.topic, "key": self._wrap(self.key_schema, {"id": i}), "value": None}

    def expected(self, i: int, which: int | None) -> dict:
        out: dict[str, Any] = {"id": i}
        for c in self.cols:
            out[c.name] = None if which is None else render(c.values[which][1])
        return out

    def hints(self) -> dict:
        return {c.name: c.hint for c in self.cols if c.hint}

    def types(self) -> dict:
        return {"id": "int32", **{c.name: c.arrow for c in self.cols}}


def matrix(stream: Stream, *, avro: bool = False) -> tuple[list[list[dict]], dict]:
    parts, rows = _matrix(stream)
    if stream.numeric and not avro:  # the AvroConverter has no decimal.format
        parts = [[as_numeric_decimals(m) if m["value"] else m for m in p] for p in parts]
    return parts, rows


def _matrix(stream: Stream) -> tuple[list[list[dict]], dict]:
    """Rows 1..4 over two batches: value sets A (0) and B (1), and all nulls.

    Batch 1 inserts 1=A, 2=B, 3=nulls, 4=A; batch 2 updates 1 to B and 2 to A and
    deletes 4 (delete and tombstone). The replica ends as 1=B, 2=A, 3=nulls.
    """
    s = stream
    first = [s.event("r", 1, s.row(1, 0)), s.event("c", 2, s.row(2, 1)),
             s.event("c", 3, s.row(3, None)), s.event("c", 4, s.row(4, 0))]  # fmt: skip
    second = [s.event("u", 1, s.row(1, 1)), s.event("u", 2, s.row(2, 0)),
              s.event("d", 4, None), s.tombstone(4)]  # fmt: skip
    rows = {"1": s.expected(1, 1), "2": s.expected(2, 0), "3": s.expected(3, None)}
    return [first, second], rows


def table_name(topic: str) -> str:
    _, ns, table = topic.split(".")
    return f"{ns}_{table}"


def typed_case(
    about: str, *streams: Stream, misfits: list[dict] | None = None, avro: bool = False
) -> dict:
    """One table per stream, batches interleaved; ``misfits`` are bad messages. With
    ``avro`` the messages are made for :func:`avro_case` (no ``decimal.format=NUMERIC``)."""
    case: dict[str, Any] = {"about": about, "config": {"tables": {}}, "expect": {}}
    batches: list[list[dict]] = [[], []]
    for stream in streams:
        parts, rows = matrix(stream, avro=avro)
        name = table_name(stream.topic)
        case["config"]["tables"][name] = {"columns": stream.hints()}
        case["expect"][name] = (
            {"multiset": list(rows.values()), "types": stream.types()}
            if stream.as_multiset
            else {"rows": rows, "types": stream.types()}
        )
        for k, part in enumerate(parts):
            batches[k].extend(part)
    if misfits:
        batches[0].extend(misfits)
        case["config"]["errors"] = {"tolerance": "all"}
        case["bad"] = len(misfits)
    case["batches"] = batches
    return case


def as_numeric_decimals(message: dict) -> dict:
    """The message as ``decimal.format=NUMERIC`` writes it: Decimals as exact JSON numbers.

    The JSON text is written raw (``value_text``) so that no float ever holds a decimal.
    """
    value = message["value"]
    schema = {f["field"]: f for f in value["schema"]["fields"][1]["fields"]}
    numbers: dict[str, str] = {}

    def swap(v: Any, s: dict) -> Any:
        if v is None:
            return None
        if s.get("name") == DEC:
            text = str(decode_unscaled(v, int(s["parameters"]["scale"])))
            token = f"__number_{len(numbers)}__"
            numbers[token] = text
            return token
        if s.get("type") == "array":
            return [swap(x, s["items"]) for x in v]
        return v

    after = value["payload"]["after"]
    if after is not None:
        after = {k: swap(v, schema[k]) if k in schema else v for k, v in after.items()}
    text = json.dumps({**value, "payload": {**value["payload"], "after": after}})
    for token, number in numbers.items():
        text = text.replace(f'"{token}"', number)
    out = {k: v for k, v in message.items() if k != "value"}
    return {**out, "value_text": text}


def decode_unscaled(b64text: str, scale: int) -> D:
    n = int.from_bytes(base64.b64decode(b64text), "big", signed=True)
    return D(n).scaleb(-scale, context=decimal.Context(prec=100))


def newest_geometry_columns() -> list[Col]:
    """The Geometry shape of the newest releases (with ``extensions``), in a table of
    its own: one connector release writes one Geometry schema (two shapes under one
    Connect name in one record are refused by the AvroConverter: "Can't redefine")."""
    return [
        Col(  # box, path, polygon, lseg (newest releases): Geometry with its native type
            "geom_native",
            struct_schema(
                "io.debezium.data.geometry.Geometry",
                ("wkb", {"type": "bytes", "optional": False}),
                ("srid", {"type": "int32", "optional": True}),
                (
                    "extensions",
                    {
                        "type": "map",
                        "optional": True,
                        "keys": {"type": "string", "optional": False},
                        "values": {"type": "string", "optional": True},
                    },
                ),
            ),
            [
                (
                    {
                        "wkb": b64(WKB_LINE),
                        "srid": None,
                        "extensions": {"type": "path", "closed": "false"},
                    },
                    {
                        "wkb": WKB_LINE,
                        "srid": None,
                        "extensions": [("type", "path"), ("closed", "false")],
                    },
                ),
                (
                    {"wkb": b64(WKB_POINT), "srid": None, "extensions": None},
                    {"wkb": WKB_POINT, "srid": None, "extensions": None},
                ),
            ],
            "struct<wkb: binary, srid: int32, extensions: map<string, string>>",
        ),
    ]


def double_mode_columns() -> list[Col]:
    """decimal.handling.mode=double: NUMERIC's NaN and (PostgreSQL 14+) infinities are
    sent as the quoted names Jackson writes (JSON has no such numbers)."""
    nan, inf = float("nan"), float("inf")
    return [
        Col("num", sch("double"), [("NaN", nan), ("-Infinity", -inf)], "double"),
        Col("num_pos", sch("double"), [("Infinity", inf), (0.25, 0.25)], "double"),
    ]


def numeric_columns() -> list[Col]:
    prec = {"connect.decimal.precision": "12"}
    return [
        Col(
            "price",
            sch("bytes", DEC, scale="2", **prec),
            [dec("1234.56", 2), dec("-0.01", 2)],
            "decimal128(12, 2)",
        ),  # fmt: skip
        Col(
            "wide",
            sch("bytes", DEC, scale="4", **{"connect.decimal.precision": "30"}),
            [dec("12345678901234567890123456.7891", 4), dec("0", 4)],
            "decimal128(30, 4)",
        ),  # fmt: skip
        Col(
            "prices",
            {"type": "array", "optional": True, "items": sch("bytes", DEC, scale="2", **prec)},
            [([dec("1.5", 2)[0]], [D("1.50")]), ([None], [None])],
            "list<item: decimal128(12, 2)>",
        ),  # fmt: skip
    ]


# ---------------------------------------------------------------------------------------
# Schemaless JSON with hints
# ---------------------------------------------------------------------------------------


def schemaless_pg() -> list[Col]:
    s = lambda: {}  # noqa: E731 - schemaless: the Connect schema is not sent
    return [
        Col(
            "price", s(), [dec("1234.56", 2), dec("-0.01", 2)], "decimal128(12, 2)", "decimal(12,2)"
        ),
        Col(
            "price_text",
            s(),
            [("1234.56", D("1234.56")), (7, D("7.00"))],
            "decimal128(12, 2)",
            "decimal(12,2,string)",
        ),
        Col(
            "price_number",
            s(),
            [(1234.56, D("1234.56")), (-3, D("-3.00"))],
            "decimal128(12, 2)",
            "decimal(12,2)",
        ),
        Col(
            "amount",
            s(),
            [(vsd("-1.234")[0], D("-1.2340")), (vsd("5")[0], D("5.0000"))],
            "decimal128(20, 4)",
            "decimal(20,4)",
        ),
        Col("price_raw", s(), same(dec("1234.56", 2)[0], dec("-0.01", 2)[0]), "string"),
        Col(
            "created",
            s(),
            [(since_epoch(TS_A, "us"), TS_A), (since_epoch(TS_B, "us"), TS_B)],
            "timestamp[us]",
            "timestamp",
        ),
        Col(
            "created_ms",
            s(),
            [(since_epoch(TS_A_MS, "ms"), TS_A_MS), (since_epoch(TS_B_MS, "ms"), TS_B_MS)],
            "timestamp[us]",
            "timestamp(ms)",
        ),
        Col("created_raw", s(), same(since_epoch(TS_A, "us"), since_epoch(TS_B, "us")), "int64"),
        Col(
            "at",
            s(),
            [
                (zoned(TS_A), TS_A.replace(tzinfo=UTC)),
                ("2024-01-15T10:30:00+02:00", dt.datetime(2024, 1, 15, 8, 30, tzinfo=UTC)),
            ],
            "timestamp[us, tz=UTC]",
            "timestamptz",
        ),
        Col(
            "day",
            s(),
            [(19737, dt.date(2024, 1, 15)), ("1969-12-31", dt.date(1969, 12, 31))],
            "date32[day]",
            "date",
        ),
        Col(
            "tod",
            s(),
            [(since_midnight(TIME_A, "us"), TIME_A), (0, dt.time(0))],
            "time64[us]",
            "time",
        ),
        Col(
            "tod_ms",
            s(),
            [
                (since_midnight(dt.time(1, 2, 3, 4000), "ms"), dt.time(1, 2, 3, 4000)),
                (0, dt.time(0)),
            ],
            "time64[us]",
            "time(ms)",
        ),
        Col(
            "ttz",
            s(),
            [("09:15:30.5Z", dt.time(9, 15, 30, 500000)), ("10:00:00+02:00", dt.time(8))],
            "time64[us]",
            "time",
        ),
        Col("raw", s(), [(b64(b"\x00\xff"), b"\x00\xff"), ("", b"")], "binary", "bytes"),
        Col("raw_hex", s(), [("00ff", b"\x00\xff"), ("ABCD", b"\xab\xcd")], "binary", "bytes(hex)"),
        Col(
            "uid",
            s(),
            [
                ("7C9E6679-7425-40DE-944B-E07FC1F90AE7", "7c9e6679-7425-40de-944b-e07fc1f90ae7"),
                ("00000000-0000-0000-0000-000000000000",) * 2,
            ],
            "string",
            "uuid",
        ),
        Col("doc", s(), same('{"a": 1}', "[1, 2]"), "string", "json"),
        Col("n", s(), same(5, -5), "int64"),
    ]


def schemaless_mysql() -> list[Col]:
    s = lambda: {}  # noqa: E731
    return [
        Col("amount", s(), [dec("99.99", 2), dec("0", 2)], "decimal128(10, 2)", "decimal(10,2)"),
        Col(
            "dt0",
            s(),
            [(since_epoch(TS_A_MS, "ms"), TS_A_MS), (0, EPOCH)],
            "timestamp[us]",
            "timestamp(ms)",
        ),
        Col(
            "dt6",
            s(),
            [(since_epoch(TS_A, "us"), TS_A), (since_epoch(TS_B, "us"), TS_B)],
            "timestamp[us]",
            "timestamp(us)",
        ),
        Col(
            "ts",
            s(),
            [
                ("2024-03-04T05:06:07Z", dt.datetime(2024, 3, 4, 5, 6, 7, tzinfo=UTC)),
                ("1970-01-01T00:00:00Z", EPOCH.replace(tzinfo=UTC)),
            ],
            "timestamp[us, tz=UTC]",
            "timestamptz",
        ),
        Col(
            "d",
            s(),
            [(days(dt.date(2024, 2, 29)), dt.date(2024, 2, 29)), (0, EPOCH_DATE)],
            "date32[day]",
            "date",
        ),
        Col(
            "t",
            s(),
            [(since_midnight(TIME_A, "us"), TIME_A), (0, dt.time(0))],
            "time64[us]",
            "time",
        ),
        Col("flag", s(), [(1, True), (0, False)], "bool", "boolean"),
        Col("blob", s(), [(b64(b"\x01\x02"), b"\x01\x02"), ("", b"")], "binary", "bytes"),
        Col("js", s(), same('{"a":[1,2]}', "{}"), "string", "json"),
        Col("n", s(), same(7, 8), "int64"),
    ]


def schemaless_case() -> dict:
    pg = Stream("pgsrv.shop.orders", "postgresql", schemaless_pg(), schemas=False)
    my = Stream("mysrv.shop.items", "mysql", schemaless_mysql(), schemas=False)
    pg_batches, pg_rows = matrix(pg)
    my_batches, my_rows = matrix(my)
    # Values that do not fit their hint: each message is bad (quarantined), never a null.
    misfits = [
        pg.event("c", 10, pg.row(10, 0, {"price": unscaled_b64(D("10000000000.00"), 2)})),
        pg.event("c", 11, pg.row(11, 0, {"price_text": "12.345"})),
        pg.event("c", 12, pg.row(12, 0, {"created": "yesterday"})),
        pg.event("c", 13, pg.row(13, 0, {"raw_hex": "xyz"})),
        pg.event("c", 14, pg.row(14, 0, {"uid": "not-a-uuid"})),
        pg.event("c", 15, pg.row(15, 0, {"doc": "{broken"})),
        pg.event("c", 16, pg.row(16, 0, {"tod": 86_400_000_000})),
        my.event("c", 10, my.row(10, 0, {"flag": 2})),
        my.event("c", 11, my.row(11, 0, {"amount": "!!notbase64"})),
    ]
    pg_name, my_name = table_name(pg.topic), table_name(my.topic)
    return {
        "about": (
            "schemaless JSON (schemas.enable=false) of both connectors typed by "
            "[tables.<name>.columns] hints: base64 decimals, integer timestamps and days, "
            "ISO text, hex and base64 bytes, uuid, json; values that do not fit a hint "
            "are bad messages"
        ),
        "config": {
            "errors": {"tolerance": "all"},
            "tables": {pg_name: {"columns": pg.hints()}, my_name: {"columns": my.hints()}},
        },
        "batches": [
            pg_batches[0] + my_batches[0] + misfits,
            pg_batches[1] + my_batches[1],
        ],
        "expect": {
            pg_name: {"rows": pg_rows, "types": pg.types() | {"id": "int64"}},
            my_name: {"rows": my_rows, "types": my.types() | {"id": "int64"}},
        },
        "bad": len(misfits),
    }


MYSQL_ABOUT = (
    "MySQL connector ({}): every logical type, zero dates, unsigned bigint, under each "
    "decimal, time and binary mode; a TIME of -01:00 is a bad message"
)


def mysql_case(*, avro: bool = False) -> dict:
    stream = Stream("mysrv.shop.kinds", "mysql", mysql_columns(), schemas=True)
    # MySQL allows TIME values outside one day, which Debezium cannot represent
    # correctly and no time-of-day type holds: such a message is bad, never a null.
    return typed_case(
        MYSQL_ABOUT.format("JsonConverter with schemas"),
        stream,
        misfits=[stream.event("c", 9, stream.row(9, 0, {"tm": -3_600_000_000}))],
        avro=avro,
    )


PG_ABOUT = (
    "PostgreSQL connector ({}): every logical type under each decimal.handling.mode, "
    "time.precision.mode and binary.handling.mode, with the column type hints that turn "
    "Debezium's text into real types"
)


def pg_case(*, avro: bool = False) -> dict:
    return typed_case(
        PG_ABOUT.format("JsonConverter with schemas"),
        Stream("pgsrv.public.kinds", "postgresql", pg_columns(), schemas=True),
        Stream(
            "pgsrv.public.numeric_format",
            "postgresql",
            numeric_columns(),
            schemas=True,
            numeric=True,
        ),
        Stream(
            "pgsrv.public.double_mode",
            "postgresql",
            double_mode_columns(),
            schemas=True,
            as_multiset=True,
        ),
        Stream(
            "pgsrv.public.newest_geometry", "postgresql", newest_geometry_columns(), schemas=True
        ),
        avro=avro,
    )


def main() -> None:
    from tests.avro_support import avro_case

    cases = {
        HERE / "pg-every-type.json": pg_case(),
        HERE / "mysql-every-type.json": mysql_case(),
        HERE / "schemaless-hints.json": schemaless_case(),
        # The same events as Confluent's AvroConverter writes them (schema registry), with
        # the same expectations: every type decodes to the same replica type and values.
        AVRO / "types-pg-every-type.json": avro_case(
            pg_case(avro=True),
            PG_ABOUT.format(
                "AvroConverter, schema registry; the events of "
                "types/pg-every-type.json, the numeric_format table's decimals "
                "as Avro decimals"
            ),
        ),
        AVRO / "types-mysql-every-type.json": avro_case(
            mysql_case(avro=True),
            MYSQL_ABOUT.format(
                "AvroConverter, schema registry; the events of types/mysql-every-type.json"
            ),
        ),
    }
    for path, case in cases.items():
        path.write_text(json.dumps(case, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
