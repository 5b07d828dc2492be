"""Schema evolution of a replica: which changes of the source schema are applied.

Applied in place: a new column (added as nullable; old file slices read it as null),
int8 -> int16 -> int32 -> int64, float -> double, integer -> double (a schemaless column
first seen with integers, later with fractions; integers then arriving in it are stored
as doubles, exact up to 2**53), decimal precision increases at the
same scale, a column missing from a batch (kept; new rows get null). Anything else —
type narrowing, a change of kind (e.g. int -> string), a decimal scale change — is
refused with a message naming the column, both types and what to do, and the table
alone goes to FAILING.
"""

from __future__ import annotations

import pyarrow as pa

from engine.errors import SchemaEvolutionError
from engine.hudi.schema import storage_type
from engine.model import BY_FIELD, CONTROL_COLUMNS, REPLICA_CDC_COLUMNS

CDC_FIELDS = [
    pa.field(REPLICA_CDC_COLUMNS[0], pa.string()),
    pa.field(REPLICA_CDC_COLUMNS[1], pa.int64()),
    pa.field(REPLICA_CDC_COLUMNS[2], pa.int64()),
    pa.field(REPLICA_CDC_COLUMNS[3], pa.int64()),
]
_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def widened(old: pa.DataType, new: pa.DataType) -> pa.DataType | None:
    """The type a column takes when the source changes it from ``old`` to ``new``.

    Returns None when the change cannot be applied in place.
    """
    if old == new or pa.types.is_null(new):
        return old
    if pa.types.is_null(old):
        return new
    if old in _INT_ORDER and new in _INT_ORDER:
        return new if _INT_ORDER.index(new) > _INT_ORDER.index(old) else None
    if old == pa.float32() and new == pa.float64():
        return new
    # A column first seen with integers and later with fractions (schemaless JSON):
    # double; integers arriving in a double column are stored as doubles.
    if old in _INT_ORDER and new in (pa.float32(), pa.float64()):
        return pa.float64()
    if old in (pa.float32(), pa.float64()) and new in _INT_ORDER:
        return old
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        if old.scale == new.scale and new.precision > old.precision:
            return new
        return None
    if pa.types.is_string(old) and pa.types.is_large_string(new):
        return old
    if pa.types.is_list(old) and pa.types.is_list(new):
        inner = widened(old.value_type, new.value_type)
        return pa.list_(inner) if inner is not None else None
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields = {f.name: f for f in old}
        for f in new:
            inner = widened(fields[f.name].type, f.type) if f.name in fields else f.type
            if inner is None:
                return None
            fields[f.name] = pa.field(f.name, inner)
        return pa.struct(list(fields.values()))
    return None


def without_null(t: pa.DataType) -> pa.DataType:
    """``t`` with every null type in it (a field only ever seen null in schemaless JSON,
    e.g. the ``srid`` of Debezium's Point struct, or an empty array's items) made
    ``string``, as a top-level column only ever seen null is: Hudi (Avro) has no null
    column type."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, without_null(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field(t.value_field.name, without_null(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(without_null(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, without_null(t.item_type))
    return t


def evolve_schema(
    current: pa.Schema | None, batch_schema: pa.Schema, *, keep_wider: bool = False
) -> pa.Schema:
    """The table's data schema after a batch: existing columns, then new ones.

    ``keep_wider``: a column the batch has in a narrower type of the same kind (a
    narrowing applied by ``source.ddl = "apply"``) keeps the table's wider type.

    New columns go after every existing column (the ``_cdc_*`` columns included), as
    Hudi's schema evolution appends them: a Java writer taking over sees the same order.

    Raises:
        SchemaEvolutionError: a column changed in a way that cannot be applied.
    """
    # As the table stores them (decimals wider than 38 digits as exact text).
    row_fields = [
        f if pa.types.is_null(f.type) else f.with_type(without_null(storage_type(f.type)))
        for f in batch_schema
        if f.name not in CONTROL_COLUMNS and f.name != BY_FIELD
    ]
    if current is None:
        return pa.schema(
            [f.with_nullable(True) for f in row_fields if not pa.types.is_null(f.type)]
            + [pa.field(f.name, pa.string()) for f in row_fields if pa.types.is_null(f.type)]
            + CDC_FIELDS
        )
    out = list(current)
    index = {f.name: i for i, f in enumerate(out)}
    for f in row_fields:
        if f.name not in index:
            typ = pa.string() if pa.types.is_null(f.type) else f.type
            out.append(pa.field(f.name, typ, nullable=True))
            index = {g.name: i for i, g in enumerate(out)}
            continue
        old = out[index[f.name]]
        typ = widened(old.type, f.type)
        if typ is None and keep_wider and widened(f.type, old.type) == old.type:
            typ = old.type
        if typ is None:
            raise SchemaEvolutionError(
                f"column {f.name!r} changed from {old.type} to {f.type}, which cannot be "
                "applied in place",
                hint="this table stopped (others go on); rebuild it with `cdcctl resync "
                "<table>`, so it is re-created from the topic with the new type",
            )
        out[index[f.name]] = pa.field(f.name, typ, nullable=True)
    return pa.schema(out)
