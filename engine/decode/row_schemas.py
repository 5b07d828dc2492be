"""Which Connect schema each row event of a batch carried: its columns and their defaults.

A change batch is the union of the columns of every schema its events carried (a column
missing from an event's schema is null in its row), so the batch alone cannot tell a
column the source dropped from one that is null. Formats whose events carry schemas
(Debezium JSON with schemas, Avro) also return, per distinct value schema, the names of
its row columns, the ``default`` its Connect schema gives each (as the column's value),
and per Kafka partition the lowest and highest offset of the batch's row events that
carried it. The replicator uses it for the schema-change policies
(:mod:`engine.merge.evolution`): the schema of the newest event says which columns the
source still has; a column added with a default is filled from it.
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
    #: Partition -> (lowest, highest) offset of the batch's row events with this schema.
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Column -> the type the schema gives it (columns without a type hint).
    types: dict[str, pa.DataType] = field(default_factory=dict)


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
            t = pa.table({"p": parts.take(idx), "o": offs.take(idx)})
            agg = t.group_by("p").aggregate([("o", "min"), ("o", "max")])
            spans = {
                int(p): (int(lo), int(hi))
                for p, lo, hi in zip(
                    agg.column("p").to_pylist(),
                    agg.column("o_min").to_pylist(),
                    agg.column("o_max").to_pylist(),
                    strict=True,
                )
            }
            out.append(RowSchema(columns, defaults, spans, types))
        return out


def newest_schema(
    schemas: Sequence[RowSchema], batch: pa.Table | None
) -> tuple[RowSchema, tuple[int, int] | None] | None:
    """The schema of the batch's newest row event that carried one, and that event's
    source position: newest by position (``_cdc_pos``, ``_cdc_pos_sub``), not by offset,
    since a connector that restarts sends older events again after newer ones (at least
    once); by offset when no event has a position. None when no row event of the batch
    carried a schema (schemaless JSON, or only tombstones and truncates)."""
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
    cols = [batch.column(c) for c in (PARTITION, OFFSET, POS, POS_SUB)]
    step = 256
    for start in range(0, len(order), step):  # newest first; tombstones carry no schema
        rows = [c.take(order[start : start + step]).to_pylist() for c in cols]
        for p, o, a, b in zip(*rows, strict=True):
            holding = [s for s in schemas if p in s.spans and s.spans[p][0] <= o <= s.spans[p][1]]
            if holding:
                # Spans of two schemas can overlap (A, B, A in one partition): the newer.
                schema = max(holding, key=lambda s: s.spans[p][0])
                return schema, ((a, b or 0) if a is not None else None)
    return None


def rows_without(schemas: Sequence[RowSchema], batch: pa.Table, column: str) -> pa.Array:
    """A mask of the batch's rows whose event's schema had no ``column`` (events from
    before it was added); rows of no known schema are False."""
    mask = pa.array([False] * batch.num_rows, pa.bool_())
    parts, offs = batch.column(PARTITION), batch.column(OFFSET)
    for s in schemas:
        if column in s.columns:
            continue
        for p, (lo, hi) in s.spans.items():
            hit = pc.and_(
                pc.equal(parts, pa.scalar(p, pa.int32())),
                pc.and_(pc.greater_equal(offs, lo), pc.less_equal(offs, hi)),
            )
            mask = pc.or_(mask, pc.fill_null(hit, False))
    return mask
