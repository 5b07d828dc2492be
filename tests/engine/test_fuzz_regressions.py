"""Every failure the fuzzing found, pinned with its minimal input (see
docs/guide/development.md, "Fuzzing"). Before the fix each of these raised out of the
decoder (one crashed the process); now each record is a row or a bad message with a
reason, and the contract of tests/fuzz/harness.py holds for the batch."""

from __future__ import annotations

import json
import math

import pytest

from tests.fuzz.harness import decode_checked

TOPIC = "srv.app.t"
KEY = b'{"id":1}'


def _wrapped(schema: object, payload: object) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}).encode()


def _envelope_schema(after_fields: list, source_fields: object = None) -> dict:
    return {
        "type": "struct",
        "name": "srv.app.t.Envelope",
        "fields": [
            {"field": "after", "type": "struct", "optional": True, "fields": after_fields},
            {"field": "source", "type": "struct", "fields": source_fields or []},
            {"field": "op", "type": "string"},
        ],
    }


PAYLOAD = {"op": "c", "after": {"id": 1}, "source": {"lsn": 1}}
ID = {"field": "id", "type": "int32"}

# name: (key, value, expected reason substring or None for a row)
CASES: dict[str, tuple[bytes | None, bytes | None, str | None]] = {
    # Segmentation fault in pyarrow's JSON reader (C recursion), RecursionError in json.
    "value nested 40000 deep": (
        KEY,
        b'{"op":"c","after":' + b'{"a":' * 40_000 + b"1" + b"}" * 40_000 + b"}",
        "nested 40001 levels deep",
    ),
    "key nested 2000 deep": (
        b"[" * 2000 + b"]" * 2000,
        b'{"op":"c","after":{"id":1}}',
        "key nested 2000 levels deep",
    ),  # fmt: skip
    # TypeError: unhashable type: 'list' (envelope.py _classify_value_schema).
    "schema field name is a list": (
        KEY,
        _wrapped({"type": "struct", "fields": [{"field": ["op"], "type": "string"}]}, PAYLOAD),
        "malformed Connect value schema",
    ),
    # AttributeError: 'int' object has no attribute 'endswith' (schema name not a string).
    "schema name is a number": (
        KEY,
        _wrapped(
            {"type": "struct", "name": 7, "fields": [{"field": "ddl", "type": "string"}]},
            {"ddl": "x"},
        ),
        "name is 7, not a string",
    ),  # fmt: skip
    # TypeError: 'float' object is not iterable (source schema fields).
    "source schema fields is a number": (
        KEY,
        _wrapped(_envelope_schema([ID], source_fields=1.5), PAYLOAD),
        "fields is not a list",
    ),
    # TypeError: unhashable type: 'list' (connect.plan_for, Connect type a list).
    "column type is a list": (
        KEY,
        _wrapped(_envelope_schema([{"field": "id", "type": ["int32"]}]), PAYLOAD),
        "after.id: type is",
    ),
    # UnicodeEncodeError from pyarrow: a lone surrogate escape in a schemaless value.
    "lone surrogate in a value": (
        KEY,
        b'{"op":"c","after":{"id":1,"s":"\\ud800"},"source":{"lsn":1}}',
        "lone UTF-16 surrogate",
    ),
    # UnicodeEncodeError from pyarrow: a scalar key that is a lone surrogate.
    "lone surrogate scalar key": (
        b'"\\ud800"',
        b'{"op":"c","after":{"id":1}}',
        "lone UTF-16 surrogate",
    ),  # fmt: skip
    # Found reviewing the fixes above (same family): OverflowError from float() of a
    # 400-digit integer in a double column, on the per-record path (a map column sends
    # every record there). Now infinity, as the bulk reader reads it.
    "integer beyond the double range": (
        KEY,
        _wrapped(
            _envelope_schema(
                [
                    ID,
                    {"field": "x", "type": "double", "optional": True},
                    {
                        "field": "m",
                        "type": "map",
                        "optional": True,
                        "keys": {"type": "string"},
                        "values": {"type": "string"},
                    },
                ]
            ),
            {"op": "c", "after": {"id": 1, "x": -(10**400), "m": None}, "source": {}},
        ),  # fmt: skip
        None,
    ),
    # ...and memory bombs: a decimal exponent or scale of a billion digits.
    "decimal with a giant exponent": (
        KEY,
        _wrapped(
            _envelope_schema(
                [
                    ID,
                    {
                        "field": "d",
                        "type": "bytes",
                        "optional": True,
                        "name": "org.apache.kafka.connect.data.Decimal",
                        "parameters": {"scale": "2"},
                    },
                ]
            ),  # fmt: skip
            {"op": "c", "after": {"id": 1, "d": 0}, "source": {}},
        ).replace(b'"d": 0', b'"d": 1e999999999'),
        "has more than 140000 digits",
    ),
    "variable-scale decimal with a giant scale": (
        KEY,
        _wrapped(
            _envelope_schema(
                [
                    ID,
                    {
                        "field": "v",
                        "type": "struct",
                        "optional": True,
                        "name": "io.debezium.data.VariableScaleDecimal",
                        "fields": [
                            {"field": "scale", "type": "int32"},
                            {"field": "value", "type": "bytes"},
                        ],
                    },
                ]
            ),
            {
                "op": "c",
                "after": {"id": 1, "v": {"scale": 2**31 - 1, "value": "AQ=="}},
                "source": {},
            },
        ),  # fmt: skip
        "invalid VariableScaleDecimal",
    ),
    "decimal schema with a giant scale": (
        KEY,
        _wrapped(
            _envelope_schema(
                [
                    ID,
                    {
                        "field": "d",
                        "type": "bytes",
                        "optional": True,
                        "name": "org.apache.kafka.connect.data.Decimal",
                        "parameters": {"scale": "999999999"},
                    },
                ]
            ),  # fmt: skip
            {"op": "c", "after": {"id": 1, "d": "AQ=="}, "source": {}},
        ),
        "Decimal scale 999999999",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fuzz_finding(name: str) -> None:
    key, value, reason = CASES[name]
    good = (b'{"id":9}', b'{"op":"c","after":{"id":9},"source":{"lsn":2}}')
    # The hostile record alone, and between two good ones (the bulk path and bisection).
    for records in ([(key, value)], [good, (key, value), good]):
        result = decode_checked("debezium-json", TOPIC, records)
        if reason is None:
            assert not result.bad and result.batch is not None
            assert result.batch.num_rows == len(records)
            continue
        assert len(result.bad) == 1, [b.reason for b in result.bad]
        assert reason in result.bad[0].reason, result.bad[0].reason
        assert result.bad[0].value == value and result.bad[0].key == key
        if len(records) == 3:
            assert result.batch is not None and result.batch.num_rows == 2


def test_paired_surrogates_are_text() -> None:
    """The surrogate fix must not reject valid escapes: a pair is one character."""
    value = b'{"op":"c","after":{"id":1,"s":"\\ud83d\\ude00"},"source":{"lsn":1}}'
    result = decode_checked("debezium-json", TOPIC, [(KEY, value)])
    assert not result.bad and result.batch is not None
    assert result.batch.column("s").to_pylist() == ["\U0001f600"]


def test_an_integer_beyond_the_double_range_is_infinity_on_both_paths() -> None:
    key, value, _ = CASES["integer beyond the double range"]
    bulk = value.replace(b', "m": null', b"").replace(
        b', {"field": "m", "type": "map", "optional": true, "keys": {"type": "string"}, '
        b'"values": {"type": "string"}}',
        b"",
    )
    assert b'"m"' not in bulk
    for v in (value, bulk):
        result = decode_checked("debezium-json", TOPIC, [(key, v)])
        assert result.batch is not None and result.batch.column("x").to_pylist() == [-math.inf]


def test_ignored_records_around_a_bad_one_are_all_counted() -> None:
    """Found by the atheris run: schema-change records (ignored) around one with a lone
    surrogate lost their count. The ignored records' pieces have no columns, and pyarrow
    concatenates column-less tables to 0 rows; they are now counted by record."""
    schema = {
        "type": "struct",
        "name": "io.debezium.connector.mysql.SchemaChangeValue",
        "fields": [{"field": "ddl", "type": "string", "optional": True}],
    }
    records = [
        (None, _wrapped(schema, {"ddl": ddl}).replace(b"SURROGATE", b"\\ud800"))
        for ddl in ("CREATE TABLE a (x int)", "SURROGATE", "DROP TABLE a")
    ]
    result = decode_checked("debezium-json", "srv", records)
    assert result.ignored == 2 and result.batch is None
    assert [b.offset for b in result.bad] == [1001]
    assert "lone UTF-16 surrogate" in result.bad[0].reason


@pytest.mark.parametrize(
    "value",
    [
        # UnicodeEncodeError in the rewrites (now engine/decode/jsonconverter.py): a lone
        # surrogate in a flattened row, schemaless and inside a JsonConverter payload
        # (found when the debezium-flat fuzz target was added).
        b'{"id":1,"name":"\\ud800","__lsn":5}',
        _wrapped(
            {"type": "struct", "fields": [ID, {"field": "name", "type": "string"}]},
            {"id": 1, "name": "\ud800", "__lsn": 5},
        ),
    ],
    ids=["schemaless", "with schema"],
)
def test_lone_surrogate_in_a_flattened_row_is_a_bad_message(value: bytes) -> None:
    good = (b'{"id":9}', b'{"id":9,"name":"ok","__lsn":6}')
    for records in ([(KEY, value)], [good, (KEY, value), good]):
        result = decode_checked("debezium-flat", "srv.public.items", records)
        assert len(result.bad) == 1, [b.reason for b in result.bad]
        assert result.bad[0].value == value
        assert result.batch is not None if len(records) == 3 else True


CDC_KEY = b'{"PK": 1}'
CDC_GOOD = (b'{"PK": 9}', b'{"PK": 9, "col_1": "ok", "_action": "_insert", "_timestamp": 5}')


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (CDC_KEY, b'{"PK": 1, "col_1": "\\ud800", "_action": "_insert", "_timestamp": 1}'),
        # The surrogate's own UTF-8 bytes: invalid UTF-8 that json.loads takes anyway.
        (CDC_KEY, b'{"PK": 1, "col\xed\xa0\x80": 1, "_action": "_insert", "_timestamp": 1}'),
        (b'{"PK": "\\udc00"}', b'{"col_1": "x", "_action": "_insert", "_timestamp": 1}'),
    ],
    ids=["in a value", "as UTF-8 bytes in a name", "in the key"],
)
def test_lone_surrogate_in_a_cdc_json_event_is_a_bad_message(key: bytes, value: bytes) -> None:
    """Found by the first coverage-guided run of the cdc-json target (40,080 failures in
    10 minutes, all this one cause): UnicodeEncodeError out of the decoder when the
    batch's columns were built. The JSON decoders now share one rule
    (engine/decode/text.py)."""
    for records in ([(key, value)], [CDC_GOOD, (key, value), CDC_GOOD]):
        result = decode_checked("cdc-json", "shop.public.items", records)
        assert len(result.bad) == 1, [b.reason for b in result.bad]
        assert "lone UTF-16 surrogate" in result.bad[0].reason
        assert result.bad[0].value == value
        if len(records) == 3:
            assert result.batch is not None and result.batch.num_rows == 2


def test_a_flattened_rows_schema_with_a_field_name_that_is_a_list_is_a_bad_message() -> None:
    """Found by the first coverage-guided run of the debezium-flat target: TypeError
    (unhashable list) in the schema rewrite (now engine/decode/flat.py), which failed the
    whole batch (the exception net then quarantined every record of it)."""
    schema = {"type": "struct", "fields": [{"field": [["id"]], "type": "int32"}, ID]}
    value = _wrapped(schema, {"id": 1, "__lsn": 5})
    good = (b'{"id":9}', b'{"id":9,"name":"ok","__lsn":6}')
    result = decode_checked("debezium-flat", "srv.public.items", [good, (KEY, value), good])
    assert [b.value for b in result.bad] == [value]
    assert "the decoder failed" not in result.bad[0].reason
    assert result.batch is not None and result.batch.num_rows == 2


def test_a_flattened_binlog_position_beyond_int64_is_a_bad_message() -> None:
    """Found by the second coverage-guided run of the debezium-flat target: ``__pos`` of
    2**63 next to a duplicate ``__row`` member (the last, text, wins) made the bulk path
    cast text digits to int64, and ArrowInvalid escaped the decoder for the whole batch.
    Now such a column goes to the per-record path, which names the bad record."""
    bad = (
        b'{"id":1,"name":"one v2","__op":"u","__file":"mysql-bin.000004",'
        b'"__pos":9223372036854775808,"__row":0,"__source_ts_ms":1700000000000,'
        b'"__deleted":"false","__row":"c"}'
    )
    good = (
        b'{"id": 2, "name": "one", "__op": "c", "__file": "mysql-bin.000003", "__pos": 900, '
        b'"__row": 0, "__source_ts_ms": 1700000000000, "__deleted": "false"}'
    )
    records = [(b'{"id":2}', good), (b'{"id":1}', bad), (b'{"id":2}', good)]
    result = decode_checked("debezium-flat", "srv.app.items", records)
    assert [b.value for b in result.bad] == [bad]
    assert "source.pos" in result.bad[0].reason
    assert result.batch is not None and result.batch.num_rows == 2
