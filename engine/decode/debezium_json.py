"""Bulk decoder of Debezium change events serialized with Kafka Connect's JsonConverter.

:func:`decode_debezium_json` turns the records of one topic from one micro-batch into a
change batch (see :mod:`engine.model`): one row per row-level event with the control
columns followed by the typed ``after`` image.

How it stays fast: records never become one Python dict each. The JsonConverter wrapper
is stripped with byte operations (:mod:`engine.decode._split`), the payloads of one
Connect schema are joined and parsed by one ``pyarrow.json.read_json`` call with an
explicit schema (:mod:`engine.decode._reader`), and logical types, positions and record
keys are computed with vectorised Arrow kernels (:mod:`engine.decode._connect`,
:mod:`engine.decode._positions`). Python per-record work only happens for records that
need it (odd layouts, invalid JSON, non-row records on a table topic).

Robustness: a record that is not valid JSON, not a Debezium envelope, or holds a value
that does not fit its schema is returned in :attr:`DecodeResult.bad` with its Kafka
coordinates; it never aborts or silently shrinks the batch. Valid records that are not row
changes (logical decoding messages ``op=m``, heartbeats, transaction BEGIN/END, MySQL
schema changes) are counted in :attr:`DecodeResult.ignored`. Every input record ends up
in exactly one of: a batch row, ``bad``, ``ignored``.

Edge-case decisions:

* Tombstones (null value, the legacy ``{"schema":null,"payload":null}``, or the JSON text
  ``null``) become rows with ``_cdc_op = "x"``, the record's key, null positions and null
  row columns.
* Truncates (``op = "t"``) become rows with a null ``_cdc_key`` and null row columns.
* Deletes carry the key fields of the *record key* in the row columns (other columns
  null): ``before`` of a REPLICA IDENTITY DEFAULT delete holds placeholders, never data.
* ``_cdc_key`` is built from the JSON values of the record key as they are on the wire
  (integers in decimal, strings as-is, booleans ``true``/``false``), so it is identical
  with and without ``schemas.enable`` and never depends on logical-type rendering.
  Composite keys use Hudi's complex-key layout ``f1:v1,f2:v2`` with ``__null__`` and
  ``__empty__`` for null and empty parts. A scalar (non-object) key is its own text.
* ``_cdc_source_ts_ms`` is ``source.ts_ms``; 0.x records without it fall back to
  ``ts_usec`` / ``ts_sec``.
* Avro-JSON renderings (``{"string": "false"}`` union wrappers) and flattened rows written
  by the ``ExtractNewRecordState`` SMT are *bad*, not ignored: they carry row data but
  no trustworthy envelope (op, position), so dropping them silently would lose changes.
* Without a schema nothing is guessed: types are what JSON says (int64, float64, bool,
  string, nested); Arrow's habit of turning ISO-looking strings into timestamps is undone.
  If records of one batch disagree on a column's JSON type, that column becomes text
  (noted in :attr:`DecodeResult.notes`) rather than losing records.
* Type mapping with a schema: see :mod:`engine.decode._connect`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine.decode import _connect as connect
from engine.decode._connect import FieldError, SchemaError, TypePlan
from engine.decode._positions import MYSQL_HINTS, POSTGRES_HINTS, source_columns
from engine.decode._reader import (
    AVRO_BRANCHES,
    AVRO_REASON,
    BulkReader,
    Piece,
    avro_rendering_hint,
    envelope_retry_schema,
    merge_pieces,
)
from engine.decode._split import Group, Split, split_records, split_slow
from engine.model import (
    CONTROL_COLUMNS,
    KEY,
    OFFSET,
    OP,
    OP_TOMBSTONE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
    TX_ID,
    GTID,
)

__all__ = ["BadMessage", "DecodeResult", "decode_debezium_json"]

# Internal column names (never part of the result).
_IDX = "__cdc_decode_index__"
_KEY_TEXT = "__cdc_decode_key__"
_KEY_SET = "__cdc_decode_key_set__"
_RESERVED = frozenset(CONTROL_COLUMNS) | {_IDX, _KEY_TEXT, _KEY_SET}

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
    "op and position cannot be trusted; consume the unflattened topic"
)

# Markers returned by _classify_other (compared by identity).
_REROUTE = "reroute"
_TOMBSTONE = "tombstone"

_PLAN_CACHE: dict[tuple[str, str], Any] = {}
_PLAN_CACHE_MAX = 512


def _str(value: str) -> pa.Scalar:
    # Typed scalars: an untyped Python value makes pyarrow attempt an import on each call.
    return pa.scalar(value, pa.string())


# --------------------------------------------------------------------------------------
# Public result types
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BadMessage:
    """A record that could not be decoded; it must be quarantined, never dropped.

    Attributes:
        topic: Kafka topic.
        partition: Kafka partition.
        offset: Kafka offset.
        key: Raw key bytes (None for a null key).
        value: Raw value bytes (None for a null value).
        reason: What is wrong with the record.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


@dataclass(slots=True)
class DecodeResult:
    """Outcome of decoding the records of one topic from one micro-batch.

    Attributes:
        batch: One row per row-level event (and tombstone) in consumption order: the
            control columns of :data:`engine.model.CONTROL_COLUMNS`, then the row
            columns. None if there is no such event.
        key_fields: Record-key field names in key order (union over the batch rows).
        bad: Undecodable records, in consumption order.
        ignored: Valid non-row records skipped (``op=m``, heartbeats, transaction
            BEGIN/END, MySQL schema changes).
        value_schema_fingerprints: Distinct Connect value schemas seen (short hashes), in
            order of first appearance; more than one means the table schema changed.
        key_field_sets: Distinct record-key field lists of the batch rows; more than one
            means the key changed (a table redefinition).
        notes: Non-fatal remarks (e.g. a schemaless column whose JSON type varies).
    """

    batch: pa.Table | None
    key_fields: list[str]
    bad: list[BadMessage]
    ignored: int
    value_schema_fingerprints: list[str] = field(default_factory=list)
    key_field_sets: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------
# Plans (cached per Connect schema)
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _ValuePlan:
    """How the values of one Connect schema (or of schemaless records) are decoded."""

    kind: str  # "envelope", "ignore" or "bad"
    reason: str = ""
    reader: BulkReader | None = None
    after: list[tuple[str, TypePlan]] | None = None  # None: schemaless (inferred)


@dataclass(slots=True)
class _KeyPlan:
    """How the keys of one Connect key schema (or schemaless keys) are decoded."""

    kind: str  # "struct", "schemaless" or "bad"
    reason: str = ""
    reader: BulkReader | None = None
    fields: list[tuple[str, TypePlan]] | None = None


def _cached(kind: str, fp: str, build: Callable[[], Any]) -> Any:
    plan = _PLAN_CACHE.get((kind, fp))
    if plan is None:
        plan = build()
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.pop(next(iter(_PLAN_CACHE)))
        _PLAN_CACHE[(kind, fp)] = plan
    return plan


def _struct_normalizer(members: list[tuple[str, Any]]) -> Callable[[Any, str], Any]:
    def norm(v: Any, path: str) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise FieldError(f"{path}: expected an object, got {type(v).__name__}")
        return {name: f(v.get(name), f"{path}.{name}") for name, f in members}

    return norm


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
    if any(name in _RESERVED for name, _ in after):
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

    source_norm = _struct_normalizer([(m, connect.normalizer_for(t)) for m, t in source_members])
    after_norm = _struct_normalizer([(n, p.normalize) for n, p in after])

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
    return _ValuePlan("envelope", reader=reader, after=after)


def _schemaless_value_build(objs: list[Any]) -> pa.Table:
    """Per-record twin of the inferring bulk read (declared envelope parts are checked)."""
    source_norm = _struct_normalizer(
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


def _infer_columns(objs: list[Any]) -> pa.Table:
    """Per-record twin of the inferring bulk read for schemaless keys."""
    names: dict[str, None] = {}
    for o in objs:
        names.update(dict.fromkeys(o))
    return pa.table({k: connect.infer_array([o.get(k) for o in objs]) for k in names})


def _value_plan(fp: str | None, schema: dict | None) -> _ValuePlan:
    if fp is None or schema is None:
        # Full inference: measured faster than an explicit partial schema plus inference,
        # and the envelope members are checked defensively afterwards anyway.
        reader = BulkReader(
            [None],
            infer=True,
            py_build=_schemaless_value_build,
            retry_schema=envelope_retry_schema,
        )
        return _ValuePlan("envelope", reader=reader, after=None)

    def build() -> _ValuePlan:
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

    return _cached("value", fp, build)


def _key_plan(fp: str | None, schema: dict | None) -> _KeyPlan:
    if fp is None or schema is None:
        reader = BulkReader([pa.schema([])], infer=True, py_build=_infer_columns)
        return _KeyPlan("schemaless", reader=reader)

    def build() -> _KeyPlan:
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
        norm = _struct_normalizer([(n, p.normalize) for n, p in fields])

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

    return _cached("key", fp, build)


# --------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Ctx:
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


def _index_array(group: Group, positions: list[int] | range) -> pa.Array:
    """Original record indices of some positions of a group, as int64."""
    indices = group.indices
    if isinstance(indices, range) and isinstance(positions, range) and indices.step == 1:
        # Polars builds a large range natively (pa.array(range) iterates in Python).
        start = indices.start + positions.start
        stop = indices.start + positions.stop
        return pl.int_range(start, stop, eager=True, dtype=pl.Int64).to_arrow()
    return pa.array([indices[p] for p in positions], pa.int64())


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _flag(bad: dict[int, str], idx: pa.Array, mask: pa.Array, reason: str) -> None:
    """Record ``reason`` for the masked rows (a reason already recorded is kept)."""
    for k in pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist():
        bad.setdefault(idx[k].as_py(), reason)


def _classify_other(payload: bytes, topic: str) -> str | None:
    """For a record without ``op``: None if it is a known non-row record, else the reason.

    Returns :data:`_REROUTE` for a JsonConverter wrapper that reached a schemaless group
    and :data:`_TOMBSTONE` for the JSON literal ``null``.
    """
    try:
        obj = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        return f"invalid JSON: {exc}"
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

    def wrapped(arr: pa.Array, record: bool) -> None:
        if not pa.types.is_struct(arr.type) or arr.type.num_fields != 1:
            return
        branch = arr.type.field(0)
        named_record = record and "." in branch.name and pa.types.is_struct(branch.type)
        if branch.name in AVRO_BRANCHES or named_record:
            masks.append((pc.is_valid(arr.flatten()[0]), AVRO_REASON))

    for name, record in (("op", False), ("ts_ms", False), ("before", True), ("after", True)):
        col = _column(t, name)
        if col is not None:
            wrapped(col, record)
    source = _column(t, "source")
    if source is not None and pa.types.is_struct(source.type):
        for child in source.flatten():
            wrapped(child, record=False)
    return masks


def _classify_ops(
    piece: Piece, idx: pa.Array, group: Group, ctx: _Ctx
) -> tuple[pa.Array, pa.Array]:
    """The ``op`` column as strings and the mask of row events; other records are settled.

    Message events are counted as ignored, unknown ops reported, and records without an
    op classified one by one (non-row records, tombstones as text, hidden wrappers).
    """
    t = piece.table
    n = t.num_rows
    raw_op = _column(t, "op")
    if raw_op is None or pa.types.is_null(raw_op.type):
        raw_op = pa.nulls(n, pa.string())
    if pa.types.is_string(raw_op.type):
        op = raw_op
    else:
        # Schemaless input can hold anything under "op"; non-strings are not envelopes.
        _flag(ctx.bad, idx, pc.is_valid(raw_op), f"op is {raw_op.type}, not a string")
        op = pa.nulls(n, pa.string())
    is_row = pc.fill_null(pc.is_in(op, value_set=_ROW_OPS), False)
    is_message = pc.fill_null(pc.equal(op, _str("m")), False)
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
    tx = _column(t, "transaction")
    if tx is None or not pa.types.is_struct(tx.type) or tx.type.get_field_index("id") < 0:
        return pa.nulls(n, pa.string())
    raw_id = pc.struct_field(tx, "id")
    if pa.types.is_string(raw_id.type):
        return raw_id
    if not pa.types.is_null(raw_id.type):
        checks.append((pc.is_valid(raw_id), f"transaction.id is {raw_id.type}, not a string"))
    return pa.nulls(n, pa.string())


def _envelope_piece(
    piece: Piece, idx: pa.Array, group: Group, plan: _ValuePlan, ctx: _Ctx
) -> pa.Table | None:
    """Control and row columns of the row events of one parsed piece."""
    t = piece.table
    n = t.num_rows
    op, is_row = _classify_ops(piece, idx, group, ctx)
    if not pc.any(is_row).as_py():
        return None

    checks: list[tuple[pa.Array, str]] = []  # (rows, reason); the first match wins
    src = source_columns(_column(t, "source"), n, ctx.hint)
    tx_id = _transaction_ids(t, n, checks)

    rows: dict[str, pa.Array] = {}
    after = _column(t, "after")
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
            if any(name in _RESERVED for name in names):
                _flag(ctx.bad, idx, is_row, "a row column collides with a control column name")
                return None
            rows = dict(zip(names, after.flatten(), strict=True))

    after_valid = after.is_valid() if after is not None else pa.array([False] * n, pa.bool_())
    needs_after = pc.fill_null(pc.is_in(op, value_set=_NEEDS_AFTER), False)
    checks.append((pc.and_(needs_after, pc.invert(after_valid)), "row event without after"))
    checks.extend(src.bad)

    bad_any = pa.array([False] * n, pa.bool_())
    for mask, reason in checks:
        hit = pc.and_(pc.and_(pc.fill_null(mask, False), is_row), pc.invert(bad_any))
        if pc.any(hit).as_py():
            _flag(ctx.bad, idx, hit, reason)
            bad_any = pc.or_(bad_any, hit)
    keep = pc.and_(is_row, pc.invert(bad_any))

    columns = {
        _IDX: idx,
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


def _decode_values(split: Split, ctx: _Ctx) -> None:
    """Decode every value group of a split into ``ctx`` (tables, bad, ignored)."""
    ctx.bad.update(split.bad)
    ctx.tombstones.extend(split.nulls)
    for fp, group in split.groups.items():
        ctx.groups += 1
        plan = _value_plan(fp, group.schema)
        if fp is not None and fp not in ctx.fingerprints:
            ctx.fingerprints.append(fp)
        if plan.kind == "bad":
            for i in group.indices:
                ctx.bad[i] = plan.reason
            continue
        assert plan.reader is not None
        pieces, bad, nulls = plan.reader.decode(group)
        for p, reason in bad.items():
            ctx.bad[group.indices[p]] = reason
        ctx.tombstones.extend(group.indices[p] for p in nulls)
        for piece in merge_pieces(pieces):
            if plan.kind == "ignore":
                ctx.ignored += piece.table.num_rows
                continue
            out = _envelope_piece(piece, _index_array(group, piece.positions), group, plan, ctx)
            if out is not None and out.num_rows:
                ctx.tables.append(out)


def _tombstones(indices: list[int]) -> pa.Table:
    k = len(indices)
    return pa.table(
        {
            _IDX: pa.array(indices, pa.int64()),
            OP: pa.array([OP_TOMBSTONE] * k, pa.string()),
            POS: pa.nulls(k, pa.int64()),
            POS_SUB: pa.nulls(k, pa.int64()),
            SOURCE_TS: pa.nulls(k, pa.int64()),
            TX_ID: pa.nulls(k, pa.string()),
            GTID: pa.nulls(k, pa.string()),
        }
    )


def _concat(tables: list[pa.Table], notes: list[str]) -> pa.Table:
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
        result = pa.concat_tables(_as_text(tables, conflicting), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # The types unify but some values do not convert (e.g. an integer beyond 2**53
        # promoted to double): keep every column whose type varies as text.
        conflicting = varying
        result = pa.concat_tables(_as_text(tables, conflicting), promote_options="permissive")
    for name in sorted(conflicting):
        notes.append(f"column {name!r} has different JSON types in the batch; kept as text")
    return result


def _as_text(tables: list[pa.Table], names: set[str]) -> list[pa.Table]:
    """The tables with the named columns replaced by their JSON text (strings as-is)."""
    fixed = []
    for t in tables:
        for name in names & set(t.column_names):
            i = t.schema.get_field_index(name)
            text = pa.array([connect.json_text(v) for v in t.column(i).to_pylist()], pa.string())
            t = t.set_column(i, pa.field(name, pa.string()), text)
        fixed.append(t)
    return fixed


# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Keys:
    """Decoded record keys, aligned to record indices through the ``_IDX`` column."""

    table: pa.Table | None  # _IDX, _KEY_TEXT, _KEY_SET and the typed key fields
    identity: bool  # the table rows are exactly records 0..n-1, in order
    field_sets: list[tuple[str, ...]]  # indexed by _KEY_SET
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
        text = pc.if_else(pc.equal(text, _str("")), _str("__empty__"), text)
        parts.append(_str(("," if i else "") + name + ":"))
        parts.append(pc.fill_null(text, _str("__null__")))
    return pc.binary_join_element_wise(*parts, _str(""))


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
    idx = _index_array(group, piece.positions)
    t = piece.table
    names = t.column_names
    raw = [_column(t, name) for name in names]
    key_set = tuple(names)
    if key_set not in field_sets:
        field_sets.append(key_set)
    n = len(piece.positions)
    columns: dict[str, pa.Array] = {
        _IDX: idx,
        _KEY_TEXT: _key_text(names, raw, n),
        _KEY_SET: pa.repeat(pa.scalar(field_sets.index(key_set), pa.int32()), n),
    }
    if plan.fields is not None:
        for (name, tplan), col in zip(plan.fields, raw, strict=True):
            if tplan.convert is not None:
                res = tplan.convert(col, f"key.{name}")
                col = res.array
                if res.bad is not None:
                    _flag(bad, idx, res.bad, f"undecodable key field: {res.reason}")
            columns[name] = col
    else:
        columns.update(zip(names, raw, strict=True))
    return pa.table(columns)


def _decode_keys(split: Split, n: int, ctx: _Ctx) -> _Keys:
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
        assert plan.reader is not None
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
                    _IDX: pa.array([i for i, _ in items], pa.int64()),
                    _KEY_TEXT: pa.array([s for _, s in items], pa.string()),
                }
            )
        )
    table = _concat(tables, ctx.notes) if tables else None
    return _Keys(table, identity, field_sets, bad)


# --------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------


def _fill_delete_keys(
    batch: pa.Table, keys: pa.Table, key_fields: list[str], notes: list[str]
) -> pa.Table:
    """Put the record-key fields into the row columns of delete events."""
    is_delete = pc.fill_null(pc.equal(batch.column(OP), _str("d")), False)
    if not pc.any(is_delete).as_py():
        return batch
    for name in key_fields:
        if name in _RESERVED or name not in keys.column_names:
            continue
        key_col = keys.column(name)
        i = batch.schema.get_field_index(name)
        if i < 0:
            filled = pc.if_else(is_delete, key_col, pa.nulls(len(key_col), key_col.type))
            batch = batch.append_column(pa.field(name, key_col.type), filled)
            continue
        row_col = batch.column(i)
        target = row_col.type
        if pa.types.is_null(target):
            target = key_col.type
            row_col = pa.nulls(len(row_col), target)
        try:
            key_col = key_col.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            notes.append(f"key field {name!r} ({key_col.type}) does not fit column type {target}")
            continue
        filled = pc.if_else(is_delete, key_col, row_col)
        batch = batch.set_column(i, pa.field(name, target), filled)
    return batch


def _assemble(
    tables: list[pa.Table],
    keys: _Keys,
    partitions: Sequence[int],
    offsets: Sequence[int],
    ctx: _Ctx,
    *,
    sort: bool,
) -> pa.Table | None:
    """Join the pieces in consumption order and add key, partition and offset columns."""
    if not tables:
        return None
    batch = _concat(tables, ctx.notes)
    if sort or len(tables) > 1:
        batch = batch.take(pc.sort_indices(batch.column(_IDX)))
    idx = batch.column(_IDX)

    # Row events and tombstones with an undecodable key cannot be applied: quarantine.
    if keys.bad:
        key_bad = pc.is_in(idx, value_set=pa.array(sorted(keys.bad), pa.int64()))
        if pc.any(key_bad).as_py():
            for i in pc.filter(idx, key_bad).to_pylist():
                ctx.bad[i] = keys.bad[i]
            batch = batch.filter(pc.invert(key_bad))
            idx = batch.column(_IDX)
    if batch.num_rows == 0:
        return None

    if keys.table is None:
        key_rows = pa.table({_KEY_TEXT: pa.nulls(batch.num_rows, pa.string())})
    elif keys.identity:
        key_rows = keys.table.take(idx)
    else:
        key_rows = keys.table.take(pc.index_in(idx, value_set=keys.table.column(_IDX)))
    if _KEY_SET in key_rows.column_names:
        used = pc.unique(pc.drop_null(key_rows.column(_KEY_SET))).to_pylist()
        keys.used_sets = [keys.field_sets[i] for i in sorted(used)]

    row_names = [name for name in batch.column_names if name not in _RESERVED]
    batch = _fill_delete_keys(batch, key_rows, keys.fields, ctx.notes)
    row_names += [
        name for name in batch.column_names if name not in _RESERVED and name not in row_names
    ]

    key_text = key_rows.column(_KEY_TEXT)
    is_truncate = pc.fill_null(pc.equal(batch.column(OP), _str("t")), False)
    if pc.any(is_truncate).as_py():
        # A truncate concerns the whole table, never one record key.
        key_text = pc.if_else(is_truncate, pa.scalar(None, pa.string()), key_text)
    out = pa.table(
        {
            KEY: key_text,
            OP: batch.column(OP),
            POS: batch.column(POS),
            POS_SUB: batch.column(POS_SUB),
            SOURCE_TS: batch.column(SOURCE_TS),
            PARTITION: pa.array(partitions, pa.int32()).take(idx),
            OFFSET: pa.array(offsets, pa.int64()).take(idx),
            TX_ID: batch.column(TX_ID),
            GTID: batch.column(GTID),
        }
    )
    for name in row_names:
        out = out.append_column(batch.schema.field(name), batch.column(name))
    return out


def _normalize_hint(hint: str | None) -> str | None:
    if hint is None:
        return None
    lowered = hint.lower()
    if lowered in POSTGRES_HINTS:
        return "postgresql"
    if lowered in MYSQL_HINTS:
        return "mysql"
    raise ValueError(f"unknown connector_hint {hint!r}; use 'postgresql' or 'mysql'")


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------


def decode_debezium_json(
    topic: str,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    partitions: Sequence[int],
    offsets: Sequence[int],
    *,
    connector_hint: str | None = None,
) -> DecodeResult:
    """Decode the JsonConverter records of one topic from one micro-batch.

    Pure function: the result depends only on the arguments (schemas are cached per
    process, but only as an optimisation).

    Args:
        topic: The Kafka topic (reported with bad records; heartbeat detection).
        keys: Raw record keys (None for a null key), in consumption order.
        values: Raw record values (None for a tombstone), aligned with ``keys``.
        partitions: Kafka partition of each record.
        offsets: Kafka offset of each record.
        connector_hint: ``"postgresql"`` or ``"mysql"`` to force the position encoding;
            by default it is detected per record from ``source.connector`` (and from
            ``source.file`` for 0.x MySQL records, which lack ``connector``).

    Returns:
        The change batch, the key fields, the bad records and the ignored count.

    Raises:
        ValueError: The input sequences differ in length, or the hint is unknown.
    """
    n = len(values)
    if not len(keys) == len(partitions) == len(offsets) == n:
        raise ValueError("keys, values, partitions and offsets must have the same length")
    ctx = _Ctx(topic, _normalize_hint(connector_hint))
    if n == 0:
        return DecodeResult(None, [], [], 0)

    _decode_values(split_records(values, "value"), ctx)
    if ctx.reroute:
        ctx.rerouting = True
        _decode_values(split_slow(values, sorted(ctx.reroute), "value"), ctx)
    if ctx.tombstones:
        ctx.tables.append(_tombstones(sorted(ctx.tombstones)))

    keys_info = _decode_keys(split_records(keys, "key"), n, ctx)
    sort = ctx.groups > 1 or bool(ctx.tombstones)
    batch = _assemble(ctx.tables, keys_info, partitions, offsets, ctx, sort=sort)

    bad = [
        BadMessage(
            topic,
            int(partitions[i]),
            int(offsets[i]),
            None if keys[i] is None else bytes(keys[i]),  # type: ignore[arg-type]
            None if values[i] is None else bytes(values[i]),  # type: ignore[arg-type]
            reason,
        )
        for i, reason in sorted(ctx.bad.items())
    ]
    return DecodeResult(
        batch,
        keys_info.fields,
        bad,
        ctx.ignored,
        ctx.fingerprints,
        keys_info.used_sets,
        ctx.notes,
    )
