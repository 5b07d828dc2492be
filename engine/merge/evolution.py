"""Schema evolution of a replica: which changes of the source schema are applied.

Applied in place: a new column (added as nullable; old file slices read it as null),
int8 -> int16 -> int32 -> int64, float -> double, integer -> double (a schemaless column
first seen with integers, later with fractions; integers then arriving in it are stored
as doubles, exact up to 2**53), decimal precision increases at the
same scale, a column missing from a batch (kept; new rows get null), and a narrowing
when the table keeps the wider type (``keep_wider``). Anything else — a change of kind
(e.g. int -> string), a decimal scale change, a narrowing otherwise — is refused with a
message naming the column, both types and what to do, and the table alone goes to
FAILING.

Formats whose events carry schemas also say which columns the source has as of a batch's
newest event, and the defaults their schemas declare. :func:`evolve_table` applies the
table's ``schema_changes`` policy to them (docs/guide/formats.md "Schema changes seen in events"):

======================  ====================  ==================  =================
seen in the events      ``keep`` (default)    ``apply``           ``fail``
======================  ====================  ==================  =================
column no longer sent   kept, null from now   removed from the    table FAILED
                        on (noted once)       replica
narrowing               wider type kept       wider type kept     table FAILED
change of kind          table FAILED          table FAILED        table FAILED
added with a DEFAULT    noted; stored rows filled with it when ``fill_defaults``
kept column added       treated as added: its pre-drop values in stored rows are
again                   replaced by its DEFAULT (``fill_defaults``) or NULL (noted)
======================  ====================  ==================  =================
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from engine.errors import SchemaEvolutionError
from engine.hudi import storage_type
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
    current: pa.Schema | None,
    batch_schema: pa.Schema,
    *,
    keep_wider: bool = False,
    narrowed: list[str] | None = None,
) -> pa.Schema:
    """The table's data schema after a batch: existing columns, then new ones.

    ``keep_wider``: a column the batch has in a narrower type of the same kind (a
    narrowing applied by ``source.ddl = "apply"``, or seen in the events' schemas under
    ``schema_changes`` ``keep``/``apply``) keeps the table's wider type; each such column
    is added to ``narrowed`` (``"name old->new"``) when given.

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
        narrower = typ is None and widened(f.type, old.type) == old.type
        if narrower and keep_wider:
            typ = old.type
            if narrowed is not None:
                narrowed.append(f"{f.name} {old.type}->{f.type}")
        if typ is None and narrower:
            raise SchemaEvolutionError(
                f"column {f.name!r} narrowed from {old.type} to {f.type} in the source",
                hint='to keep the replica\'s wider type, set source.schema_changes = "keep" '
                '(or schema_changes = "keep" under [tables.<table>]) and restart: the '
                "batch is read again; or rebuild the table with `cdcctl resync <table>`",
            )
        if typ is None:
            raise SchemaEvolutionError(
                f"column {f.name!r} changed from {old.type} to {f.type}, which cannot be "
                "applied in place",
                hint="this table stopped (others go on); rebuild it with `cdcctl resync "
                "<table>`, so it is re-created from the topic with the new type",
            )
        out[index[f.name]] = pa.field(f.name, typ, nullable=True)
    return pa.schema(out)


@dataclass
class Evolution:
    """What a batch's schema does to a table under its ``schema_changes`` policy."""

    #: The table's data schema after the batch.
    schema: pa.Schema
    #: Columns the source no longer has, to remove from the replica (``apply``).
    drop: list[str] = field(default_factory=list)
    #: Columns the source no longer has that the replica keeps (``keep``), all of them.
    kept: list[str] = field(default_factory=list)
    #: Added column -> its default, to set on the rows stored before it.
    fills: dict[str, Any] = field(default_factory=dict)
    #: Columns kept after a drop (``keep``) that the source has again: a new column of
    #: the same name, whose stored (pre-drop) values are discarded.
    readded: list[str] = field(default_factory=list)
    #: Narrowed columns whose wider type the replica keeps (``"name old->new"``).
    narrowed: list[str] = field(default_factory=list)
    #: What happened, one line each, for the log and the table's event log.
    notes: list[str] = field(default_factory=list)


def evolve_table(
    current: pa.Schema | None,
    batch_schema: pa.Schema,
    *,
    policy: tuple[str, bool, bool],
    source_columns: Collection[str] | None,
    defaults: Mapping[str, Any],
    kept_before: Collection[str] = (),
    key_fields: Collection[str] = (),
) -> Evolution:
    """Decide what a batch's schema does to the table.

    Args:
        current: the table's data schema (None: the batch creates the table).
        batch_schema: the change batch's schema.
        policy: ``Config.schema_policy``: (``keep``/``apply``/``fail``, keep a narrowed
            column's wider type, fill added columns' defaults).
        source_columns: the columns of the newest event's schema (None: unknown, e.g.
            schemaless JSON: nothing is judged dropped).
        defaults: column -> the default the events' schema declares.
        kept_before: columns already kept after a drop, and narrowings already kept
            wider (``"name old->new"``): not noted again.
        key_fields: the record key's columns (never dropped).

    Raises:
        SchemaEvolutionError: a change the policy does not apply.
    """
    changes, keep_wider, fill = policy
    cdc = {f.name for f in CDC_FIELDS}
    sent = source_columns
    gone = (
        [
            f.name
            for f in current
            if f.name not in cdc and f.name not in sent and f.name not in key_fields
        ]
        if current is not None and sent is not None
        else []
    )
    if gone and changes == "fail":
        raise SchemaEvolutionError(
            f"column(s) {', '.join(gone)} no longer in the source's events (dropped in the "
            "source?)",
            hint='to keep them (null from now on) set source.schema_changes = "keep", to '
            'remove them from the replica "apply" (or schema_changes under '
            "[tables.<table>]); then restart: the batch is read again",
        )
    narrowed: list[str] = []
    schema = evolve_schema(current, batch_schema, keep_wider=keep_wider, narrowed=narrowed)
    out = Evolution(schema, narrowed=narrowed)
    out.notes += [
        f"column {n} narrowed in the source; the replica keeps the wider type"
        for n in narrowed
        if n not in kept_before
    ]
    if current is None:
        return out
    if changes == "apply" and gone:
        out.drop = gone
        out.schema = pa.schema([f for f in out.schema if f.name not in gone])
        out.notes.append(
            f"column(s) {', '.join(gone)} no longer in the source: removed from the "
            "replica (schema_changes = apply)"
        )
    elif gone:
        out.kept = gone
        new = [n for n in gone if n not in kept_before]
        if new:
            out.notes.append(
                f"column(s) {', '.join(new)} no longer in the source: kept in the replica, "
                "null in rows changed from now on (schema_changes = keep)"
            )
    added = [n for n in batch_schema.names if n not in current.names and n not in CONTROL_COLUMNS]
    # A column kept after a drop that the source sends again was added again: the values
    # the replica kept from before the drop are not the source's (it shows the new
    # column's DEFAULT, or NULL), so they go like those of a column added anew.
    out.readded = [n for n in current.names if n in kept_before and sent is not None and n in sent]
    for name in out.readded:
        if fill and name in defaults:
            continue  # noted and filled below
        out.notes.append(
            f"column {name}, kept after it was dropped in the source, was added again: "
            "its values from before the drop are set to NULL in stored rows"
            + (
                f" (the source shows DEFAULT {defaults[name]!r} for them; fill_defaults = "
                "true sets it)"
                if name in defaults
                else ""
            )
        )
    added += [n for n in out.readded if fill and n in defaults]
    for name in added:
        if name not in defaults:
            continue
        value = defaults[name]
        if fill:
            out.fills[name] = value
            out.notes.append(
                f"column {name} added in the source with DEFAULT {value!r}: rows stored "
                "before it are set to it (fill_defaults)"
            )
        else:
            out.notes.append(
                f"column {name} added in the source with DEFAULT {value!r}: rows stored "
                f"before it read NULL in the replica (the source shows {value!r}) until they "
                "change; fill_defaults = true sets them when a column is added"
            )
    return out


def fill_columns(
    stored: pa.Table, fills: tuple[tuple[str, Any], ...], schema: pa.Schema
) -> pa.Table:
    """Stored rows with each added column they lack set to its default (the rows predate
    the column: the source shows them with the default)."""
    for name, value in fills:
        if name in stored.column_names or name not in schema.names:
            continue
        typ = schema.field(name).type
        stored = stored.append_column(pa.field(name, typ), pa.array([value] * stored.num_rows, typ))
    return stored
