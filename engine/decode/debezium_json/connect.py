"""Kafka Connect schemas (JsonConverter ``schemas.enable=true``) mapped to Arrow.

Every Connect field schema becomes a :class:`TypePlan` with two Arrow types:

* ``parse_type`` - what the bulk JSON reader (``pyarrow.json``) is asked to produce. It is
  the *wire* representation: a ``Decimal`` is a base64 string, a ``MicroTimestamp`` an
  int64, a ``ZonedTimestamp`` a string.
* ``out_type`` - the type of the column in the change batch (decimal128, timestamp, ...).

``convert`` turns an array of ``parse_type`` into ``out_type`` with vectorised Arrow (and,
for base64, Polars) kernels, and reports the rows whose value cannot be represented
(invalid base64, a time of day past midnight, ...) instead of failing the whole array.

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
* Temporal values: see :data:`_TEMPORAL` and the ``_timestamp_converter`` /
  ``_time_converter`` helpers (timestamps without zone, times of day as time64[us]).
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
import binascii
import bisect
import dataclasses
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

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

#: Decimal arithmetic without rounding (the default context rounds to 28 digits): more
#: digits than any decimal that is not refused (MAX_DECIMAL_DIGITS) can have.
EXACT = decimal.Context(prec=2 * 140_000 + 10, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)

#: Precision used when a Decimal schema has no ``connect.decimal.precision`` parameter
#: (MySQL and old connectors omit it); 38 is the widest decimal128.
DEFAULT_DECIMAL_PRECISION = 38

# PostgreSQL +/-infinity timestamps arrive as the JDBC driver's sentinels (the same numbers
# whatever the unit) or, in nanosecond mode, as Long.MAX/MIN. They are clamped to the ends of
# the range every engine downstream (Spark, Hudi, Python) can represent.
_POS_INFINITY = pa.array([9223372036825200000, 2**63 - 1], pa.int64())
_NEG_INFINITY = pa.array([-9223372036832400000, -(2**63)], pa.int64())
TS_MAX_US = 253402300799999999  # 9999-12-31T23:59:59.999999
TS_MIN_US = -62135596800000000  # 0001-01-01T00:00:00
_DAY_US = 86_400_000_000

_INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def _i64(value: int) -> pa.Scalar:
    # Typed scalars: converting an untyped Python number makes pyarrow try (and, without
    # dateutil installed, fail) an import on every call, which is slow in small pieces.
    return pa.scalar(value, pa.int64())


class FieldError(ValueError):
    """A value does not match its Connect schema; the message is quarantined."""


@dataclass(slots=True)
class Converted:
    """Result of a vectorised conversion.

    Attributes:
        array: The converted values (``out_type``); rows flagged in ``bad`` hold nulls.
        bad: Boolean mask of rows whose value could not be converted, or None.
        reason: Why the flagged rows failed (used as the quarantine reason).
    """

    array: pa.Array
    bad: pa.Array | None = None
    reason: str = ""


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


def _mask_or_none(mask: pa.Array) -> pa.Array | None:
    """Normalize a boolean mask: nulls count as False; None if nothing is flagged."""
    mask = pc.fill_null(mask, False)
    return mask if pc.any(mask).as_py() else None


def _null_where(arr: pa.Array, mask: pa.Array | None) -> pa.Array:
    if mask is None:
        return arr
    return pc.if_else(mask, pa.nulls(len(arr), arr.type), arr)


def b64decode(arr: pa.Array) -> tuple[pa.Array, pa.Array | None]:
    """Decode a string array of standard padded base64 into binary, vectorised.

    Returns:
        The decoded array and a mask of invalid rows (None if all are valid).
    """
    if len(arr) == 0:
        return pa.array([], pa.binary()), None
    try:
        # Polars decodes base64 in native code; pyarrow.compute has no base64 kernel.
        decoded = pl.Series(arr).str.decode("base64", strict=True)
        return decoded.to_arrow().cast(pa.binary()), None
    except pl.exceptions.PolarsError:
        pass
    # Rare path: find the offending rows one by one.
    return _per_value(
        arr,
        lambda v: binascii.a2b_base64(v, strict_mode=True),
        pa.binary(),
        (binascii.Error, ValueError),
    )


def _per_value(
    arr: pa.Array,
    convert: Callable[[Any], Any],
    out_type: pa.DataType,
    errors: tuple[type[Exception], ...],
) -> tuple[pa.Array, pa.Array]:
    """Convert each non-null value in Python; return the values and a mask of failures."""
    out: list[Any] = []
    bad: list[bool] = []
    for v in arr.to_pylist():
        if v is None:
            out.append(None)
            bad.append(False)
            continue
        try:
            out.append(convert(v))
            bad.append(False)
        except errors:
            out.append(None)
            bad.append(True)
    return pa.array(out, out_type), pa.array(bad, pa.bool_())


def _convert_bytes(arr: pa.Array, path: str) -> Converted:
    if pa.types.is_binary(arr.type):
        return Converted(arr)
    out, bad = b64decode(arr)
    return Converted(out, bad, f"{path}: invalid base64")


def unscaled_to_decimal(raw: pa.Array, out_type: pa.DataType) -> Converted:
    """Build decimals from big-endian two's-complement unscaled integers, vectorised.

    Each value is sign-extended to the decimal width, byte-reversed (Arrow decimals are
    little-endian) and the resulting fixed-size buffer is reinterpreted as a decimal.

    Args:
        raw: Binary array of unscaled values (Java ``BigInteger.toByteArray`` layout).
        out_type: decimal128 or decimal256 type to produce.
    """
    width = 16 if pa.types.is_decimal128(out_type) else 32
    max_precision = 38 if width == 16 else 76
    lengths = pc.binary_length(raw)
    too_long = _mask_or_none(pc.greater(lengths, pa.scalar(width, pa.int32())))
    if too_long is not None:
        raw = _null_where(raw, too_long)
        lengths = pc.binary_length(raw)
    first = pc.binary_slice(raw, 0, 1)
    negative = pc.greater_equal(first, pa.scalar(b"\x80", pa.binary()))
    ones, zeros = pa.scalar(b"\xff", pa.binary()), pa.scalar(b"\x00", pa.binary())
    pad_byte = pc.if_else(negative, ones, zeros)
    pad = pc.binary_repeat(pad_byte, pc.subtract(pa.scalar(width, pa.int32()), lengths))
    big_endian = pc.binary_join_element_wise(pad, raw, pa.scalar(b"", pa.binary()))
    little = pc.binary_reverse(big_endian).cast(pa.binary(width))
    wide_type = (pa.decimal128 if width == 16 else pa.decimal256)(max_precision, out_type.scale)
    wide = pa.Array.from_buffers(
        wide_type, len(little), little.buffers()[:2], little.null_count, little.offset
    )
    bad = too_long
    if out_type.precision == max_precision:
        return Converted(wide, bad)
    try:
        return Converted(wide.cast(out_type), bad)
    except pa.ArrowInvalid:
        pass
    # Rare path: some values exceed the declared precision; flag them individually.
    limit = 10**out_type.precision
    flags: list[bool] = []
    for v in wide.to_pylist():
        flags.append(v is not None and abs(int(v.scaleb(out_type.scale, context=EXACT))) >= limit)
    over = pa.array(flags, pa.bool_())
    fixed = _null_where(wide, over).cast(out_type)
    return Converted(fixed, over if bad is None else pc.or_(over, bad))


def _decimal_converter(out_type: pa.DataType) -> Callable[[pa.Array, str], Converted]:
    def convert(arr: pa.Array, path: str) -> Converted:
        if pa.types.is_decimal(arr.type):
            # decimal.format=NUMERIC: the reader already produced decimals.
            return Converted(arr if arr.type == out_type else arr.cast(out_type))
        if pa.types.is_binary(arr.type):
            # Avro: the unscaled bytes themselves, not base64 text.
            res = unscaled_to_decimal(arr, out_type)
            return Converted(res.array, res.bad, f"{path}: undecodable {out_type} value")
        raw, bad_b64 = b64decode(arr)
        if bad_b64 is not None:
            raw = _null_where(raw, bad_b64)
        res = unscaled_to_decimal(raw, out_type)
        bad = _or_masks(bad_b64, res.bad)
        return Converted(res.array, bad, f"{path}: undecodable {out_type} value")

    return convert


#: Most digits a decimal may have before or after the point (PostgreSQL ``numeric``
#: allows 131072 before and 16383 after); bounds the text a hostile scale can make.
MAX_DECIMAL_DIGITS = 140_000


def _decimal_text(unscaled: int, scale: int) -> str:
    """Exact plain text of ``unscaled * 10**-scale`` (no exponent, scale kept)."""
    if abs(scale) > MAX_DECIMAL_DIGITS:
        raise ValueError(f"scale {scale} is beyond {MAX_DECIMAL_DIGITS} digits")
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled))
    if scale <= 0:
        return sign + digits + "0" * (-scale) if unscaled else "0"
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def _text_per_value(
    arr: pa.Array, path: str, what: str, to_text: Callable[[Any], str]
) -> Converted:
    """Convert each non-null value to exact text in Python (for rare, wide types)."""
    out, bad = _per_value(
        arr, to_text, pa.string(), (binascii.Error, ValueError, TypeError, KeyError)
    )
    return Converted(out, _mask_or_none(bad), f"{path}: invalid {what}")


def _unscaled_text(b64: Any, scale: int) -> str:
    # Avro carries the bytes themselves, JSON their base64 text.
    raw = b64 if isinstance(b64, bytes) else binascii.a2b_base64(b64, strict_mode=True)
    return _decimal_text(int.from_bytes(raw, "big", signed=True), scale)


def _decimal_text_converter(scale: int) -> Callable[[pa.Array, str], Converted]:
    """Decimals too wide for decimal256: exact text (Python; such columns are rare)."""

    def convert(arr: pa.Array, path: str) -> Converted:
        return _text_per_value(arr, path, "decimal", lambda v: _unscaled_text(v, scale))

    return convert


def _variable_scale_text(v: Any) -> str:
    scale, value = v["scale"], v["value"]
    if scale is None or value is None:
        raise ValueError("missing scale or value")
    return _unscaled_text(value, scale)


def _convert_variable_scale(arr: pa.Array, path: str) -> Converted:
    """VariableScaleDecimal ``{scale, value}`` -> exact decimal text (Python; rare type)."""
    return _text_per_value(arr, path, "VariableScaleDecimal", _variable_scale_text)


def _or_masks(*masks: pa.Array | None) -> pa.Array | None:
    result = None
    for m in masks:
        if m is None:
            continue
        result = m if result is None else pc.or_(result, m)
    return result


def _date_convert(arr: pa.Array, path: str) -> Converted:
    days = arr.cast(pa.int64())
    # date32 holds days as int32; anything wider is not a date Debezium can produce.
    bad = _mask_or_none(pc.or_(pc.less(days, _i64(-(2**31))), pc.greater(days, _i64(2**31 - 1))))
    days = _null_where(days, bad)
    return Converted(days.cast(pa.int32()).cast(pa.date32()), bad, f"{path}: date out of range")


def _floor_div(arr: pa.Array, divisor: int) -> pa.Array:
    """Integer division rounding towards minus infinity (pre-1970 nanoseconds)."""
    q = pc.divide(arr, _i64(divisor))  # truncates towards zero
    r = pc.subtract(arr, pc.multiply(q, _i64(divisor)))
    return pc.if_else(pc.less(r, _i64(0)), pc.subtract(q, _i64(1)), q)


def _timestamp_converter(unit: str, tz: str | None = None) -> Callable[[pa.Array, str], Converted]:
    """int64 ms/us/ns since the epoch -> timestamp[us] (wall-clock, no zone)."""
    out_type = pa.timestamp("us", tz)

    def convert(arr: pa.Array, path: str) -> Converted:
        arr = arr.cast(pa.int64())
        pos_inf = pc.is_in(arr, value_set=_POS_INFINITY)
        neg_inf = pc.is_in(arr, value_set=_NEG_INFINITY)
        special = pc.or_(pos_inf, neg_inf)
        plain = pc.if_else(special, _i64(0), arr)
        bad = None
        if unit == "ms":
            # Values whose microseconds overflow int64 cannot be represented at all.
            limit = (2**63 - 1) // 1000
            bad = _mask_or_none(pc.greater(pc.abs(plain), _i64(limit)))
            plain = pc.if_else(bad, _i64(0), plain) if bad is not None else plain
            us = pc.multiply(plain, _i64(1000))
        elif unit == "ns":
            us = _floor_div(plain, 1000)
        else:
            us = plain
        us = pc.if_else(pos_inf, _i64(TS_MAX_US), pc.if_else(neg_inf, _i64(TS_MIN_US), us))
        out = us.cast(pa.int64()).cast(out_type)
        return Converted(_null_where(out, bad), bad, f"{path}: timestamp out of range")

    return convert


def _time_converter(unit: str) -> Callable[[pa.Array, str], Converted]:
    """ms/us/ns since midnight -> time64[us]; values outside one day are quarantined."""

    def convert(arr: pa.Array, path: str) -> Converted:
        arr = arr.cast(pa.int64())
        if unit == "ms":
            day = _i64(_DAY_US)
            guarded = pc.if_else(pc.greater(pc.abs(arr), day), day, arr)
            us = pc.multiply(guarded, _i64(1000))
        elif unit == "ns":
            us = _floor_div(arr, 1000)
        else:
            us = arr
        bad = _mask_or_none(pc.or_(pc.less(us, _i64(0)), pc.greater_equal(us, _i64(_DAY_US))))
        us = _null_where(us, bad)
        return Converted(us.cast(pa.time64("us")), bad, f"{path}: time of day outside 00:00-24:00")

    return convert


def _zoned_timestamp_convert(arr: pa.Array, path: str) -> Converted:
    """ISO-8601 instant strings (normalized to ``Z``) -> timestamp[us, UTC]."""
    out_type = pa.timestamp("us", "UTC")
    try:
        return Converted(arr.cast(out_type))
    except pa.ArrowInvalid:
        pass
    try:
        # More than six fractional digits: parse at nanosecond precision, then floor.
        ns = arr.cast(pa.timestamp("ns", "UTC")).cast(pa.int64())
        return Converted(_floor_div(ns, 1000).cast(out_type))
    except pa.ArrowInvalid:
        pass
    # Rare path: isolate the unparseable values.
    values: list[Any] = []
    bad: list[bool] = []
    for v in arr.to_pylist():
        try:
            values.append(None if v is None else pa.scalar(v).cast(out_type).value)
            bad.append(False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            values.append(None)
            bad.append(True)
    out = pa.array(values, pa.int64()).cast(out_type)
    return Converted(out, _mask_or_none(pa.array(bad)), f"{path}: invalid ZonedTimestamp")


def _iso_time_us(text: Any) -> int:
    """Microseconds since midnight, in UTC, of an ISO time (``09:15:30.5Z``)."""
    if not isinstance(text, str):
        raise ValueError("not text")
    t = dt.time.fromisoformat(text.strip())
    us = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    if t.tzinfo is not None:
        offset = t.utcoffset() or dt.timedelta(0)
        us = (us - (offset // dt.timedelta(microseconds=1))) % _DAY_US
    return us


def zoned_time_convert(arr: pa.Array, path: str) -> Converted:
    """ISO-8601 times of day (``ZonedTime``: normalized to ``Z``) -> time64[us] in UTC."""
    us, bad = _per_value(arr, _iso_time_us, pa.int64(), (ValueError, TypeError))
    return Converted(us.cast(pa.time64("us")), _mask_or_none(bad), f"{path}: invalid time of day")


def _without_utc_suffix(arr: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(arr, r"(Z|\+00:00)$", "")


def _iso_date_convert(arr: pa.Array, path: str) -> Converted:
    """``IsoDate`` text (``2024-01-15``, a ``Z`` allowed) -> date32."""
    plain = _without_utc_suffix(arr)
    try:
        return Converted(plain.cast(pa.date32()))
    except pa.ArrowInvalid:
        pass
    out, bad = _per_value(plain, dt.date.fromisoformat, pa.date32(), (ValueError, TypeError))
    return Converted(out, _mask_or_none(bad), f"{path}: invalid ISO date")


def _iso_naive(text: Any) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _iso_timestamp_convert(arr: pa.Array, path: str) -> Converted:
    """``IsoTimestamp`` text in UTC (a wall clock read as UTC, like ``MicroTimestamp``)
    -> timestamp[us] without zone."""
    plain = _without_utc_suffix(arr)
    try:
        return Converted(plain.cast(pa.timestamp("us")))
    except pa.ArrowInvalid:
        pass
    out, bad = _per_value(arr, _iso_naive, pa.timestamp("us"), (ValueError, TypeError))
    return Converted(out, _mask_or_none(bad), f"{path}: invalid ISO timestamp")


def _list_converter(item: TypePlan) -> Callable[[pa.Array, str], Converted]:
    item_convert = item.convert
    if item_convert is None:
        raise RuntimeError("a list item type without a converter")

    def convert(arr: pa.Array, path: str) -> Converted:
        flat = arr.flatten()
        res = item_convert(flat, f"{path}[]")
        lengths = pc.fill_null(pc.list_value_length(arr), 0).cast(pa.int32())
        offsets = pa.concat_arrays(
            [pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())]
        )
        out = pa.ListArray.from_arrays(
            offsets, res.array, type=pa.list_(res.array.type), mask=arr.is_null()
        )
        bad = None
        if res.bad is not None:
            parents = pc.filter(pc.list_parent_indices(arr), res.bad)
            rows = pa.array(range(len(arr)), pa.int64())
            bad = _mask_or_none(pc.is_in(rows, value_set=parents.cast(pa.int64())))
        return Converted(out, bad, res.reason)

    return convert


def _struct_converter(
    fields: list[tuple[str, TypePlan]], out_type: pa.DataType
) -> Callable[[pa.Array, str], Converted]:
    def convert(arr: pa.Array, path: str) -> Converted:
        children = arr.flatten()  # applies the struct's own nulls to its children
        converted: list[pa.Array] = []
        bad: pa.Array | None = None
        reason = ""
        for (name, plan), child in zip(fields, children, strict=True):
            if plan.convert is None:
                converted.append(child)
                continue
            res = plan.convert(child, f"{path}.{name}")
            converted.append(res.array)
            if res.bad is not None:
                reason = reason or res.reason
                bad = _or_masks(bad, res.bad)
        out = pa.StructArray.from_arrays(converted, fields=list(out_type), mask=arr.is_null())
        return Converted(out, bad, reason)

    return convert


def _map_converter(
    key: TypePlan, value: TypePlan, out_type: pa.DataType
) -> Callable[[pa.Array, str], Converted]:
    def convert(arr: pa.Array, path: str) -> Converted:
        if arr.offset:
            arr = pa.concat_arrays([arr])  # fresh buffers: offsets index the children
        keys, items = arr.keys, arr.items
        bad_entries = None
        reason = ""
        for plan, child, where in ((key, keys, "key"), (value, items, "value")):
            if plan.convert is None:
                continue
            res = plan.convert(child, f"{path}.{where}")
            if where == "key":
                keys = res.array
            else:
                items = res.array
            if res.bad is not None:
                bad_entries = _or_masks(bad_entries, res.bad)
                reason = reason or res.reason
        out = pa.MapArray.from_arrays(arr.offsets, keys, items, type=out_type, mask=arr.is_null())
        bad = None
        if bad_entries is not None:
            # Entries belong to the row whose offset range contains them. (Computed in
            # Python: list kernels abort the process on map arrays in pyarrow 26.)
            offsets = arr.offsets.to_pylist()
            flags = [False] * len(arr)
            for j in pc.indices_nonzero(bad_entries).to_pylist():
                flags[bisect.bisect_right(offsets, j) - 1] = True
            bad = _mask_or_none(pa.array(flags, pa.bool_()))
        return Converted(out, bad, reason)

    return convert


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
    DBZ_DATE: (pa.date32(), _date_convert),
    CONNECT_DATE: (pa.date32(), _date_convert),
    DBZ_TIME: (pa.time64("us"), _time_converter("ms")),
    CONNECT_TIME: (pa.time64("us"), _time_converter("ms")),
    DBZ_MICRO_TIME: (pa.time64("us"), _time_converter("us")),
    DBZ_NANO_TIME: (pa.time64("us"), _time_converter("ns")),
    DBZ_TIMESTAMP: (pa.timestamp("us"), _timestamp_converter("ms")),
    CONNECT_TIMESTAMP: (pa.timestamp("us"), _timestamp_converter("ms")),
    DBZ_MICRO_TIMESTAMP: (pa.timestamp("us"), _timestamp_converter("us")),
    DBZ_NANO_TIMESTAMP: (pa.timestamp("us"), _timestamp_converter("ns")),
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
        convert = _decimal_text_converter(scale)
        return TypePlan(DECIMAL, pa.string(), pa.string(), convert, norm, has_decimal=True)
    if precision <= 38:
        out = pa.decimal128(precision, scale)
    else:
        out = pa.decimal256(precision, scale)
    return TypePlan(DECIMAL, pa.string(), out, _decimal_converter(out), norm, has_decimal=True)


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
        return TypePlan(name, parse, pa.string(), _convert_variable_scale, norm)
    if name in _TEMPORAL and ctype in ("int32", "int64"):
        out, convert = _TEMPORAL[name]
        return TypePlan(name, pa.int64(), out, convert, _norm_int("int64"))
    if name == DBZ_ZONED_TIMESTAMP and ctype == "string":
        out = pa.timestamp("us", "UTC")
        return TypePlan(name, pa.string(), out, _zoned_timestamp_convert, _norm_str)
    if name in (DBZ_ZONED_TIME, DBZ_ISO_TIME) and ctype == "string":
        return TypePlan(name, pa.string(), pa.time64("us"), zoned_time_convert, _norm_str)
    if name == DBZ_ISO_DATE and ctype == "string":
        return TypePlan(name, pa.string(), pa.date32(), _iso_date_convert, _norm_str)
    if name == DBZ_ISO_TIMESTAMP and ctype == "string":
        out = pa.timestamp("us")
        return TypePlan(name, pa.string(), out, _iso_timestamp_convert, _norm_str)

    if ctype in _PRIMITIVES:
        parse, out, norm = _PRIMITIVES[ctype]
        # Json, Uuid, Enum, EnumSet, Xml, Interval, ... are plain strings.
        return TypePlan(name or ctype, parse, out, None, norm)
    if ctype == "bytes":
        # Bits and other bytes-based semantic types are kept as raw bytes.
        return TypePlan(name or ctype, pa.string(), pa.binary(), _convert_bytes, _norm_str)
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
            _map_converter(key, value, out) if needs else None,
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
        _list_converter(item) if item.convert is not None else None,
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
        _struct_converter(fields, out) if needs else None,
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


# The converters column type hints (:mod:`.hints`) reuse for the same wire forms.
time_converter = _time_converter
timestamp_converter = _timestamp_converter
date_convert = _date_convert
zoned_timestamp_convert = _zoned_timestamp_convert
short = _short
