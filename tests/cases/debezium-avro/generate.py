"""Writes the case files of this folder (run: .venv/bin/python -m tests.cases.debezium-avro...
or ``.venv/bin/python tests/cases/debezium-avro/generate.py`` from the repository root).

The Avro bytes are made by confluent-kafka's own AvroSerializer against the test registry
(engine/playground/registry.py); each case keeps the registry's schemas by id under
``"registry"`` so the driver can serve the same ids again.
"""

from __future__ import annotations

import base64
import json
import sys
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from engine.playground.registry import SchemaRegistry  # noqa: E402
from tests.avro_support import (  # noqa: E402
    DATE,
    MICRO_TIMESTAMP,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
    Serializer,
    decimal_type,
    envelope_schema,
    event,
    key_schema,
)

HERE = Path(__file__).resolve().parent
TOPIC = "srv.public.orders"


def msg(key: bytes | None, value: bytes | None) -> dict:
    out: dict = {"topic": TOPIC}
    out["key_b64"] = base64.b64encode(key).decode() if key is not None else None
    if key is None:
        del out["key_b64"]
        out["key"] = None
    if value is None:
        out["value"] = None
    else:
        out["value_b64"] = base64.b64encode(value).decode()
    return out


def registry_of(reg: SchemaRegistry) -> dict:
    return {str(i): json.loads(s["schema"]) for i, s in sorted(reg.store.schemas.items())}


def types_case(reg: SchemaRegistry) -> dict:
    cols = [
        ("id", "int", False),
        ("amount", decimal_type(12, 2), True),
        ("placed_at", MICRO_TIMESTAMP, True),
        ("ship_day", DATE, True),
        ("seen_at", ZONED_TIMESTAMP, True),
        ("ratio", VARIABLE_SCALE_DECIMAL, True),
        ("tags", {"type": "array", "items": "string"}, True),
        ("note", "string", True),
    ]
    ser = Serializer(
        reg.url, TOPIC, key_schema(TOPIC, [("id", "int")]), envelope_schema(TOPIC, cols)
    )

    def row(i: int, note: str) -> dict:
        return {
            "id": i,
            "amount": Decimal("1234.56") * i,
            "placed_at": 1_709_528_767_654_321 + i,
            "ship_day": 19_786 + i,
            "seen_at": "2024-03-04T05:06:07.654321Z",
            "ratio": {"scale": 4, "value": (12345 * i).to_bytes(4, "big", signed=True)},
            "tags": ["a", note],
            "note": note,
        }

    b1 = [
        msg(ser.key({"id": i}), ser.value(event("orders", "c", row(i, "new"), 100 + i)))
        for i in (1, 2, 3, 4)
    ]  # noqa: E501
    b2 = [
        msg(
            ser.key({"id": 2}),
            ser.value(event("orders", "u", row(2, "changed"), 200, before=row(2, "new"))),
        ),  # noqa: E501
        msg(ser.key({"id": 3}), ser.value(event("orders", "d", None, 201, before=row(3, "new")))),
        msg(ser.key({"id": 3}), None),
        msg(ser.key({"id": 4}), None),  # a tombstone alone deletes its key (Kafka semantics)
    ]
    expect_row = {
        "id": 1, "amount": "1234.56", "placed_at": "2024-03-04T05:06:07.654322",
        "ship_day": "2024-03-05", "seen_at": "2024-03-04T05:06:07.654321+00:00",
        "ratio": "1.2345", "tags": ["a", "new"], "note": "new",
    }  # fmt: skip
    return {
        "about": "Debezium PostgreSQL Avro (Confluent wire format, schema registry): decimal, "
        "MicroTimestamp, Date, ZonedTimestamp, VariableScaleDecimal, arrays; insert, update, "
        "delete and tombstones; types equal the JSON path's",
        "registry": registry_of(reg),
        "config": {"source": {"format": "debezium-avro"}},
        "batches": [b1, b2],
        "expect": {
            "public_orders": {
                "rows": {
                    "1": expect_row,
                    "2": {
                        "id": 2,
                        "amount": "2469.12",
                        "note": "changed",
                        "tags": ["a", "changed"],
                    },
                },
                "types": {
                    "amount": "decimal128(12, 2)",
                    "placed_at": "timestamp[us]",
                    "ship_day": "date32[day]",
                    "seen_at": "timestamp[us, tz=UTC]",
                    "ratio": "string",
                    "tags": "list<item: string>",
                },
            }
        },
    }


def evolution_case(reg: SchemaRegistry) -> dict:
    cols1 = [("id", "int", False), ("name", "string", True)]
    cols2 = [*cols1, ("score", "long", True)]
    key = key_schema(TOPIC, [("id", "int")])
    s1 = Serializer(reg.url, TOPIC, key, envelope_schema(TOPIC, cols1))
    s2 = Serializer(reg.url, TOPIC, key, envelope_schema(TOPIC, cols2))
    b1 = [
        msg(s1.key({"id": i}), s1.value(event("orders", "c", {"id": i, "name": f"n{i}"}, 10 + i)))
        for i in (1, 2)
    ]  # noqa: E501
    b2 = [
        msg(s1.key({"id": 3}), s1.value(event("orders", "c", {"id": 3, "name": "n3"}, 20))),
        msg(
            s2.key({"id": 1}),
            s2.value(event("orders", "u", {"id": 1, "name": "n1", "score": 7}, 21)),
        ),  # noqa: E501
        msg(
            s2.key({"id": 4}),
            s2.value(event("orders", "c", {"id": 4, "name": "n4", "score": 9}, 22)),
        ),  # noqa: E501
        msg(s2.key({"id": 5}), b'{"not": "avro"}'),
    ]
    b3 = [msg(s2.key({"id": 2}), s2.value(event("orders", "d", None, 30)))]
    return {
        "about": "Debezium Avro with a schema id change mid-stream (a column added, mid-batch): "
        "earlier rows read null in the new column; a JSON value on the Avro topic is a bad "
        "message (errors.tolerance = all)",
        "registry": registry_of(reg),
        "config": {"source": {"format": "debezium-avro"}, "errors": {"tolerance": "all"}},
        "batches": [b1, b2, b3],
        "expect": {
            "public_orders": {
                "rows": {
                    "1": {"id": 1, "name": "n1", "score": 7},
                    "3": {"id": 3, "name": "n3", "score": None},
                    "4": {"id": 4, "name": "n4", "score": 9},
                },
                "types": {"score": "int64", "name": "string"},
            }
        },
        "bad": 1,
    }


def main() -> None:
    for name, make in (("pg-types-create-update-delete", types_case),
                       ("pg-schema-id-change-mid-stream", evolution_case)):  # fmt: skip
        with SchemaRegistry() as reg:
            case = make(reg)
        (HERE / f"{name}.json").write_text(json.dumps(case, indent=1) + "\n")


if __name__ == "__main__":
    main()
