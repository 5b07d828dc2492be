"""Tests of the reference fold on small hand-written Debezium streams."""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from tests.oracle import (
    INVENTORY_TYPES,
    decode_column,
    fold,
    fold_flattened,
    inventory_types,
    record_key,
)

TOPIC = "srv.public.items"
OTHER = "srv.public.other"


def key(ident: Any) -> bytes:
    return json.dumps({"id": ident}).encode()


def event(
    op: str,
    ident: Any,
    lsn: int | None,
    after: dict[str, Any] | None = None,
    *,
    snapshot: str = "false",
    topic: str = TOPIC,
) -> tuple[str, bytes | None, bytes]:
    """A schemaless Debezium PostgreSQL message for ``public.<table>``."""
    row = None if after is None else {"id": ident, **after}
    before = {"id": ident, "name": ""} if op == "d" else None
    value = {
        "before": before,
        "after": row,
        "source": {
            "version": "2.7.3.Final",
            "connector": "postgresql",
            "name": "srv",
            "ts_ms": 1_700_000_000_000,
            "snapshot": snapshot,
            "db": "db",
            "sequence": json.dumps([None, str(lsn)]),
            "schema": "public",
            "table": topic.rsplit(".", 1)[1],
            "txId": 1,
            "lsn": lsn,
            "xmin": None,
        },  # fmt: skip
        "transaction": None,
        "op": op,
        "ts_ms": 1_700_000_000_010,
    }
    return topic, (None if op == "t" else key(ident)), json.dumps(value).encode()


def tombstone(ident: Any, topic: str = TOPIC) -> tuple[str, bytes, None]:
    return topic, key(ident), None


def test_upserts_and_deletes() -> None:
    state = fold(
        [
            event("r", 1, 100, {"name": "a"}, snapshot="first"),
            event("r", 2, 100, {"name": "b"}, snapshot="last"),
            event("c", 3, 200, {"name": "c"}),
            event("u", 1, 300, {"name": "a2"}),
            event("d", 2, 400),
            tombstone(2),
        ]
    )
    assert state == {TOPIC: {"1": {"id": 1, "name": "a2"}, "3": {"id": 3, "name": "c"}}}


def test_replays_and_late_older_events_are_ignored() -> None:
    messages = [
        event("c", 1, 100, {"name": "v1"}),
        event("u", 1, 200, {"name": "v2"}),
        event("u", 1, 300, {"name": "v3"}),
        # The connector restarts and re-emits from an older offset.
        event("u", 1, 200, {"name": "v2"}),
        event("u", 1, 300, {"name": "v3-replayed-with-equal-lsn"}),
        event("c", 1, 100, {"name": "v1"}),
    ]
    assert fold(messages)[TOPIC] == {"1": {"id": 1, "name": "v3"}}


def test_snapshot_rows_order_before_streamed_changes() -> None:
    # A (re-)snapshot row with a higher LSN still loses against a streamed change.
    messages = [
        event("c", 1, 500, {"name": "streamed"}),
        event("r", 1, 900, {"name": "snapshot"}, snapshot="true"),
        event("r", 2, 900, {"name": "only-in-snapshot"}, snapshot="true"),
    ]
    assert fold(messages)[TOPIC] == {
        "1": {"id": 1, "name": "streamed"},
        "2": {"id": 2, "name": "only-in-snapshot"},
    }


def test_delete_then_reinsert() -> None:
    messages = [
        event("c", 7, 100, {"name": "first life"}),
        event("d", 7, 200),
        tombstone(7),
        event("c", 7, 300, {"name": "second life"}),
    ]
    assert fold(messages)[TOPIC] == {"7": {"id": 7, "name": "second life"}}
    # A replay of the old delete (and its tombstone) must not kill the new row.
    replayed = [*messages, event("d", 7, 200), tombstone(7)]
    assert fold(replayed)[TOPIC] == {"7": {"id": 7, "name": "second life"}}


def test_tombstones() -> None:
    # After a delete: no-op (the row stays deleted, later inserts still work).
    after_delete = [event("c", 1, 100, {"name": "x"}), event("d", 1, 200), tombstone(1)]
    assert fold(after_delete)[TOPIC] == {}
    # Alone on a compacted topic (the delete event was compacted away): a delete.
    compacted = [event("r", 1, 100, {"name": "x"}, snapshot="true"), tombstone(1)]
    assert fold(compacted)[TOPIC] == {}
    # For a key never seen: nothing.
    assert fold([tombstone(5)]) == {TOPIC: {}}
    # The old Kafka shape of a tombstone.
    legacy = (TOPIC, key(1), b'{"schema":null,"payload":null}')
    assert fold([event("c", 1, 100, {"name": "x"}), legacy])[TOPIC] == {}
    # Events newer than the deletion apply.
    assert fold([*after_delete, event("c", 1, 300, {"name": "y"})])[TOPIC] == {
        "1": {"id": 1, "name": "y"}
    }


def test_truncate_empties_only_its_table() -> None:
    messages = [
        event("c", 1, 100, {"name": "a"}),
        event("c", 2, 110, {"name": "b"}),
        event("c", 9, 120, {"name": "other"}, topic=OTHER),
        event("t", None, 200),
        event("c", 3, 300, {"name": "after truncate"}),
        # Late replays of pre-truncate events stay truncated.
        event("u", 1, 150, {"name": "late"}),
        event("c", 4, 130, {"name": "never seen before, older than truncate"}),
    ]
    assert fold(messages) == {
        TOPIC: {"3": {"id": 3, "name": "after truncate"}},
        OTHER: {"9": {"id": 9, "name": "other"}},
    }
    # A replayed truncate does not remove rows written after it.
    assert fold([*messages, event("t", None, 200)])[TOPIC] == {
        "3": {"id": 3, "name": "after truncate"}
    }


def test_message_events_are_ignored_and_garbage_is_rejected() -> None:
    logical = (TOPIC, None, json.dumps({"op": "m", "source": {"lsn": 5}}).encode())
    assert fold([event("c", 1, 1, {"name": "a"}), logical])[TOPIC] == {"1": {"id": 1, "name": "a"}}
    with pytest.raises(ValueError):
        fold([(TOPIC, key(1), b'{"id": 1, "name": "flattened row"}')])
    with pytest.raises(ValueError):
        fold([(TOPIC, None, event("c", 1, 1, {"name": "a"})[2])])


def test_record_keys() -> None:
    assert record_key(b'{"id": 42}') == "42"
    assert record_key(b'{"schema": {"type": "struct"}, "payload": {"id": "x"}}') == "x"
    assert record_key(b'{"order_id": 1, "line": 2}') == "order_id:1,line:2"
    with pytest.raises(ValueError):
        record_key(None)


# ----------------------------------------------------------------------------- decoding


def _wrapped(
    columns: list[dict[str, Any]], after: dict[str, Any], lsn: int = 10
) -> tuple[str, bytes, bytes]:
    """A JsonConverter ``schemas.enable=true`` create event with the given after schema."""
    row_schema = {
        "type": "struct", "fields": columns, "optional": True, "name": "srv.public.items.Value",
    }  # fmt: skip
    value = {
        "schema": {
            "type": "struct",
            "fields": [
                {**row_schema, "field": "before"},
                {**row_schema, "field": "after"},
                {"type": "struct", "fields": [], "optional": False, "field": "source"},
                {"type": "string", "optional": False, "field": "op"},
            ],
            "optional": False,
            "name": "srv.public.items.Envelope",
        },
        "payload": {
            "before": None,
            "after": after,
            "source": {"snapshot": "false", "lsn": lsn},
            "op": "c",
        },
    }
    wrapped_key = {
        "schema": {
            "type": "struct",
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
        },  # fmt: skip
        "payload": {"id": after["id"]},
    }
    return TOPIC, json.dumps(wrapped_key).encode(), json.dumps(value).encode()


def test_decoding_with_schemas() -> None:
    columns = [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "price"},
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2"}, "field": "refund"},
        {"type": "int64", "optional": False, "name": "io.debezium.time.MicroTimestamp",
         "field": "created"},
        {"type": "string", "optional": False, "name": "io.debezium.time.ZonedTimestamp",
         "field": "updated"},
        {"type": "int32", "optional": False, "name": "io.debezium.time.Date", "field": "day"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "at"},
        {"type": "string", "optional": False, "name": "io.debezium.data.Enum",
         "parameters": {"allowed": "A,B"}, "field": "status"},
        {"type": "double", "optional": True, "field": "weight"},
        {"type": "boolean", "optional": False, "field": "vip"},
        {"type": "bytes", "optional": True, "field": "blob"},
        {"type": "string", "optional": True, "field": "note"},
    ]  # fmt: skip
    after = {
        "id": 1, "price": "AeJA", "refund": "/w==", "created": -86_400_000_000,
        "updated": "2024-01-15T08:30:00.12Z", "day": 19737, "at": 3_723_000_001,
        "status": "B", "weight": 5, "vip": True, "blob": base64.b64encode(b"\x00\xff").decode(),
        "note": None,
    }  # fmt: skip
    row = fold([_wrapped(columns, after)])[TOPIC]["1"]
    assert row == {
        "id": 1,
        "price": Decimal("1234.56"),
        "refund": Decimal("-0.01"),
        "created": datetime(1969, 12, 31, 0, 0),
        "updated": datetime(2024, 1, 15, 8, 30, 0, 120000, tzinfo=UTC),
        "day": date(2024, 1, 15),
        "at": time(1, 2, 3, 1),
        "status": "B",
        "weight": 5.0,
        "vip": True,
        "blob": b"\x00\xff",
        "note": None,
    }
    assert isinstance(row["weight"], float)
    assert row["price"].as_tuple().exponent == -2
    assert row["created"].tzinfo is None


def test_decoding_schemaless_needs_type_hints() -> None:
    after = {"name": "n", "description": None, "price": "AeJA", "weight": 1.5,
             "updated_at": "2024-01-15T08:30:00Z"}  # fmt: skip
    messages = [event("c", 101, 10, after, topic="shop.inventory.products")]
    raw = fold(messages)["shop.inventory.products"]["101"]
    assert raw["price"] == "AeJA"  # no types: the JSON value as it is
    typed = fold(messages, types=INVENTORY_TYPES)["shop.inventory.products"]["101"]
    assert typed["price"] == Decimal("1234.56")
    assert typed["updated_at"] == datetime(2024, 1, 15, 8, 30, tzinfo=UTC)
    assert fold(messages, types=inventory_types("shop")) == fold(messages, types=INVENTORY_TYPES)
    decimal = "org.apache.kafka.connect.data.Decimal"
    assert decode_column("AA==", decimal, {"scale": "3"}) == Decimal("0.000")
    assert decode_column(12.5, decimal, {"scale": "2"}) == Decimal("12.50")


def test_decoded_values_match_what_pyarrow_returns() -> None:
    # The oracle's values must compare equal to a replica read back with to_pylist().
    row = fold(
        [
            event(
                "c",
                1,
                10,
                {
                    "price": "AeJA",
                    "created_at": 1_705_307_400_123_456,
                    "updated_at": "2024-01-15T08:30:00.5Z",
                    "order_date": 19737,
                },
                topic="x.inventory.mixed",
            )
        ],  # fmt: skip
        types={
            "x.inventory.mixed": {
                "price": INVENTORY_TYPES["inventory.products"]["price"],
                "created_at": "io.debezium.time.MicroTimestamp",
                "updated_at": "io.debezium.time.ZonedTimestamp",
                "order_date": "io.debezium.time.Date",
            }
        },
    )["x.inventory.mixed"]["1"]
    schema = pa.schema(
        [
            ("id", pa.int32()),
            ("price", pa.decimal128(10, 2)),
            ("created_at", pa.timestamp("us")),
            ("updated_at", pa.timestamp("us", tz="UTC")),
            ("order_date", pa.date32()),
        ]
    )
    stored = pa.Table.from_pylist([row], schema=schema).to_pylist()[0]
    assert stored == row


def test_both_shapes_of_the_demo_workload_fold_alike() -> None:
    from engine.playground.workload import InventoryWorkload

    wrapped = fold(InventoryWorkload(seed=9, schemas=True).events(30_000))
    workload = InventoryWorkload(seed=9)
    plain = fold(workload.events(30_000), types=INVENTORY_TYPES)
    assert wrapped == plain
    for table in ("customers", "products", "orders"):
        rows = plain[workload.topic(table)]
        assert sorted(int(k) for k in rows) == workload.live_ids(table)
    orders = plain[workload.topic("orders")]
    assert {r["status"] for r in orders.values()} <= {"NEW", "PAID", "SHIPPED", "CANCELLED"}
    assert all(isinstance(r["order_date"], date) for r in orders.values())
    products = plain[workload.topic("products")].values()
    assert all(r["price"].as_tuple().exponent == -2 for r in products)
    assert all(r["updated_at"].tzinfo is not None for r in products)


def test_flattened_equal_order_values_are_two_changes() -> None:
    def flat(name: str, ts: int, op: str = "u") -> tuple[str, bytes, bytes]:
        value = {"id": 1, "name": name, "__op": op, "__source_ts_ms": ts}
        if op == "d":
            value["__deleted"] = "true"
        return (TOPIC, key(1), json.dumps(value).encode())

    # The later of two changes in one millisecond wins; an older one is late.
    assert fold_flattened(
        [flat("a", 1, "c"), flat("b", 2), flat("c", 2), flat("old", 1)], "__source_ts_ms"
    ) == {TOPIC: {"1": {"id": 1, "name": "c"}}}
    # A delete and a re-insert in one millisecond leave the row; a drop-mode tombstone
    # after an upsert at the same value deletes it.
    assert fold_flattened(
        [flat("a", 1, "c"), flat("a", 2, "d"), flat("b", 2, "c")], "__source_ts_ms"
    ) == {TOPIC: {"1": {"id": 1, "name": "b"}}}
    assert fold_flattened(
        [flat("a", 1, "c"), flat("b", 1), (TOPIC, key(1), None)], "__source_ts_ms"
    ) == {TOPIC: {}}
