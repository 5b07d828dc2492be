"""Kafka Connect schemas (JsonConverter ``schemas.enable=true``) mapped to Arrow.

Every Connect field schema becomes a :class:`TypePlan` with two Arrow types:

* ``parse_type`` - what the bulk JSON reader (``pyarrow.json``) is asked to produce. It is
  the *wire* representation: a ``Decimal`` is a base64 string, a ``MicroTimestamp`` an
  int64, a ``ZonedTimestamp`` a string.
* ``out_type`` - the type of the column in the change batch (decimal128, timestamp, ...).

``convert`` turns an array of ``parse_type`` into ``out_type`` with vectorised Arrow (and,
for base64, Polars) kernels, and reports the rows whose value cannot be represented
(invalid base64, a time of day past midnight, ...) instead of failing the whole array
(the converters are in :mod:`.convert`).

``normalize`` is the per-value Python twin of the bulk reader: it turns a ``json.loads``
value into a value of ``parse_type``. The decoder uses it only for messages the bulk reader
rejects (one odd message must not poison a block) and for types the Arrow JSON reader
cannot read (maps). Because it produces the *wire* representation, the same vectorised
``convert`` runs afterwards, so both paths give identical results.

Type decisions (see also the module docstring of :mod:`.decoder`):

* ``int8`` and ``int16`` become int32: Hudi's Avro schema has no narrower integer, so int32
  avoids a type change when the batch meets the table schema.
* ``VariableScaleDecimal`` becomes a string holding the exact plain decimal text: every
  value carries its own scale, so any fixed ``decimal128(38, s)`` would either change type
  between batches (a scale change is not a safe Hudi evolution) or lose digits.
* A ``Decimal`` with precision above 76 (PostgreSQL allows 1000) also becomes exact text.
* Temporal values: see :data:`_TEMPORAL` and the ``timestamp_converter`` /
  ``time_converter`` helpers of :mod:`.convert` (timestamps without zone, times of day
  as time64[us]).
  ``ZonedTime`` (PostgreSQL ``timetz``, sent normalized to UTC) is a time64[us] in UTC.
  ``IsoDate`` / ``IsoTime`` / ``IsoTimestamp`` (``time.precision.mode=isostring``) are
  date32 / time64[us] / timestamp[us] like their integer counterparts.
* A ``map`` whose keys are not strings (pgvector's ``SparseVector``: int16 -> float64)
  becomes ``list<struct<key, value>>``, its entries in the order sent: a Hudi (Avro) map
  has string keys only, and this is the form Confluent's AvroConverter writes, so the
  Avro path gives the same type.
* Types Debezium sends as text (``Json``, ``Uuid``, ``Xml``, ``Enum``, ``EnumSet``,
  ``Interval``, and every column under ``decimal.handling.mode=string`` or a string
  ``binary.handling.mode``) stay text: the message does not say more. A column type
  hint (``[tables.<name>.columns]``, :mod:`.hints`) turns them into real types.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from engine.decode.debezium_json.convert import (
    EXACT,
    MAX_DECIMAL_DIGITS,
    Converted,
    convert_bytes,
    convert_variable_scale,
    date_convert,
    decimal_converter,
    decimal_text_converter,
    iso_date_convert,
    iso_timestamp_convert,
    list_converter,
    map_converter,
    struct_converter,
    time_converter,
    timestamp_converter,
    zoned_time_convert,
    zoned_timestamp_convert,
)

# Connect / Debezium semantic type names (schema "name").
DECIMAL = "org.apache.kafka.connect.data.Decimal"
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
DBZ_DATE = "io.debezium.time.Date"
DBZ_TIME = "io.debezium.time.Time"
DBZ_MICRO_TIME = "io.debezium.time.MicroTime"
DBZ_NANO_TIME = "io.debezium.time.NanoTime"
DBZ_TIMESTAMP = "io.debezium.time.Timestamp"
DBZ_MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
DBZ_NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
DBZ_ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
DBZ_ZONED_TIME = "io.debezium.time.ZonedTime"
# time.precision.mode=isostring (newest releases): ISO-8601 text in UTC.
DBZ_ISO_DATE = "io.debezium.time.IsoDate"
DBZ_ISO_TIME = "io.debezium.time.IsoTime"
DBZ_ISO_TIMESTAMP = "io.debezium.time.IsoTimestamp"


#: Precision used when a Decimal schema has no ``connect.decimal.precision`` parameter
#: (MySQL and old connectors omit it); 38 is the widest decimal128.
DEFAULT_DECIMAL_PRECISION = 38


_INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


class FieldError(ValueError):
    """A value does not match its Connect schema; the message is quarantined."""


@dataclass(frozen=True, slots=True)
class TypePlan:
    """How one Connect field is read, converted and typed.

    Attributes:
        describe: Human-readable Connect type (for error messages).
        parse_type: Wire representation requested from the Arrow JSON reader.
        out_type: Type of the change-batch column.
        convert: Vectorised ``parse_type`` -> ``out_type`` conversion (None: identity).
        normalize: Python JSON value -> ``parse_type`` value; raises :class:`FieldError`.
        arrow_readable: False if the Arrow JSON reader cannot produce ``parse_type``.
        has_decimal: True if a ``Decimal`` occurs anywhere inside (it may arrive as a JSON
            number with ``decimal.format=NUMERIC``, so a second parse variant is needed).
    """

    describe: str
    parse_type: pa.DataType
    out_type: pa.DataType
    convert: Callable[[pa.Array, str], Converted] | None
    normalize: Callable[[Any, str], Any]
    arrow_readable: bool = True
    has_decimal: bool = False

    def numeric_decimal_variant(self) -> pa.DataType:
        """Parse type for ``decimal.format=NUMERIC`` (decimals as JSON numbers)."""
        return _numeric_variant(self)

    def numeric_decimal_probe(self) -> pa.DataType:
        """The NUMERIC variant with decimals as float64, which rejects JSON strings.

        Arrow reads a decimal from a JSON number *or* string, and a base64 decimal such
        as ``"1234"`` also looks numeric; parsing the probe proves every value was a number.
        """
        return _decimals_as_float(_numeric_variant(self))


# --------------------------------------------------------------------------------------
# Python normalizers (wire representation)
# --------------------------------------------------------------------------------------


def _norm_int(kind: str) -> Callable[[Any, str], Any]:
    lo, hi = _INT_RANGES[kind]

    def norm(v: Any, path: str) -> Any:
        if v is None:
            return None
        # bool is an int subclass in Python but a different JSON type.
        if isinstance(v, bool) or not isinstance(v, int):
            raise FieldError(f"{path}: expected an integer, got {_short(v)}")
        if not lo <= v <= hi:
            raise FieldError(f"{path}: integer {v} out of {kind} range")
        return v

    return norm


_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _norm_float(v: Any, path: str) -> Any:
    if v is None:
        return None
    if isinstance(v, bool):
        raise FieldError(f"{path}: expected a number, got {_short(v)}")
    if isinstance(v, (int, float, decimal.Decimal)):
        try:
            return float(v)
        except OverflowError:
            # An integer beyond the double range: infinity, as the bulk reader makes it.
            return -math.inf if v < 0 else math.inf
    # Jackson renders NaN/Infinity of FLOAT64 columns (e.g. decimal.handling.mode=double) as
    # quoted strings, which the bulk reader rejects; accept them here.
    if isinstance(v, str) and v in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[v]
    raise FieldError(f"{path}: expected a number, got {_short(v)}")


def _norm_bool(v: Any, path: str) -> Any:
    if v is None or isinstance(v, bool):
        return v
    raise FieldError(f"{path}: expected a boolean, got {_short(v)}")


def _norm_str(v: Any, path: str) -> Any:
    if v is None or isinstance(v, str):
        return v
    raise FieldError(f"{path}: expected a string, got {_short(v)}")


def _norm_decimal(scale: int) -> Callable[[Any, str], Any]:
    """Normalize a Decimal to its base64 wire form, accepting ``decimal.format=NUMERIC``."""

    def norm(v: Any, path: str) -> Any:
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
            raise FieldError(f"{path}: expected a decimal, got {_short(v)}")
        d = decimal.Decimal(v) if not isinstance(v, float) else decimal.Decimal(repr(v))
        if not d.is_finite():
            raise FieldError(f"{path}: {v} is not a finite decimal")
        if abs(d.adjusted()) > MAX_DECIMAL_DIGITS:
            raise FieldError(f"{path}: {_short(v)} has more than {MAX_DECIMAL_DIGITS} digits")
        unscaled = d.scaleb(scale, context=EXACT)
        if unscaled != unscaled.to_integral_value():
            raise FieldError(f"{path}: {v} has more than {scale} fractional digits")
        n = int(unscaled)
        raw = n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True)
        return base64.b64encode(raw).decode("ascii")

    return norm


def _norm_list(item: TypePlan) -> Callable[[Any, str], Any]:
    def norm(v: Any, path: str) -> Any:
        if v is None:
            return None
        if not isinstance(v, list):
            raise FieldError(f"{path}: expected an array, got {_short(v)}")
        return [item.normalize(x, f"{path}[]") for x in v]

    return norm


def _norm_struct(fields: list[tuple[str, TypePlan]]) -> Callable[[Any, str], Any]:
    def norm(v: Any, path: str) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise FieldError(f"{path}: expected an object, got {_short(v)}")
        return {name: plan.normalize(v.get(name), f"{path}.{name}") for name, plan in fields}

    return norm


def _norm_map(key: TypePlan, value: TypePlan) -> Callable[[Any, str], Any]:
    def norm(v: Any, path: str) -> Any:
        if v is None:
            return None
        # String-keyed maps are JSON objects; other maps are arrays of [key, value] pairs.
        if isinstance(v, dict):
            pairs = list(v.items())
        elif isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 for p in v):
            pairs = [(p[0], p[1]) for p in v]
        else:
            raise FieldError(f"{path}: expected a map, got {_short(v)}")
        return [
            (key.normalize(k, f"{path}.key"), value.normalize(x, f"{path}.value")) for k, x in pairs
        ]

    return norm


def _norm_entries(pairs: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """A map's entries as a list of ``{key, value}`` objects (a map with non-string keys)."""

    def norm(v: Any, path: str) -> Any:
        got = pairs(v, path)
        return None if got is None else [{"key": k, "value": x} for k, x in got]

    return norm


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------------------
# Vectorised converters
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Plan construction
# --------------------------------------------------------------------------------------

_PRIMITIVES: dict[str, tuple[pa.DataType, pa.DataType, Callable[[Any, str], Any]]] = {
    # connect type: (parse type, out type, normalizer)
    "int8": (pa.int32(), pa.int32(), _norm_int("int32")),
    "int16": (pa.int32(), pa.int32(), _norm_int("int32")),
    "int32": (pa.int32(), pa.int32(), _norm_int("int32")),
    "int64": (pa.int64(), pa.int64(), _norm_int("int64")),
    "float": (pa.float32(), pa.float32(), _norm_float),
    "float32": (pa.float32(), pa.float32(), _norm_float),
    "double": (pa.float64(), pa.float64(), _norm_float),
    "float64": (pa.float64(), pa.float64(), _norm_float),
    "boolean": (pa.bool_(), pa.bool_(), _norm_bool),
    "string": (pa.string(), pa.string(), _norm_str),
}


class SchemaError(ValueError):
    """The Connect schema itself is not understood (every message using it is quarantined)."""


# Integer-encoded temporal semantic types: name -> (out type, converter). All are read as
# int64 so that the same converters serve int32 (days, milliseconds) and int64 encodings.
_TEMPORAL: dict[str, tuple[pa.DataType, Callable[[pa.Array, str], Converted]]] = {
    DBZ_DATE: (pa.date32(), date_convert),
    CONNECT_DATE: (pa.date32(), date_convert),
    DBZ_TIME: (pa.time64("us"), time_converter("ms")),
    CONNECT_TIME: (pa.time64("us"), time_converter("ms")),
    DBZ_MICRO_TIME: (pa.time64("us"), time_converter("us")),
    DBZ_NANO_TIME: (pa.time64("us"), time_converter("ns")),
    DBZ_TIMESTAMP: (pa.timestamp("us"), timestamp_converter("ms")),
    CONNECT_TIMESTAMP: (pa.timestamp("us"), timestamp_converter("ms")),
    DBZ_MICRO_TIMESTAMP: (pa.timestamp("us"), timestamp_converter("us")),
    DBZ_NANO_TIMESTAMP: (pa.timestamp("us"), timestamp_converter("ns")),
}


def _decimal_plan(params: dict, path: str) -> TypePlan:
    """Plan of a Connect ``Decimal`` (scale and precision from the schema parameters)."""
    try:
        scale = int(params.get("scale", "0"))
        precision = int(params.get("connect.decimal.precision", DEFAULT_DECIMAL_PRECISION))
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{path}: bad Decimal parameters {params}") from exc
    if abs(scale) > MAX_DECIMAL_DIGITS:
        raise SchemaError(f"{path}: Decimal scale {scale} is beyond {MAX_DECIMAL_DIGITS} digits")
    precision = max(precision, scale, 1)
    norm = _norm_decimal(scale)
    if scale < 0 or precision > 76:
        # Beyond decimal256 (PostgreSQL numeric allows 1000 digits): exact text.
        convert = decimal_text_converter(scale)
        return TypePlan(DECIMAL, pa.string(), pa.string(), convert, norm, has_decimal=True)
    if precision <= 38:
        out = pa.decimal128(precision, scale)
    else:
        out = pa.decimal256(precision, scale)
    return TypePlan(DECIMAL, pa.string(), out, decimal_converter(out), norm, has_decimal=True)


def _text_ok(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (``"\\ud800"`` in the JSON text)
        return False
    return True


def schema_problem(schema: Any, path: str = "") -> str | None:
    """What makes a Connect schema object malformed, or None if its shape is sound.

    Checks the shape :func:`plan_for` and the envelope classification rely on, so that a
    hostile schema is refused with a reason instead of breaking them: ``type`` a string,
    ``name`` a string or null, ``parameters`` an object, ``optional`` a boolean, struct
    ``fields`` a list of objects with a (UTF-8 encodable) ``field`` name, array ``items``
    and map ``keys``/``values`` schema objects. Whether a type is *supported* is left to
    :func:`plan_for`.
    """
    where = path or "schema"
    if not isinstance(schema, dict):
        return f"{where}: not an object"
    ctype = schema.get("type")
    if not _text_ok(ctype):
        return f"{where}: type is {_short(ctype)}, not a type name"
    name = schema.get("name")
    if name is not None and not _text_ok(name):
        return f"{where}: name is {_short(name)}, not a string"
    if not isinstance(schema.get("parameters") or {}, dict):
        return f"{where}: parameters is not an object"
    if schema.get("optional") is not None and not isinstance(schema.get("optional"), bool):
        return f"{where}: optional is not a boolean"
    if ctype == "struct":
        fields = schema.get("fields")
        if fields is None:
            return None
        if not isinstance(fields, list):
            return f"{where}: fields is not a list"
        for f in fields:
            if not isinstance(f, dict) or not _text_ok(f.get("field")):
                return f"{where}: a member of fields has no field name"
            problem = schema_problem(f, f"{path}.{f['field']}" if path else f["field"])
            if problem:
                return problem
    elif ctype == "array" and "items" in schema:
        return schema_problem(schema["items"], f"{path}[]")
    elif ctype == "map":
        for member in ("keys", "values"):
            if member in schema:
                problem = schema_problem(schema[member], f"{path}.{member}")
                if problem:
                    return problem
    return None


def plan_for(schema: Any, path: str = "") -> TypePlan:
    """Build the :class:`TypePlan` of a Connect (JsonConverter) schema object.

    Args:
        schema: The schema as decoded JSON (``{"type": ..., "name": ..., ...}``).
        path: Dotted field path, for error messages.

    Raises:
        SchemaError: The schema uses a type this decoder does not know.
    """
    if not isinstance(schema, dict):
        raise SchemaError(f"{path}: schema is not an object")
    ctype = schema.get("type")
    name = schema.get("name")
    params = schema.get("parameters") or {}

    if name == DECIMAL:
        return _decimal_plan(params, path)
    if name == VARIABLE_SCALE_DECIMAL:
        parse = pa.struct([("scale", pa.int32()), ("value", pa.string())])
        norm = _norm_struct(
            [
                ("scale", TypePlan("int32", pa.int32(), pa.int32(), None, _norm_int("int32"))),
                ("value", TypePlan("bytes", pa.string(), pa.string(), None, _norm_str)),
            ]
        )
        return TypePlan(name, parse, pa.string(), convert_variable_scale, norm)
    if name in _TEMPORAL and ctype in ("int32", "int64"):
        out, convert = _TEMPORAL[name]
        return TypePlan(name, pa.int64(), out, convert, _norm_int("int64"))
    if name == DBZ_ZONED_TIMESTAMP and ctype == "string":
        out = pa.timestamp("us", "UTC")
        return TypePlan(name, pa.string(), out, zoned_timestamp_convert, _norm_str)
    if name in (DBZ_ZONED_TIME, DBZ_ISO_TIME) and ctype == "string":
        return TypePlan(name, pa.string(), pa.time64("us"), zoned_time_convert, _norm_str)
    if name == DBZ_ISO_DATE and ctype == "string":
        return TypePlan(name, pa.string(), pa.date32(), iso_date_convert, _norm_str)
    if name == DBZ_ISO_TIMESTAMP and ctype == "string":
        out = pa.timestamp("us")
        return TypePlan(name, pa.string(), out, iso_timestamp_convert, _norm_str)

    if ctype in _PRIMITIVES:
        parse, out, norm = _PRIMITIVES[ctype]
        # Json, Uuid, Enum, EnumSet, Xml, Interval, ... are plain strings.
        return TypePlan(name or ctype, parse, out, None, norm)
    if ctype == "bytes":
        # Bits and other bytes-based semantic types are kept as raw bytes.
        return TypePlan(name or ctype, pa.string(), pa.binary(), convert_bytes, _norm_str)
    if ctype == "array":
        return _list_plan(plan_for(schema.get("items"), f"{path}[]"))
    if ctype == "struct":
        return _struct_plan(name or "struct", struct_fields(schema, path))
    if ctype == "map":
        key = plan_for(schema.get("keys"), f"{path}.key")
        value = plan_for(schema.get("values"), f"{path}.value")
        if isinstance(key.out_type, (pa.StructType, pa.ListType, pa.MapType)):
            raise SchemaError(f"{path}: map keys of type {key.describe} are not supported")
        if not pa.types.is_string(key.out_type):
            # A Hudi (Avro) map has string keys only. A map with other keys (pgvector's
            # SparseVector: int16 -> float64) is kept as its entries, in their order, the
            # way Confluent's AvroConverter writes it, so both formats give one type.
            entry = _struct_plan("map entry", [("key", key), ("value", value)])
            entries = _list_plan(entry)
            return dataclasses.replace(
                entries,
                describe=f"map<{key.describe}, {value.describe}>",
                normalize=_norm_entries(_norm_map(key, value)),
                arrow_readable=False,  # JsonConverter writes it as [[key, value], ...]
            )
        out = pa.map_(key.out_type, value.out_type)
        needs = key.convert is not None or value.convert is not None
        return TypePlan(
            "map",
            pa.map_(key.parse_type, value.parse_type),
            out,
            map_converter(key, value, out) if needs else None,
            _norm_map(key, value),
            arrow_readable=False,  # the Arrow JSON reader cannot build maps
            has_decimal=key.has_decimal or value.has_decimal,
        )
    raise SchemaError(f"{path}: unsupported Connect type {ctype!r} (name {name!r})")


def _list_plan(item: TypePlan) -> TypePlan:
    """The plan of a Connect ``array`` of ``item``."""
    return TypePlan(
        f"array<{item.describe}>",
        pa.list_(item.parse_type),
        pa.list_(item.out_type),
        list_converter(item) if item.convert is not None else None,
        _norm_list(item),
        item.arrow_readable,
        item.has_decimal,
    )


def _struct_plan(describe: str, fields: list[tuple[str, TypePlan]]) -> TypePlan:
    """The plan of a Connect ``struct`` of ``fields``."""
    out = pa.struct([(n, p.out_type) for n, p in fields])
    needs = any(p.convert is not None for _, p in fields)
    return TypePlan(
        describe,
        pa.struct([(n, p.parse_type) for n, p in fields]),
        out,
        struct_converter(fields, out) if needs else None,
        _norm_struct(fields),
        all(p.arrow_readable for _, p in fields),
        any(p.has_decimal for _, p in fields),
    )


def struct_fields(schema: dict, path: str = "") -> list[tuple[str, TypePlan]]:
    """Plans of the fields of a Connect ``struct`` schema, in schema order."""
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise SchemaError(f"{path}: struct schema without fields")
    result: list[tuple[str, TypePlan]] = []
    seen: set[str] = set()
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("field"), str):
            raise SchemaError(f"{path}: struct member without a field name")
        name = f["field"]
        if name in seen:
            raise SchemaError(f"{path}: duplicate field {name!r}")
        seen.add(name)
        result.append((name, plan_for(f, f"{path}.{name}" if path else name)))
    return result


def _numeric_variant(plan: TypePlan) -> pa.DataType:
    """Parse type with every base64 Decimal replaced by its decimal type (NUMERIC format)."""
    if not plan.has_decimal:
        return plan.parse_type
    t = plan.out_type
    if pa.types.is_decimal(t) and pa.types.is_string(plan.parse_type):
        return t
    return _replace_decimal_parse(plan.parse_type, t)


def _replace_decimal_parse(parse: pa.DataType, out: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(out) and pa.types.is_string(parse):
        return out
    if pa.types.is_struct(parse) and pa.types.is_struct(out):
        pairs = zip(parse, out, strict=True)
        return pa.struct([p.with_type(_replace_decimal_parse(p.type, o.type)) for p, o in pairs])
    if pa.types.is_list(parse) and pa.types.is_list(out):
        return pa.list_(_replace_decimal_parse(parse.value_type, out.value_type))
    return parse


def _decimals_as_float(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return pa.float64()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_decimals_as_float(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_decimals_as_float(t.value_type))
    return t


def json_text(value: Any) -> str | None:
    """Compact JSON text of a Python value (None stays None); used for odd columns."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, (bytes, bytearray)):
        return base64.b64encode(o).decode("ascii")
    if isinstance(o, decimal.Decimal):
        return str(o)
    if isinstance(o, (dt.date, dt.time, dt.datetime)):
        return o.isoformat()
    return str(o)


def normalizer_for(t: pa.DataType) -> Callable[[Any, str], Any]:
    """Python normalizer for a primitive parse type (used for ``source`` members)."""
    if pa.types.is_int64(t):
        return _norm_int("int64")
    if pa.types.is_int32(t):
        return _norm_int("int32")
    if pa.types.is_boolean(t):
        return _norm_bool
    if pa.types.is_floating(t):
        return _norm_float
    return _norm_str


def infer_array(values: list[Any]) -> pa.Array:
    """Arrow array with inferred type; columns whose values disagree become JSON text.

    Used only for schemaless records the bulk reader rejected. Mirrors the bulk reader's
    inference (ints, floats, strings, booleans, nested objects and arrays) and, where no
    single Arrow type fits (an integer in one record, a string in another), keeps every
    value as text instead of dropping the record.
    """
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    if all(v is None or isinstance(v, dict) for v in values):
        names: dict[str, None] = {}
        for v in values:
            if v is not None:
                names.update(dict.fromkeys(v))
        children = [infer_array([None if v is None else v.get(k) for v in values]) for k in names]
        mask = pa.array([v is None for v in values], pa.bool_())
        return pa.StructArray.from_arrays(children, names=list(names), mask=mask)
    return pa.array([json_text(v) for v in values], pa.string())


short = _short
