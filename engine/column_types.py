"""Column type hints: ``[tables.<name>.columns]`` in the config, and types read from the
source database's catalog.

A hint names the replica column's type and, where the wire form is ambiguous, how the
value is encoded in the message (the names of Debezium's own settings are used for that):

=================================  ============================  ==============================
hint                               replica (Arrow) type          wire forms accepted
=================================  ============================  ==============================
``decimal(p,s)``                   ``decimal128(p, s)``          base64 unscaled bytes
                                                                 (``decimal.handling.mode=
                                                                 precise``), a JSON number, a
                                                                 ``VariableScaleDecimal``
``decimal(p,s,string)``            ``decimal128(p, s)``          decimal text (``"1234.56"``,
                                                                 ``decimal.handling.mode=
                                                                 string``), a JSON number
``date``                           ``date32``                    days since 1970-01-01, ISO text
``time`` / ``time(ms|us|ns)``      ``time64[us]``                units since midnight (``us``
                                                                 default), ISO text (``Z``
                                                                 allowed: ``ZonedTime``)
``timestamp`` / ``(ms|us|ns)``     ``timestamp[us]``             units since the epoch (``us``
                                                                 default), ISO text
``timestamptz`` / ``(ms|us|ns)``   ``timestamp[us, UTC]``        ISO-8601 with offset
                                                                 (``ZonedTimestamp``), or
                                                                 units since the epoch
``bytes`` / ``bytes(base64)``      ``binary``                    base64 text
``bytes(base64-url-safe)``         ``binary``                    URL-safe base64 text
``bytes(hex)``                     ``binary``                    hexadecimal text
``uuid``                           ``string``                    UUID text (checked, lower case)
``json``                           ``string``                    JSON text (checked) or a JSON
                                                                 object / array (rendered)
``string``, ``boolean``, ``int32``, the matching type            the plain JSON value
``int64``, ``float32``, ``float64``
=================================  ============================  ==============================

This module is pure Python (no Arrow): the config validates hints with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Integer units of time hints.
UNITS = ("ms", "us", "ns")
#: Wire encodings of ``bytes`` hints (Debezium's ``binary.handling.mode`` values).
BYTES_ENCODINGS = ("bytes", "base64", "base64-url-safe", "hex")
#: Wire encodings of ``decimal`` hints (Debezium's ``decimal.handling.mode`` values).
DECIMAL_ENCODINGS = ("precise", "string", "double")
#: Widest decimal a hint may name (Hudi's Spark readers hold at most 38 digits).
MAX_DECIMAL_PRECISION = 38

_PLAIN = ("string", "boolean", "int32", "int64", "float32", "float64", "uuid", "json", "date")
_ALIASES = {
    "bool": "boolean",
    "int": "int32",
    "integer": "int32",
    "bigint": "int64",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "text": "string",
    "binary": "bytes",
    "numeric": "decimal",
}
_FORM = re.compile(r"^([a-z0-9]+)\s*(?:\(\s*([^()]*?)\s*\))?$")

#: The forms, for error messages.
FORMS = (
    "decimal(p,s), decimal(p,s,string), date, time[(ms|us|ns)], timestamp[(ms|us|ns)], "
    "timestamptz[(ms|us|ns)], bytes[(base64|base64-url-safe|hex)], uuid, json, string, "
    "boolean, int32, int64, float32, float64"
)


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A parsed column type hint.

    Attributes:
        kind: ``decimal``, ``date``, ``time``, ``timestamp``, ``timestamptz``, ``bytes``,
            ``uuid``, ``json``, ``string``, ``boolean``, ``int32``, ``int64``,
            ``float32`` or ``float64``.
        precision: Decimal precision (decimals only).
        scale: Decimal scale (decimals only).
        unit: ``ms``, ``us`` or ``ns`` for integers of time and timestamp hints.
        encoding: Wire form of strings: a ``decimal.handling.mode`` for decimals, a
            ``binary.handling.mode`` for bytes.
    """

    kind: str
    precision: int = 0
    scale: int = 0
    unit: str = "us"
    encoding: str = ""

    def text(self) -> str:
        """The canonical spelling (``decimal(12,2)``, ``timestamp(ms)``, ``bytes(hex)``)."""
        if self.kind == "decimal":
            extra = f",{self.encoding}" if self.encoding not in ("", "precise") else ""
            return f"decimal({self.precision},{self.scale}{extra})"
        if self.kind in ("time", "timestamp", "timestamptz"):
            return self.kind if self.unit == "us" else f"{self.kind}({self.unit})"
        if self.kind == "bytes":
            plain = self.encoding in ("", "bytes", "base64")
            return "bytes" if plain else f"bytes({self.encoding})"
        return self.kind


def parse_column_type(text: str) -> ColumnType:
    """Parse a hint such as ``"decimal(12,2)"`` or ``"timestamp(ms)"``.

    Raises:
        ValueError: Not a known form; the message lists the forms.
    """
    if not isinstance(text, str):
        raise ValueError(f"a column type is text, not {type(text).__name__}; use one of {FORMS}")
    m = _FORM.match(text.strip().lower())
    if not m:
        raise ValueError(f"{text!r} is not a column type; use one of {FORMS}")
    name, args_text = m.group(1), m.group(2)
    name = _ALIASES.get(name, name)
    args = [a.strip() for a in args_text.split(",")] if args_text else []
    if name == "decimal":
        return _decimal(text, args)
    if name in ("time", "timestamp", "timestamptz"):
        if len(args) > 1 or (args and args[0] not in UNITS):
            raise ValueError(f"{text!r}: the unit of {name} is one of ms, us, ns (e.g. {name}(ms))")
        return ColumnType(name, unit=args[0] if args else "us")
    if name == "bytes":
        if len(args) > 1 or (args and args[0] not in BYTES_ENCODINGS):
            raise ValueError(
                f"{text!r}: the encoding of bytes is one of {', '.join(BYTES_ENCODINGS)} "
                "(Debezium's binary.handling.mode)"
            )
        return ColumnType("bytes", encoding=args[0] if args else "base64")
    if name in _PLAIN:
        if args:
            raise ValueError(f"{text!r}: {name} takes no arguments")
        return ColumnType(name)
    raise ValueError(f"{text!r} is not a column type; use one of {FORMS}")


def _decimal(text: str, args: list[str]) -> ColumnType:
    if len(args) not in (2, 3):
        raise ValueError(
            f"{text!r}: write decimal(precision,scale), e.g. decimal(12,2), or "
            "decimal(12,2,string) when Debezium sends decimals as text"
        )
    try:
        precision, scale = int(args[0]), int(args[1])
    except ValueError:
        raise ValueError(f"{text!r}: precision and scale are whole numbers") from None
    if not 1 <= precision <= MAX_DECIMAL_PRECISION:
        raise ValueError(
            f"{text!r}: precision must be 1 to {MAX_DECIMAL_PRECISION} (wider decimals: "
            "use string, the exact text)"
        )
    if not 0 <= scale <= precision:
        raise ValueError(f"{text!r}: scale must be 0 to the precision ({precision})")
    encoding = args[2] if len(args) == 3 else "precise"
    if encoding not in DECIMAL_ENCODINGS:
        raise ValueError(
            f"{text!r}: the third argument is Debezium's decimal.handling.mode of the "
            f"column: {', '.join(DECIMAL_ENCODINGS)}"
        )
    return ColumnType("decimal", precision, scale, encoding=encoding)


_MYSQL_BINARY = ("binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob")


def catalog_column_type(
    kind: str,
    data_type: str,
    precision: int | None,
    scale: int | None,
    datetime_precision: int | None,
    native: str,
) -> ColumnType | None:
    """The hint a source column's catalog entry implies, or None (keep the JSON type).

    Only types JSON cannot carry are mapped, with the wire forms of the connectors'
    default settings (``decimal.handling.mode=precise``; ``time.precision.mode=adaptive``
    for PostgreSQL, ``adaptive_time_microseconds`` for MySQL; ``binary.handling.mode=
    bytes``). Decimals wider than 38 digits and ``numeric`` without a precision are left
    alone (their text, or the ``{scale, value}`` object, is kept).

    Args:
        kind: ``postgresql`` or ``mysql`` (MariaDB too).
        data_type: ``information_schema.columns.data_type``.
        precision: ``numeric_precision``.
        scale: ``numeric_scale``.
        datetime_precision: ``datetime_precision``.
        native: ``udt_name`` (PostgreSQL) or ``column_type`` (MySQL).
    """
    t = data_type.lower()
    fraction = 6 if datetime_precision is None else int(datetime_precision)
    if t in ("numeric", "decimal"):
        if precision is None or not 1 <= int(precision) <= MAX_DECIMAL_PRECISION:
            return None
        return ColumnType("decimal", int(precision), int(scale or 0), encoding="precise")
    if t == "date":
        return ColumnType("date")
    if kind == "postgresql":
        if t == "timestamp without time zone":
            return ColumnType("timestamp", unit="ms" if fraction <= 3 else "us")
        if t == "timestamp with time zone":
            return ColumnType("timestamptz")
        if t == "time without time zone":
            return ColumnType("time", unit="ms" if fraction <= 3 else "us")
        if t == "time with time zone":
            return ColumnType("time")
        if t == "bytea":
            return ColumnType("bytes", encoding="base64")
        if t == "uuid":
            return ColumnType("uuid")
        if t in ("json", "jsonb"):
            return ColumnType("json")
        return None
    if t == "datetime":
        return ColumnType("timestamp", unit="ms" if fraction <= 3 else "us")
    if t == "timestamp":
        return ColumnType("timestamptz")
    if t == "time":
        return ColumnType("time", unit="us")
    if t in _MYSQL_BINARY:
        return ColumnType("bytes", encoding="base64")
    if t == "bit" and native.lower() not in ("bit(1)", "bit"):
        return ColumnType("bytes", encoding="base64")  # io.debezium.data.Bits
    if t == "json":
        return ColumnType("json")
    return None
