"""The nesting limit of Debezium JSON values as a by-product of the parse.

``debezium-json`` (without key rewriting) refuses values nested deeper than
``source.max_nesting_depth`` by its parse: a parsed buffer whose Arrow type nests deeper
has its records measured; records that leave the bulk path are measured before any
per-record parse; only values longer than ``PARSE_SAFE_BYTES`` are scanned before the
decoder (``Guarded``). The reasons are the scan's, with the same depths.
"""

from __future__ import annotations

import json

import pytest

from engine.config import config_from_dict
from engine.decode import RecordBatch, decoder_for
from engine.decode.limits import DECODER_FAILED, PARSE_SAFE_BYTES
from tests.fuzz.harness import check
from tests.fuzz.registry import target_config


def _decoder(fmt: str = "debezium-json", **source: object):  # noqa: ANN202
    return decoder_for(config_from_dict(target_config(fmt, source=source)))


def _envelope(after: object, **more: object) -> bytes:
    env = {"op": "c", "after": after, "source": {"connector": "postgresql", "lsn": 1}, **more}
    return json.dumps(env).encode()


def _decode(decode, values: list[bytes | None]):  # noqa: ANN001, ANN202
    n = len(values)
    keys = [json.dumps({"id": i}).encode() for i in range(n)]
    offsets = list(range(100, 100 + n))
    result = decode(RecordBatch("srv.app.t", keys, values, [0] * n, offsets))
    check("srv.app.t", list(zip(keys, values, strict=True)), [0] * n, offsets, result)
    assert not [b for b in result.bad if b.reason.startswith(DECODER_FAILED)]
    return result, {b.offset - 100: b.reason for b in result.bad}


def test_only_the_json_decoders_parse_check_their_values() -> None:
    assert _decoder().values_parsed
    assert not _decoder("debezium-avro").values_parsed
    assert not _decoder("cdc-json").values_parsed
    assert not _decoder("debezium-flat").values_parsed


@pytest.mark.parametrize("depth", [17, 100, 900])
def test_a_short_deep_value_is_refused_by_the_parse(depth: int) -> None:
    """Envelope (1) + after (1) + members: the depth the scan would report."""
    node: object = 1
    for _ in range(depth - 2):
        node = [node]
    deep = _envelope({"id": 1, "deep": node})
    assert len(deep) <= PARSE_SAFE_BYTES
    result, reasons = _decode(_decoder(max_nesting_depth=16), [_envelope({"id": 0}), deep])
    assert reasons[1].startswith(f"value nested {depth} levels deep")
    assert result.batch is not None and result.batch.num_rows == 1


def test_deep_values_off_the_bulk_path_are_refused_before_python_parses_them() -> None:
    decode = _decoder(max_nesting_depth=16)
    values: list[bytes | None] = [
        _envelope({"id": 0}),
        b"[" * 1500 + b"]" * 1500,  # a top-level array: the per-record split
        b'{"op": "c", "after": ' + b"[" * 1500,  # invalid: bisected, parsed alone
        b'{"schema":' + b'{"a":' * 600 + b"1" + b"}" * 600 + b',"payload":{}}',  # wrapper
        None,
    ]
    result, reasons = _decode(decode, values)
    assert reasons[1].startswith("value nested 1500 levels deep")
    assert reasons[2].startswith("value nested 1501 levels deep")
    assert reasons[3].startswith("value nested 601 levels deep")
    assert result.batch is not None and result.batch.num_rows == 2  # the row and a tombstone


def test_a_long_deep_value_is_still_scanned_first() -> None:
    deep = b'{"op": "c", "pad": "' + b"x" * PARSE_SAFE_BYTES + b'", "after": ' + b"[" * 50_000
    _, reasons = _decode(_decoder(max_nesting_depth=16), [_envelope({"id": 0}), deep])
    assert reasons[1].startswith("value nested 50001 levels deep")


@pytest.mark.parametrize(
    "deep",
    [
        b'{"op":"c","after":{"id":1,"deep":' + b"[" * 990 + b"1" + b"]" * 990 + b"}}",
        b'{"op":"c","after":{"id":1,"deep":' + b'{"a":' * 500 + b"1" + b"}" * 500 + b"}}",
    ],
    ids=["lists", "objects"],
)
def test_deeper_than_python_recursion_within_the_safe_length(deep: bytes) -> None:
    """Review finding: Arrow parses these, and the reader's type walks would recurse past
    Python's limit; the buffer is read in parts after the exact measure instead."""
    assert len(deep) <= PARSE_SAFE_BYTES
    result, reasons = _decode(_decoder(max_nesting_depth=16), [_envelope({"id": 0}), deep])
    assert reasons[1].startswith("value nested")
    assert "deeper than source.max_nesting_depth = 16" in reasons[1]
    assert result.batch is not None and result.batch.num_rows == 1


def _wrapped(payload: dict) -> bytes:
    schema = {
        "type": "struct",
        "name": "srv.app.t.Envelope",
        "optional": False,
        "fields": [
            {"field": "op", "type": "string", "optional": False},
            {
                "field": "after",
                "type": "struct",
                "optional": True,
                "fields": [{"field": "id", "type": "int64", "optional": False}],
            },
            {
                "field": "source",
                "type": "struct",
                "optional": False,
                "fields": [
                    {"field": "connector", "type": "string", "optional": False},
                    {"field": "lsn", "type": "int64", "optional": True},
                ],
            },
        ],
    }
    return json.dumps({"schema": schema, "payload": payload}).encode()


def test_jsonconverter_records_are_measured_whole() -> None:
    """Review finding: the wrapper, its schema and members the schema does not name count,
    as they did when every value was scanned before the decoder."""
    payload = {"op": "c", "after": {"id": 1}, "source": {"connector": "postgresql", "lsn": 1}}
    plain = _wrapped(payload)
    extra = _wrapped({**payload, "x": [[[[[[[[0]]]]]]]]})  # wrapper 1, payload 2, lists 8
    result, reasons = _decode(_decoder(max_nesting_depth=8), [plain, extra])
    assert set(reasons) == {1} and reasons[1].startswith("value nested 10 levels deep")
    assert result.batch is not None and result.batch.num_rows == 1
    # A deep schema alone, as the only record of its batch.
    deep_schema = b'{"schema":' + b'{"a":' * 600 + b"1" + b"}" * 600 + b',"payload":{}}'
    _, reasons = _decode(_decoder(max_nesting_depth=16), [deep_schema])
    assert reasons[0].startswith("value nested 601 levels deep")
