"""Debezium PostgreSQL change events (JsonConverter with schemas) whose row schema changes
between events, in the shape the real connector writes them (a dropped column leaves the
``before`` and ``after`` schemas; a column added with a DEFAULT carries it as the field's
``default``; seen with Debezium 3.6.1, tests/peers/test_pg_schema_changes.py)."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def decimal_field(name: str, precision: int, scale: int, default: Decimal | None = None) -> dict:
    f = {
        "type": "bytes",
        "optional": True,
        "name": DECIMAL,
        "version": 1,
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
        "field": name,
    }
    if default is not None:
        f["default"] = encode_decimal(default, scale)
    return f


def field(name: str, typ: str, *, optional: bool = True, default: Any = None) -> dict:
    f = {"type": typ, "optional": optional, "field": name}
    if default is not None:
        f["default"] = default
    return f


def encode_decimal(value: Decimal, scale: int) -> str:
    unscaled = int(value.scaleb(scale))
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def event(
    topic: str,
    fields: list[dict],
    op: str,
    row: dict | None,
    lsn: int,
    *,
    before: dict | None = None,
) -> tuple[str, bytes, bytes]:
    """One JsonConverter message: ``(topic, key, value)``; ``fields`` the row schema."""
    row_schema = {"type": "struct", "optional": True, "name": "x.Value", "fields": fields}
    schema = {
        "type": "struct",
        "name": "x.Envelope",
        "optional": False,
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {
                "type": "struct",
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
                "fields": [
                    {"type": "string", "optional": False, "field": "connector"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": False, "field": "schema"},
                    {"type": "string", "optional": False, "field": "table"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "string", "optional": True, "field": "snapshot"},
                    {"type": "int64", "optional": True, "field": "lsn"},
                ],
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }
    source = {
        "connector": "postgresql",
        "db": "db",
        "schema": "public",
        "table": topic.rsplit(".", 1)[-1],
        "ts_ms": 1_700_000_000_000 + lsn,
        "snapshot": "true" if op == "r" else "false",
        "lsn": lsn,
    }
    key_id = (row or before or {})["id"]
    key = {
        "schema": {
            "type": "struct",
            "name": "x.Key",
            "optional": False,
            "fields": [{"type": "int32", "optional": False, "field": "id"}],
        },
        "payload": {"id": key_id},
    }
    value = {
        "schema": schema,
        "payload": {"before": before, "after": row, "source": source, "op": op, "ts_ms": 1},
    }
    return topic, json.dumps(key).encode(), json.dumps(value).encode()
