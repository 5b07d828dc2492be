"""Debezium-shaped Avro schemas and Confluent-framed messages for tests and benchmarks.

Schemas are written the way Debezium's AvroConverter registers them (Envelope record with
``before``/``after`` as ``[null, Value]``, a ``source`` record, ``op``, ``ts_ms``,
``transaction``; semantic types annotated with ``connect.name`` / ``connect.parameters``
/ ``logicalType``). Messages are serialized by confluent-kafka's own ``AvroSerializer``
against a registry, so the bytes are the real wire format.
"""

from __future__ import annotations

import copy
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

# -- column types, as the AvroConverter writes them -----------------------------------------


def decimal_type(precision: int, scale: int) -> dict:
    return {
        "type": "bytes",
        "scale": scale,
        "precision": precision,
        "connect.version": 1,
        "connect.parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
        "connect.name": "org.apache.kafka.connect.data.Decimal",
        "logicalType": "decimal",
    }


def named(base: str, connect_name: str, **params: str) -> dict:
    out: dict[str, Any] = {"type": base, "connect.version": 1, "connect.name": connect_name}
    if params:
        out["connect.parameters"] = params
    return out


MICRO_TIMESTAMP = named("long", "io.debezium.time.MicroTimestamp")
TIMESTAMP = named("long", "io.debezium.time.Timestamp")
DATE = named("int", "io.debezium.time.Date")
MICRO_TIME = named("long", "io.debezium.time.MicroTime")
ZONED_TIMESTAMP = named("string", "io.debezium.time.ZonedTimestamp")
JSON = named("string", "io.debezium.data.Json")
UUID = named("string", "io.debezium.data.Uuid")
INT16 = {"type": "int", "connect.type": "int16"}
VARIABLE_SCALE_DECIMAL = {
    "type": "record",
    "name": "VariableScaleDecimal",
    "namespace": "io.debezium.data",
    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.doc": "Variable scaled decimal",
    "connect.version": 1,
    "connect.name": "io.debezium.data.VariableScaleDecimal",
}


def _field(name: str, typ: Any, optional: bool) -> dict:
    if optional:
        return {"name": name, "type": ["null", typ], "default": None}
    return {"name": name, "type": typ}


def pg_source_schema() -> dict:
    fields = [
        _field("version", "string", False),
        _field("connector", "string", False),
        _field("name", "string", False),
        _field("ts_ms", "long", False),
        {
            "name": "snapshot",
            "type": [
                {
                    "type": "string",
                    "connect.version": 1,
                    "connect.parameters": {"allowed": "true,last,false,incremental"},
                    "connect.default": "false",
                    "connect.name": "io.debezium.data.Enum",
                },
                "null",
            ],
            "default": "false",
        },
        _field("db", "string", False),
        _field("sequence", "string", True),
        _field("schema", "string", False),
        _field("table", "string", False),
        _field("txId", "long", True),
        _field("lsn", "long", True),
        _field("xmin", "long", True),
    ]
    return {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": fields,
        "connect.name": "io.debezium.connector.postgresql.Source",
    }


def envelope_schema(topic: str, columns: list[tuple[str, Any, bool]]) -> dict:
    """Value schema of a PostgreSQL table topic; ``columns`` = (name, Avro type, optional)."""
    value = {
        "type": "record",
        "name": "Value",
        "namespace": topic,
        "fields": [_field(n, copy.deepcopy(t), o) for n, t, o in columns],
        "connect.name": f"{topic}.Value",
    }
    block = {
        "type": "record",
        "name": "block",
        "namespace": "event",
        "fields": [
            _field("id", "string", False),
            _field("total_order", "long", False),
            _field("data_collection_order", "long", False),
        ],
        "connect.version": 1,
        "connect.name": "event.block",
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": topic,
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": pg_source_schema()},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", block], "default": None},
        ],
        "connect.version": 1,
        "connect.name": f"{topic}.Envelope",
    }


def key_schema(topic: str, columns: list[tuple[str, Any]]) -> dict:
    return {
        "type": "record",
        "name": "Key",
        "namespace": topic,
        "fields": [{"name": n, "type": copy.deepcopy(t)} for n, t in columns],
        "connect.name": f"{topic}.Key",
    }


def source(table: str, lsn: int, ts_ms: int = 1_700_000_000_000, snapshot: str = "false") -> dict:
    return {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": "srv",
        "ts_ms": ts_ms,
        "snapshot": snapshot,
        "db": "app",
        "sequence": f'[null,"{lsn}"]',
        "schema": "public",
        "table": table,
        "txId": 700 + lsn,
        "lsn": lsn,
        "xmin": None,
    }


def event(table: str, op: str, after: dict | None, lsn: int, before: dict | None = None) -> dict:
    return {
        "before": before,
        "after": after,
        "source": source(table, lsn),
        "op": op,
        "ts_ms": 1_700_000_000_100,
        "transaction": None,
    }


class Serializer:
    """confluent-kafka's AvroSerializer for one topic's key and value schemas."""

    def __init__(self, url: str, topic: str, key: dict, value: dict) -> None:
        import json

        self.client = SchemaRegistryClient({"url": url})
        self.topic = topic
        self._key = AvroSerializer(self.client, json.dumps(key))
        self._value = AvroSerializer(self.client, json.dumps(value))

    def key(self, datum: dict) -> bytes:
        out = self._key(datum, SerializationContext(self.topic, MessageField.KEY))
        assert out is not None
        return out

    def value(self, datum: dict | None) -> bytes | None:
        if datum is None:
            return None
        out = self._value(datum, SerializationContext(self.topic, MessageField.VALUE))
        assert out is not None
        return out
