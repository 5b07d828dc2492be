"""The cdc-json decoder and its config, without Spark: order-value encoding, keys, images,
records_field, and bad input quarantined with its coordinates."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.decode import RecordBatch, decoder_for
from engine.decode.cdc_json import OrderError, encode_order
from engine.errors import ConfigError


def _cfg(tmp_path: Path, cdc_json: dict | None = None, tables: dict | None = None):
    return config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "format": "cdc-json",
                "cdc_json": cdc_json or {},
            },
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
            "tables": tables or {},
        }
    )


def _decode(cfg, values, keys=None, topic="srv.app.items", partition=3, first_offset=100):
    raw = [
        None if v is None else (v if isinstance(v, bytes) else json.dumps(v).encode())
        for v in values
    ]
    raw_keys = [None if k is None else json.dumps(k).encode() for k in (keys or [None] * len(raw))]
    n = len(raw)
    return decoder_for(cfg)(
        RecordBatch(
            topic, raw_keys, raw, [partition] * n, list(range(first_offset, first_offset + n))
        )
    )


# -- order values -------------------------------------------------------------------------


def _pair(value):
    return encode_order(value)[:2]


@settings(max_examples=300)
@given(a=st.decimals(-(10**15), 10**15, places=6), b=st.decimals(-(10**15), 10**15, places=6))
def test_decimal_and_integer_order_values_compare_like_the_numbers(a: Decimal, b: Decimal) -> None:
    for x, y in ((a, b), (str(a), str(b)), (float(a), float(b))):
        if isinstance(x, float) and float(a) == float(b):
            continue
        expected = (a > b) - (a < b)
        got = (_pair(x) > _pair(y)) - (_pair(x) < _pair(y))
        assert got == expected, (x, y)
    if a == a.to_integral_value():
        assert _pair(int(a)) == _pair(a)


@settings(max_examples=300)
@given(
    a=st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    b=st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    offset=st.integers(-14 * 60, 14 * 60),
)
def test_timestamp_order_values_compare_like_the_instants(a, b, offset) -> None:
    zone = UTC if offset == 0 else timezone(timedelta(minutes=offset))
    ta, tb = a.replace(tzinfo=UTC), b.replace(tzinfo=zone)
    expected = (ta > tb) - (ta < tb)
    pa_, pb = _pair(ta.isoformat()), _pair(tb.isoformat())
    assert ((pa_ > pb) - (pa_ < pb)) == expected
    # The source time is the instant's milliseconds.
    micros = (ta - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert encode_order(ta.isoformat())[2] == micros // 1000


def test_order_value_details() -> None:
    # Nanoseconds order; a zone-less timestamp is UTC; a date alone is midnight.
    assert _pair("2024-01-01T00:00:00.000000001Z") > _pair("2024-01-01T00:00:00Z")
    assert _pair("2024-01-01 02:00:00+02:00") == _pair("2024-01-01T00:00:00")
    assert _pair("2024-01-01") == _pair("2024-01-01T00:00:00Z")
    assert encode_order("1970-01-01T00:00:01.5Z") == (1_500_000, 0, 1500)
    assert _pair(3) < _pair(3.5) < _pair("4")
    # order_type: one kind only.
    assert encode_order("2024-01-01", "timestamp")[2] is not None
    assert encode_order(7, "decimal") == (7, 0, None)  # decimal accepts integers
    for value, kind in ((5, "timestamp"), ("2024-01-01", "integer"), ("1.5", "integer")):
        with pytest.raises(OrderError, match=f"order_type is '{kind}'"):
            encode_order(value, kind)
    for bad in (True, None, "yesterday", float("nan"), 2**63, {"a": 1}, [1], "2024-13-01"):
        with pytest.raises(OrderError):
            encode_order(bad)


# -- decoding -----------------------------------------------------------------------------


def test_events_become_change_rows_with_positions_and_coordinates(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"key_fields": ["id"]})
    result = _decode(
        cfg,
        [
            {"id": 1, "name": "a", "n": 1, "_action": "_insert", "_timestamp": 5},
            {"id": 1, "n": 2.5, "_action": "_update", "_timestamp": 7},
            {"id": 1, "name": "zzz", "_action": "_delete", "_timestamp": "9.25"},
            None,
        ],
    )
    batch = result.batch.to_pydict()
    assert batch["_cdc_op"] == ["c", "u", "d"]
    assert batch["_cdc_pos"] == [5, 7, 9]
    assert batch["_cdc_pos_sub"] == [0, 0, 250_000_000_000_000_000]
    assert batch["_cdc_key"] == ["1", "1", "1"]
    assert batch["_cdc_partition"] == [3, 3, 3] and batch["_cdc_offset"] == [100, 101, 102]
    assert batch["n"] == [1.0, 2.5, None]  # integers and fractions: double
    assert batch["name"] == ["a", None, None]  # a delete carries the key only
    assert batch["_timestamp"] == [5, 7, None]
    assert "_action" not in batch
    assert result.key_fields == ["id"] and result.ignored == 1 and not result.bad
    # Full images keep no per-column positions.
    assert not [c for c in batch if c.startswith("_cdc_pos__") or c.startswith("_cdc_floor")]


def test_partial_images_mark_the_columns_an_event_carries(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"images": "partial"})
    result = _decode(
        cfg,
        [
            {"col_1": "x", "col_3": 1, "_action": "_insert", "_timestamp": "2024-01-01T00:00:00Z"},
            {"col_3": None, "_action": "_update", "_timestamp": "2024-01-01T00:00:01Z"},
        ],
        keys=[{"PK": 1}, {"PK": 1}],
    )
    batch = result.batch.to_pydict()
    assert result.key_fields == ["PK"] and batch["PK"] == [1, 1]
    t0 = 1_704_067_200_000_000
    assert batch["_cdc_pos__col_1"] == [t0, None]
    assert batch["_cdc_pos__col_3"] == [t0, t0 + 1_000_000]
    assert batch["_cdc_sub__col_3"] == [0, 0]
    assert batch["_cdc_floor_pos"] == [None, None]
    assert batch["_cdc_source_ts_ms"] == [t0 // 1000, t0 // 1000 + 1000]
    assert "_cdc_pos__PK" not in batch


def test_records_field_and_per_table_overrides(tmp_path: Path) -> None:
    cfg = _cfg(
        tmp_path,
        {"key_fields": ["id"]},
        tables={
            "app_items": {
                "op_field": "kind",
                "insert_values": ["I"],
                "update_values": ["U"],
                "delete_values": ["D"],
                "order_field": "seq",
                "records_field": "rows",
                "key_fields": ["shop", "sku"],
            }
        },
    )
    events = [
        {"shop": "s1", "sku": "a", "qty": 1, "kind": "I", "seq": 1},
        {"shop": "s1", "sku": "", "kind": "D", "seq": 2},
    ]
    result = _decode(cfg, [{"rows": events}, {"rows": []}])
    assert result.batch.column("_cdc_key").to_pylist() == ["shop:s1,sku:a", "shop:s1,sku:__empty__"]
    assert result.batch.column("_cdc_offset").to_pylist() == [100, 100]
    assert result.key_fields == ["shop", "sku"] and result.ignored == 1
    # Other topics keep [source.cdc_json].
    other = _decode(cfg, [{"id": 4, "_action": "_insert", "_timestamp": 1}], topic="srv.app.other")
    assert other.batch.column("_cdc_key").to_pylist() == ["4"]


def test_bad_messages_are_quarantined_with_their_coordinates(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"key_fields": ["id"], "records_field": ""})
    values = [
        {"id": 1, "_timestamp": 1},
        {"id": 1, "_action": "_upsert", "_timestamp": 2},
        {"id": 1, "_action": "_insert", "_timestamp": "last tuesday"},
        {"id": 1, "_action": "_insert"},
        {"_action": "_insert", "_timestamp": 3},
        b"{not json",
        [1, 2],
        {"id": 1, "_cdc_op": "c", "_action": "_insert", "_timestamp": 4},
        {"id": 2, "_action": "_insert", "_timestamp": 5},
    ]
    result = _decode(cfg, values, partition=7, first_offset=40)
    reasons = {b.offset: b.reason for b in result.bad}
    assert {b.partition for b in result.bad} == {7}
    assert all(b.topic == "srv.app.items" and b.value is not None for b in result.bad)
    assert "op field '_action' is missing" in reasons[40]
    assert "unknown op value '_upsert'" in reasons[41]
    assert "order field '_timestamp'" in reasons[42] and "last tuesday" in reasons[42]
    assert "missing or null" in reasons[43]
    assert "key field 'id' is missing" in reasons[44]
    assert "not valid JSON" in reasons[45]
    assert "not an object" in reasons[46]
    assert "reserved" in reasons[47]
    assert sorted(reasons) == list(range(40, 48))
    assert result.batch.column("_cdc_offset").to_pylist() == [48]


def test_order_type_quarantines_values_of_another_kind(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"key_fields": ["id"]}, tables={"app_items": {"order_type": "timestamp"}})
    values = [
        {"id": 1, "_action": "_insert", "_timestamp": "2024-01-01T00:00:00Z"},
        {"id": 1, "_action": "_update", "_timestamp": 1704067201000},
    ]
    result = _decode(cfg, values)
    assert [b.offset for b in result.bad] == [101]
    assert "order_type is 'timestamp'" in result.bad[0].reason
    assert _decode(cfg, values, topic="srv.app.other").bad == []  # auto elsewhere


def test_no_key_fields_and_no_object_key_is_bad(tmp_path: Path) -> None:
    result = _decode(_cfg(tmp_path), [{"id": 1, "_action": "_insert", "_timestamp": 1}])
    assert result.batch is None
    assert "set key_fields" in result.bad[0].reason


@pytest.mark.parametrize(
    ("cdc_json", "tables", "words"),
    [
        ({"images": "some"}, {}, "source.cdc_json.images"),
        (
            {"update_values": ["_insert"]},
            {},
            "'_insert' is in both insert_values and update_values",
        ),
        ({"delete_values": []}, {}, "delete_values is empty"),
        ({"order_field": "_action"}, {}, "op_field and order_field"),
        ({}, {"t": {"update_values": ["_insert"]}}, "tables.t with source.cdc_json"),
        ({}, {"t": {"images": "half"}}, "tables.t.images"),
    ],
)
def test_bad_cdc_json_config_is_refused_before_anything_runs(
    tmp_path: Path, cdc_json: dict, tables: dict, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(tmp_path, cdc_json, tables)
    assert words in str(info.value) + repr(getattr(info.value, "problems", "")), info.value


def test_connection_check_samples_decode_as_cdc_json(tmp_path: Path) -> None:
    from engine.checks.kafka import Partition, check_samples

    cfg = _cfg(tmp_path, {"key_fields": ["id"]})
    good = json.dumps({"id": 1, "_action": "_insert", "_timestamp": 1}).encode()
    ok, _ = check_samples(cfg, {"s.app.t": {0: Partition(0, 1, [(None, good, 0)])}})
    assert ok.status == "pass" and "decode as cdc-json" in ok.detail
    bad = json.dumps({"id": 1, "_timestamp": 1}).encode()
    check, _ = check_samples(
        cfg, {"s.app.t": {0: Partition(0, 2, [(None, good, 0), (None, bad, 1)])}}
    )
    assert check.status == "fail"
    assert "s.app.t[0]@1: the op field '_action' is missing" in check.detail
    assert "[source.cdc_json]" in check.fix and "JsonConverter" not in check.fix
