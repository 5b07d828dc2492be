"""Debezium-shaped Avro schemas and Confluent-framed messages for tests and benchmarks.

Schemas are written the way Debezium's AvroConverter registers them (Envelope record with
``before``/``after`` as ``[null, Value]``, a ``source`` record, ``op``, ``ts_ms``,
``transaction``; semantic types annotated with ``connect.name`` / ``connect.parameters``
/ ``logicalType``). Messages are serialized by confluent-kafka's own ``AvroSerializer``
against a registry, so the bytes are the real wire format.
"""

from __future__ import annotations

import copy
import json
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


# -- JsonConverter messages re-serialized as the AvroConverter would write them ------------
#
# The rules are those of Confluent's AvroData.fromConnectSchema / fromConnectData (the
# AvroConverter's defaults: connect.meta.data=true, enhanced.avro.schema.support=false),
# checked against confluentinc/schema-registry avro-data/.../AvroData.java.

_CONNECT_PRIMITIVE = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
#: Connect's own logical types and the Avro logical type AvroData gives each.
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
}
#: AvroData's precision for a Decimal without ``connect.decimal.precision``.
DECIMAL_PRECISION_DEFAULT = 64


def connect_to_avro(schema: dict, defined: set[str] | None = None) -> Any:
    """The Avro schema Confluent's AvroData makes of a Connect schema (JsonConverter form).

    Structs become records named after the Connect name (a second use refers to it by
    name); an optional schema becomes the union ``["null", T]`` (``[T, "null"]`` when it
    has a default); int8/int16 are ``int`` with ``connect.type``; a Decimal is ``bytes``
    with ``logicalType`` decimal, ``scale`` and ``precision`` (``connect.decimal.precision``,
    else 64); Connect Date/Time/Timestamp get ``logicalType`` date/time-millis/
    timestamp-millis; the name, version, doc, parameters and default of every schema go
    into ``connect.name``, ``connect.version``, ``connect.doc``, ``connect.parameters``
    and ``connect.default``. Debezium's own semantic types (MicroTimestamp, Json, ...) keep
    their primitive Avro type, annotated only.
    """
    defined = set() if defined is None else defined
    base = _avro_base(schema, defined)
    if not schema.get("optional"):
        return base
    return [base, "null"] if schema.get("default") is not None else ["null", base]


def _avro_base(schema: dict, defined: set[str]) -> Any:
    t = schema["type"]
    name = schema.get("name")
    params = schema.get("parameters") or {}
    out: dict[str, Any]
    if t == "struct":
        full = name or f"io.confluent.connect.avro.ConnectDefault{len(defined) + 1}"
        # (the set also holds "name\0fields" of each struct defined, to compare shapes)
        shape = f"{full}\0" + json.dumps(schema["fields"], sort_keys=True)
        if full in defined:
            if shape not in defined:  # as Avro's schema parser refuses it
                raise ValueError(f"Can't redefine: {full} (two structs of that name differ)")
            return full
        defined.update((full, shape))
        ns, _, short = full.rpartition(".")
        fields = []
        for f in schema["fields"]:
            field = {"name": f["field"], "type": connect_to_avro(f, defined)}
            if f.get("default") is not None:
                field["default"] = f["default"]
            elif f.get("optional"):
                field["default"] = None
            fields.append(field)
        out = {"type": "record", "name": short, "fields": fields}
        if ns:
            out["namespace"] = ns
    elif t == "array":
        out = {"type": "array", "items": connect_to_avro(schema["items"], defined)}
    elif t == "map" and _entries(schema):
        # AvroData: a map whose keys are not required strings is an array of MapEntry.
        entry = "io.confluent.connect.avro.MapEntry"
        if entry in defined:
            return {"type": "array", "items": entry}
        defined.add(entry)
        entry_fields = [
            {"name": "key", "type": connect_to_avro(schema["keys"], defined)},
            {"name": "value", "type": connect_to_avro(schema["values"], defined)},
        ]
        for f, part in zip(entry_fields, ("keys", "values"), strict=True):
            if schema[part].get("optional"):
                f.update(type=["null", f["type"]], default=None)
        record = {"type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro"}
        return {"type": "array", "items": {**record, "fields": entry_fields}}
    elif t == "map":
        out = {"type": "map", "values": connect_to_avro(schema["values"], defined)}
    else:
        out = {"type": _CONNECT_PRIMITIVE[t]}
        if name == _DECIMAL:
            precision = int(params.get("connect.decimal.precision", DECIMAL_PRECISION_DEFAULT))
            out.update(scale=int(params.get("scale", "0")), precision=precision,
                       logicalType="decimal")  # fmt: skip
        elif name in _LOGICAL:
            out["logicalType"] = _LOGICAL[name]
    if schema.get("doc") is not None:
        out["connect.doc"] = schema["doc"]
    if schema.get("version") is not None:
        out["connect.version"] = schema["version"]
    if params:
        out["connect.parameters"] = dict(params)
    if schema.get("default") is not None:
        out["connect.default"] = schema["default"]
    if name:
        out["connect.name"] = name
    if t in ("int8", "int16"):
        out["connect.type"] = t
    return out if len(out) > 1 else out["type"]


def _entries(schema: dict) -> bool:
    """Whether a Connect map is written as its entries (its keys are not required strings:
    an Avro map has string keys only, a JSON object too)."""
    keys = schema.get("keys") or {}
    return keys.get("type") != "string" or bool(keys.get("optional"))


def payload_to_avro(value: Any, schema: dict) -> Any:
    """A JsonConverter payload value as the Python datum AvroSerializer takes.

    Bytes are base64 in JSON and raw in Avro. A Decimal's datum is its unscaled
    two's-complement bytes as they are (what AvroData writes: ``Decimal.fromLogical``),
    never a Python ``Decimal``, whose default 28-digit context would round wide values.
    """
    import base64

    if value is None:
        return None
    t = schema["type"]
    if t == "struct":
        return {f["field"]: payload_to_avro(value.get(f["field"]), f) for f in schema["fields"]}
    if t == "array":
        return [payload_to_avro(v, schema["items"]) for v in value]
    if t == "map" and _entries(schema):  # JsonConverter: [[key, value], ...] (text keys: {})
        pairs = value.items() if isinstance(value, dict) else value
        keys, values = schema["keys"], schema["values"]
        return [
            {"key": payload_to_avro(k, keys), "value": payload_to_avro(v, values)} for k, v in pairs
        ]
    if t == "map":
        return {k: payload_to_avro(v, schema["values"]) for k, v in value.items()}
    if t == "bytes":
        return base64.b64decode(value)
    if t in ("float", "double", "float32", "float64") and isinstance(value, str):
        return float(value)  # Jackson's quoted "NaN" / "Infinity" / "-Infinity"
    return value


def _converter(schema: dict) -> Any:
    """A compiled :func:`payload_to_avro` for one schema (identity where nothing changes)."""
    t = schema["type"]
    if t == "struct":
        fields = [(f["field"], _converter(f)) for f in schema["fields"]]
        changing = [(name, conv) for name, conv in fields if conv is not None]
        if not changing:
            return None

        def struct(value: Any) -> Any:
            if value is None:
                return None
            out = dict(value)
            for name, conv in changing:
                out[name] = conv(value.get(name))
            return out

        return struct
    if t in ("bytes", "array", "map", "float", "double", "float32", "float64"):
        return lambda value: payload_to_avro(value, schema)
    return None


class JsonToAvro:
    """Re-serializes JsonConverter (``schemas.enable=true``) messages as AvroConverter
    output through confluent-kafka's AvroSerializer (one serializer per Connect schema).

    With ``fast=True`` (benchmarks: millions of messages) the first ``check`` messages of
    each schema go through AvroSerializer and every later one is written by fastavro
    directly with the schema id AvroSerializer registered; the two are asserted to give
    identical bytes on those first messages.
    """

    def __init__(self, url: str, *, fast: bool = False, check: int = 200) -> None:
        import json

        self._json = json
        self.client = SchemaRegistryClient({"url": url})
        self.fast = fast
        self.check = check
        self._serializers: dict[tuple[str, bytes], list[Any]] = {}

    def _one(self, topic: str, raw: bytes | None, field: str) -> bytes | None:
        import io

        import fastavro

        if raw is None:
            return None
        cut = raw.find(b',"payload":')
        if not raw.startswith(b'{"schema":') or cut < 0:  # not compact: re-serialize it
            doc = self._json.loads(raw)
            raw = (
                b'{"schema":'
                + self._json.dumps(doc["schema"], separators=(",", ":")).encode()
                + b',"payload":'
                + self._json.dumps(doc["payload"], separators=(",", ":")).encode()
                + b"}"
            )
            cut = raw.find(b',"payload":')
        schema_text = raw[len(b'{"schema":') : cut]
        found = self._serializers.get((field, schema_text))
        if found is None:
            schema = self._json.loads(schema_text)
            avro = connect_to_avro(schema)
            serializer = AvroSerializer(self.client, self._json.dumps(avro))
            found = [serializer, _converter(schema), fastavro.parse_schema(avro), None, 0]
            self._serializers[(field, schema_text)] = found
        serializer, convert, parsed, header, done = found
        payload = self._json.loads(raw[cut + len(b',"payload":') : -1])
        datum = convert(payload) if convert is not None else payload
        if self.fast and header is not None and done >= self.check:
            buf = io.BytesIO()
            buf.write(header)
            fastavro.schemaless_writer(buf, parsed, datum)
            return buf.getvalue()
        context = SerializationContext(
            topic, MessageField.KEY if field == "key" else MessageField.VALUE
        )
        out = serializer(datum, context)
        assert out is not None
        if self.fast:
            buf = io.BytesIO()
            buf.write(out[:5])
            fastavro.schemaless_writer(buf, parsed, datum)
            assert buf.getvalue() == out, "fastavro and AvroSerializer disagree"
            found[3], found[4] = out[:5], done + 1
        return out

    def message(
        self, topic: str, key: bytes | None, value: bytes | None
    ) -> tuple[str, bytes | None, bytes | None]:
        return (topic, self._one(topic, key, "key"), self._one(topic, value, "value"))


def avro_case(case: dict, about: str) -> dict:
    """A case of tests/cases/ (JsonConverter messages with schemas) with every key and
    value re-serialized by :class:`JsonToAvro` through a registry started for it: the
    same events as the AvroConverter writes them, ``source.format = "debezium-avro"``,
    the registry's schemas by id under ``"registry"``; expectations unchanged."""
    import base64
    import json

    from engine.playground.registry import SchemaRegistry

    def part(msg: dict, name: str, raw: bytes | None) -> None:
        if raw is None:
            msg[name] = None
        else:
            msg[f"{name}_b64"] = base64.b64encode(raw).decode()

    batches = []
    with SchemaRegistry() as reg:
        convert = JsonToAvro(reg.url)
        for batch in case["batches"]:
            out = []
            for m in batch:
                if "key_text" in m or "value_text" in m or "key_b64" in m or "value_b64" in m:
                    raise ValueError("avro_case takes messages given as JSON objects only")
                key = None if m.get("key") is None else json.dumps(m["key"]).encode()
                value = None if m.get("value") is None else json.dumps(m["value"]).encode()
                _, k, v = convert.message(m["topic"], key, value)
                msg = {k2: v2 for k2, v2 in m.items() if k2 not in ("key", "value")}
                part(msg, "key", k)
                part(msg, "value", v)
                out.append(msg)
            batches.append(out)
        registry = {str(i): json.loads(s["schema"]) for i, s in sorted(reg.store.schemas.items())}
    config = json.loads(json.dumps(case.get("config", {})))
    config.setdefault("source", {})["format"] = "debezium-avro"
    out_case = {"about": about, "registry": registry, "config": config, "batches": batches}
    return {**case, **out_case}
