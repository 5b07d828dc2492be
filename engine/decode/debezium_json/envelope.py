"""Values of one topic: Debezium envelopes (op, source, transaction, after) to columns.

Values are grouped by Connect schema (:mod:`.split`); each group gets a plan, cached per
schema, saying whether its records are envelopes, records to ignore (transaction
metadata, heartbeats, schema changes) or bad, and how to read them in bulk
(:mod:`.reader`). An envelope piece becomes the control columns (op, positions, source
time, transaction id, GTID) and the typed row columns of ``after``; everything else in
a group is settled record by record: ignored, a tombstone, or bad with its reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.debezium_json import connect, hints, learned
from engine.decode.debezium_json.common import (
    IDX,
    RESERVED,
    Ctx,
    cached_plan,
    column,
    flag,
    index_array,
    str_scalar,
    struct_normalizer,
)
from engine.decode.debezium_json.connect import FieldError, SchemaError, TypePlan
from engine.decode.debezium_json.inferred import type_depth
from engine.decode.debezium_json.reader import (
    AVRO_BRANCHES,
    AVRO_REASON,
    BulkReader,
    Piece,
    avro_rendering_hint,
    merge_pieces,
)
from engine.decode.debezium_json.split import Group, Split
from engine.decode.limits import nesting_reason, too_deep_records
from engine.decode.positions import SourceColumns, ends_snapshot, source_columns
from engine.decode.row_schemas import connect_defaults
from engine.model import GTID, OP, OP_TOMBSTONE, POS, POS_SUB, SOURCE_TS, TX_ID

if TYPE_CHECKING:
    from engine.column_types import ColumnType

_ROW_OPS = pa.array(["c", "u", "d", "r", "t"], pa.string())
_NEEDS_AFTER = pa.array(["c", "u", "r"], pa.string())
_TX_TYPE = pa.struct([("id", pa.string())])

# ``source`` members the decoder needs (everything else is skipped by the reader).
_SOURCE_MEMBERS = (
    "connector", "lsn", "sequence", "file", "pos", "row", "gtid", "snapshot",
    "ts_ms", "ts_us", "ts_usec", "ts_sec",
)  # fmt: skip
_SCHEMALESS_SOURCE = pa.struct(
    [
        ("connector", pa.string()),
        ("lsn", pa.int64()),
        ("sequence", pa.string()),
        ("file", pa.string()),
        ("pos", pa.int64()),
        ("row", pa.int64()),
        ("gtid", pa.string()),
        ("ts_ms", pa.int64()),
        ("ts_us", pa.int64()),
        ("ts_usec", pa.int64()),
        ("ts_sec", pa.int64()),
        # ``snapshot`` is left to inference: strings since 1.0, booleans in 0.x and docs.
    ]
)
_SOURCE_DEFAULTS = {f.name: f.type for f in _SCHEMALESS_SOURCE}
_CONNECT_INTS = {"int8", "int16", "int32", "int64"}

_TRANSACTION_SCHEMAS = {
    "io.debezium.connector.common.TransactionMetadataValue",
    "io.debezium.connector.common.TransactionMetadataKey",
}
_HEARTBEAT_SCHEMAS = {
    "io.debezium.connector.common.Heartbeat",
    "io.debezium.connector.common.ServerNameKey",
}
_FLATTENED_REASON = (
    "flattened row (ExtractNewRecordState/unwrap SMT output), not a Debezium envelope: "
    "op and position cannot be trusted; consume the unflattened topic, or set "
    'source.format = "debezium-flat" (docs/guide/formats.md "Flattened events")'
)

# Markers returned by _classify_other (compared by identity).
_REROUTE = "reroute"
_TOMBSTONE = "tombstone"


@dataclass(slots=True)
class _ValuePlan:
    """How the values of one Connect schema (or of schemaless records) are decoded."""

    kind: str  # "envelope", "ignore" or "bad"
    reason: str = ""
    reader: BulkReader | None = None
    after: list[tuple[str, TypePlan]] | None = None  # None: schemaless (inferred)
    #: Column -> the default the Connect schema declares (engine.decode.row_schemas).
    defaults: dict = field(default_factory=dict)


def _tx_normalize(v: Any) -> Any:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise FieldError("transaction: expected an object")
    tx_id = v.get("id")
    if tx_id is not None and not isinstance(tx_id, str):
        raise FieldError("transaction.id: expected a string")
    return {"id": tx_id}


def _op_normalize(v: Any) -> Any:
    if v is not None and not isinstance(v, str):
        raise FieldError(f"op: expected a string, got {type(v).__name__}")
    return v


def _classify_value_schema(schema: dict) -> tuple[str, str]:
    """Decide from the Connect value schema what its records are."""
    if schema.get("type") != "struct":
        return "bad", f"value schema is {schema.get('type')!r}, not a Debezium envelope"
    fields = {f.get("field") for f in schema.get("fields") or [] if isinstance(f, dict)}
    name = schema.get("name") or ""
    if "op" in fields:
        return "envelope", ""
    if name in _TRANSACTION_SCHEMAS or {"status", "id"} <= fields:
        return "ignore", "transaction metadata"
    if name.endswith("SchemaChangeValue") or "ddl" in fields or "tableChanges" in fields:
        return "ignore", "schema change"
    if name in _HEARTBEAT_SCHEMAS or fields == {"ts_ms"}:
        return "ignore", "heartbeat"
    if any(isinstance(f, str) and f.startswith("__") for f in fields):
        return "bad", _FLATTENED_REASON
    return "bad", f"value schema {name!r} is not a Debezium envelope (no op field)"


def _source_members(source_schema: Any) -> list[tuple[str, pa.DataType]]:
    """``source`` members to read, typed as the Connect schema declares them."""
    declared: dict[Any, Any] = {}
    if isinstance(source_schema, dict) and source_schema.get("type") == "struct":
        for f in source_schema.get("fields") or []:
            if isinstance(f, dict):
                declared[f.get("field")] = f.get("type")
    members: list[tuple[str, pa.DataType]] = []
    for member in _SOURCE_MEMBERS:
        ctype = declared.get(member)
        if ctype in _CONNECT_INTS:
            members.append((member, pa.int64()))
        elif ctype == "string":
            members.append((member, pa.string()))
        elif ctype == "boolean":
            members.append((member, pa.bool_()))
        elif ctype is None and member in _SOURCE_DEFAULTS:
            # Not declared (hand-edited documentation examples): read it with its usual
            # type anyway; a real JsonConverter record simply never has it.
            members.append((member, _SOURCE_DEFAULTS[member]))
    return members


def _envelope_plan(schema: dict) -> _ValuePlan:
    fields = {
        f["field"]: f for f in schema.get("fields") or [] if isinstance(f, dict) and "field" in f
    }
    try:
        after = connect.struct_fields(fields["after"], "after") if "after" in fields else []
    except SchemaError as exc:
        return _ValuePlan("bad", f"unsupported value schema: {exc}")
    if any(name in RESERVED for name, _ in after):
        return _ValuePlan("bad", "a row column collides with a control column name")
    source_members = _source_members(fields.get("source"))

    # Empty structs are left out: the Arrow reader cannot build a struct without members.
    top: list[tuple[str, pa.DataType]] = [("op", pa.string()), ("transaction", _TX_TYPE)]
    if source_members:
        top.append(("source", pa.struct(source_members)))
    if after:
        top.append(("after", pa.struct([(n, p.parse_type) for n, p in after])))
    base = pa.schema(top)
    variants: list[pa.Schema | None] = [base]
    probes: list[tuple[pa.Schema, pa.Schema]] = []
    if any(p.has_decimal for _, p in after):
        # decimal.format=NUMERIC: the same schema, decimals as JSON numbers.
        at = base.get_field_index("after")
        numeric = pa.struct([(n, p.numeric_decimal_variant()) for n, p in after])
        probe = pa.struct([(n, p.numeric_decimal_probe()) for n, p in after])
        variants.append(base.set(at, pa.field("after", numeric)))
        probes.append((variants[-1], pa.schema([pa.field("after", probe)])))

    source_norm = struct_normalizer([(m, connect.normalizer_for(t)) for m, t in source_members])
    after_norm = struct_normalizer([(n, p.normalize) for n, p in after])

    def build(objs: list[Any]) -> pa.Table:
        rows = []
        for o in objs:
            row = {
                "op": _op_normalize(o.get("op")),
                "transaction": _tx_normalize(o.get("transaction")),
            }
            if source_members:
                row["source"] = source_norm(o.get("source"), "source")
            if after:
                row["after"] = after_norm(o.get("after"), "after")
            rows.append(row)
        return pa.Table.from_pylist(rows, schema=base)

    reader = BulkReader(
        variants,
        infer=False,
        py_build=build,
        arrow_readable=all(p.arrow_readable for _, p in after),
        exact_numbers=True,
        probes=probes,
    )
    defaults = connect_defaults(fields.get("after"), after, plain=False)
    return _ValuePlan("envelope", reader=reader, after=after, defaults=defaults)


def _schemaless_value_build(objs: list[Any]) -> pa.Table:
    """Per-record twin of the inferring bulk read (declared envelope parts are checked)."""
    source_norm = struct_normalizer(
        [(f.name, connect.normalizer_for(f.type)) for f in _SCHEMALESS_SOURCE]
    )
    ops, sources, snapshots, txs, afters = [], [], [], [], []
    for o in objs:
        ops.append(_op_normalize(o.get("op")))
        src = o.get("source")
        sources.append(source_norm(src, "source"))
        snapshots.append(src.get("snapshot") if isinstance(src, dict) else None)
        txs.append(_tx_normalize(o.get("transaction")))
        after = o.get("after")
        if after is not None and not isinstance(after, dict):
            raise FieldError("after: expected an object")
        afters.append(after)
    declared = pa.array(sources, _SCHEMALESS_SOURCE)
    source = pa.StructArray.from_arrays(
        [*declared.flatten(), connect.infer_array(snapshots)],
        names=[*(f.name for f in _SCHEMALESS_SOURCE), "snapshot"],
        mask=declared.is_null(),
    )
    return pa.table(
        {
            "op": pa.array(ops, pa.string()),
            "source": source,
            "transaction": pa.array(txs, _TX_TYPE),
            "after": connect.infer_array(afters),
        }
    )


def _value_plan(fp: str | None, schema: dict | None, topic: str) -> _ValuePlan:
    if fp is None or schema is None:
        # Full inference: measured faster than an explicit partial schema plus inference,
        # and the envelope members are checked defensively afterwards anyway.
        reader = learned.schemaless_reader(topic, _schemaless_value_build)
        return _ValuePlan("envelope", reader=reader, after=None)

    def build() -> _ValuePlan:
        problem = connect.schema_problem(schema)
        if problem:
            return _ValuePlan("bad", f"malformed Connect value schema: {problem}")
        kind, reason = _classify_value_schema(schema)
        if kind == "envelope":
            return _envelope_plan(schema)
        if kind == "ignore":
            # Still parsed (with nothing to extract) so that broken JSON is reported.
            reader = BulkReader(
                [pa.schema([])],
                infer=False,
                py_build=lambda objs: pa.table({"_": pa.nulls(len(objs))}),
            )
            return _ValuePlan("ignore", reason, reader=reader)
        return _ValuePlan("bad", reason)

    return cached_plan("value", fp, build)


def _classify_other(payload: bytes, topic: str) -> str | None:
    """For a record without ``op``: None if it is a known non-row record, else the reason.

    Returns :data:`_REROUTE` for a JsonConverter wrapper that reached a schemaless group
    and :data:`_TOMBSTONE` for the JSON literal ``null``.
    """
    try:
        obj = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        return f"invalid JSON: {exc}"
    except RecursionError:  # members a Connect schema skipped can nest without bound
        return "not a Debezium envelope (nested too deep to read)"
    if obj is None:
        return _TOMBSTONE
    if not isinstance(obj, dict):
        return "not a JSON object"
    if "payload" in obj and set(obj) <= {"schema", "payload"}:
        return _REROUTE
    if obj.get("status") in ("BEGIN", "END") and "id" in obj:
        return None  # transaction metadata
    if "ddl" in obj or "tableChanges" in obj or ("databaseName" in obj and "source" in obj):
        return None  # MySQL schema change
    if topic.startswith("__debezium-heartbeat") or set(obj) == {"ts_ms"}:
        return None  # heartbeat
    hint = avro_rendering_hint(obj)
    if hint:
        return hint
    if any(k.startswith("__") for k in obj):
        return _FLATTENED_REASON
    if "op" in obj:
        return "envelope with a null op"
    return "not a Debezium envelope (no op member)"


def _avro_rendering_masks(t: pa.Table) -> list[tuple[pa.Array, str]]:
    """Rows of a schemaless piece that look like Avro's JSON rendering of an envelope.

    Union values are wrapped in a one-member object named after the branch type
    (``{"long": 5}``) and records after their full name (``{"db.tbl.Value": {...}}``).
    Inference happily turns these into structs, so look for such one-member structs.
    """
    masks: list[tuple[pa.Array, str]] = []

    def suspect(typ: pa.DataType, record: bool) -> bool:
        if not pa.types.is_struct(typ) or typ.num_fields != 1:
            return False
        branch = typ.field(0)
        named_record = record and "." in branch.name and pa.types.is_struct(branch.type)
        return branch.name in AVRO_BRANCHES or named_record

    # The types decide; a column is only read (and its chunks joined) when its type is
    # such a one-member struct: the row images stay untouched on the normal path.
    for name, record in (("op", False), ("ts_ms", False), ("before", True), ("after", True)):
        if name in t.column_names and suspect(t.schema.field(name).type, record):
            col = t.column(name).combine_chunks()
            masks.append((pc.is_valid(col.flatten()[0]), AVRO_REASON))
    if "source" in t.column_names and pa.types.is_struct(t.schema.field("source").type):
        members = t.schema.field("source").type
        if any(suspect(members.field(k).type, False) for k in range(members.num_fields)):
            for child in t.column("source").combine_chunks().flatten():
                if suspect(child.type, False):
                    masks.append((pc.is_valid(child.flatten()[0]), AVRO_REASON))
    return masks


def _classify_ops(piece: Piece, idx: pa.Array, group: Group, ctx: Ctx) -> tuple[pa.Array, pa.Array]:
    """The ``op`` column as strings and the mask of row events; other records are settled.

    Message events are counted as ignored, unknown ops reported, and records without an
    op classified one by one (non-row records, tombstones as text, hidden wrappers).
    """
    t = piece.table
    n = t.num_rows
    raw_op = column(t, "op")
    if raw_op is None or pa.types.is_null(raw_op.type):
        raw_op = pa.nulls(n, pa.string())
    if pa.types.is_string(raw_op.type):
        op = raw_op
    else:
        # Schemaless input can hold anything under "op"; non-strings are not envelopes.
        flag(ctx.bad, idx, pc.is_valid(raw_op), f"op is {raw_op.type}, not a string")
        op = pa.nulls(n, pa.string())
    is_row = pc.fill_null(pc.is_in(op, value_set=_ROW_OPS), False)
    is_message = pc.fill_null(pc.equal(op, str_scalar("m")), False)
    ctx.ignored += pc.sum(is_message).as_py() or 0

    op_null = pc.is_null(raw_op)
    if pc.any(op_null).as_py():
        payloads = group.payload_list()
        for k in pc.indices_nonzero(op_null).to_pylist():
            i = idx[k].as_py()
            reason = _classify_other(payloads[piece.positions[k]], ctx.topic)
            if reason is None:
                ctx.ignored += 1
            elif reason is _TOMBSTONE:
                ctx.tombstones.append(i)
            elif reason is _REROUTE:
                if ctx.rerouting:
                    ctx.bad[i] = "JsonConverter wrapper that could not be unwrapped"
                else:
                    ctx.reroute.append(i)
            else:
                ctx.bad[i] = reason
    unknown = pc.and_(pc.invert(pc.or_(is_row, is_message)), pc.is_valid(op))
    for k in pc.indices_nonzero(unknown).to_pylist():
        ctx.bad[idx[k].as_py()] = f"unknown op {op[k].as_py()!r}"
    return op, is_row


def _transaction_ids(t: pa.Table, n: int, checks: list[tuple[pa.Array, str]]) -> pa.Array:
    tx = column(t, "transaction")
    if tx is None or not pa.types.is_struct(tx.type) or tx.type.get_field_index("id") < 0:
        return pa.nulls(n, pa.string())
    raw_id = pc.struct_field(tx, "id")
    if pa.types.is_string(raw_id.type):
        return raw_id
    if not pa.types.is_null(raw_id.type):
        checks.append((pc.is_valid(raw_id), f"transaction.id is {raw_id.type}, not a string"))
    return pa.nulls(n, pa.string())


def _envelope_piece(
    piece: Piece, idx: pa.Array, group: Group, plan: _ValuePlan, ctx: Ctx
) -> pa.Table | None:
    """Control and row columns of the row events of one parsed piece."""
    t = piece.table
    n = t.num_rows
    op, is_row = _classify_ops(piece, idx, group, ctx)
    if not pc.any(is_row).as_py():
        return None

    checks: list[tuple[pa.Array, str]] = []  # (rows, reason); the first match wins
    source = column(t, "source")
    src = source_columns(source, n, ctx.hint)
    ctx.snapshot_ended = ctx.snapshot_ended or ends_snapshot(source)
    tx_id = _transaction_ids(t, n, checks)

    rows: dict[str, pa.Array] = {}
    after = column(t, "after")
    if after is not None and not pa.types.is_struct(after.type):
        after = None  # all null (or not an object: flagged below as missing)
    if plan.after is not None:
        if after is not None:
            children = after.flatten()  # applies the struct's nulls to its members
        else:
            children = [pa.nulls(n, p.parse_type) for _, p in plan.after]
        for (name, tplan), child in zip(plan.after, children, strict=True):
            if tplan.convert is None:
                rows[name] = child
                continue
            res = tplan.convert(child, f"after.{name}")
            rows[name] = res.array
            if res.bad is not None:
                checks.append((res.bad, f"undecodable field: {res.reason}"))
    else:
        checks.extend(_avro_rendering_masks(t))
        if after is not None:
            names = [f.name for f in after.type]
            if any(name in RESERVED for name in names):
                flag(ctx.bad, idx, is_row, "a row column collides with a control column name")
                return None
            rows = dict(zip(names, after.flatten(), strict=True))
    _apply_types(rows, plan, piece, group, ctx, checks)

    keep = kept_rows(op, is_row, after, checks, src.bad, idx, ctx)

    if ctx.source_table is None and pc.any(keep).as_py():
        first = pc.index(keep, pa.scalar(True, pa.bool_())).as_py()
        ctx.source_table = _source_table(group, piece.positions[first])
    if plan.after is not None:
        ctx.row_schemas.add(id(plan), plan.after, plan.defaults, idx.filter(keep), ctx.column_types)
    return row_piece(idx, op, src, tx_id, rows, keep)


def row_piece(
    idx: pa.Array,
    op: pa.Array,
    src: SourceColumns,
    tx_id: pa.Array,
    rows: dict[str, pa.Array],
    keep: pa.Array,
) -> pa.Table:
    """The kept row events of a piece: their input positions (``IDX``), the control
    columns, then the row columns."""
    columns = {
        IDX: idx,
        OP: op,
        POS: src.pos,
        POS_SUB: src.pos_sub,
        SOURCE_TS: src.source_ts_ms,
        TX_ID: tx_id,
        GTID: src.gtid,
        **rows,
    }
    table = pa.table(columns)
    return table if pc.all(keep).as_py() else table.filter(keep)


def kept_rows(
    op: pa.Array,
    is_row: pa.Array,
    after: pa.Array | None,
    checks: list[tuple[pa.Array, str]],
    source_checks: list[tuple[pa.Array, str]],
    idx: pa.Array,
    ctx: Ctx,
) -> pa.Array:
    """The row events of a piece that pass every check, in this order: ``checks`` (masks
    of the rows that fail, with the reason: the row columns'), a create, update or read
    without an ``after`` image, ``source_checks`` (the ``source`` block's). A failing row
    event is bad (``ctx.bad``) with the reason of the first check it fails."""
    n = len(op)
    after_valid = after.is_valid() if after is not None else pa.array([False] * n, pa.bool_())
    needs_after = pc.fill_null(pc.is_in(op, value_set=_NEEDS_AFTER), False)
    missing = (pc.and_(needs_after, pc.invert(after_valid)), "row event without after")
    bad_any = pa.array([False] * n, pa.bool_())
    for mask, reason in [*checks, missing, *source_checks]:
        hit = pc.and_(pc.and_(pc.fill_null(mask, False), is_row), pc.invert(bad_any))
        if pc.any(hit).as_py():
            flag(ctx.bad, idx, hit, reason)
            bad_any = pc.or_(bad_any, hit)
    return pc.and_(is_row, pc.invert(bad_any))


def _apply_types(
    rows: dict[str, pa.Array],
    plan: _ValuePlan,
    piece: Piece,
    group: Group,
    ctx: Ctx,
    checks: list[tuple[pa.Array, str]],
) -> None:
    """Convert row columns to their hinted types (config hints, then the catalog's).

    The catalog only types schemaless messages: a Connect schema already says what each
    value is. Values that do not fit are added to ``checks`` (their messages go bad).
    """
    schemaless = plan.after is None
    types = dict(ctx.column_types)
    if schemaless and ctx.catalog is not None and rows:
        source = _source_table(group, piece.positions[0])
        found, problem, untyped = ctx.catalog.types_for(source, ctx.topic, list(rows))
        types = {**found, **types}
        untyped = [c for c in untyped if c not in types]
        if problem and untyped:
            # Messages with a value in a column the catalog could not type are bad; the
            # others apply without the column (its type is still unknown).
            valid = [pc.is_valid(rows.pop(c)) for c in untyped]
            mask = valid[0]
            for v in valid[1:]:
                mask = pc.or_(mask, v)
            checks.append((mask, problem))
    apply_hints(rows, types, ctx, checks, schemaless=schemaless)


def apply_hints(
    rows: dict[str, pa.Array],
    types: dict[str, ColumnType],
    ctx: Ctx,
    checks: list[tuple[pa.Array, str]],
    *,
    schemaless: bool,
) -> None:
    """Convert the row columns named in ``types`` to their types (JSON and Avro paths);
    values that do not fit are added to ``checks`` (their messages go bad)."""
    for name, ct in types.items():
        if name not in rows:
            continue
        res = hints.apply_hint(rows[name], ct, f"after.{name}", schemaless=schemaless)
        rows[name] = res.array
        ctx.applied_types[name] = ct
        if res.bad is not None:
            checks.append((res.bad, f"undecodable field: {res.reason}"))


_SOURCE_TABLE_MEMBERS = ("connector", "db", "schema", "table")


def _source_table(group: Group, position: int) -> dict[str, str] | None:
    """``connector``, ``db``, ``schema`` and ``table`` of one record's ``source`` block.

    One record per decode call is parsed again (the bulk read skips these members), so
    the cost does not grow with the batch.
    """
    if group.payloads is not None:
        payload = group.payloads[position]
    elif group.source is not None:
        messages, cut = group.source
        payload = messages[position][cut:-1] if cut else messages[position]
    else:
        return None
    try:
        source = json.loads(payload).get("source")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(source, dict):
        return None
    found = {m: source[m] for m in _SOURCE_TABLE_MEMBERS if isinstance(source.get(m), str)}
    return found if "table" in found else None


def decode_values(split: Split, ctx: Ctx) -> None:
    """Decode every value group of a split into ``ctx`` (tables, bad, ignored)."""
    ctx.bad.update(split.bad)
    ctx.tombstones.extend(split.nulls)
    for fp, group in split.groups.items():
        ctx.groups += 1
        plan = _value_plan(fp, group.schema, ctx.topic)
        if fp is not None and fp not in ctx.fingerprints:
            ctx.fingerprints.append(fp)
        if plan.kind == "bad":
            for i in group.indices:
                ctx.bad[i] = plan.reason
            continue
        if plan.reader is None:
            raise RuntimeError(f"value plan of kind {plan.kind!r} has no reader")
        refuse = _refuser(group, ctx)
        pieces, bad, nulls = plan.reader.decode(group, refuse)
        if plan.reader.infer and plan.after is None:
            learned.remember(ctx.topic, plan.reader)
        for p, reason in bad.items():
            ctx.bad[group.indices[p]] = reason
        ctx.tombstones.extend(group.indices[p] for p in nulls)
        for piece in merge_pieces(pieces):
            if refuse is not None and type_depth(piece.table.schema) > (ctx.max_depth or 0):
                piece = _without(piece, refuse(list(piece.positions)))
                if not len(piece.positions):
                    continue
            if plan.kind == "ignore":
                # Counted by record, not by table rows: pieces read with the empty parse
                # schema have no columns, and pyarrow concatenates such tables to 0 rows.
                ctx.ignored += len(piece.positions)
                continue
            out = _envelope_piece(piece, index_array(group, piece.positions), group, plan, ctx)
            if out is not None and out.num_rows:
                ctx.tables.append(out)


def _refuser(group: Group, ctx: Ctx) -> Callable[[list[int]], set[int]] | None:
    """The nesting check of a group's records by position (None without a limit): the
    positions whose record nests deeper than the limit, each made bad with its depth."""
    limit = ctx.max_depth
    if limit is None:
        return None

    def refuse(positions: list[int]) -> set[int]:
        records = [ctx.values[group.indices[p]] for p in positions]
        deep = too_deep_records(records, limit)
        for j, depth in deep.items():
            ctx.bad[group.indices[positions[j]]] = nesting_reason("value", depth, limit)
        return {positions[j] for j in deep}

    return refuse


def _without(piece: Piece, refused: set[int]) -> Piece:
    """The piece without the rows of the refused positions."""
    if not refused:
        return piece
    keep = [p not in refused for p in piece.positions]
    return Piece(
        [p for p in piece.positions if p not in refused],
        piece.table.filter(pa.array(keep, pa.bool_())),
    )


def tombstone_rows(indices: list[int]) -> pa.Table:
    k = len(indices)
    return pa.table(
        {
            IDX: pa.array(indices, pa.int64()),
            OP: pa.array([OP_TOMBSTONE] * k, pa.string()),
            POS: pa.nulls(k, pa.int64()),
            POS_SUB: pa.nulls(k, pa.int64()),
            SOURCE_TS: pa.nulls(k, pa.int64()),
            TX_ID: pa.nulls(k, pa.string()),
            GTID: pa.nulls(k, pa.string()),
        }
    )
