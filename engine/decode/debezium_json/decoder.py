"""Bulk decoder of Debezium change events serialized with Kafka Connect's JsonConverter.

:func:`decode_debezium_json` turns the records of one topic from one micro-batch into a
change batch (see :mod:`engine.model`): one row per row-level event with the control
columns followed by the typed ``after`` image.

How it stays fast: records never become one Python dict each. The JsonConverter wrapper
is stripped with byte operations (:mod:`.split`), the payloads of one Connect schema are
joined and parsed by one ``pyarrow.json.read_json`` call with an explicit schema
(:mod:`.reader`), envelopes become columns in :mod:`.envelope` and record keys in
:mod:`.keys`, and logical types and positions are computed with vectorised Arrow kernels
(:mod:`.connect`, :mod:`engine.decode.positions`). Python per-record work only happens
for records that need it (odd layouts, invalid JSON, non-row records on a table topic).

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
* Type mapping with a schema: see :mod:`.connect`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.column_types import ColumnType
from engine.decode.debezium_json.common import (
    IDX,
    KEY_SET,
    KEY_TEXT,
    RESERVED,
    Ctx,
    concat,
    str_scalar,
)
from engine.decode.debezium_json.envelope import decode_values, tombstone_rows
from engine.decode.debezium_json.hints import apply_hint
from engine.decode.debezium_json.keys import Keys, decode_keys
from engine.decode.debezium_json.split import split_fast, split_records, split_slow
from engine.decode.interleave import spread
from engine.decode.limits import nesting_reason, too_deep_records
from engine.decode.positions import MYSQL_HINTS, POSTGRES_HINTS
from engine.decode.records import RecordBatch
from engine.decode.result import DecodeResult
from engine.model import GTID, KEY, OFFSET, OP, PARTITION, POS, POS_SUB, SOURCE_TS, TX_ID

__all__ = ["decode_debezium_json", "finish"]


def _fill_delete_keys(
    batch: pa.Table, keys: pa.Table, key_fields: list[str], notes: list[str], types: dict
) -> pa.Table:
    """Put the record-key fields into the row columns of delete events.

    A key field with a column type hint gets the hint's conversion (its wire form is the
    row column's); a key value that does not fit leaves the delete's row column null
    (the record key, which identifies the row, is unaffected) and is noted.
    """
    is_delete = pc.fill_null(pc.equal(batch.column(OP), str_scalar("d")), False)
    if not pc.any(is_delete).as_py():
        return batch
    for name in key_fields:
        if name in RESERVED or name not in keys.column_names:
            continue
        key_col = keys.column(name)
        if name in types:
            key_col = key_col.combine_chunks() if isinstance(key_col, pa.ChunkedArray) else key_col
            res = apply_hint(key_col, types[name], f"key.{name}", schemaless=True)
            if res.bad is not None:
                notes.append(res.reason)
            key_col = res.array
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


def _key_types(keys: Keys, ctx: Ctx) -> dict[str, ColumnType]:
    """Type hints of the record-key fields (the delete rows' key columns get them).

    The hints applied to the batch's row columns, the configured ones, and, for a
    schemaless batch (say one of deletes only), the catalog's.
    """
    types: dict[str, ColumnType] = {}
    if ctx.catalog is not None and not ctx.fingerprints and keys.fields:
        found, _, _ = ctx.catalog.types_for(ctx.source_table, ctx.topic, list(keys.fields))
        types.update(found)
    types.update(ctx.applied_types)
    types.update(ctx.column_types)
    return types


def _in_order(tables: list[pa.Table], tombstones: list[int], ctx: Ctx) -> pa.Table | None:
    """The decoded pieces and the tombstone rows as one table in consumption order.

    The pieces of one group come in order; several groups (or pieces a bisection could
    not rejoin) are sorted by input position. Tombstones have no row image: their rows
    are put between the others with :func:`spread`, which moves no text.
    """
    rows = concat(tables, ctx.notes) if tables else None
    if rows is not None and (ctx.groups > 1 or len(tables) > 1):
        rows = rows.take(pc.sort_indices(rows.column(IDX)))
    if not tombstones:
        return rows
    tombs = tombstone_rows(sorted(tombstones))
    if rows is None:
        return tombs
    n, total = rows.num_rows, rows.num_rows + tombs.num_rows
    at = np.concatenate([rows.column(IDX).to_numpy(), tombs.column(IDX).to_numpy()])
    order = np.argsort(at, kind="stable")
    shared = [name for name in rows.column_names if name in tombs.column_names]
    control = concat([rows.select(shared), tombs], ctx.notes).take(pa.array(order))
    dest = np.flatnonzero(order < n)
    columns = []
    fields = []
    for name in rows.column_names:
        if name in tombs.column_names:
            columns.append(control.column(name))
            fields.append(control.schema.field(name))
        else:
            columns.append(spread(rows.column(name), dest, total))
            fields.append(rows.schema.field(name))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _assemble(
    tables: list[pa.Table],
    tombstones: list[int],
    keys: Keys,
    partitions: Sequence[int],
    offsets: Sequence[int],
    ctx: Ctx,
) -> pa.Table | None:
    """Join the pieces in consumption order and add key, partition and offset columns."""
    batch = _in_order(tables, tombstones, ctx)
    if batch is None:
        return None
    idx = batch.column(IDX)

    # Row events and tombstones with an undecodable key cannot be applied: quarantine.
    if keys.bad:
        key_bad = pc.is_in(idx, value_set=pa.array(sorted(keys.bad), pa.int64()))
        if pc.any(key_bad).as_py():
            for i in pc.filter(idx, key_bad).to_pylist():
                ctx.bad[i] = keys.bad[i]
            batch = batch.filter(pc.invert(key_bad))
            idx = batch.column(IDX)
    if batch.num_rows == 0:
        return None

    if keys.table is None:
        key_rows = pa.table({KEY_TEXT: pa.nulls(batch.num_rows, pa.string())})
    elif keys.identity:
        key_rows = keys.table.take(idx)
    else:
        key_rows = keys.table.take(pc.index_in(idx, value_set=keys.table.column(IDX)))
    if KEY_SET in key_rows.column_names:
        used = pc.unique(pc.drop_null(key_rows.column(KEY_SET))).to_pylist()
        keys.used_sets = [keys.field_sets[i] for i in sorted(used)]

    row_names = [name for name in batch.column_names if name not in RESERVED]
    batch = _fill_delete_keys(batch, key_rows, keys.fields, ctx.notes, _key_types(keys, ctx))
    row_names += [
        name for name in batch.column_names if name not in RESERVED and name not in row_names
    ]

    key_text = key_rows.column(KEY_TEXT)
    is_truncate = pc.fill_null(pc.equal(batch.column(OP), str_scalar("t")), False)
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


def decode_debezium_json(
    records: RecordBatch,
    *,
    connector_hint: str | None = None,
    column_types: Mapping[str, ColumnType] | None = None,
    catalog: Any = None,
    max_nesting_depth: int | None = None,
) -> DecodeResult:
    """Decode the JsonConverter records of one topic from one micro-batch.

    Pure function: the result depends only on the arguments (schemas are cached per
    process, but only as an optimisation).

    Args:
        records: The records (raw keys, values - None for a tombstone -, partitions and
            offsets, in consumption order) of one topic; the topic is reported with bad
            records and used for heartbeat detection.
        connector_hint: ``"postgresql"`` or ``"mysql"`` to force the position encoding;
            by default it is detected per record from ``source.connector`` (and from
            ``source.file`` for 0.x MySQL records, which lack ``connector``).
        column_types: Column type hints by column name (``[tables.<name>.columns]``):
            each named row column is converted to its hint's type (see
            :mod:`engine.column_types`); a value that does not fit makes its message bad.
        catalog: Types of schemaless columns from the source database, an object with
            ``types_for(source_table, topic, columns) -> (types, problem)`` (see
            :mod:`engine.decode.catalog`); hints win over it, and messages with a Connect
            schema do not use it.
        max_nesting_depth: Refuse values nested deeper (``source.max_nesting_depth``) by
            the parse: a parsed schemaless buffer whose type nests deeper has its records
            measured; JsonConverter records and records parsed one by one are measured
            before. Values longer than
            :data:`engine.decode.limits.PARSE_SAFE_BYTES` must have been measured by the
            caller (see :class:`engine.decode.limits.Guarded`). None: not checked here.

    Returns:
        The change batch, the key fields, the bad records and the ignored count.

    Raises:
        ValueError: The connector hint is unknown.
    """
    ctx = Ctx(records.topic, _normalize_hint(connector_hint))
    ctx.column_types = dict(column_types or {})
    ctx.catalog = catalog
    if not len(records):
        return DecodeResult(None, [], [], 0)
    values = records.values
    ctx.values = values
    ctx.max_depth = max_nesting_depth
    split = split_fast(values, "value")
    # The per-record path parses in Python, and a JsonConverter record nests in its
    # schema and wrapper too, beyond what its payload's parse shows: those are measured
    # here first (the schema part once per schema), as the scan before the decoder did.
    wrapped = split is not None and any(fp is not None for fp in split.groups)
    if max_nesting_depth is not None and (split is None or wrapped):
        deep = too_deep_records(values, max_nesting_depth)
        for i, depth in deep.items():
            ctx.bad[i] = nesting_reason("value", depth, max_nesting_depth)
        if deep:
            split = split_slow(values, [i for i in range(len(values)) if i not in deep], "value")
    if split is None:
        split = split_slow(values, range(len(values)), "value")
    decode_values(split, ctx)
    if ctx.reroute:
        ctx.rerouting = True
        decode_values(split_slow(values, sorted(ctx.reroute), "value"), ctx)
    keys = decode_keys(split_records(records.keys, "key"), len(records), ctx)
    return finish(records, keys, ctx)


def finish(records: RecordBatch, keys: Keys, ctx: Ctx) -> DecodeResult:
    """The result of a batch whose values and keys are decoded (the JSON and the Avro
    decoders' common end): tombstone rows added, the pieces joined in consumption order
    with their record keys, partitions and offsets, every bad record reported."""
    partitions, offsets = records.partitions, records.offsets
    batch = _assemble(ctx.tables, ctx.tombstones, keys, partitions, offsets, ctx)
    return DecodeResult(
        batch,
        keys.fields,
        records.bad_messages(ctx.bad),
        ctx.ignored,
        ctx.fingerprints,
        keys.used_sets,
        ctx.notes,
        ctx.source_table,
        snapshot_ended=ctx.snapshot_ended,
        row_schemas=ctx.row_schemas.result(partitions, offsets),
    )
