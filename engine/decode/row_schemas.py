"""Which Connect schema each row event of a batch carried: its columns and their defaults.

A change batch is the union of the columns of every schema its events carried (a column
missing from an event's schema is null in its row), so the batch alone cannot tell a
column the source dropped from one that is null. Formats whose events carry schemas
(Debezium JSON with schemas, Avro) also return, per distinct value schema, the names of
its row columns, the ``default`` its Connect schema gives each (as the column's value),
and per Kafka partition the exact offsets of the batch's row events that carried it
(not a span: a connector that restarts re-sends old-schema events after new-schema
ones, so the offsets of two schemas interleave). The replicator uses it for the
schema-change policies (:mod:`engine.merge.evolution`): the schema of the newest event
says which columns the source still has; a column added with a default is filled from
it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.model import OFFSET, PARTITION, POS, POS_SUB

#: Connect types whose ``default`` reads the same in JSON and in an Avro schema.
_PLAIN = {"int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string"}


@dataclass
class RowSchema:
    """One value schema of a batch's row events."""

    #: Its row columns, in schema order.
    columns: tuple[str, ...]
    #: Column -> the default its Connect schema declares (a value of the column's type);
    #: columns without one (or with one that could not be read) are absent.
    defaults: dict[str, Any] = field(default_factory=dict)
    #: Partition -> the offsets (int64, ascending) of the batch's row events with this
    #: schema.
    offsets: dict[int, pa.Array] = field(default_factory=dict)
    #: Column -> the type the schema gives it (columns without a type hint).
    types: dict[str, pa.DataType] = field(default_factory=dict)

    def newest_offset(self) -> int:
        """The highest offset of its events (over partitions)."""
        return max((pc.max(o).as_py() for o in self.offsets.values() if len(o)), default=-1)

    def remapped(self, real: pa.Array) -> RowSchema:
        """The same schema with each offset ``o`` replaced by ``real[o]``: for a decoder
        run on records numbered 0..n-1 in place of their Kafka offsets."""
        offsets = {p: pc.array_take(real, o).cast(pa.int64()) for p, o in self.offsets.items()}
        return RowSchema(self.columns, self.defaults, offsets, self.types)


def connect_defaults(after: dict | None, plans: Sequence[tuple[str, Any]], *, plain: bool) -> dict:
    """Column -> default value of the ``after`` struct schema's fields (JsonConverter
    form), read with each column's type plan (``normalize`` then ``convert``): the value
    the column holds. ``plain``: only Connect types whose default is written alike by
    the JSON and Avro converters (an Avro schema's ``bytes`` default is not base64)."""
    if not isinstance(after, dict):
        return {}
    raw = {
        f["field"]: f["default"]
        for f in after.get("fields") or []
        if isinstance(f, dict) and f.get("default") is not None and "field" in f
        if not plain or (f.get("type") in _PLAIN and "name" not in f)
    }
    out: dict[str, Any] = {}
    for name, plan in plans:
        if name not in raw:
            continue
        try:
            arr = pa.array([plan.normalize(raw[name], name)], plan.parse_type)
            if plan.convert is not None:
                res = plan.convert(arr, name)
                if res.bad is not None and pc.any(res.bad).as_py():
                    continue
                arr = res.array
            out[name] = arr[0].as_py()
        except Exception:  # noqa: BLE001 - an unreadable default is just not known
            continue
    return out


class RowSchemaLog:
    """Collects, while one topic's records are decoded, the record indices of the row
    events of each value schema; :meth:`result` turns them into :class:`RowSchema`."""

    def __init__(self) -> None:
        self._by_key: dict[Any, tuple[tuple[str, ...], dict, dict, list[pa.Array]]] = {}

    def add(
        self,
        key: Any,
        plans: Sequence[tuple[str, Any]],
        defaults: dict,
        indices: pa.Array,
        hinted: Collection[str] = (),
    ) -> None:
        """Row events (record ``indices``) of the schema ``key`` with these column
        ``plans`` (name, type plan); ``hinted``: columns whose type a hint sets."""
        if len(indices) == 0:
            return
        entry = self._by_key.get(key)
        if entry is None:
            columns = tuple(n for n, _ in plans)
            types = {n: p.out_type for n, p in plans if n not in hinted}
            entry = self._by_key[key] = (columns, defaults, types, [])
        entry[3].append(indices)

    def result(self, partitions: Sequence[int], offsets: Sequence[int]) -> list[RowSchema]:
        out: list[RowSchema] = []
        if not self._by_key:
            return out
        parts = pa.array(partitions, pa.int32())
        offs = pa.array(offsets, pa.int64())
        for columns, defaults, types, chunks in self._by_key.values():
            idx = pa.chunked_array(chunks, pa.int64()).combine_chunks()
            p, o = parts.take(idx), offs.take(idx)
            by_part: dict[int, pa.Array] = {}
            distinct = pc.unique(p).to_pylist()
            for part in distinct:
                mine = o if len(distinct) == 1 else o.filter(pc.equal(p, part))
                by_part[int(part)] = pc.array_take(mine, pc.sort_indices(mine))
            out.append(RowSchema(columns, defaults, by_part, types))
        return out


def schema_ids(schemas: Sequence[RowSchema], batch: pa.Table) -> pa.Array:
    """Per row of the batch, the index in ``schemas`` of its event's schema (by its
    exact partition and offset), null for rows of no known schema."""
    ids = pa.nulls(batch.num_rows, pa.int32())
    if not schemas or batch.num_rows == 0:
        return ids
    parts = batch.column(PARTITION)
    offs = batch.column(OFFSET)
    single = pc.unique(parts).to_pylist()
    for i, s in enumerate(schemas):
        for p, offsets in s.offsets.items():
            if p not in single:
                continue
            hit = pc.is_in(offs, value_set=offsets)
            if len(single) > 1:
                hit = pc.and_(hit, pc.equal(parts, pa.scalar(p, pa.int32())))
            ids = pc.if_else(pc.fill_null(hit, False), pa.scalar(i, pa.int32()), ids)
    return ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids


def newest_schema(
    schemas: Sequence[RowSchema], batch: pa.Table | None, ids: pa.Array | None = None
) -> tuple[RowSchema, tuple[int, int] | None] | None:
    """The schema of the batch's newest row event that carried one, and that event's
    source position: newest by position (``_cdc_pos``, ``_cdc_pos_sub``), not by offset,
    since a connector that restarts sends older events again after newer ones (at least
    once); by offset when no event has a position. None when no row event of the batch
    carried a schema (schemaless JSON, or only tombstones and truncates). ``ids``: the
    batch's :func:`schema_ids`, when already computed."""
    if not schemas or batch is None or batch.num_rows == 0:
        return None
    order = pc.sort_indices(
        batch.select([POS, POS_SUB, OFFSET]),
        sort_keys=[
            (POS, "descending", "at_end"),
            (POS_SUB, "descending", "at_end"),
            (OFFSET, "descending", "at_end"),
        ],
    )
    ids = (schema_ids(schemas, batch) if ids is None else ids).take(order)
    found = pc.indices_nonzero(pc.is_valid(ids))  # newest first; tombstones carry no schema
    if len(found) == 0:
        return None
    first = found[0].as_py()
    row = order[first].as_py()
    a, b = batch.column(POS)[row].as_py(), batch.column(POS_SUB)[row].as_py()
    return schemas[ids[first].as_py()], ((a, b or 0) if a is not None else None)


def rows_without(
    schemas: Sequence[RowSchema], batch: pa.Table, column: str, ids: pa.Array | None = None
) -> pa.Array:
    """A mask of the batch's rows whose event's schema had no ``column`` (events from
    before it was added); rows of no known schema are False. ``ids``: the batch's
    :func:`schema_ids`, when already computed."""
    if ids is None:
        ids = schema_ids(schemas, batch)
    lacking = [i for i, s in enumerate(schemas) if column not in s.columns]
    if not lacking:
        return pa.array([False] * batch.num_rows, pa.bool_())
    return pc.fill_null(pc.is_in(ids, value_set=pa.array(lacking, pa.int32())), False)
