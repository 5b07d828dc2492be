"""Column type hints (``[tables.<name>.columns]``) and catalog types, at the decoder.

The replicated outcome (Spark merge, Hudi files read back by hudi-rs) is asserted by the
corpus (tests/cases/types/) and tests/integration/test_catalog_types.py; these tests
cover the hint grammar, the config's refusals, the conversion of every wire form with a
Python oracle (hypothesis), and that a value that does not fit its hint makes its
message bad with its coordinates instead of a null.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.column_types import ColumnType, catalog_column_type, parse_column_type
from engine.config import config_from_dict
from engine.decode import RecordBatch, decoder_for
from engine.decode.debezium_json import decode_debezium_json
from engine.errors import ConfigError

EPOCH = dt.datetime(1970, 1, 1)


def _unscaled(d: decimal.Decimal, scale: int) -> str:
    n = int(d.scaleb(scale, context=decimal.Context(prec=100)))
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def _event(i: int, after: dict | None, op: str = "c") -> tuple[bytes, bytes]:
    value = {
        "before": {"id": i} if op == "d" else None,
        "after": after,
        "source": {
            "connector": "postgresql",
            "schema": "app",
            "table": "t",
            "lsn": 100 + i,
            "sequence": json.dumps([None, str(100 + i)]),
            "ts_ms": 1,
        },  # fmt: skip
        "op": op,
    }
    return json.dumps({"id": i}).encode(), json.dumps(value).encode()


def _decode(rows: list[tuple[bytes, bytes]], hints: dict[str, str], partition: int = 3):
    types = {c: parse_column_type(t) for c, t in hints.items()}
    keys = [k for k, _ in rows]
    values = [v for _, v in rows]
    offsets = list(range(40, 40 + len(rows)))
    return decode_debezium_json(
        RecordBatch("srv.app.t", keys, values, [partition] * len(rows), offsets), column_types=types
    )


# -- grammar and config ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("decimal(12,2)", "decimal(12,2)"),
        (" NUMERIC( 12 , 2 ) ", "decimal(12,2)"),
        ("decimal(12,2,string)", "decimal(12,2,string)"),
        ("decimal(5,0,precise)", "decimal(5,0)"),
        ("timestamp", "timestamp"),
        ("timestamp(ms)", "timestamp(ms)"),
        ("timestamptz(ns)", "timestamptz(ns)"),
        ("time(us)", "time"),
        ("bytes(hex)", "bytes(hex)"),
        ("binary(base64)", "bytes"),
        ("bytes(base64-url-safe)", "bytes(base64-url-safe)"),
        ("bigint", "int64"),
        ("uuid", "uuid"),
        ("json", "json"),
    ],
)
def test_hint_forms_parse_to_their_canonical_spelling(text: str, canonical: str) -> None:
    assert parse_column_type(text).text() == canonical


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("decimal(12)", "write decimal(precision,scale)"),
        ("decimal(39,2)", "precision must be 1 to 38"),
        ("decimal(4,5)", "scale must be 0 to the precision"),
        ("decimal(12,2,text)", "decimal.handling.mode"),
        ("timestamp(s)", "one of ms, us, ns"),
        ("bytes(base32)", "binary.handling.mode"),
        ("uuid(4)", "takes no arguments"),
        ("money", "is not a column type"),
    ],
)
def test_bad_hints_say_what_to_write(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_column_type(text)


def test_config_refuses_a_bad_hint_naming_table_and_column() -> None:
    base = {"source": {"bootstrap_servers": "a:1", "topics": "."}, "target": {"path": "x"}}
    with pytest.raises(ConfigError) as err:
        config_from_dict({**base, "tables": {"app_t": {"columns": {"price": "decimal(12)"}}}})
    text = str(err.value)
    assert "tables.app_t.columns" in text and "'price'" in text and "decimal(12,2)" in text


def test_catalog_types_need_a_database() -> None:
    source = {"bootstrap_servers": "a:1", "topics": ".", "catalog_types": True}
    with pytest.raises(ConfigError, match="set source.database_dsn"):
        config_from_dict({"source": source, "target": {"path": "x"}})


def test_an_unreachable_catalog_stops_the_start_with_the_reason() -> None:
    # Port 9 (discard) on localhost: nothing listens there.
    source = {
        "bootstrap_servers": "a:1",
        "topics": ".",
        "catalog_types": True,
        "database_dsn": "postgresql://postgres@127.0.0.1:9/postgres",
    }
    cfg = config_from_dict({"source": source, "target": {"path": "x"}})
    with pytest.raises(ConfigError) as err:
        decoder_for(cfg)
    assert "cannot read the column types of postgresql://postgres@127.0.0.1:9" in str(err.value)
    assert "source.catalog_types" in str(err.value)


# -- conversions -----------------------------------------------------------------------


def test_misfits_are_bad_messages_with_coordinates_never_nulls() -> None:
    good = {"id": 1, "price": _unscaled(decimal.Decimal("12.50"), 2), "at": 0, "raw": "00ff"}
    rows = [
        _event(1, good),
        _event(2, {**good, "id": 2, "price": _unscaled(decimal.Decimal("1e10"), 2)}),
        _event(3, {**good, "id": 3, "at": "not a time"}),
        _event(4, {**good, "id": 4, "raw": "0g"}),
        _event(5, {**good, "id": 5, "price": None, "at": None, "raw": None}),
    ]
    hints = {"price": "decimal(10,2)", "at": "timestamp(ms)", "raw": "bytes(hex)"}
    result = _decode(rows, hints)
    batch = result.batch.to_pydict()
    assert batch["id"] == [1, 5]
    assert batch["price"] == [decimal.Decimal("12.50"), None]
    assert batch["at"] == [EPOCH, None]
    assert batch["raw"] == [b"\x00\xff", None]
    bad = {(b.partition, b.offset): b.reason for b in result.bad}
    assert sorted(bad) == [(3, 41), (3, 42), (3, 43)]
    assert "after.price" in bad[(3, 41)] and "decimal(10,2)" in bad[(3, 41)]
    assert "after.at" in bad[(3, 42)] and "'not a time'" not in bad[(3, 42)]
    assert '"not a time"' in bad[(3, 42)] and "timestamp(ms)" in bad[(3, 42)]
    assert "after.raw" in bad[(3, 43)] and "bytes(hex)" in bad[(3, 43)]
    # The raw bytes go with the bad message, so it can be replayed after a fix.
    assert result.bad[0].value == rows[1][1]


def test_a_deleted_rows_hinted_key_is_converted_too() -> None:
    price = _unscaled(decimal.Decimal("3.25"), 2)
    key = json.dumps({"price": price}).encode()
    value = json.dumps({"before": None, "after": None, "op": "d",
                        "source": {"connector": "postgresql", "lsn": 7, "ts_ms": 1}})  # fmt: skip
    result = decode_debezium_json(
        RecordBatch("srv.app.t", [key], [value.encode()], [0], [0]),
        column_types={"price": parse_column_type("decimal(6,2)")},
    )  # fmt: skip
    assert result.bad == []
    assert result.batch.column("price").to_pylist() == [decimal.Decimal("3.25")]
    assert result.batch.column("_cdc_key").to_pylist() == [price]  # the wire key text


def test_hints_apply_over_a_connect_schema_too() -> None:
    # decimal.handling.mode=string with a schema: the Connect type is a plain string.
    schema = {
        "type": "struct", "name": "srv.app.t.Envelope", "optional": False,
        "fields": [
            {"type": "struct", "optional": True, "field": "after", "name": "V", "fields": [
                {"type": "int32", "optional": False, "field": "id"},
                {"type": "string", "optional": True, "field": "price"},
                {"type": "string", "optional": True, "field": "ttz",
                 "name": "io.debezium.time.ZonedTime"},
            ]},
            {"type": "struct", "optional": False, "field": "source", "name": "S", "fields": [
                {"type": "int64", "optional": True, "field": "lsn"}]},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }  # fmt: skip
    payloads = [
        {"after": {"id": 1, "price": "1234.5", "ttz": "10:00:00+02:00"}, "source": {"lsn": 1}},
        {"after": {"id": 2, "price": "1.234", "ttz": "23:30:00Z"}, "source": {"lsn": 2}},
    ]
    values = [
        json.dumps({"schema": schema, "payload": {**p, "op": "c"}}).encode() for p in payloads
    ]
    keys = [json.dumps({"id": i}).encode() for i in (1, 2)]
    result = decode_debezium_json(
        RecordBatch("srv.app.t", keys, values, [0, 0], [0, 1]),
        column_types={"price": parse_column_type("decimal(8,2)")},
    )  # fmt: skip
    assert result.batch.column("price").to_pylist() == [decimal.Decimal("1234.50")]
    assert result.batch.column("ttz").to_pylist() == [dt.time(8, 0)]  # normalized to UTC
    (bad,) = result.bad
    assert bad.offset == 1 and "more" not in bad.reason and "decimal(8,2)" in bad.reason


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=38)
    .flatmap(lambda p: st.tuples(st.just(p), st.integers(min_value=0, max_value=p)))
    .flatmap(
        lambda ps: st.tuples(
            st.just(ps),
            st.lists(
                st.integers(min_value=-(10 ** ps[0]) + 1, max_value=10 ** ps[0] - 1),
                min_size=1,
                max_size=8,
            ),
        )
    ),
    st.lists(
        st.integers(min_value=-(2**62) // 1000, max_value=2**62 // 1000), min_size=8, max_size=8
    ),
)
def test_decimals_and_timestamps_equal_a_python_oracle(case, micros) -> None:
    (precision, scale), unscaled = case
    hint = f"decimal({precision},{scale})"
    values = [
        decimal.Decimal(n).scaleb(-scale, context=decimal.Context(prec=100)) for n in unscaled
    ]
    rows = []
    for i, d in enumerate(values):
        after = {"id": i, "b64": _unscaled(d, scale), "text": str(d), "us": micros[i]}
        rows.append(_event(i, after))
    result = _decode(
        rows, {"b64": hint, "text": f"decimal({precision},{scale},string)", "us": "timestamp"}
    )
    assert result.bad == []
    assert result.batch.column("b64").to_pylist() == values
    assert result.batch.column("text").to_pylist() == values
    expect = [EPOCH + dt.timedelta(microseconds=m) for m in micros[: len(values)]]
    assert result.batch.column("us").to_pylist() == expect


def test_catalog_types_map_what_json_cannot_carry() -> None:
    pg = "postgresql"
    assert catalog_column_type(pg, "numeric", 12, 2, None, "numeric") == ColumnType(
        "decimal", 12, 2, encoding="precise"
    )
    assert catalog_column_type(pg, "numeric", None, None, None, "numeric") is None  # free
    assert catalog_column_type(pg, "numeric", 40, 2, None, "numeric") is None  # > 38
    assert catalog_column_type(pg, "timestamp without time zone", None, None, 3, "").text() == (
        "timestamp(ms)"
    )
    assert catalog_column_type(pg, "timestamp without time zone", None, None, 6, "").text() == (
        "timestamp"
    )
    assert catalog_column_type(pg, "time without time zone", None, None, 0, "").text() == "time(ms)"
    assert catalog_column_type(pg, "timestamp with time zone", None, None, 6, "").text() == (
        "timestamptz"
    )
    assert catalog_column_type(pg, "bytea", None, None, None, "bytea").text() == "bytes"
    assert catalog_column_type(pg, "jsonb", None, None, None, "jsonb").text() == "json"
    assert catalog_column_type(pg, "integer", 32, 0, None, "int4") is None  # JSON says it
    my = "mysql"
    assert catalog_column_type(my, "decimal", 10, 2, None, "decimal(10,2)").text() == (
        "decimal(10,2)"
    )
    assert catalog_column_type(my, "datetime", None, None, 0, "datetime").text() == (
        "timestamp(ms)"
    )
    assert catalog_column_type(my, "datetime", None, None, 6, "datetime(6)").text() == "timestamp"
    assert catalog_column_type(my, "timestamp", None, None, 0, "timestamp").text() == (
        "timestamptz"
    )
    assert catalog_column_type(my, "time", None, None, 0, "time").text() == "time"
    assert catalog_column_type(my, "blob", None, None, None, "blob").text() == "bytes"
    assert catalog_column_type(my, "bit", 1, None, None, "bit(1)") is None  # a boolean
    assert catalog_column_type(my, "bit", 12, None, None, "bit(12)").text() == "bytes"


HINT_FORMS = [
    "decimal(12,2)", "decimal(5,0,string)", "date", "time", "time(ms)", "timestamp(ns)",
    "timestamptz", "bytes", "bytes(hex)", "bytes(base64-url-safe)", "uuid", "json", "string",
    "boolean", "int32", "int64", "float32", "float64",
]  # fmt: skip
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(["00ff", "AAE=", "-_8=", "12.50", "2024-01-15", "13:14:15Z", "{}", "NaN"]),
)
JSON_VALUES = st.one_of(
    JSON_SCALARS,
    st.lists(JSON_SCALARS, max_size=2),
    st.dictionaries(st.text(max_size=3), JSON_SCALARS, max_size=2),
)


@settings(max_examples=150, deadline=None)
@example("date", [-719163], False)  # year 0: Arrow's, not Python's
@given(st.sampled_from(HINT_FORMS), st.lists(JSON_VALUES, min_size=1, max_size=6), st.booleans())
def test_any_json_value_is_converted_or_flagged_never_silently_null(
    hint, values, schemaless
) -> None:
    from engine.decode.debezium_json.connect import infer_array
    from engine.decode.debezium_json.hints import apply_hint, out_type

    arr = infer_array(values)
    ct = parse_column_type(hint)
    res = apply_hint(arr, ct, "after.c", schemaless=schemaless)  # never raises
    assert res.array.type == out_type(ct) and len(res.array) == len(arr)
    bad = [False] * len(arr) if res.bad is None else res.bad.to_pylist()
    # Null masks, not Python values: a date Arrow holds (day -719163, year 0) has no
    # Python date, and the replica keeps it as Arrow does.
    nulls = res.array.is_null().to_pylist()
    for src, null, flagged in zip(arr.to_pylist(), nulls, bad, strict=True):
        if flagged:
            assert null and res.reason.startswith("after.c: ")
        elif src is not None:
            assert not null, (hint, src)


def test_isostring_types_decode_and_a_broken_one_is_bad() -> None:
    def field(name: str, semantic: str) -> dict:
        return {"type": "string", "optional": True, "field": name, "name": semantic}

    row = {"type": "struct", "optional": True, "name": "V", "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        field("d", "io.debezium.time.IsoDate"),
        field("t", "io.debezium.time.IsoTime"),
        field("ts", "io.debezium.time.IsoTimestamp"),
    ]}  # fmt: skip
    schema = {"type": "struct", "name": "E", "optional": False, "fields": [
        {**row, "field": "after"}, {"type": "string", "optional": False, "field": "op"},
    ]}  # fmt: skip
    afters = [
        {"id": 1, "d": "2024-01-15Z", "t": "13:14:15.5Z", "ts": "2024-01-15T08:30:00.000001Z"},
        {"id": 2, "d": "2024-13-45", "t": None, "ts": None},
    ]
    values = [json.dumps({"schema": schema, "payload": {"after": a, "op": "c"}}).encode()
              for a in afters]  # fmt: skip
    keys = [json.dumps({"id": a["id"]}).encode() for a in afters]
    result = decode_debezium_json(RecordBatch("srv.app.t", keys, values, [0, 0], [5, 6]))
    got = result.batch.to_pylist()[0]
    assert (got["d"], got["t"], got["ts"]) == (
        dt.date(2024, 1, 15), dt.time(13, 14, 15, 500000), dt.datetime(2024, 1, 15, 8, 30, 0, 1)
    )  # fmt: skip
    (bad,) = result.bad
    assert bad.offset == 6 and "after.d" in bad.reason and "invalid ISO date" in bad.reason
