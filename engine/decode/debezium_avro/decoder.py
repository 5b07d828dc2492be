"""Bulk decoder of Debezium change events written by Confluent's AvroConverter.

Records are in the Confluent wire format: magic byte ``0``, a 4-byte big-endian schema
id, then the Avro binary datum. Values (and keys) are grouped by schema id; each writer
schema, fetched once from the registry (:mod:`.registry`), is turned into the Connect
schema it encodes (:mod:`.schema`) and planned by the same code as the JSON path
(:mod:`engine.decode.debezium_json.connect` for types, the envelope classification of
:mod:`engine.decode.debezium_json.envelope`), so both paths give identical change
batches for the same events. Datums of one schema id are decoded in one call
(:mod:`.bulk`).

Every record ends in exactly one of: a batch row, ``bad`` (wrong magic byte, too short,
unknown schema id, a body that is not a datum of its schema, a value that does not fit
its type, a row event without ``after``), or ``ignored`` (transaction metadata,
heartbeats, schema changes, ``op = m``). A null value is a tombstone. A registry that
cannot be reached raises :class:`engine.errors.SourceError` (transient: retried).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.debezium_avro.bulk import BodyReader, Decoded
from engine.decode.debezium_avro.registry import SchemaCache, UnknownSchema
from engine.decode.debezium_avro.schema import bulk_schema, to_connect, wire_type
from engine.decode.debezium_json import connect
from engine.decode.debezium_json.common import (
    IDX,
    KEY_SET,
    KEY_TEXT,
    RESERVED,
    Ctx,
    concat,
    flag,
)
from engine.decode.debezium_json.connect import SchemaError, TypePlan
from engine.decode.debezium_json.decoder import _normalize_hint, finish
from engine.decode.debezium_json.envelope import (
    _classify_value_schema,
    apply_hints,
    kept_rows,
    row_piece,
)
from engine.decode.debezium_json.keys import Keys, _key_text
from engine.decode.debezium_json.split import fingerprint
from engine.decode.positions import ends_snapshot, source_columns
from engine.decode.records import RecordBatch
from engine.decode.result import DecodeResult
from engine.decode.row_schemas import connect_defaults

if TYPE_CHECKING:
    from engine.column_types import ColumnType

__all__ = ["AvroDecoder"]

_ROW_OPS = pa.array(["c", "u", "d", "r", "t"], pa.string())
_SOURCE_TABLE_MEMBERS = ("connector", "db", "schema", "table")


@dataclass(slots=True)
class _Plan:
    kind: str  # "envelope", "ignore", "key" or "bad"
    reason: str = ""
    reader: BodyReader | None = None
    fields: list[tuple[str, TypePlan]] = field(default_factory=list)
    fingerprint: str | None = None
    #: Column -> the default the writer schema declares (engine.decode.row_schemas).
    defaults: dict = field(default_factory=dict)


_MAGIC_BYTE = pa.scalar(b"\x00", pa.binary())


def _group(
    records: Sequence[bytes | None], role: str, bad: dict[int, str], nulls: list[int]
) -> dict[int, tuple[np.ndarray, pa.Array]]:
    """Records by schema id: (record indices, Avro bodies); nulls and unframed records
    are reported in ``nulls`` and ``bad``. Vectorised: no Python work per good record."""
    # Nulls (tombstones follow every delete) are left out of the Arrow array rather than
    # filtered from it: filtering would copy every body once more.
    is_null = np.fromiter(map(operator.is_, records, repeat(None)), np.bool_, len(records))
    present: np.ndarray | None = None
    if is_null.any():
        nulls.extend(np.flatnonzero(is_null).tolist())
        present = np.flatnonzero(~is_null)
        records = list(compress(records, ~is_null))
    arr = pa.array(records, pa.large_binary())  # 64-bit offsets: no 2 GiB limit
    n = len(arr)
    lengths = pc.binary_length(arr)
    short = pc.less(lengths, pa.scalar(5, pa.int32()))
    magic = pc.equal(pc.binary_slice(arr, 0, 1), _MAGIC_BYTE)
    wrong = pc.and_(pc.invert(short), pc.invert(magic))

    def at(i: int) -> int:
        return i if present is None else int(present[i])

    for i in pc.indices_nonzero(short).to_pylist():
        bad[at(i)] = (
            f"{role} of {len(records[i])} bytes is too short for the Confluent Avro "
            "wire format (magic byte 0, 4-byte schema id, datum)"
        )
    for i in pc.indices_nonzero(wrong).to_pylist():
        first = records[i][0]
        bad[at(i)] = (
            f"{role} starts with byte 0x{first:02x}, not the Confluent magic byte 0x00: not "
            "Avro from a schema registry (for JsonConverter output use "
            'source.format = "debezium-json")'
        )
    good = pc.and_(pc.invert(short), magic)
    if pc.all(good).as_py():
        indices = np.arange(n, dtype=np.int64)
        framed = arr
    else:
        indices = pc.indices_nonzero(good).to_numpy().astype(np.int64)
        framed = arr.filter(good)
    if present is not None:
        indices = present[indices]
    if not len(framed):
        return {}
    heads = pc.binary_slice(framed, 1, 5).cast(pa.binary(4))
    ids = np.frombuffer(heads.buffers()[1], ">i4")[heads.offset : heads.offset + len(heads)]
    bodies = pc.binary_slice(framed, 5, 2**31 - 1)  # (no stop: pyarrow 26 fails)
    distinct = np.unique(ids)
    if len(distinct) == 1:
        return {int(distinct[0]): (indices, bodies)}
    groups: dict[int, tuple[np.ndarray, pa.Array]] = {}
    first_seen = sorted(distinct, key=lambda x: int(np.argmax(ids == x)))
    for schema_id in first_seen:
        mask = ids == schema_id
        groups[int(schema_id)] = (indices[mask], bodies.filter(pa.array(mask)))
    return groups


class AvroDecoder:
    """The ``debezium-avro`` decoder of a :class:`~engine.decode.records.RecordBatch`.

    ``column_types`` gives a topic's column type hints (``[tables.<name>.columns]``):
    they convert what the writer schema decoded, exactly as for a JSON message with a
    Connect schema (:func:`engine.decode.debezium_json.envelope.apply_hints`).
    """

    def __init__(
        self,
        schemas: SchemaCache,
        connector_hint: str | None = None,
        column_types: Callable[[str], Mapping[str, ColumnType]] | None = None,
    ) -> None:
        self.schemas = schemas
        self.hint = _normalize_hint(connector_hint)
        self.column_types = column_types
        self._plans: dict[tuple[str, int], _Plan] = {}
        self._doc_readers: dict[int, BodyReader] = {}

    # -- plans ---------------------------------------------------------------------------

    def _plan(self, role: str, schema_id: int) -> _Plan:
        plan = self._plans.get((role, schema_id))
        if plan is None:
            try:
                avro = self.schemas.get(schema_id)
            except UnknownSchema as exc:
                return _Plan("bad", str(exc))  # not cached: it may be registered later
            try:
                plan = self._build(role, avro)
            except (SchemaError, KeyError, TypeError, ValueError) as exc:
                plan = _Plan("bad", f"unsupported {role} schema id {schema_id}: {exc}")
            self._plans[(role, schema_id)] = plan
        return plan

    def _build(self, role: str, avro: Any) -> _Plan:
        schema = to_connect(avro)
        wire_s, bulk_ok = bulk_schema(avro)
        wire = wire_type(wire_s)
        if role == "key":
            if schema.get("type") != "struct":
                return _Plan("bad", f"key schema is {schema.get('type')!r}, not a record")
            fields = connect.struct_fields(schema, "key")
            reader = BodyReader(wire_s, wire, bulk_ok, [n for n, _ in fields])
            return _Plan("key", reader=reader, fields=fields)
        fp = fingerprint(schema)
        kind, reason = _classify_value_schema(schema)
        if kind == "bad":
            return _Plan("bad", reason, fingerprint=fp)
        names = [f.name for f in wire]
        if kind == "ignore":
            return _Plan("ignore", reason, BodyReader(wire_s, wire, bulk_ok, names[:1]), [], fp)
        by_name = {f["field"]: f for f in schema["fields"]}
        after = connect.struct_fields(by_name["after"], "after") if "after" in by_name else []
        if any(name in RESERVED for name, _ in after):
            return _Plan("bad", "a row column collides with a control column name")
        columns = [c for c in ("op", "source", "transaction", "after") if c in names]
        defaults = connect_defaults(by_name.get("after"), after, plain=True)
        return _Plan("envelope", reader=BodyReader(wire_s, wire, bulk_ok, columns), fields=after,
                     fingerprint=fp, defaults=defaults)  # fmt: skip

    # -- decoding ------------------------------------------------------------------------

    def documents(self, values: Sequence[bytes | None]) -> list[Any]:
        """Avro values as plain documents (dicts of the raw values), None for a null or
        undecodable value: how the transaction-metadata topic (BEGIN/END records) is read.
        Decoded in bulk per schema id like row events."""
        docs: list[Any] = [None] * len(values)
        for schema_id, (indices, bodies) in _group(values, "value", {}, []).items():
            reader = self._doc_readers.get(schema_id)
            if reader is None:
                try:
                    wire_s, bulk_ok = bulk_schema(self.schemas.get(schema_id))
                except (UnknownSchema, SchemaError):
                    continue
                if not (isinstance(wire_s, dict) and wire_s.get("type") == "record"):
                    continue
                names = [f["name"] for f in wire_s["fields"]]
                reader = BodyReader(wire_s, wire_type(wire_s), bulk_ok, names)
                self._doc_readers[schema_id] = reader
            pieces, _ = reader.decode(bodies)
            for piece in pieces:
                for p, row in zip(piece.positions.tolist(), piece.table.to_pylist(), strict=True):
                    docs[int(indices[p])] = row
        return docs

    def __call__(self, records: RecordBatch) -> DecodeResult:
        if not len(records):
            return DecodeResult(None, [], [], 0)
        ctx = Ctx(records.topic, self.hint)
        if self.column_types is not None:
            ctx.column_types = dict(self.column_types(records.topic))
        groups = _group(records.values, "value", ctx.bad, ctx.tombstones)
        for schema_id, (indices, bodies) in groups.items():
            self._values(schema_id, indices, bodies, ctx)
        return finish(records, self._keys(records.keys, ctx), ctx)

    def _values(self, schema_id: int, indices: np.ndarray, bodies: pa.Array, ctx: Ctx) -> None:
        ctx.groups += 1
        plan = self._plan("value", schema_id)
        if plan.fingerprint is not None and plan.fingerprint not in ctx.fingerprints:
            ctx.fingerprints.append(plan.fingerprint)
        if plan.kind == "bad" or plan.reader is None:
            for i in indices.tolist():
                ctx.bad[i] = plan.reason
            return
        pieces, bad = plan.reader.decode(bodies)
        for p, reason in bad.items():
            ctx.bad[int(indices[p])] = f"schema id {schema_id}: {reason}"
        for piece in pieces:
            if plan.kind == "ignore":
                ctx.ignored += piece.table.num_rows
                continue
            idx = pa.array(indices[piece.positions], pa.int64())
            out = self._envelope(piece, idx, plan, ctx)
            if out is not None and out.num_rows:
                ctx.tables.append(out)

    def _envelope(self, piece: Decoded, idx: pa.Array, plan: _Plan, ctx: Ctx) -> pa.Table | None:
        """Control and row columns of the row events of one decoded piece."""
        t = piece.table
        n = t.num_rows
        op = _col(t, "op")
        if op is None:
            op = pa.nulls(n, pa.string())
        flag(ctx.bad, idx, pc.is_null(op), "envelope with a null op")
        is_row = pc.fill_null(pc.is_in(op, value_set=_ROW_OPS), False)
        is_message = pc.fill_null(pc.equal(op, pa.scalar("m", pa.string())), False)
        ctx.ignored += pc.sum(is_message).as_py() or 0
        unknown = pc.and_(pc.invert(pc.or_(is_row, is_message)), pc.is_valid(op))
        for k in pc.indices_nonzero(unknown).to_pylist():
            ctx.bad[idx[k].as_py()] = f"unknown op {op[k].as_py()!r}"
        if not pc.any(is_row).as_py():
            return None

        checks: list[tuple[pa.Array, str]] = []
        source = _col(t, "source")
        src = source_columns(source, n, ctx.hint)
        ctx.snapshot_ended = ctx.snapshot_ended or ends_snapshot(source)
        tx = _col(t, "transaction")
        tx_id = pa.nulls(n, pa.string())
        if tx is not None and pa.types.is_struct(tx.type) and tx.type.get_field_index("id") >= 0:
            raw_id = pc.struct_field(tx, "id")
            if pa.types.is_string(raw_id.type):
                tx_id = raw_id

        rows: dict[str, pa.Array] = {}
        after = _col(t, "after")
        if plan.fields:
            if after is not None:
                children = after.flatten()
            else:
                children = [pa.nulls(n, p.parse_type) for _, p in plan.fields]
            for (name, tplan), child in zip(plan.fields, children, strict=True):
                if tplan.convert is None:
                    rows[name] = child.cast(tplan.out_type)
                    continue
                res = tplan.convert(child, f"after.{name}")
                rows[name] = res.array
                if res.bad is not None:
                    checks.append((res.bad, f"undecodable field: {res.reason}"))
        apply_hints(rows, ctx.column_types, ctx, checks, schemaless=False)
        keep = kept_rows(op, is_row, after, checks, src.bad, idx, ctx)
        if ctx.source_table is None and source is not None and pc.any(keep).as_py():
            first = pc.index(keep, pa.scalar(True, pa.bool_())).as_py()
            ctx.source_table = _source_table(source, first)
        ctx.row_schemas.add(
            id(plan), plan.fields, plan.defaults, idx.filter(keep), ctx.column_types
        )
        return row_piece(idx, op, src, tx_id, rows, keep)

    def _keys(self, keys: Sequence[bytes | None], ctx: Ctx) -> Keys:
        bad: dict[int, str] = {}
        groups = _group(keys, "key", bad, [])
        tables: list[pa.Table] = []
        field_sets: list[tuple[str, ...]] = []
        for schema_id, (indices, bodies) in groups.items():
            plan = self._plan("key", schema_id)
            if plan.kind == "bad" or plan.reader is None:
                for i in indices.tolist():
                    bad[i] = plan.reason
                continue
            pieces, piece_bad = plan.reader.decode(bodies)
            for p, reason in piece_bad.items():
                bad[int(indices[p])] = f"key schema id {schema_id}: {reason}"
            names = [name for name, _ in plan.fields]
            key_set = tuple(names)
            if key_set not in field_sets:
                field_sets.append(key_set)
            for piece in pieces:
                idx = pa.array(indices[piece.positions], pa.int64())
                m = len(piece.positions)
                raw = [_col(piece.table, name) for name in names]
                columns: dict[str, Any] = {
                    IDX: idx,
                    KEY_TEXT: _key_text(names, raw, m),
                    KEY_SET: pa.repeat(pa.scalar(field_sets.index(key_set), pa.int32()), m),
                }
                for (name, tplan), col in zip(plan.fields, raw, strict=True):
                    if tplan.convert is not None:
                        res = tplan.convert(col, f"key.{name}")
                        col = res.array
                        if res.bad is not None:
                            flag(bad, idx, res.bad, f"undecodable key field: {res.reason}")
                    elif col is not None:
                        col = col.cast(tplan.out_type)
                    columns[name] = col
                tables.append(pa.table(columns))
        if not tables:
            return Keys(None, False, field_sets, bad)
        return Keys(concat(tables, ctx.notes), False, field_sets, bad)


def _col(t: pa.Table, name: str) -> pa.Array | None:
    if name not in t.column_names:
        return None
    col = t.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _source_table(source: pa.Array, row: int) -> dict[str, str] | None:
    value = source[row].as_py()
    if not isinstance(value, dict):
        return None
    found = {m: value[m] for m in _SOURCE_TABLE_MEMBERS if isinstance(value.get(m), str)}
    return found if "table" in found else None
