"""Avro writer schemas (as Debezium's AvroConverter registers them) -> Connect schemas.

The Avro path does not have type rules of its own: each writer schema is turned back into
the Kafka Connect schema it was made from (the inverse of the AvroConverter's mapping,
see ../shared/docs/debezium-format.md 5.3), in JsonConverter's ``{"type", "name",
"parameters", "fields"}`` form, and that schema goes through the very same
:mod:`engine.decode.debezium_json.connect` plans as a JSON record. So a column typed
``io.debezium.time.MicroTimestamp`` gets the same Arrow type whichever converter wrote it.

Also here: the *wire* form of a writer schema used to decode datums in bulk
(:func:`bulk_schema`: every named type written out in place with a unique name, logical
types and defaults dropped, so decoders return the raw wire values: ints, bytes) and its
Arrow type (:func:`wire_type`).
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa

from engine.decode.debezium_json.connect import (
    CONNECT_DATE,
    CONNECT_TIME,
    CONNECT_TIMESTAMP,
    DECIMAL,
    SchemaError,
)

_PRIMITIVE_CONNECT = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_LOGICAL_CONNECT = {
    "date": CONNECT_DATE,
    "time-millis": CONNECT_TIME,
    "timestamp-millis": CONNECT_TIMESTAMP,
}
_NAMED = ("record", "enum", "fixed")


def _full_name(schema: dict, namespace: str | None) -> str:
    name = schema["name"]
    if "." in name:
        return name
    ns = schema.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


class _Names:
    """Named types of one schema by full and short name (references resolve to them)."""

    def __init__(self) -> None:
        self.types: dict[str, tuple[dict, str | None]] = {}

    def define(self, schema: dict, namespace: str | None) -> str | None:
        full = _full_name(schema, namespace)
        ns = full.rpartition(".")[0] or None
        self.types[full] = (schema, ns)
        self.types.setdefault(schema["name"].rpartition(".")[2], (schema, ns))
        return ns

    def resolve(self, name: str, namespace: str | None) -> tuple[dict, str | None]:
        for candidate in (f"{namespace}.{name}" if namespace else name, name):
            if candidate in self.types:
                return self.types[candidate]
        raise SchemaError(f"unknown Avro type name {name!r}")


def _split_union(branches: list[Any], path: str) -> tuple[Any, bool]:
    """The one non-null branch of a union and whether null is allowed."""
    others = [b for b in branches if b != "null"]
    if len(others) != 1:
        raise SchemaError(
            f"{path}: Avro union {branches} has {len(others)} non-null branches; "
            "Debezium only writes [null, T]"
        )
    return others[0], len(others) < len(branches)


def to_connect(avro: Any) -> dict:
    """The Connect schema (JsonConverter form) an AvroConverter writer schema encodes.

    Raises:
        SchemaError: A construct Debezium's AvroConverter never writes (unions of
            several types) or a reference to an undefined name.
    """
    return _connect(avro, _Names(), None, "")


def _connect(avro: Any, names: _Names, namespace: str | None, path: str) -> dict:
    if isinstance(avro, list):
        branch, optional = _split_union(avro, path)
        made = _connect(branch, names, namespace, path)
        if optional:
            made["optional"] = True
        return made
    if isinstance(avro, str):
        if avro in _PRIMITIVE_CONNECT:
            return {"type": _PRIMITIVE_CONNECT[avro], "optional": False}
        if avro == "null":
            raise SchemaError(f"{path}: a field of type null")
        resolved, ns = names.resolve(avro, namespace)
        return _connect_named(resolved, names, ns, path, define=False)
    if not isinstance(avro, dict):
        raise SchemaError(f"{path}: not an Avro schema: {avro!r}")
    t = avro.get("type")
    if isinstance(t, (dict, list)):
        return _connect(t, names, namespace, path)
    if t in _NAMED:
        return _connect_named(avro, names, namespace, path, define=True)
    out: dict[str, Any] = {"optional": False}
    name = avro.get("connect.name")
    params = dict(avro.get("connect.parameters") or {})
    logical = avro.get("logicalType")
    if t == "array":
        out.update(type="array", items=_connect(avro.get("items"), names, namespace, path + "[]"))
    elif t == "map":
        out.update(
            type="map",
            keys={"type": "string", "optional": False},
            values=_connect(avro.get("values"), names, namespace, path + ".value"),
        )
    elif t in _PRIMITIVE_CONNECT:
        out["type"] = _PRIMITIVE_CONNECT[t]
        if t == "int" and avro.get("connect.type") in ("int8", "int16"):
            out["type"] = avro["connect.type"]
        if logical == "decimal" or name == DECIMAL:
            name = DECIMAL
            params = _decimal_params(avro, params)
        elif name is None and logical in _LOGICAL_CONNECT:
            name = _LOGICAL_CONNECT[logical]
    else:
        raise SchemaError(f"{path}: unsupported Avro type {t!r}")
    if name:
        out["name"] = name
    if params:
        out["parameters"] = params
    return out


def _decimal_params(avro: dict, params: dict) -> dict:
    """The Connect Decimal parameters of an Avro decimal.

    AvroData writes every Connect Decimal with ``connect.parameters`` (the scale is one)
    holding ``connect.decimal.precision`` only when the Decimal declares one, and with an
    Avro ``precision`` of 64 when it does not (PostgreSQL ``money``): then the Connect
    parameters are the whole truth, as for the JSON path, and a 64 is not a precision.
    Without ``connect.parameters`` (another writer, or ``connect.meta.data=false``) the
    Avro ``scale`` and ``precision`` are all there is.
    """
    out = dict(params)
    out.setdefault("scale", str(avro.get("scale", 0)))
    if "precision" in avro and "connect.parameters" not in avro:
        out["connect.decimal.precision"] = str(avro["precision"])
    return out


def _connect_named(
    avro: dict, names: _Names, namespace: str | None, path: str, *, define: bool
) -> dict:
    ns = names.define(avro, namespace) if define else namespace
    t = avro["type"]
    name = avro.get("connect.name")
    if name is None and t != "fixed":  # AvroData names records and enums, not fixed
        name = _full_name(avro, namespace)
    out: dict[str, Any] = {"optional": False}
    if name:
        out["name"] = name
    if avro.get("connect.parameters"):
        out["parameters"] = dict(avro["connect.parameters"])
    if t == "enum":
        out["type"] = "string"  # Connect has no enum: the AvroConverter maps it to string
    elif t == "fixed":
        out["type"] = "bytes"
        if avro.get("logicalType") == "decimal" or name == DECIMAL:
            out["name"] = DECIMAL
            out["parameters"] = _decimal_params(avro, out.get("parameters", {}))
    else:
        fields = []
        for f in avro.get("fields") or []:
            sub = _connect(f["type"], names, ns, f"{path}.{f['name']}" if path else f["name"])
            sub["field"] = f["name"]
            if f.get("default") is not None:
                sub["default"] = f["default"]  # the Connect default (AvroData writes it)
            fields.append(sub)
        out.update(type="struct", fields=fields)
    return out


# --------------------------------------------------------------------------------------
# Wire form for bulk decoding
# --------------------------------------------------------------------------------------


def bulk_schema(avro: Any) -> tuple[Any, bool]:
    """The writer schema with every named type written in place under a unique name,
    without logical types, defaults or annotations (the binary encoding is unchanged), and
    whether the compiled bulk reader (Polars) can read it: no maps, no unions of several
    types, a record at the top."""
    counter = itertools.count()
    names = _Names()
    simple = [True]

    def walk(s: Any, ns: str | None) -> Any:
        if isinstance(s, list):
            if len([b for b in s if b != "null"]) != 1:
                simple[0] = False
            return [walk(b, ns) for b in s]
        if isinstance(s, str):
            if s in _PRIMITIVE_CONNECT or s == "null":
                return s
            resolved, rns = names.resolve(s, ns)
            return walk_named(resolved, rns, define=False)
        t = s.get("type")
        if isinstance(t, (dict, list)):
            return walk(t, ns)
        if t in _NAMED:
            return walk_named(s, ns, define=True)
        if t == "array":
            return {"type": "array", "items": walk(s["items"], ns)}
        if t == "map":
            simple[0] = False
            return {"type": "map", "values": walk(s["values"], ns)}
        if t in _PRIMITIVE_CONNECT:
            return t
        raise SchemaError(f"unsupported Avro type {t!r}")

    def walk_named(s: dict, ns: str | None, *, define: bool) -> Any:
        inner_ns = names.define(s, ns) if define else ns
        n = f"t{next(counter)}"
        if s["type"] == "enum":
            return {"type": "enum", "name": n, "symbols": list(s["symbols"])}
        if s["type"] == "fixed":
            return {"type": "fixed", "name": n, "size": s["size"]}
        fields = [{"name": f["name"], "type": walk(f["type"], inner_ns)} for f in s["fields"]]
        return {"type": "record", "name": n, "fields": fields}

    out = walk(avro, None)
    top_record = isinstance(out, dict) and out.get("type") == "record"
    return out, simple[0] and top_record


def wire_type(s: Any) -> pa.DataType:
    """Arrow type of the raw values of a :func:`bulk_schema` schema."""
    if isinstance(s, list):
        (branch,) = [b for b in s if b != "null"] or ["null"]
        if len([b for b in s if b != "null"]) > 1:
            raise SchemaError("unions of several types are not supported")
        return wire_type(branch)
    if isinstance(s, str):
        return {
            "int": pa.int32(),
            "long": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "boolean": pa.bool_(),
            "string": pa.string(),
            "bytes": pa.binary(),
            "null": pa.null(),
        }[s]
    t = s["type"]
    if t == "record":
        return pa.struct([(f["name"], wire_type(f["type"])) for f in s["fields"]])
    if t == "array":
        return pa.list_(wire_type(s["items"]))
    if t == "map":
        return pa.map_(pa.string(), wire_type(s["values"]))
    if t == "enum":
        return pa.string()
    if t == "fixed":
        return pa.binary()
    raise SchemaError(f"unsupported Avro type {t!r}")
