"""What a parsed buffer's Arrow types say: how deep its records can nest, and whether a
read with an explicit (learned) schema is the table a full inference would give.

Pure functions over Arrow types and arrays; :class:`~.reader.BulkReader` uses them.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.limits import MAX_NESTING_DEPTH_CEILING

__all__ = ["TooDeep", "as_inferred", "explicit_part", "not_too_deep", "type_depth"]


def _depth(typ: pa.DataType) -> int:
    """Nesting of a type's structs, lists and maps (iterative: a type may nest thousands
    of levels deep, past Python's recursion limit)."""
    deepest, stack = 0, [(typ, 0)]
    while stack:
        t, above = stack.pop()
        if pa.types.is_struct(t):
            stack.extend((f.type, above + 1) for f in t)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            stack.append((t.value_type, above + 1))
        elif pa.types.is_map(t):
            stack.extend([(t.key_type, above + 1), (t.item_type, above + 1)])
        else:
            deepest = max(deepest, above)
            continue
        deepest = max(deepest, above + 1)
    return deepest


def type_depth(schema: pa.Schema) -> int:
    """How deep the JSON objects and arrays of a parsed buffer nest at most: the record
    object plus its members' nesting. No record of the buffer nests deeper, except in
    members the parse schema skipped (read with ``ignore``), which were not materialised."""
    return 1 + max((_depth(f.type) for f in schema), default=0)


class TooDeep(Exception):
    """A parsed buffer nests deeper than any nesting limit allows."""


def not_too_deep(table: pa.Table) -> None:
    """Raise :class:`TooDeep` for a buffer deeper than ``source.max_nesting_depth`` can
    ever be: such a buffer holds a record the caller's limit refuses, and the type walkers
    here recurse (its records are then read in parts, after the caller's nesting check).
    """
    depth = type_depth(table.schema)
    if depth > MAX_NESTING_DEPTH_CEILING:
        raise TooDeep(f"records nested {depth} levels deep")


def _witnessed(arr: pa.Array, typ: pa.DataType) -> bool:
    """Whether inference over ``arr``'s JSON values gives exactly ``typ``.

    Read with an explicit schema, a value either has the schema's JSON type or fails the
    read, with one exception: a floating-point member accepts integers too. So the
    result equals inference when every typed member holds at least one value (an
    all-null member infers as ``null``) and every floating-point member at least one
    that is not a whole number (all-integer numbers infer as ``int64``).
    """
    if pa.types.is_null(typ):
        return True
    if arr.null_count == len(arr):
        return False
    if pa.types.is_struct(typ):
        children = arr.flatten()  # with the struct's own nulls applied
        return all(_witnessed(c, typ.field(i).type) for i, c in enumerate(children))
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return _witnessed(arr.flatten(), typ.value_type)
    if pa.types.is_floating(typ):
        return bool(pc.any(pc.not_equal(arr, pc.floor(arr))).as_py())
    return True


def _without_nulls(typ: pa.DataType) -> pa.DataType | None:
    """``typ`` without its null-typed struct members (None: a null member inside a list,
    which a read could not place)."""
    if pa.types.is_struct(typ):
        kept = []
        for f in typ:
            if pa.types.is_null(f.type):
                continue
            inner = _without_nulls(f.type)
            if inner is None:
                return None
            kept.append(f.with_type(inner))
        return pa.struct(kept)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        inner = _without_nulls(typ.value_type)
        return None if inner is None or inner != typ.value_type else typ
    return typ


def explicit_part(learned: pa.Schema) -> pa.Schema | None:
    """The explicit parse schema of a learned schema: its members that have a type.

    A member inference typed ``null`` (null in every record of the earlier buffer) is
    left to inference: a buffer without it must not get it.
    """
    row = _without_nulls(pa.struct(list(learned)))
    return None if row is None else pa.schema(list(row))


def _conformed(arr: pa.Array, full: pa.DataType) -> pa.Array | None:
    """``arr`` with its struct members in the learned order ``full`` (null-typed ones
    where present), or None when it holds a member the learned schema does not."""
    if arr.type == full:
        return arr
    if not (pa.types.is_struct(arr.type) and pa.types.is_struct(full)):
        return None
    got = {arr.type.field(i).name: i for i in range(arr.type.num_fields)}
    if len(got) != arr.type.num_fields:
        return None
    children, fields = [], []
    for f in full:
        i = got.pop(f.name, None)
        if i is None:
            if pa.types.is_null(f.type):
                continue  # absent from every record, as inference leaves it out
            return None
        child = _conformed(arr.field(i), f.type)
        if child is None:
            return None
        children.append(child)
        fields.append(f.with_type(child.type))
    if got:
        return None
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def as_inferred(
    table: pa.Table, learned: pa.Schema, exempt: frozenset[str], explicit: pa.Schema | None = None
) -> pa.Table | None:
    """``table``, read with :func:`explicit_part` of ``learned`` (other members inferred),
    as the table a full inference of the same buffer gives, or None when that is not
    certain.

    Certain when no member is new (a new column, or a member of another type: its place
    and type are inference's to decide), the members the learned schema typed ``null``
    are null where present, and every typed member is witnessed (:func:`_witnessed`).
    The ``exempt`` top-level members are not proved and taken as read: members the caller
    reads the same way typed or null; where ``explicit`` (the parse schema) types one,
    the read must have kept that type. Members come in the learned order: inference
    orders them by first appearance, which differs only where a producer writes members
    in varying order.
    """
    got = {name: i for i, name in enumerate(table.column_names)}
    if len(got) != table.num_columns:
        return None
    columns, fields = [], []
    for f in learned:
        i = got.pop(f.name, None)
        if i is None:
            if pa.types.is_null(f.type) or f.name in exempt:
                continue
            return None
        col = table.column(i)
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if f.name not in exempt:
            arr = _conformed(arr, f.type)
            if arr is None or not _witnessed(arr, arr.type):
                return None
        elif explicit is not None and f.name in explicit.names:
            # Taken as read, but as typed: a member inferred inside it (an Avro-rendered
            # ``before``, say) is for inference to place and judge.
            if arr.type != explicit.field(f.name).type:
                return None
        columns.append(arr)
        fields.append(f.with_type(arr.type))
    if got:
        return None
    if not columns:  # no member at all: keep the rows (a table of no columns has none)
        return table.select([])
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
