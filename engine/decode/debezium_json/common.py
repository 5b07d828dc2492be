"""Internals shared by the Debezium JSON decoder's modules: column names, per-call
state, plan cache, and small Arrow helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.debezium_json import connect
from engine.decode.debezium_json.connect import FieldError
from engine.decode.debezium_json.split import Group
from engine.decode.row_schemas import RowSchemaLog
from engine.model import BY_FIELD, CONTROL_COLUMNS

# Internal column names (never part of the result).
IDX = "__cdc_decode_index__"
KEY_TEXT = "__cdc_decode_key__"
KEY_SET = "__cdc_decode_key_set__"
RESERVED = frozenset(CONTROL_COLUMNS) | {BY_FIELD, IDX, KEY_TEXT, KEY_SET}

_PLAN_CACHE: dict[tuple[str, str], Any] = {}
_PLAN_CACHE_MAX = 512


def str_scalar(value: str) -> pa.Scalar:
    # Typed scalars: an untyped Python value makes pyarrow attempt an import on each call.
    return pa.scalar(value, pa.string())


def cached_plan(kind: str, fp: str, build: Callable[[], Any]) -> Any:
    plan = _PLAN_CACHE.get((kind, fp))
    if plan is None:
        plan = build()
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.pop(next(iter(_PLAN_CACHE)))
        _PLAN_CACHE[(kind, fp)] = plan
    return plan


def struct_normalizer(members: list[tuple[str, Any]]) -> Callable[[Any, str], Any]:
    def norm(v: Any, path: str) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise FieldError(f"{path}: expected an object, got {type(v).__name__}")
        return {name: f(v.get(name), f"{path}.{name}") for name, f in members}

    return norm


def infer_columns(objs: list[Any]) -> pa.Table:
    """Per-record twin of the inferring bulk read for schemaless keys."""
    names: dict[str, None] = {}
    for o in objs:
        names.update(dict.fromkeys(o))
    return pa.table({k: connect.infer_array([o.get(k) for o in objs]) for k in names})


@dataclass(slots=True)
class Ctx:
    """Mutable state of one decode call."""

    topic: str
    hint: str | None
    bad: dict[int, str] = field(default_factory=dict)
    ignored: int = 0
    notes: list[str] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    tombstones: list[int] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    groups: int = 0
    #: Wrapped records found inside a schemaless bulk group (decoded again separately).
    reroute: list[int] = field(default_factory=list)
    rerouting: bool = False
    #: The source table of the topic's row events (``source`` block), from one record.
    source_table: dict[str, str] | None = None
    #: Column type hints by column name (``[tables.<name>.columns]``).
    column_types: dict[str, Any] = field(default_factory=dict)
    #: Types of schemaless columns from the source database's catalog (or None): an
    #: object with ``types_for(source_table, topic, columns) -> (types, problem)``.
    catalog: Any = None
    #: The hints applied to row columns in this call (record-key columns get them too).
    applied_types: dict[str, Any] = field(default_factory=dict)
    #: A row event is a table's last snapshot record (see DecodeResult.snapshot_ended).
    snapshot_ended: bool = False
    #: Record indices of the row events of each value schema (see DecodeResult.row_schemas).
    row_schemas: RowSchemaLog = field(default_factory=RowSchemaLog)
    #: The batch's raw values, and the nesting limit the parse enforces (None: the
    #: caller checked every value before; see ``decode_debezium_json``).
    values: Sequence[bytes | None] = ()
    max_depth: int | None = None


def index_array(group: Group, positions: list[int] | range) -> pa.Array:
    """Original record indices of some positions of a group, as int64."""
    indices = group.indices
    if isinstance(indices, range) and isinstance(positions, range) and indices.step == 1:
        # Polars builds a large range natively (pa.array(range) iterates in Python).
        start = indices.start + positions.start
        stop = indices.start + positions.stop
        return pl.int_range(start, stop, eager=True, dtype=pl.Int64).to_arrow()
    return pa.array([indices[p] for p in positions], pa.int64())


def column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def flag(bad: dict[int, str], idx: pa.Array, mask: pa.Array, reason: str) -> None:
    """Record ``reason`` for the masked rows (a reason already recorded is kept)."""
    for k in pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist():
        bad.setdefault(idx[k].as_py(), reason)


def concat(tables: list[pa.Table], notes: list[str]) -> pa.Table:
    """Concatenate pieces, unifying column types; irreconcilable columns become text."""
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        pass
    types: dict[str, set[pa.DataType]] = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, set()).add(f.type)
    varying = {name for name, ts in types.items() if len(ts) > 1}
    conflicting = set()
    for name in varying:
        try:
            schemas = [pa.schema([pa.field(name, x)]) for x in types[name]]
            pa.unify_schemas(schemas, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            conflicting.add(name)
    try:
        result = pa.concat_tables(as_text(tables, conflicting), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # The types unify but some values do not convert (e.g. an integer beyond 2**53
        # promoted to double): keep every column whose type varies as text.
        conflicting = varying
        result = pa.concat_tables(as_text(tables, conflicting), promote_options="permissive")
    for name in sorted(conflicting):
        notes.append(f"column {name!r} has different JSON types in the batch; kept as text")
    return result


def as_text(tables: list[pa.Table], names: set[str]) -> list[pa.Table]:
    """The tables with the named columns replaced by their JSON text (strings as-is)."""
    fixed = []
    for t in tables:
        for name in names & set(t.column_names):
            i = t.schema.get_field_index(name)
            text = pa.array([connect.json_text(v) for v in t.column(i).to_pylist()], pa.string())
            t = t.set_column(i, pa.field(name, pa.string()), text)
        fixed.append(t)
    return fixed
