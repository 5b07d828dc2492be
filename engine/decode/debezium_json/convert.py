"""Vectorised converters: arrays of a Connect field's wire form to its change-batch type.

A :class:`~engine.decode.debezium_json.connect.TypePlan`'s ``convert`` is one of these:
it turns an array of ``parse_type`` (what the bulk JSON reader or the Avro reader gives:
a base64 string for a ``Decimal``, an int64 for a ``MicroTimestamp``, a string for a
``ZonedTimestamp``) into ``out_type`` with Arrow (and, for base64, Polars) kernels, and
reports the rows whose value cannot be represented (invalid base64, a time of day past
midnight, ...) in :class:`Converted` instead of failing the whole array. Column type
hints (:mod:`.hints`) reuse them for the same wire forms. Which type each Connect schema
gets is decided in :mod:`.connect`.
"""

from __future__ import annotations

import binascii
import bisect
import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from engine.decode.debezium_json.connect import TypePlan

#: Decimal arithmetic without rounding (the default context rounds to 28 digits): more
#: digits than any decimal that is not refused (MAX_DECIMAL_DIGITS) can have.
EXACT = decimal.Context(prec=2 * 140_000 + 10, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)

# PostgreSQL +/-infinity timestamps arrive as the JDBC driver's sentinels (the same numbers
# whatever the unit) or, in nanosecond mode, as Long.MAX/MIN. They are clamped to the ends of
# the range every engine downstream (Spark, Hudi, Python) can represent.
_POS_INFINITY = pa.array([9223372036825200000, 2**63 - 1], pa.int64())
_NEG_INFINITY = pa.array([-9223372036832400000, -(2**63)], pa.int64())
TS_MAX_US = 253402300799999999  # 9999-12-31T23:59:59.999999
TS_MIN_US = -62135596800000000  # 0001-01-01T00:00:00
_DAY_US = 86_400_000_000


def _i64(value: int) -> pa.Scalar:
    # Typed scalars: converting an untyped Python number makes pyarrow try (and, without
    # dateutil installed, fail) an import on every call, which is slow in small pieces.
    return pa.scalar(value, pa.int64())


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
    return per_value(
        arr,
        lambda v: binascii.a2b_base64(v, strict_mode=True),
        pa.binary(),
        (binascii.Error, ValueError),
    )


def per_value(
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


def convert_bytes(arr: pa.Array, path: str) -> Converted:
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


def decimal_converter(out_type: pa.DataType) -> Callable[[pa.Array, str], Converted]:
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
    out, bad = per_value(
        arr, to_text, pa.string(), (binascii.Error, ValueError, TypeError, KeyError)
    )
    return Converted(out, _mask_or_none(bad), f"{path}: invalid {what}")


def _unscaled_text(b64: Any, scale: int) -> str:
    # Avro carries the bytes themselves, JSON their base64 text.
    raw = b64 if isinstance(b64, bytes) else binascii.a2b_base64(b64, strict_mode=True)
    return _decimal_text(int.from_bytes(raw, "big", signed=True), scale)


def decimal_text_converter(scale: int) -> Callable[[pa.Array, str], Converted]:
    """Decimals too wide for decimal256: exact text (Python; such columns are rare)."""

    def convert(arr: pa.Array, path: str) -> Converted:
        return _text_per_value(arr, path, "decimal", lambda v: _unscaled_text(v, scale))

    return convert


def _variable_scale_text(v: Any) -> str:
    scale, value = v["scale"], v["value"]
    if scale is None or value is None:
        raise ValueError("missing scale or value")
    return _unscaled_text(value, scale)


def convert_variable_scale(arr: pa.Array, path: str) -> Converted:
    """VariableScaleDecimal ``{scale, value}`` -> exact decimal text (Python; rare type)."""
    return _text_per_value(arr, path, "VariableScaleDecimal", _variable_scale_text)


def _or_masks(*masks: pa.Array | None) -> pa.Array | None:
    result = None
    for m in masks:
        if m is None:
            continue
        result = m if result is None else pc.or_(result, m)
    return result


def date_convert(arr: pa.Array, path: str) -> Converted:
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


def timestamp_converter(unit: str, tz: str | None = None) -> Callable[[pa.Array, str], Converted]:
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


def time_converter(unit: str) -> Callable[[pa.Array, str], Converted]:
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


def zoned_timestamp_convert(arr: pa.Array, path: str) -> Converted:
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
    us, bad = per_value(arr, _iso_time_us, pa.int64(), (ValueError, TypeError))
    return Converted(us.cast(pa.time64("us")), _mask_or_none(bad), f"{path}: invalid time of day")


def _without_utc_suffix(arr: pa.Array) -> pa.Array:
    return pc.replace_substring_regex(arr, r"(Z|\+00:00)$", "")


def iso_date_convert(arr: pa.Array, path: str) -> Converted:
    """``IsoDate`` text (``2024-01-15``, a ``Z`` allowed) -> date32."""
    plain = _without_utc_suffix(arr)
    try:
        return Converted(plain.cast(pa.date32()))
    except pa.ArrowInvalid:
        pass
    out, bad = per_value(plain, dt.date.fromisoformat, pa.date32(), (ValueError, TypeError))
    return Converted(out, _mask_or_none(bad), f"{path}: invalid ISO date")


def _iso_naive(text: Any) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def iso_timestamp_convert(arr: pa.Array, path: str) -> Converted:
    """``IsoTimestamp`` text in UTC (a wall clock read as UTC, like ``MicroTimestamp``)
    -> timestamp[us] without zone."""
    plain = _without_utc_suffix(arr)
    try:
        return Converted(plain.cast(pa.timestamp("us")))
    except pa.ArrowInvalid:
        pass
    out, bad = per_value(arr, _iso_naive, pa.timestamp("us"), (ValueError, TypeError))
    return Converted(out, _mask_or_none(bad), f"{path}: invalid ISO timestamp")


def list_converter(item: TypePlan) -> Callable[[pa.Array, str], Converted]:
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


def struct_converter(
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


def map_converter(
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
