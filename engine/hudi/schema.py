"""Arrow schema <-> the Avro writer schema stored in Hudi commits.

Every commit carries the writer's Avro schema (``extraMetadata.schema``, format doc 9),
and hudi-rs casts every file it reads to that schema, silently. So the Avro types must
match the parquet types pyarrow writes. Avro cannot say everything Arrow can (int8,
large_string, naive timestamps), so commits also carry the exact Arrow schema
(``cdcctl.arrow_schema``) and :func:`conform` casts hudi-rs output back to it.

Mapping (Arrow -> Avro -> what hudi-rs 0.5.0 returns):

===========================  ===================================  =====================
Arrow                        Avro                                 hudi-rs returns
===========================  ===================================  =====================
int8 / int16 / int32         int                                  int32
int64                        long                                 int64
float32 / float64            float / double                       same
bool                         boolean                              bool
string / large_string        string                               string
binary / large_binary        bytes                                binary
date32                       int + date                           date32
timestamp[ms|us, tz]         long + timestamp-millis|micros       timestamp[.., tz=UTC]
timestamp[ms|us] (naive)     long + timestamp-millis|micros       timestamp[.., tz=UTC]
decimal128(p, s)             fixed(n) + decimal(p, s)             decimal128(p, s)
decimal256(p, s)             stored as string (exact text)        string
time64[us] / time32[ms]      long / int (µs / ms since midnight)  int64 / int32 (*)
list<T>                      array<T>                             list<T>
struct<...>                  record (named after its field)       struct<...>
map<string, T>               map<T>                               map<string, T>
===========================  ===================================  =====================

(*) Times of day are plain integers in the Avro schema and in the Parquet files, as
Hudi's Spark readers see them (Spark has no TIME type: Hudi maps ``time-micros`` to a
long): Spark's Parquet reader refuses Parquet's TIME(MICROS) ("Illegal Parquet type",
in base files for every Hudi version, in log blocks for Hudi 1.x), and hudi-rs refuses a
log block whose type differs from the Avro one. ``cdcctl.arrow_schema`` and
:func:`conform` give the engine its times back. Naive timestamps are stored
UTC-adjusted in Parquet (:func:`parquet_type`).

Naive timestamps use ``timestamp-*`` too: hudi-rs 0.5.0 panics ("not yet implemented")
on every read of a table whose schema has ``local-timestamp-*``. The values are the
same integers; only the type's time zone differs, and :func:`conform` drops it again.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa

from engine.errors import HudiError

# Hudi meta columns, in file order (format doc section 6): every base file and log data
# block starts with them.
HOODIE_COMMIT_TIME: Final = "_hoodie_commit_time"
HOODIE_COMMIT_SEQNO: Final = "_hoodie_commit_seqno"
HOODIE_RECORD_KEY: Final = "_hoodie_record_key"
HOODIE_PARTITION_PATH: Final = "_hoodie_partition_path"
HOODIE_FILE_NAME: Final = "_hoodie_file_name"
HOODIE_META_COLUMNS: Final = (
    HOODIE_COMMIT_TIME,
    HOODIE_COMMIT_SEQNO,
    HOODIE_RECORD_KEY,
    HOODIE_PARTITION_PATH,
    HOODIE_FILE_NAME,
)

# Avro names (record, field, fixed); apache-avro in hudi-rs rejects anything else.
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_names(names: list[str], what: str, where: str = "") -> None:
    """Refuse names a Hudi table cannot hold: each must be an Avro name, and no two may
    be equal but for case (Spark and Hudi's readers are case-insensitive, so they would
    read one column). The one rule for table, column and nested field names.

    Args:
        names: the names, in order.
        what: what they are, singular (``column``).
        where: where they are, for the message (`` in <record>``).

    Raises:
        HudiError: naming the first offending name.
    """
    seen: dict[str, str] = {}
    for name in names:
        if not _AVRO_NAME.match(name):
            raise HudiError(
                f"{what} {name!r}{where} is not a valid Avro name",
                "table, column and nested field names must match [A-Za-z_][A-Za-z0-9_]*; "
                "rename the column at the source (or in Debezium with a transform)",
            )
        other = seen.get(name.casefold())
        if other == name:
            raise HudiError(f"{what} {name!r}{where} appears twice", _RENAME)
        if other is not None:
            raise HudiError(
                f"{what}s {other!r} and {name!r}{where} differ only in case (Hudi and Spark "
                "read names case-insensitively, so they would be one column)",
                _RENAME,
            )
        seen[name.casefold()] = name


_RENAME = (
    "rename one of them at the source; a column may not take the name of a _hoodie_* meta "
    "column or of a _cdc_* column cdcctl adds"
)


def file_schema(data_schema: pa.Schema) -> pa.Schema:
    """Full base-file schema: the five Hudi meta columns (strings), then the data columns."""
    meta = [pa.field(name, pa.string()) for name in HOODIE_META_COLUMNS]
    return pa.schema(meta + list(data_schema))


def decimal_fixed_size(precision: int) -> int:
    """Return the fewest bytes of a two's-complement integer holding ``precision`` digits.

    This is the ``fixed`` size Avro and Parquet (FIXED_LEN_BYTE_ARRAY) use for decimals,
    and what pyarrow writes: the smallest n with 2^(8n-1) - 1 >= 10^precision - 1.

    Args:
        precision: Decimal precision, 1..38.

    Returns:
        The size in bytes (e.g. 5 for precision 10, 16 for precision 38).
    """
    n = 1
    while 2 ** (8 * n - 1) - 1 < 10**precision - 1:
        n += 1
    return n


def _avro_type(t: pa.DataType, name_path: str) -> Any:
    """Return the (non-null) Avro type of an Arrow type.

    ``name_path`` is the dotted namespace of the field, so that named types (``fixed``)
    get unique full names, as Hudi's own converter does.
    """
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        # With or without tz: see the module docstring for why never local-timestamp-*.
        logical = "timestamp-micros" if t.unit == "us" else "timestamp-millis"
        return {"type": "long", "logicalType": logical}
    if pa.types.is_decimal128(t):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": name_path,
            "size": decimal_fixed_size(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_time64(t) and t.unit == "us":
        return "long"  # microseconds since midnight: see (*) in the module docstring
    if pa.types.is_time32(t) and t.unit == "ms":
        return "int"  # milliseconds since midnight
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _avro_type(t.value_type, f"{name_path}.element")
        return {"type": "array", "items": ["null", item] if t.value_field.nullable else item}
    if pa.types.is_struct(t):
        # A named record, named after its field in the enclosing record's namespace, as
        # Spark's Avro converter names nested records.
        namespace, _, name = name_path.rpartition(".")
        check_names([f.name for f in t], "field", f" (in {name_path})")
        fields = [
            {
                "name": f.name,
                "type": ["null", _avro_type(f.type, f"{name_path}.{f.name}")],
                "default": None,
            }
            for f in t
        ]
        return {"type": "record", "name": name, "namespace": namespace, "fields": fields}
    if pa.types.is_map(t) and (
        pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)
    ):
        return {"type": "map", "values": ["null", _avro_type(t.item_type, f"{name_path}.value")]}
    raise HudiError(
        f"column type {t} has no Hudi (Avro) mapping",
        "cast the column to a supported type (integers, floats, bool, string, binary, "
        "date32, time64[us], timestamp[us], decimal128, list, struct, map with string keys)",
    )


def storage_type(t: pa.DataType) -> pa.DataType:
    """The type a column of type ``t`` is stored as in a Hudi table.

    Decimals wider than 38 digits (decimal256) become their exact text: Hudi's Spark
    readers map Avro decimals to Spark's ``DecimalType``, which holds at most 38 digits.
    Every other type is stored as it is.
    """
    if pa.types.is_decimal256(t):
        return pa.string()
    return _nested(t, storage_type)


def _nested(
    t: pa.DataType, each: Callable[[pa.DataType], pa.DataType], large_lists: bool = False
) -> pa.DataType:
    """``t`` with ``each`` applied to the types it nests (list items, struct fields, map
    keys and values); any other type as it is. Lists come out as ``list`` unless
    ``large_lists`` keeps a ``large_list`` large."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field.with_type(each(t.value_type))
        return pa.large_list(item) if large_lists and pa.types.is_large_list(t) else pa.list_(item)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(each(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(each(t.key_type)), t.item_field.with_type(each(t.item_type))
        )
    return t


def parquet_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type a column of type ``t`` has inside a Parquet file (base file, log data
    block, tombstone sidecar).

    Times of day are plain integers there (``time64[us]`` an int64 of microseconds,
    ``time32[ms]`` an int32 of milliseconds), without Parquet's TIME annotation: Spark's
    Parquet reader refuses TIME(MICROS) ("Illegal Parquet type"), in base files and (Hudi
    1.x) in log blocks; the Avro schema says ``long`` / ``int``. Timestamps without a
    zone are stored as UTC instants (``isAdjustedToUTC=true``, the same integers):
    Spark reads the other kind as ``timestamp_ntz``, which its vectorized reader cannot
    give Hudi's ``timestamp`` columns (the Avro schema says ``timestamp-micros``).
    :func:`engine.hudi.parquet.read_table` gives the engine its types back.
    Every other type is stored as it is.
    """
    if pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_time32(t):
        return pa.int32()
    if pa.types.is_timestamp(t) and t.tz is None:
        return pa.timestamp(t.unit, "UTC")
    return _nested(t, parquet_type, large_lists=True)


def parquet_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column typed as it is stored in Parquet (:func:`parquet_type`)."""
    return pa.schema([f.with_type(parquet_type(f.type)) for f in schema], metadata=schema.metadata)


def reader_type(t: pa.DataType) -> pa.DataType:
    """Return the Arrow type hudi-rs gives a column of type ``t`` (third column above).

    Base files may hold the exact types (hudi-rs casts them), but the rows of a log data
    block must already have these types: hudi-rs refuses to re-tag naive timestamps or
    widen integers there.
    """
    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return pa.int32()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t) and t.tz is None:
        return pa.timestamp(t.unit, "UTC")
    if pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_time32(t):
        return pa.int32()
    return _nested(t, reader_type)


def reader_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with every column typed as hudi-rs reads it (:func:`reader_type`)."""
    return pa.schema([f.with_type(reader_type(f.type)) for f in schema], metadata=schema.metadata)


def avro_schema(arrow_schema: pa.Schema, table_name: str) -> dict[str, Any]:
    """Return the Avro writer schema of a data schema, as a JSON-ready dict.

    See :func:`avro_schema_json`.
    """
    check_names([table_name], "table name")
    check_names(arrow_schema.names, "column")
    record = f"{table_name}_record"
    namespace = f"hoodie.{table_name}"
    fields = [
        {
            "name": f.name,
            "type": ["null", _avro_type(f.type, f"{namespace}.{record}.{f.name}")],
            "default": None,
        }
        for f in arrow_schema
    ]
    return {"type": "record", "name": record, "namespace": namespace, "fields": fields}


def avro_schema_json(arrow_schema: pa.Schema, table_name: str) -> str:
    """Return the Avro writer schema stored in ``extraMetadata.schema`` (format doc 9).

    Like Spark's writer: record ``<table>_record`` in namespace ``hoodie.<table>``, no
    ``_hoodie_*`` meta fields, every field ``["null", T]`` with default null.

    Args:
        arrow_schema: The data columns (without meta columns), in file order.
        table_name: The Hudi table name.

    Returns:
        Compact JSON text.

    Raises:
        HudiError: For a type without mapping or a name Avro does not accept.
    """
    return json.dumps(avro_schema(arrow_schema, table_name), separators=(",", ":"))


def arrow_schema_to_b64(schema: pa.Schema) -> str:
    """Serialize an Arrow schema (Arrow IPC) to base64 text for commit metadata.

    Args:
        schema: Any Arrow schema; field metadata and nullability are kept.

    Returns:
        ASCII base64 text.
    """
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def arrow_schema_from_b64(text: str) -> pa.Schema:
    """Inverse of :func:`arrow_schema_to_b64`.

    Args:
        text: Base64 text written by :func:`arrow_schema_to_b64`.

    Returns:
        The Arrow schema.

    Raises:
        HudiError: If the text is not a serialized Arrow schema.
    """
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
    except (ValueError, pa.ArrowInvalid) as exc:
        raise HudiError(f"commit metadata holds an unreadable Arrow schema: {exc}") from exc


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast a table read by hudi-rs back to the exact Arrow data schema.

    hudi-rs returns Avro's view of the types (int32 for int8, tz=UTC on naive
    timestamps, ...). Columns of ``schema`` are selected in order and cast; columns the
    table lacks come back null; other columns (e.g. ``_hoodie_*``) are kept in front.

    Args:
        table: Output of a hudi-rs read.
        schema: The data schema, e.g. ``HudiTable.arrow_schema()``.

    Returns:
        The table with the data columns typed exactly as ``schema``.
    """
    extra = [name for name in table.column_names if name not in schema.names]
    columns: list[pa.ChunkedArray | pa.Array] = [table[name] for name in extra]
    fields: list[pa.Field] = [table.schema.field(name) for name in extra]
    for field in schema:
        if field.name in table.column_names:
            col = table[field.name]
            if pa.types.is_timestamp(field.type) and pa.types.is_timestamp(col.type):
                # Same instants: re-label the zone, never shift the stored values.
                col = col.cast(pa.int64()).cast(field.type)
            else:
                col = col.cast(field.type)
        else:
            col = pa.nulls(table.num_rows, field.type)
        columns.append(col)
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
