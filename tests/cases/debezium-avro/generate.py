"""Writes the case files of this folder (run: .venv/bin/python -m tests.cases.debezium-avro...
or ``.venv/bin/python tests/cases/debezium-avro/generate.py`` from the repository root).

The Avro bytes are made by confluent-kafka's own AvroSerializer against the test registry
(engine/playground/registry.py); each case keeps the registry's schemas by id under
``"registry"`` so the driver can serve the same ids again.
"""

from __future__ import annotations

import base64
import copy
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
    avro_case,
    decimal_type,
    envelope_schema,
    event,
    key_schema,
)
from tests.samples import debezium_samples  # noqa: E402

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
        # Avro named types Connect maps to string / Decimal (AvroConverter with
        # enhanced.avro.schema.support, or a producer that is not Kafka Connect).
        ("size", {"type": "enum", "name": "Size", "symbols": ["S", "M", "L"]}, True),
        (
            "fee",
            {
                "type": "fixed",
                "name": "Fee",
                "size": 6,
                "logicalType": "decimal",
                "precision": 12,
                "scale": 2,
            },
            True,
        ),  # fmt: skip
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
            "size": "SML"[i % 3],
            "fee": (-150 * i).to_bytes(6, "big", signed=True),
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
        "ratio": "1.2345", "tags": ["a", "new"], "note": "new", "size": "M", "fee": "-1.50",
    }  # fmt: skip
    return {
        "about": "Debezium PostgreSQL Avro (Confluent wire format, schema registry): decimal, "
        "MicroTimestamp, Date, ZonedTimestamp, VariableScaleDecimal, arrays, an Avro enum and "
        "a fixed decimal; insert, update, delete and tombstones; types equal the JSON path's",
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
                    "size": "string",
                    "fee": "decimal128(12, 2)",
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


def mysql_binlog_case() -> dict:
    """The real MySQL delete of ../shared/debezium-samples/mysql-delete.json (Debezium 2.7,
    key and value with their Connect schemas), its ``op``, images and binlog position
    changed per event, as the AvroConverter writes it."""
    sample = json.loads((debezium_samples() / "mysql-delete.json").read_text())
    topic = sample["topic"]

    def ev(op: str, i: int, name: str, pos: int, *, file: int = 3, row: int = 0,
           snapshot: str = "false") -> dict:  # fmt: skip
        value = copy.deepcopy(sample["value"])
        image = {"id": i, "first_name": name, "last_name": "Kretchmar", "email": f"{i}@x.org"}
        payload = value["payload"]
        payload.update(op=op, after=None if op == "d" else image,
                       before=image if op == "d" else None)  # fmt: skip
        payload["source"].update(file=f"mysql-bin.{file:06d}", pos=pos, row=row,
                                 snapshot=snapshot)  # fmt: skip
        key = {"schema": sample["key"]["schema"], "payload": {"id": i}}
        return {"topic": topic, "key": key, "value": value}

    def tombstone(i: int) -> dict:
        return {"topic": topic, "key": {"schema": sample["key"]["schema"],
                                        "payload": {"id": i}}, "value": None}  # fmt: skip

    case = {
        "config": {},
        "batches": [
            [
                ev("u", 1001, "file4", 100, file=4),
                ev("u", 1001, "file3", 900_000),  # an earlier file: loses
                ev("u", 1002, "row1", 500, row=1),
                ev("u", 1002, "row0", 500, row=0),  # same position, earlier row: loses
                ev("c", 1003, "created", 20),
                ev("u", 1004, "streamed", 10),
                ev("r", 1004, "snapshot", 99_999, file=9, snapshot="true"),  # loses
            ],
            [
                ev("u", 1001, "late", 950_000),  # older than the stored file-4 row: loses
                ev("u", 1002, "later", 2, file=5),
                ev("d", 1003, "created", 1, file=5),
                tombstone(1003),
            ],
        ],
        "expect": {
            "inventory_customers": {
                "rows": {
                    "1001": {"id": 1001, "first_name": "file4"},
                    "1002": {"id": 1002, "first_name": "later"},
                    "1004": {"id": 1004, "first_name": "streamed", "email": "1004@x.org"},
                },
                "types": {"id": "int32", "first_name": "string", "email": "string"},
            }
        },
    }
    return avro_case(
        case,
        "Debezium MySQL Avro (the real 2.7 delete sample's schemas, AvroConverter): ordering "
        "by binlog file, position and row within and across batches (a later file beats a "
        "larger position of an earlier file, row breaks ties, a snapshot read loses to any "
        "streamed change), delete and tombstone",
    )


def main() -> None:
    for name, make in (("pg-types-create-update-delete", types_case),
                       ("pg-schema-id-change-mid-stream", evolution_case)):  # fmt: skip
        with SchemaRegistry() as reg:
            case = make(reg)
        (HERE / f"{name}.json").write_text(json.dumps(case, indent=1) + "\n")
    (HERE / "mysql-binlog-order.json").write_text(json.dumps(mysql_binlog_case(), indent=1) + "\n")


if __name__ == "__main__":
    main()
