"""Record keys of one topic: the Hudi record key text and the typed key fields.

``_cdc_key`` is built from the JSON values of the record key as they are on the wire
(integers in decimal, strings as-is, booleans ``true``/``false``), so it is identical
with and without ``schemas.enable`` and never depends on logical-type rendering.
Composite keys use Hudi's complex-key layout ``f1:v1,f2:v2`` with ``__null__`` and
``__empty__`` for null and empty parts; a scalar (non-object) key is its own text. The
typed key fields are kept too: deletes carry them in their row columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.debezium_json import connect
from engine.decode.debezium_json.common import (
    IDX,
    KEY_SET,
    KEY_TEXT,
    Ctx,
    cached_plan,
    column,
    concat,
    flag,
    index_array,
    infer_columns,
    str_scalar,
    struct_normalizer,
)
from engine.decode.debezium_json.connect import SchemaError, TypePlan
from engine.decode.debezium_json.reader import BulkReader, Piece, merge_pieces
from engine.decode.debezium_json.split import Group, Split


@dataclass(slots=True)
class _KeyPlan:
    """How the keys of one Connect key schema (or schemaless keys) are decoded."""

    kind: str  # "struct", "schemaless" or "bad"
    reason: str = ""
    reader: BulkReader | None = None
    fields: list[tuple[str, TypePlan]] | None = None


def _key_plan(fp: str | None, schema: dict | None) -> _KeyPlan:
    if fp is None or schema is None:
        reader = BulkReader([pa.schema([])], infer=True, py_build=infer_columns)
        return _KeyPlan("schemaless", reader=reader)

    def build() -> _KeyPlan:
        problem = connect.schema_problem(schema)
        if problem:
            return _KeyPlan("bad", f"malformed Connect key schema: {problem}")
        if schema.get("type") != "struct":
            return _KeyPlan("bad", f"key is an object but its schema is {schema.get('type')!r}")
        try:
            fields = connect.struct_fields(schema, "key")
        except SchemaError as exc:
            return _KeyPlan("bad", f"unsupported key schema: {exc}")
        base = pa.schema([(n, p.parse_type) for n, p in fields])
        variants: list[pa.Schema | None] = [base]
        probes: list[tuple[pa.Schema, pa.Schema]] = []
        if any(p.has_decimal for _, p in fields):
            variants.append(pa.schema([(n, p.numeric_decimal_variant()) for n, p in fields]))
            probes.append(
                (variants[-1], pa.schema([(n, p.numeric_decimal_probe()) for n, p in fields]))
            )
        norm = struct_normalizer([(n, p.normalize) for n, p in fields])

        def build_rows(objs: list[Any]) -> pa.Table:
            return pa.Table.from_pylist([norm(o, "key") for o in objs], schema=base)

        reader = BulkReader(
            variants,
            infer=False,
            py_build=build_rows,
            arrow_readable=all(p.arrow_readable for _, p in fields),
            exact_numbers=True,
            probes=probes,
        )
        return _KeyPlan("struct", reader=reader, fields=fields)

    return cached_plan("key", fp, build)


@dataclass(slots=True)
class Keys:
    """Decoded record keys, aligned to record indices through the ``IDX`` column."""

    table: pa.Table | None  # IDX, KEY_TEXT, KEY_SET and the typed key fields
    identity: bool  # the table rows are exactly records 0..n-1, in order
    field_sets: list[tuple[str, ...]]  # indexed by KEY_SET
    bad: dict[int, str]
    used_sets: list[tuple[str, ...]] = field(default_factory=list)  # of the batch rows

    @property
    def fields(self) -> list[str]:
        """Union of the key fields of the batch rows, in key order."""
        names: dict[str, None] = {}
        for key_set in self.used_sets:
            names.update(dict.fromkeys(key_set))
        return list(names)


def _text_of(arr: pa.Array) -> pa.Array:
    """Key part as text, from its wire (JSON) value."""
    t = arr.type
    if pa.types.is_string(t):
        return arr
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    scalar = (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)  # decimal.format=NUMERIC keys
        or pa.types.is_large_string(t)
    )
    if scalar:
        return arr.cast(pa.string())
    # Nested key members (never produced by Debezium for a primary key): JSON text.
    return pa.array([connect.json_text(v) for v in arr.to_pylist()], pa.string())


def _key_text(names: list[str], columns: list[pa.Array], n: int) -> pa.Array:
    """Hudi record key: the value for one field, ``f1:v1,f2:v2`` for several."""
    if not names:
        return pa.nulls(n, pa.string())
    if len(names) == 1:
        return _text_of(columns[0])
    parts: list[Any] = []
    for i, (name, col) in enumerate(zip(names, columns, strict=True)):
        text = _text_of(col)
        text = pc.if_else(pc.equal(text, str_scalar("")), str_scalar("__empty__"), text)
        parts.append(str_scalar(("," if i else "") + name + ":"))
        parts.append(pc.fill_null(text, str_scalar("__null__")))
    return pc.binary_join_element_wise(*parts, str_scalar(""))


def _regroup_schemaless_keys(group: Group, piece: Piece) -> list[Piece]:
    """Split a piece of schemaless keys by each record's exact member list."""
    payloads = group.payload_list()
    by_members: dict[tuple[str, ...], list[tuple[int, dict]]] = {}
    for p in piece.positions:
        obj = json.loads(payloads[p])
        by_members.setdefault(tuple(obj), []).append((p, obj))
    subpieces = []
    for members, items in by_members.items():
        columns = {m: connect.infer_array([obj[m] for _, obj in items]) for m in members}
        if columns:
            table = pa.table(columns)
        else:
            table = pa.table({"_": pa.nulls(len(items))}).drop_columns(["_"])
        subpieces.append(Piece([p for p, _ in items], table))
    return subpieces


def _key_piece(
    piece: Piece,
    group: Group,
    plan: _KeyPlan,
    field_sets: list[tuple[str, ...]],
    bad: dict[int, str],
) -> pa.Table:
    """Key text, key-set id and typed key fields of one parsed piece of keys."""
    idx = index_array(group, piece.positions)
    t = piece.table
    names = t.column_names
    raw = [column(t, name) for name in names]
    key_set = tuple(names)
    if key_set not in field_sets:
        field_sets.append(key_set)
    n = len(piece.positions)
    columns: dict[str, pa.Array] = {
        IDX: idx,
        KEY_TEXT: _key_text(names, raw, n),
        KEY_SET: pa.repeat(pa.scalar(field_sets.index(key_set), pa.int32()), n),
    }
    if plan.fields is not None:
        for (name, tplan), col in zip(plan.fields, raw, strict=True):
            if tplan.convert is not None:
                res = tplan.convert(col, f"key.{name}")
                col = res.array
                if res.bad is not None:
                    flag(bad, idx, res.bad, f"undecodable key field: {res.reason}")
            columns[name] = col
    else:
        columns.update(zip(names, raw, strict=True))
    return pa.table(columns)


def decode_keys(split: Split, n: int, ctx: Ctx) -> Keys:
    tables: list[pa.Table] = []
    bad = dict(split.bad)
    field_sets: list[tuple[str, ...]] = []
    identity = False
    simple = len(split.groups) == 1 and not (split.nulls or split.scalars or split.bad)
    for fp, group in split.groups.items():
        plan = _key_plan(fp, group.schema)
        if plan.kind == "bad":
            for i in group.indices:
                bad[i] = plan.reason
            continue
        if plan.reader is None:
            raise RuntimeError(f"key plan of kind {plan.kind!r} has no reader")
        # A key payload of JSON null (the third result) is a null key: nothing to add.
        pieces, piece_bad, _ = plan.reader.decode(group)
        for p, reason in piece_bad.items():
            bad[group.indices[p]] = reason
        pieces = merge_pieces(pieces)
        for piece in pieces:
            subpieces = [piece]
            if plan.fields is None and any(col.null_count for col in piece.table.columns):
                # Schemaless keys parsed together share the union of their members; a
                # null may mean "absent" ({"id":1} next to {"id":1,"k2":"a"}), so regroup
                # these records by their exact member list.
                subpieces = _regroup_schemaless_keys(group, piece)
            for sub in subpieces:
                tables.append(_key_piece(sub, group, plan, field_sets, bad))
            # Fast alignment later if these keys are exactly records 0..n-1 in order.
            identity = (
                simple
                and len(pieces) == 1
                and len(subpieces) == 1
                and isinstance(piece.positions, range)
                and len(piece.positions) == n
            )
    if split.scalars:
        items = sorted(split.scalars.items())
        tables.append(
            pa.table(
                {
                    IDX: pa.array([i for i, _ in items], pa.int64()),
                    KEY_TEXT: pa.array([s for _, s in items], pa.string()),
                }
            )
        )
    table = concat(tables, ctx.notes) if tables else None
    return Keys(table, identity, field_sets, bad)
