"""Column type hints applied to decoded columns (``[tables.<name>.columns]``, the catalog).

:func:`apply_hint` turns a column as the decoder produced it (the JSON type of a
schemaless message, or the Connect type of a message with a schema) into the hinted type
(see :mod:`engine.column_types` for the forms and the wire values each accepts). Values
that do not fit are reported in a mask with a reason naming the column, the hint and an
offending value, so their messages are quarantined with their coordinates; a value is
never silently turned into a null, rounded or cut.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import re
from collections.abc import Callable
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine.column_types import ColumnType
from engine.decode.debezium_json import connect, convert
from engine.decode.debezium_json.convert import Converted

#: A conversion's outcome: a :class:`Converted`, or the values and the mask of misfits.
_Result = Converted | tuple[pa.Array, pa.Array | None]

_UUID = r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$"
_WIRE = {
    "decimal": "base64 unscaled bytes, a JSON number or a VariableScaleDecimal",
    "decimal-text": 'decimal text such as "1234.56", or a JSON number',
    "date": "days since 1970-01-01 or ISO text (2024-01-15)",
    "time": "{unit} since midnight or ISO text (13:14:15.123456, Z or an offset allowed)",
    "timestamp": "{unit} since 1970-01-01 or ISO text without offset",
    "timestamptz": "ISO-8601 text with offset, or {unit} since 1970-01-01",
    "bytes": "{encoding} text",
    "uuid": "UUID text",
    "json": "JSON text",
}


def out_type(ct: ColumnType) -> pa.DataType:
    """The Arrow type of a hinted column."""
    return {
        "decimal": lambda: pa.decimal128(ct.precision, ct.scale),
        "date": pa.date32,
        "time": lambda: pa.time64("us"),
        "timestamp": lambda: pa.timestamp("us"),
        "timestamptz": lambda: pa.timestamp("us", "UTC"),
        "bytes": pa.binary,
        "uuid": pa.string,
        "json": pa.string,
        "string": pa.string,
        "boolean": pa.bool_,
        "int32": pa.int32,
        "int64": pa.int64,
        "float32": pa.float32,
        "float64": pa.float64,
    }[ct.kind]()


def _wire(ct: ColumnType) -> str:
    key = ct.kind
    if ct.kind == "decimal" and ct.encoding != "precise":
        key = "decimal-text"
    text = _WIRE.get(key, f"a JSON {ct.kind}")
    unit = {"ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[ct.unit]
    encoding = "base64" if ct.encoding in ("", "bytes") else ct.encoding
    return text.format(unit=unit, encoding=encoding)


def _per_value(
    arr: pa.Array, target: pa.DataType, fn: Callable[[Any], Any]
) -> tuple[pa.Array, pa.Array | None]:
    """Convert each non-null value in Python; failures (any exception) are flagged."""
    out, mask = convert.per_value(arr, fn, target, _MISFITS)
    return out, (mask if mask.true_count else None)


#: What a value that does not fit its hint raises.
_MISFITS = (ValueError, TypeError, ArithmeticError, KeyError, binascii.Error)


def _fits_decimal(ct: ColumnType) -> Callable[[decimal.Decimal], decimal.Decimal]:
    quantum = decimal.Decimal(1).scaleb(-ct.scale, context=convert.EXACT)
    limit = decimal.Decimal(10) ** (ct.precision - ct.scale)

    def check(d: decimal.Decimal) -> decimal.Decimal:
        if not d.is_finite():
            raise ValueError("not a finite number")
        with decimal.localcontext() as c:
            c.prec = 200
            q = d.quantize(quantum)
            if q != d:
                raise ValueError("more fractional digits than the scale")
            if abs(q) >= limit:
                raise ValueError("more digits than the precision")
        return q

    return check


def _decimal_from_text(text: Any, ct: ColumnType) -> decimal.Decimal:
    if not isinstance(text, str) or not re.fullmatch(
        r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*", text
    ):
        raise ValueError("not decimal text")
    return _fits_decimal(ct)(decimal.Decimal(text))


def _to_decimal(arr: pa.Array, ct: ColumnType, schemaless: bool) -> _Result:
    target = out_type(ct)
    check = _fits_decimal(ct)
    t = arr.type
    if pa.types.is_decimal(t) or pa.types.is_integer(t):
        try:
            return Converted(arr.cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(arr, target, lambda v: check(decimal.Decimal(v)))
    if pa.types.is_floating(t):
        # Shortest round-trip text of each double (0.1 stays 0.1), then exact parsing:
        # a double with more digits than the scale is not rounded but reported.
        try:
            # Arrow renders doubles as their shortest round-trip text too (vectorised).
            return Converted(arr.cast(pa.string()).cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(arr, target, lambda v: check(decimal.Decimal(repr(v))))
    if pa.types.is_struct(t) and {f.name for f in t} >= {"scale", "value"}:
        # A schemaless VariableScaleDecimal {scale, value}.
        def vsd(v: dict) -> decimal.Decimal:
            raw = binascii.a2b_base64(v["value"], strict_mode=True)
            unscaled = int.from_bytes(raw, "big", signed=True)
            return check(decimal.Decimal(unscaled).scaleb(-int(v["scale"]), context=convert.EXACT))

        return _per_value(arr, target, vsd)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if schemaless and ct.encoding == "precise":
            raw, bad_b64 = convert.b64decode(arr)
            if bad_b64 is not None:
                raw = pc.if_else(bad_b64, pa.nulls(len(raw), pa.binary()), raw)
            res = convert.unscaled_to_decimal(raw, target)
            mask = (
                bad_b64
                if res.bad is None
                else (res.bad if bad_b64 is None else pc.or_(res.bad, bad_b64))
            )
            return Converted(res.array, mask)
        # With a Connect schema a string column is text (decimal.handling.mode=string, or
        # a VariableScaleDecimal the decoder rendered exactly): the schema says so.
        try:
            return Converted(arr.cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(arr, target, lambda v: _decimal_from_text(v, ct))
    return _unsupported(arr, target)


def _unsupported(arr: pa.Array, target: pa.DataType) -> _Result:
    """Every non-null value is flagged: the column's type cannot become the hint."""
    valid = pc.is_valid(arr)
    flags = valid if pc.any(valid).as_py() else None
    return pa.nulls(len(arr), target), flags


def _to_time(arr: pa.Array, ct: ColumnType) -> _Result:
    t = arr.type
    if pa.types.is_integer(t):
        return convert.time_converter(ct.unit)(arr, "")
    if pa.types.is_string(t):
        return convert.zoned_time_convert(arr, "")
    return _cast_or_flag(arr, out_type(ct))


def _to_timestamp(arr: pa.Array, ct: ColumnType) -> _Result:
    target = out_type(ct)
    t = arr.type
    tz = "UTC" if ct.kind == "timestamptz" else None
    if pa.types.is_integer(t):
        return convert.timestamp_converter(ct.unit, tz)(arr, "")
    if pa.types.is_string(t):
        if tz:
            return convert.zoned_timestamp_convert(arr, "")
        try:
            return Converted(arr.cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(arr, pa.timestamp("us"), _naive_timestamp)
    if pa.types.is_timestamp(t):
        # Zoned -> naive keeps the UTC wall clock; naive -> zoned reads it as UTC.
        return Converted(arr.cast(pa.timestamp("us")).cast(target))
    return _cast_or_flag(arr, target)


def _naive_timestamp(text: Any) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        raise ValueError("an offset in a timestamp without time zone")
    return value


def _to_date(arr: pa.Array, ct: ColumnType) -> _Result:
    t = arr.type
    if pa.types.is_integer(t):
        return convert.date_convert(arr, "")
    if pa.types.is_string(t):
        try:
            return Converted(arr.cast(pa.date32()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _per_value(arr, pa.date32(), lambda v: dt.date.fromisoformat(v))
    return _cast_or_flag(arr, pa.date32())


def _to_bytes(arr: pa.Array, ct: ColumnType) -> _Result:
    t = arr.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return Converted(arr.cast(pa.binary()))
    if not pa.types.is_string(t):
        return _unsupported(arr, pa.binary())
    if ct.encoding == "hex":
        try:
            series = pl.Series(arr).str.decode("hex", strict=True)
            return Converted(series.to_arrow().cast(pa.binary()))
        except pl.exceptions.PolarsError:
            return _per_value(arr, pa.binary(), bytes.fromhex)
    if ct.encoding == "base64-url-safe":
        return _per_value(
            arr,
            pa.binary(),
            lambda v: base64.b64decode(v + "=" * (-len(v) % 4), b"-_", validate=True),
        )
    raw, bad = convert.b64decode(arr)
    return Converted(raw, bad)


def _to_uuid(arr: pa.Array) -> _Result:
    if not pa.types.is_string(arr.type):
        return _unsupported(arr, pa.string())
    ok = pc.match_substring_regex(arr, _UUID)
    bad = pc.and_(pc.is_valid(arr), pc.invert(pc.fill_null(ok, False)))
    lowered = pc.utf8_lower(arr)
    if pc.any(bad).as_py():
        return Converted(pc.if_else(bad, pa.nulls(len(arr), pa.string()), lowered), bad)
    return Converted(lowered)


def _json_check(v: Any) -> str:
    json.loads(v)
    return v


def _to_json(arr: pa.Array) -> _Result:
    if pa.types.is_string(arr.type):
        return _per_value(arr, pa.string(), _json_check)
    # A JSON document that arrived as an object or array (schemaless): its compact text.
    return Converted(pa.array([connect.json_text(v) for v in arr.to_pylist()], pa.string()))


def _to_string(arr: pa.Array) -> _Result:
    t = arr.type
    if pa.types.is_string(t):
        return Converted(arr)
    if pa.types.is_nested(t) or pa.types.is_binary(t):
        return Converted(pa.array([connect.json_text(v) for v in arr.to_pylist()], pa.string()))
    return _cast_or_flag(arr, pa.string())


def _to_boolean(arr: pa.Array) -> _Result:
    t = arr.type
    if pa.types.is_boolean(t):
        return Converted(arr)
    if pa.types.is_integer(t):
        # MySQL BOOLEAN is TINYINT(1): 0 and 1 only.
        allowed = pc.is_in(arr, value_set=pa.array([0, 1], t))
        bad = pc.and_(pc.is_valid(arr), pc.invert(allowed))
        out = pc.not_equal(arr, pa.scalar(0, t))
        if pc.any(bad).as_py():
            return Converted(pc.if_else(bad, pa.nulls(len(arr), pa.bool_()), out), bad)
        return Converted(out)
    return _unsupported(arr, pa.bool_())


def _cast_or_flag(arr: pa.Array, target: pa.DataType) -> _Result:
    if pa.types.is_nested(arr.type):
        return _unsupported(arr, target)
    try:
        return Converted(arr.cast(target))  # safe cast: no overflow, no truncation
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass

    def one(v: Any) -> Any:
        return pa.array([v]).cast(target)[0].as_py()

    def guarded(v: Any) -> Any:
        try:
            return one(v)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ValueError(str(exc)) from None

    return _per_value(arr, target, guarded)


def apply_hint(arr: pa.Array, ct: ColumnType, path: str, *, schemaless: bool) -> Converted:
    """Convert a decoded column to its hinted type.

    Args:
        arr: The column as decoded.
        ct: The hint.
        path: ``after.<column>``, for the reason.
        schemaless: The message had no Connect schema (strings under a ``decimal`` hint
            are then base64 unscaled values unless the hint says ``string``).

    Returns:
        The converted column and the mask of values that do not fit (their rows hold
        nulls; the caller quarantines their messages).
    """
    target = out_type(ct)
    if pa.types.is_null(arr.type):
        return Converted(pa.nulls(len(arr), target))
    if arr.type == target and ct.kind not in ("uuid", "json"):
        return Converted(arr)
    if pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    kind = ct.kind
    if kind == "decimal":
        res = _to_decimal(arr, ct, schemaless)
    elif kind == "time":
        res = _to_time(arr, ct)
    elif kind in ("timestamp", "timestamptz"):
        res = _to_timestamp(arr, ct)
    elif kind == "date":
        res = _to_date(arr, ct)
    elif kind == "bytes":
        res = _to_bytes(arr, ct)
    elif kind == "uuid":
        res = _to_uuid(arr)
    elif kind == "json":
        res = _to_json(arr)
    elif kind == "string":
        res = _to_string(arr)
    elif kind == "boolean":
        res = _to_boolean(arr)
    else:
        res = _cast_or_flag(arr, target)
    if isinstance(res, tuple):
        res = Converted(res[0], res[1])
    bad = res.bad
    if bad is not None:
        bad = pc.fill_null(bad, False)
        if not pc.any(bad).as_py():
            bad = None
    if bad is None:
        return Converted(res.array)
    first = pc.filter(arr, bad)[0].as_py()
    shown = connect.short(first if not isinstance(first, bytes) else first.hex())
    reason = (
        f"{path}: {shown} does not fit the column type {ct.text()} "
        f"(expected {_wire(ct)}; arrived as {arr.type}); fix the value at the source or "
        f"the hint in [tables.<name>.columns]"
    )
    return Converted(res.array, bad, reason)
