"""The order field of a generic CDC event as a source position ``(_cdc_pos, _cdc_pos_sub)``.

Positions compare as a pair of signed 64-bit integers (see :mod:`engine.model`); each
kind of order value is mapped so that the pair compares like the values themselves:

* **integers** (JSON numbers without a fraction, or text of digits): ``(value, 0)``.
  Any value strictly above ``-2**63`` and below ``2**63``.
* **decimals** (JSON numbers with a fraction or exponent, or decimal text such as
  ``"12.5"``): ``(floor(value), fraction * 10**18)``; the sub-position holds the first
  18 fraction digits (further digits do not order). ``floor`` must fit as an integer
  above. An integer and a decimal of the same table compare correctly (``3`` < ``3.5``).
* **timestamps** (ISO 8601 text: ``2024-03-04T05:06:07.123456789Z``, a space instead of
  ``T``, an offset ``+02:00``, or a date alone): ``(microseconds since 1970-01-01 UTC,
  the fraction digits beyond the sixth, as a 12-digit integer)``; nanoseconds and finer
  order. A timestamp without an offset is taken as UTC. Its milliseconds become the
  event's source time (``_cdc_source_ts_ms``: lag in seconds, tombstone retention);
  numeric order values give no source time.

A table must use one kind for its order values: a timestamp and a number are not
comparable (a timestamp orders like its microseconds since the epoch). ``order_type``
(``integer``, ``decimal`` or ``timestamp``) makes a value of another kind a bad message.
Booleans, null, objects, arrays, NaN and values out of range are refused (the message is
quarantined).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
_FRACTION_DIGITS = 18
_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_DECIMAL_RE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_TS_RE = re.compile(
    r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[T ](?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)(?:[.,](?P<frac>[0-9]{1,18}))?)?"
    r"\s*(?P<tz>Z|z|[+-][0-9]{2}(?::?[0-9]{2})?)?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class OrderError(ValueError):
    """An order value that cannot be encoded (the reason is the message)."""


def _int_pair(value: int) -> tuple[int, int]:
    if not _I64_MIN < value <= _I64_MAX:
        raise OrderError(f"{value} is out of the 64-bit range")
    return value, 0


def _decimal_pair(value: Decimal) -> tuple[int, int]:
    if not value.is_finite():
        raise OrderError(f"{value} is not a finite number")
    whole = int(value.to_integral_value(rounding="ROUND_FLOOR"))
    fraction = value - whole
    sub = int((fraction * (10**_FRACTION_DIGITS)).to_integral_value(rounding="ROUND_FLOOR"))
    return _int_pair(whole)[0], sub


def _timestamp_pair(text: str) -> tuple[int, int, int | None]:
    match = _TS_RE.match(text)
    if match is None:
        raise OrderError(f"{text!r} is not an integer, a decimal or an ISO 8601 timestamp")
    tz = match["tz"] or "+00:00"
    if tz in ("Z", "z"):
        tz = "+00:00"
    elif len(tz) == 3:
        tz += ":00"
    elif ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    clock = match["time"] or "00:00:00"
    if len(clock) == 5:
        clock += ":00"
    try:
        moment = datetime.fromisoformat(f"{match['date']}T{clock}{tz}")
    except ValueError as exc:
        raise OrderError(f"{text!r} is not a valid timestamp ({exc})") from None
    digits = (match["frac"] or "").ljust(_FRACTION_DIGITS, "0")
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + int(digits[:6])
    return _int_pair(micros)[0], int(digits[6:]), micros // 1000


#: What ``order_type`` may be: any kind, or one kind only.
ORDER_TYPES = ("auto", "integer", "decimal", "timestamp")


def encode_order(value: Any, order_type: str = "auto") -> tuple[int, int, int | None]:
    """The position pair of one order value (see the module docstring), and for a
    timestamp its milliseconds since the epoch (the event's source time), else None.

    ``order_type`` other than ``auto`` accepts that kind only (``decimal`` accepts
    integers too): a value of another kind is refused rather than mis-ordered.

    Raises:
        OrderError: the value is of no supported (or not of the expected) kind, or out
            of range.
    """
    pair = _encode(value)
    if order_type != "auto":
        kind = (
            "timestamp" if pair[2] is not None else "integer" if _is_integer(value) else "decimal"
        )
        if kind != order_type and not (order_type == "decimal" and kind == "integer"):
            raise OrderError(f"{value!r} is a {kind}, but order_type is {order_type!r}")
    return pair


def _is_integer(value: Any) -> bool:
    if isinstance(value, int):
        return True
    return isinstance(value, str) and _INT_RE.match(value.strip()) is not None


def _encode(value: Any) -> tuple[int, int, int | None]:
    if isinstance(value, bool) or value is None:
        raise OrderError(f"{value!r} is not an integer, a decimal or a timestamp")
    if isinstance(value, int):
        return (*_int_pair(value), None)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise OrderError(f"{value} is not a finite number")
        return (*_decimal_pair(Decimal(repr(value))), None)
    if isinstance(value, Decimal):
        return (*_decimal_pair(value), None)
    if isinstance(value, str):
        text = value.strip()
        if _INT_RE.match(text):
            return (*_int_pair(int(text)), None)
        if _DECIMAL_RE.match(text):
            try:
                return (*_decimal_pair(Decimal(text)), None)
            except InvalidOperation:  # pragma: no cover - the pattern admits valid text only
                raise OrderError(f"{text!r} is not a decimal") from None
        return _timestamp_pair(text)
    raise OrderError(f"a JSON {type(value).__name__} is not an integer, a decimal or a timestamp")
