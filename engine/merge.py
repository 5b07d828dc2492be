"""Merge one micro-batch into one Hudi file group: the unit of work of a Spark task.

The driver splits each table's decoded events by Hudi bucket and stages them as Arrow
IPC files; Spark runs one task per touched file group (:func:`execute_task`), in
parallel across buckets and tables. A task reads the group's current state (base file,
log files and delete tombstones), decides per event whether it is late, folds the rest
per key in source order, resolves TOAST placeholders, applies the result and writes
either a new base file (a rewrite: Copy-on-Write, or a Merge-on-Read compaction) or one
log file holding only the batch's upserts and deletes (a Merge-on-Read append, which
reads just the key and position columns of the stored rows). Everything is vectorised
Arrow/Polars work: no row ever becomes a Python object.

Rules (README "How changes are applied"):

* Positions compare as ``(_cdc_pos, _cdc_pos_sub)``; ties break on Kafka partition and
  offset. Tombstones, and events without a source position, take the position of the
  event before them for the same key in the same partition; when there is none they are
  applied unconditionally.
* An event is *late* when its position is not newer than the newest position already
  seen for its key: earlier in the batch, in the stored row, in the key's delete
  tombstone, or the table's last truncate. Late events change nothing and are counted.
* Per key the newest remaining event wins: r/c/u upsert its row image, d and tombstones
  delete the row and leave a tombstone.
* A truncate at position T removes every stored row and tombstone older than T; events
  of the batch older than T are dropped (they happened before it).
* A TOAST placeholder means "unchanged": the value comes from the previous event of the
  key in the batch, else from the stored row; a row never seen keeps null (counted).
* Carry-over: untouched rows keep ``_hoodie_commit_time``/``_commit_seqno``; only
  ``_hoodie_file_name`` changes.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine import faults, tombstones
from engine.hudi import parquet
from engine.hudi.log_file import LogBlock, encode_log_file, read_log_file
from engine.hudi.schema import reader_schema
from engine.model import (
    HOODIE_COMMIT_SEQNO,
    HOODIE_COMMIT_TIME,
    HOODIE_FILE_NAME,
    HOODIE_META_COLUMNS,
    HOODIE_PARTITION_PATH,
    HOODIE_RECORD_KEY,
    KEY,
    OFFSET,
    OP,
    OP_CREATE,
    OP_READ,
    OP_TOMBSTONE,
    OP_UPDATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
)

#: Position of an event whose source position is unknown (before any other).
UNKNOWN_POS = -(2**63)
UPSERT_OPS = pa.array([OP_READ, OP_CREATE, OP_UPDATE])
DEFAULT_TOAST = "__debezium_unavailable_value"
_SHIFT = 2**64
_BIAS = 2**63


@dataclass
class MergeCounts:
    """What one file-group merge did."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    late: int = 0  # events not newer than what the table already had for their key
    toast_unresolved: int = 0  # TOAST placeholders with no earlier value anywhere
    carried: int = 0
    truncated: int = 0  # stored rows removed by a truncate

    def add(self, other: MergeCounts) -> None:
        """Accumulate another group's counts."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(frozen=True)
class MergeOptions:
    """Table-level inputs of every task of one batch."""

    #: Position of the newest truncate in this batch: older rows/events are gone.
    truncate: tuple[int, int] | None = None
    #: Position of the table's last truncate in earlier commits: older events are late.
    floor: tuple[int, int] | None = None
    toast_placeholder: str = DEFAULT_TOAST
    #: Tombstones with a source time below this (ms) may expire...
    tombstone_min_ts: int | None = None
    #: ...if they were created at or before this instant.
    tombstone_keep_after: str | None = None


@dataclass
class MergeResult:
    """New rows and tombstones of a file group, and what was done."""

    rows: pa.Table
    tombstones: pa.Table
    counts: MergeCounts = field(default_factory=MergeCounts)
    changed: bool = False
    #: The batch's winning upserts, as written (a Merge-on-Read log's data block).
    upserts: pa.Table | None = None
    #: Keys whose stored row the batch deleted (a Merge-on-Read log's delete block).
    deleted_keys: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))


def _combined(pos: pl.Expr, sub: pl.Expr) -> pl.Expr:
    """Both position parts as one Int128, ordered like the (pos, sub) pair."""
    return pos.cast(pl.Int128) * _SHIFT + (sub.cast(pl.Int128) + _BIAS)


def _combined_value(pair: tuple[int, int] | None) -> int | None:
    return None if pair is None else pair[0] * _SHIFT + pair[1] + _BIAS


def _newer_than(pos: pa.ChunkedArray, sub: pa.ChunkedArray, pair: tuple[int, int]) -> pa.Array:
    """pos/sub > pair, lexicographically; null positions count as older."""
    gt = pc.or_(
        pc.greater(pos, pair[0]), pc.and_(pc.equal(pos, pair[0]), pc.greater(sub, pair[1]))
    )
    return pc.fill_null(gt, False)


def _column_or_null(table: pa.Table, fld: pa.Field) -> pa.Array | pa.ChunkedArray:
    if fld.name in table.column_names:
        col = table.column(fld.name)
        return col if col.type == fld.type else col.cast(fld.type)
    return pa.nulls(table.num_rows, fld.type)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast ``table``'s columns to ``schema`` (missing columns become null)."""
    return pa.Table.from_arrays([_column_or_null(table, f) for f in schema], schema=schema)


def repeat_string(value: str, n: int) -> pa.Array:
    """A string array of ``n`` copies of ``value``, built from buffers (no Python objects)."""
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def file_schema(data_schema: pa.Schema) -> pa.Schema:
    """Full base-file schema: the five Hudi meta columns, then the data columns."""
    meta = [pa.field(name, pa.string()) for name in HOODIE_META_COLUMNS]
    return pa.schema(meta + list(data_schema))


def toast_mask(column: pa.ChunkedArray, placeholder: str) -> pa.ChunkedArray | None:
    """Where a column holds Debezium's unavailable-value placeholder, in any of its forms.

    Strings hold the text; bytes its UTF-8 bytes (``hex:...`` placeholders are bytes);
    text arrays ``[placeholder]``; integer arrays the placeholder's byte values.
    Returns None for column types that cannot carry the placeholder.
    """
    if placeholder.startswith("hex:"):
        raw = bytes.fromhex(placeholder[4:])
        text = raw.decode("utf-8", "replace")
    else:
        raw, text = placeholder.encode(), placeholder
    typ = column.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pc.fill_null(pc.equal(column, text), False)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pc.fill_null(pc.equal(column, pa.scalar(raw, typ)), False)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        value_type = typ.value_type
        lengths = pc.fill_null(pc.list_value_length(column), -1)
        if pa.types.is_string(value_type) or pa.types.is_binary(value_type):
            one = pc.equal(lengths, 1)
            masks = []
            for chunk, one_chunk in zip(column.chunks, one.chunks, strict=True):
                padded = pc.if_else(one_chunk, chunk, pa.scalar([None], chunk.type))
                first = pc.list_element(padded, 0)
                target = text if pa.types.is_string(value_type) else pa.scalar(raw, value_type)
                masks.append(pc.fill_null(pc.and_(one_chunk, pc.equal(first, target)), False))
            return pa.chunked_array(masks, pa.bool_())
        if pa.types.is_integer(value_type):
            pattern = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
            out = np.zeros(len(column), dtype=bool)
            lens = lengths.to_numpy()
            candidates = np.nonzero(lens == len(pattern))[0]
            if len(candidates):
                picked = column.take(pa.array(candidates))
                flat = pc.list_flatten(picked).to_numpy(zero_copy_only=False)
                grid = flat.reshape(len(candidates), len(pattern))
                out[candidates] = (grid == pattern).all(axis=1)
            return pa.chunked_array([pa.array(out)])
    return None


def merge_file_group(
    old: pa.Table | None,
    events: pa.Table | None,
    *,
    instant: str,
    file_name: str,
    task_partition: int,
    data_schema: pa.Schema,
    old_tombstones: pa.Table | None = None,
    options: MergeOptions | None = None,
    old_has_only_batch_keys: bool = False,
) -> MergeResult:
    """Apply a bucket's events to its stored rows and tombstones.

    Args:
        old: rows of the current base file, or None for a new group.
        events: this bucket's change-batch rows (control columns + row image), or None.
        instant: the commit instant being written.
        file_name: the new base file's name (goes into ``_hoodie_file_name``).
        task_partition: Spark task partition id (part of ``_hoodie_commit_seqno``).
        data_schema: the table's data schema (source columns + replica CDC columns).
        old_tombstones: the group's current delete tombstones.
        options: truncate, floor, TOAST placeholder and tombstone retention.
        old_has_only_batch_keys: ``old`` was read for the batch's keys only (an append):
            it need not be filtered by them again, and no stored row is carried over
            (``rows`` holds only the batch's upserts, numbered from 0 as a log block's).
    """
    opts = options or MergeOptions()
    schema = file_schema(data_schema)
    counts = MergeCounts()
    old = _conform(old, schema) if old is not None else schema.empty_table()
    tombs = (
        old_tombstones.cast(tombstones.SCHEMA)
        if old_tombstones is not None
        else tombstones.SCHEMA.empty_table()
    )
    changed = False
    if opts.truncate is not None:
        keep = _newer_than(old.column(POS), old.column(POS_SUB), opts.truncate)
        counts.truncated = old.num_rows - (pc.sum(keep).as_py() or 0)
        changed = counts.truncated > 0 or tombs.num_rows > 0
        old = old.filter(keep)
        tombs = tombs.filter(_newer_than(tombs.column(POS), tombs.column(POS_SUB), opts.truncate))
    floor = opts.floor
    if opts.truncate is not None and (floor is None or opts.truncate > floor):
        floor = opts.truncate

    winners = history = None
    deleted_keys = pa.array([], pa.string())
    if events is not None and events.num_rows:
        events = events.filter(pc.is_valid(events.column(KEY)))
        if opts.truncate is not None and events.num_rows:
            # Events before the truncate happened before it: superseded, not late.
            known = pc.is_valid(events.column(POS))
            newer = _newer_than(events.column(POS), events.column(POS_SUB), opts.truncate)
            events = events.filter(pc.or_(pc.invert(known), newer))
        if events.num_rows:
            winners, history = _decide(
                events, old, tombs, floor, opts, counts, old_has_only_batch_keys
            )

    old_keys = old.column(HOODIE_RECORD_KEY)
    upserts = None
    # An append writes only the batch's changes: the stored rows are not carried over.
    carried = old.slice(0, 0) if old_has_only_batch_keys else old
    new_tombs = tombs
    if winners is not None and winners.num_rows:
        changed = True
        idx = pc.index_in(winners.column(KEY), value_set=old_keys)
        exists = pc.is_valid(idx)
        is_upsert = pc.is_in(winners.column(OP), value_set=UPSERT_OPS)
        counts.inserts = pc.sum(pc.and_(is_upsert, pc.invert(exists))).as_py() or 0
        counts.updates = pc.sum(pc.and_(is_upsert, exists)).as_py() or 0
        is_delete = pc.invert(is_upsert)
        counts.deletes = pc.sum(pc.and_(is_delete, exists)).as_py() or 0
        deleted_keys = winners.filter(pc.and_(is_delete, exists)).column(KEY).cast(pa.string())
        if not old_has_only_batch_keys:
            carried = old.filter(pc.invert(pc.is_in(old_keys, value_set=winners.column(KEY))))
        upserts = winners.filter(is_upsert)
        if history is not None:
            upserts = _resolve_toast(upserts, history, old, opts.toast_placeholder, counts)
        deleted = winners.filter(pc.and_(is_delete, pc.is_valid(winners.column(POS))))
        fresh = pa.table(
            {
                KEY: deleted.column(KEY).cast(pa.string()),
                POS: deleted.column(POS),
                POS_SUB: deleted.column(POS_SUB),
                SOURCE_TS: deleted.column(SOURCE_TS),
                tombstones.INSTANT: pa.array([instant] * deleted.num_rows, pa.string()),
            },
            schema=tombstones.SCHEMA,
        )
        survivors = tombs.filter(pc.invert(pc.is_in(tombs.column(KEY), value_set=winners.column(KEY))))
        new_tombs = pa.concat_tables([survivors, fresh])
    if opts.tombstone_min_ts is not None and opts.tombstone_keep_after is not None and new_tombs.num_rows:
        expired = pc.and_(
            pc.fill_null(pc.less(new_tombs.column(SOURCE_TS), opts.tombstone_min_ts), True),
            pc.less_equal(new_tombs.column(tombstones.INSTANT), opts.tombstone_keep_after),
        )
        if pc.any(expired).as_py():
            new_tombs = new_tombs.filter(pc.invert(expired))
            changed = True

    counts.carried = carried.num_rows
    parts = []
    fresh_rows = None
    if carried.num_rows:
        carried = carried.set_column(
            carried.schema.get_field_index(HOODIE_FILE_NAME),
            HOODIE_FILE_NAME,
            repeat_string(file_name, carried.num_rows),
        )
        parts.append(carried)
    if upserts is not None and upserts.num_rows:
        n = upserts.num_rows
        record_index = pa.array(np.arange(carried.num_rows, carried.num_rows + n)).cast(pa.string())
        seqno = pc.binary_join_element_wise(f"{instant}_{task_partition}_", record_index, "")
        meta = {
            HOODIE_COMMIT_TIME: repeat_string(instant, n),
            HOODIE_COMMIT_SEQNO: seqno,
            HOODIE_RECORD_KEY: upserts.column(KEY).cast(pa.string()),
            HOODIE_PARTITION_PATH: repeat_string("", n),
            HOODIE_FILE_NAME: repeat_string(file_name, n),
        }
        columns = [meta[f.name] if f.name in meta else _column_or_null(upserts, f) for f in schema]
        fresh_rows = pa.Table.from_arrays(columns, schema=schema)
        parts.append(fresh_rows)
    rows = pa.concat_tables(parts) if parts else schema.empty_table()
    return MergeResult(
        rows, new_tombs, counts, changed, fresh_rows, deleted_keys
    )


def _decide(
    events: pa.Table,
    old: pa.Table,
    tombs: pa.Table,
    floor: tuple[int, int] | None,
    opts: MergeOptions,
    counts: MergeCounts,
    old_has_only_batch_keys: bool = False,
) -> tuple[pa.Table, pa.Table | None]:
    """Drop late events and fold the rest per key.

    Returns the winners (positions filled) and, when any winner carries a TOAST
    placeholder, the kept events in (key, position) order for resolving it.
    """
    ctl = pl.from_arrow(events.select([KEY, OP, POS, POS_SUB, PARTITION, OFFSET]))
    assert isinstance(ctl, pl.DataFrame)
    ctl = _sort_by_key(ctl.with_row_index("_i"))
    # Sorted by key, repeats are neighbours. Without repeats (the common case of a
    # deduplicated or sparse batch) the per-key window work below is skipped.
    keys = ctl[_K]
    repeats = ctl.height > 1 and bool((keys.slice(1) == keys.slice(0, ctl.height - 1)).any())
    if repeats and ctl[POS].null_count():
        ctl = _fill_positions_forward(ctl)
    ctl = ctl.with_columns(_c=_combined(pl.col(POS), pl.col(POS_SUB).fill_null(0)))
    # Only the batch's keys matter: filter the stored rows before building frames.
    batch_keys = events.column(KEY)
    stored = _stored_positions(
        old if old_has_only_batch_keys else _only_keys(old, batch_keys),
        tombs.filter(pc.is_in(tombs.column(KEY), value_set=batch_keys)) if tombs.num_rows else tombs,
    )
    # Late: at or below the key's stored position, the truncate floor, or an earlier
    # event of the same key in this batch (null comparisons are "not late").
    late = pl.lit(False)
    if stored is not None:
        ctl = ctl.join(
            stored.select(KEY, "_stored"), on=KEY, how="left", maintain_order="left"
        )
        late = late | (pl.col("_c") <= pl.col("_stored"))
    floor_value = _combined_value(floor)
    if floor_value is not None:
        late = late | (pl.col("_c") <= pl.lit(floor_value, pl.Int128))
    if repeats:
        ctl = _with_previous_max_rank(ctl)
        late = late | (pl.col("_rank") <= pl.col("_prev_rank"))
    ctl = ctl.with_columns(_late=(pl.col("_c").is_not_null() & late).fill_null(False))
    counts.late = int(ctl.filter(pl.col("_late") & (pl.col(OP) != OP_TOMBSTONE)).height)
    kept = ctl.filter(~pl.col("_late")).with_columns(
        pl.col("_c").fill_null(_combined_value((UNKNOWN_POS, 0)))
    )
    winners_ctl = (
        kept.sort([_K, "_c", PARTITION, OFFSET]).unique(
            subset=[_K], keep="last", maintain_order=True
        )
        if repeats
        else kept
    )
    winners = events.take(winners_ctl["_i"].to_arrow())
    pos = winners_ctl[POS].to_arrow().cast(pa.int64())
    sub = pc.if_else(pc.is_valid(pos), winners_ctl[POS_SUB].to_arrow().cast(pa.int64()), None)
    # An event without a known position keeps the stored row's (or tombstone's) position.
    if stored is not None and pos.null_count:
        found = pl.from_arrow(winners.select([KEY])).join(
            stored.select(KEY, POS, POS_SUB), on=KEY, how="left", maintain_order="left"
        )
        assert isinstance(found, pl.DataFrame)
        pos = pc.coalesce(pos, found[POS].to_arrow().cast(pa.int64()))
        sub = pc.coalesce(sub, found[POS_SUB].to_arrow().cast(pa.int64()))
    winners = winners.set_column(winners.schema.get_field_index(POS), POS, pos)
    winners = winners.set_column(winners.schema.get_field_index(POS_SUB), POS_SUB, sub)
    if not _has_toast(winners, opts.toast_placeholder):
        return winners, None
    order = kept.sort([KEY, "_c", PARTITION, OFFSET])  # by the key itself: see _resolve_toast
    return winners, events.take(order["_i"].to_arrow())


#: The column that groups a batch's events by key: the key's 64-bit hash where the batch
#: has no two keys with the same hash, else the key itself (see :func:`_sort_by_key`).
_K = "_key_group"


def _sort_by_key(
    ctl: pl.DataFrame, key_hash: Callable[[pl.Expr], pl.Expr] = pl.Expr.hash
) -> pl.DataFrame:
    """Sort events by key, then partition and offset, and add the grouping column ``_K``.

    Sorting by the keys' 64-bit hashes is several times faster than comparing the key
    strings, and groups the same events whenever no two different keys of the batch
    share a hash. That is checked exactly (equal-hash neighbours must have equal keys);
    otherwise the batch is sorted and grouped by the key strings.
    """
    hashed = ctl.with_columns(key_hash(pl.col(KEY)).alias(_K)).sort([_K, PARTITION, OFFSET])
    if hashed.height < 2:
        return hashed
    same_hash = hashed[_K].slice(1) == hashed[_K].slice(0, hashed.height - 1)
    same_key = hashed[KEY].slice(1) == hashed[KEY].slice(0, hashed.height - 1)
    if not (same_hash & ~same_key).any():
        return hashed
    return ctl.with_columns(pl.col(KEY).alias(_K)).sort([_K, PARTITION, OFFSET])


def _key_starts(columns: list[str]) -> pl.Expr:
    """True on the first row of each run of equal ``columns`` (the frame is sorted)."""
    start = pl.lit(False)
    for name in columns:
        start = start | (pl.col(name) != pl.col(name).shift(1))
    return start.fill_null(True)


def _fill_positions_forward(ctl: pl.DataFrame) -> pl.DataFrame:
    """Fill null positions from the previous event of the same key and partition.

    The frame is sorted by (key, partition, offset), so each (key, partition) is a run
    of rows: a global forward fill is right wherever the value it carries was seen in
    the same run. Run boundaries replace a per-group window (several times faster).
    """
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    ctl = ctl.with_columns(
        _start=pl.when(_key_starts([_K, PARTITION])).then(row).forward_fill()
    )
    filled = []
    for name in (POS, POS_SUB):
        seen_at = pl.when(pl.col(name).is_not_null()).then(row).forward_fill()
        filled.append(
            pl.when(pl.col(name).is_null() & (seen_at >= pl.col("_start")))
            .then(pl.col(name).forward_fill())
            .otherwise(pl.col(name))
            .alias(name)
        )
    return ctl.with_columns(filled).drop("_start")


def _with_previous_max_rank(ctl: pl.DataFrame) -> pl.DataFrame:
    """Add ``_rank`` (dense rank of ``_c``) and ``_prev_rank``: the largest rank of the
    key's earlier events in the frame (null for a key's first event, and where the
    previous event has no position, as a per-key ``cum_max().shift(1)`` would give).

    Ranks fit in 64 bits, so each key's run can be offset above all earlier runs and one
    global running maximum serves every key: no per-key window (4x faster at 10k rows).
    """
    start = _key_starts([_K])
    run = start.cum_sum().cast(pl.Int64)
    stride = ctl.height + 1
    ctl = ctl.with_columns(_rank=pl.col("_c").rank("dense").cast(pl.Int64))
    offset = pl.col("_rank") + run * stride
    previous = offset.cum_max().shift(1) - run * stride
    return ctl.with_columns(_prev_rank=pl.when(start).then(None).otherwise(previous))


def _stored_positions(old: pa.Table, tombs: pa.Table) -> pl.DataFrame | None:
    """Per stored key (live row or tombstone) its position, also as one Int128."""
    frames = []
    for table, key_col in ((old, HOODIE_RECORD_KEY), (tombs, KEY)):
        if table.num_rows:
            frame = pl.from_arrow(table.select([key_col, POS, POS_SUB]))
            assert isinstance(frame, pl.DataFrame)
            frames.append(frame.rename({key_col: KEY}))
    if not frames:
        return None
    stored = pl.concat(frames).filter(pl.col(POS).is_not_null())
    stored = stored.with_columns(_stored=_combined(pl.col(POS), pl.col(POS_SUB).fill_null(0)))
    return stored.sort("_stored").unique(subset=[KEY], keep="last")


def _has_toast(table: pa.Table, placeholder: str) -> bool:
    for name in table.column_names:
        if name.startswith("_cdc_"):
            continue
        mask = toast_mask(table.column(name), placeholder)
        if mask is not None and pc.any(mask).as_py():
            return True
    return False


def _resolve_toast(
    upserts: pa.Table, history: pa.Table, old: pa.Table, placeholder: str, counts: MergeCounts
) -> pa.Table:
    """Replace placeholders by the previous value in the batch, else the stored one.

    ``history`` holds the batch's kept events sorted by (key, position); a winner is the
    last of its key's run, so its predecessors are the rows just before it.
    """
    keys_sorted = history.column(KEY).to_numpy(zero_copy_only=False)
    winner_keys = upserts.column(KEY).to_numpy(zero_copy_only=False)
    starts = np.searchsorted(keys_sorted, winner_keys, side="left")
    ends = np.searchsorted(keys_sorted, winner_keys, side="right")
    old_idx = pc.index_in(upserts.column(KEY), value_set=old.column(HOODIE_RECORD_KEY))
    for name in upserts.column_names:
        if name.startswith("_cdc_"):
            continue
        mask = toast_mask(upserts.column(name), placeholder)
        if mask is None or not pc.any(mask).as_py():
            continue
        hist_mask = toast_mask(history.column(name), placeholder)
        assert hist_mask is not None
        hist_ok = ~np.asarray(hist_mask.to_numpy(zero_copy_only=False), dtype=bool)
        source = np.full(len(upserts), -1, dtype=np.int64)
        for r in np.nonzero(mask.to_numpy(zero_copy_only=False))[0]:
            # Only rows holding a placeholder get here; each scans its own key's run.
            candidates = np.nonzero(hist_ok[starts[r] : ends[r] - 1])[0]
            if len(candidates):
                source[r] = starts[r] + candidates[-1]
        from_batch = history.column(name).take(pa.array(np.where(source >= 0, source, 0)))
        stored = (
            old.column(name).take(old_idx).cast(from_batch.type)
            if name in old.column_names
            else pa.nulls(len(upserts), from_batch.type)
        )
        in_batch = pa.array(source >= 0)
        resolved = pc.if_else(in_batch, from_batch, stored)
        unresolved = pc.and_(mask, pc.and_(pc.invert(in_batch), pc.is_null(old_idx)))
        counts.toast_unresolved += pc.sum(unresolved).as_py() or 0
        column = pc.if_else(mask, resolved, upserts.column(name))
        upserts = upserts.set_column(upserts.schema.get_field_index(name), name, column)
    return upserts


@dataclass
class FileGroupTask:
    """Everything a Spark task needs to rewrite one file group (picklable, paths only)."""

    table_path: str
    instant: str
    bucket: int
    file_id: str
    file_name: str  # the new base file (rewrite) or log file (append) to write
    prev_file: str | None
    prev_instant: str | None  # base instant of the current slice
    events_file: str | None
    data_schema_ipc: bytes
    task_partition: int
    options: MergeOptions = field(default_factory=MergeOptions)
    driver_pid: int = 0
    #: Committed log files of the current slice, oldest first (Merge-on-Read).
    prev_logs: tuple[str, ...] = ()
    #: Newest instant that wrote the current slice: names its tombstone sidecar.
    state_instant: str | None = None
    #: Append a log file (Merge-on-Read) instead of rewriting the base file.
    append: bool = False
    #: Avro schema JSON of the rows (the log data block's header); set for every task of a
    #: Merge-on-Read table, empty for Copy-on-Write.
    avro_schema: str = ""
    #: Estimated cost (bytes to read and write), for packing tasks into Spark partitions.
    weight: int = 0


@dataclass
class FileGroupResult:
    """What a task wrote: the input of the commit's write stats."""

    bucket: int
    file_id: str
    file_name: str | None  # None: nothing changed, no new file was written
    prev_commit: str
    num_writes: int
    file_size: int
    counts: MergeCounts
    base_file: str | None = None  # set when file_name is a log file of this base file


def write_base_file(table: pa.Table, path: Path) -> int:
    """Write a base file atomically (staged without the .parquet suffix); return its size."""
    tmp = path.with_name("." + path.name + ".tmp")
    parquet.write_table(table, tmp, statistics=[HOODIE_RECORD_KEY])
    os.replace(tmp, path)
    return path.stat().st_size


def read_slice(
    base_file: str | Path | None,
    log_files: tuple[str, ...] | list[str] = (),
    *,
    keys: pa.Array | pa.ChunkedArray | None = None,
    columns: list[str] | None = None,
) -> pa.Table | None:
    """The live rows of a file slice: its base file with its log files applied in order.

    Args:
        base_file: The slice's base file, or None for a new group.
        log_files: Paths of its committed log files, oldest first.
        keys: Only rows with these record keys (None: all rows).
        columns: Only these columns (None: all); must include ``_hoodie_record_key``.
    """
    if base_file is None:
        return None
    rows = _FILE_CACHE.get(base_file, columns, lambda: parquet.read_table(base_file, columns))
    # Every version of a key, in write order: base rows, then each log's data rows and
    # delete markers. The live rows are the keys' last versions that are not deletes:
    # one pass over all of them instead of one filter of the whole slice per log block.
    parts = [rows]
    deletes: list[tuple[int, list[str]]] = []  # (versions before the marker, keys)
    written = rows.num_rows
    for log in log_files:
        blocks = _FILE_CACHE.get(log, columns, lambda: list(read_log_file(Path(log), columns=columns)))
        for block in blocks:
            if block.rows is not None and block.rows.num_rows:
                fresh = block.rows
                if fresh.schema != rows.schema:
                    fresh = fresh.cast(rows.schema)  # log blocks hold hudi-rs's types
                parts.append(fresh)
                written += fresh.num_rows
            elif block.rows is None and block.deleted_keys:
                deletes.append((written, block.deleted_keys))
    if len(parts) == 1 and not deletes:
        return _only_keys(rows, keys)
    every = pa.concat_tables(parts) if len(parts) > 1 else rows
    index = np.arange(every.num_rows, dtype=np.int64)
    frames = [
        pl.DataFrame(
            {
                KEY: every.column(HOODIE_RECORD_KEY).cast(pa.string()),
                "_v": pa.array(index),
                "_order": pa.array(index * 2),
            }
        )
    ]
    for at, marked in deletes:
        # A delete marker sorts between the rows written before it (order 2 * index)
        # and those written after; _v -1: no row.
        frames.append(
            pl.DataFrame(
                {
                    KEY: pa.array(marked, pa.string()),
                    "_v": pa.array(np.full(len(marked), -1, np.int64)),
                    "_order": pa.array(np.full(len(marked), 2 * at - 1, np.int64)),
                }
            )
        )
    versions = pl.concat(frames) if len(frames) > 1 else frames[0]
    if keys is not None:
        versions = versions.filter(
            pl.col(KEY).is_in(pl.Series(pa.chunked_array(keys).cast(pa.string())).implode())
        )
    last = versions.sort("_order").unique(subset=[KEY], keep="last")
    take = np.sort(last.filter(pl.col("_v") >= 0)["_v"].to_numpy())
    return every.take(pa.array(take))


def _only_keys(table: pa.Table, keys: pa.Array | pa.ChunkedArray | None) -> pa.Table:
    if keys is None:
        return table
    return table.filter(pc.is_in(table.column(HOODIE_RECORD_KEY), value_set=keys))


class _ColumnCache:
    """Columns of data files already read by this (reused Spark worker) process.

    Base and log files are immutable: a name is never written twice, since it carries
    the instant that wrote it and instants only grow. So an append's reads of a slice's
    key and position columns can be served from memory in later batches. Entries are
    keyed by path, size and mtime and evicted oldest first beyond ``limit`` bytes; only
    column subsets are cached (full reads are compactions, which replace the slice).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.entries: dict[tuple, tuple[Any, int]] = {}

    def get(self, path: str | Path, columns: list[str] | None, load: Callable[[], Any]) -> Any:
        if columns is None or self.limit <= 0:
            return load()
        key = self._key(path, columns)
        hit = self.entries.pop(key, None)
        if hit is not None:
            self.entries[key] = hit  # most recently used last
            return hit[0]
        value = load()
        self._insert(key, value)
        return value

    def put(self, path: str | Path, columns: list[str], value: Any) -> None:
        """Remember what reading ``columns`` of the just-written ``path`` would return."""
        if self.limit > 0:
            self._insert(self._key(path, columns), value)

    @staticmethod
    def _key(path: str | Path, columns: list[str]) -> tuple:
        st = os.stat(path)
        return (str(path), st.st_size, st.st_mtime_ns, tuple(columns))

    def _insert(self, key: tuple, value: Any) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.used -= old[1]
        size = _nbytes(value)
        self.entries[key] = (value, size)
        self.used += size
        while self.used > self.limit and len(self.entries) > 1:
            oldest = next(iter(self.entries))
            self.used -= self.entries.pop(oldest)[1]


def _nbytes(value: Any) -> int:
    if isinstance(value, pa.Table):
        return value.nbytes
    return sum(
        (b.rows.nbytes if b.rows is not None else 0)
        + sum(len(k) + 49 for k in (b.deleted_keys or ()))
        for b in value
    )


#: The stored columns an append reads (whole rows only when TOAST values must be filled).
APPEND_COLUMNS = [HOODIE_RECORD_KEY, POS, POS_SUB]

#: Per worker process; 256 MiB holds the key and position columns of ~5M rows.
_FILE_CACHE = _ColumnCache(int(os.environ.get("CDCCTL_MERGE_CACHE_BYTES", 256 << 20)))


def _write_atomic(data: bytes, path: Path) -> int:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return len(data)


def written_blocks(
    instant: str, upserts: pa.Table | None, deleted_keys: pa.Array | pa.ChunkedArray
) -> list[LogBlock]:
    """What ``read_log_file(path, APPEND_COLUMNS)`` yields for the log file that
    ``encode_log_file(instant, ..., upserts, deleted_keys)`` wrote, without reading it."""
    blocks = []
    if upserts is not None and upserts.num_rows:
        blocks.append(LogBlock(instant, rows=upserts.select(APPEND_COLUMNS).combine_chunks()))
    if len(deleted_keys):
        blocks.append(LogBlock(instant, deleted_keys=deleted_keys.to_pylist()))
    return blocks


def execute_task(task: FileGroupTask) -> FileGroupResult:
    """Run one file-group merge (inside a Spark task or, for tests, in-process)."""
    data_schema = pa.ipc.read_schema(pa.py_buffer(task.data_schema_ipc))
    table_path = Path(task.table_path)
    logs = [str(table_path / name) for name in task.prev_logs]
    append = task.append and task.prev_file is not None
    events = None
    if task.events_file:
        with pa.memory_map(task.events_file) as source:
            events = pa.ipc.open_file(source).read_all()
    if append:
        # Only the stored rows of the batch's keys matter, and of those only the key and
        # positions, unless a TOAST placeholder needs the stored values.
        keys = events.column(KEY) if events is not None else pa.array([], pa.string())
        columns = None
        if events is None or not _has_toast(events, task.options.toast_placeholder):
            columns = APPEND_COLUMNS
        old = read_slice(task.prev_file, logs, keys=keys, columns=columns)
    else:
        old = read_slice(task.prev_file, logs)
    state_instant = task.state_instant or task.prev_instant
    old_tombs = (
        tombstones.read(tombstones.sidecar_path(table_path, task.file_id, state_instant))
        if state_instant
        else None
    )
    result = merge_file_group(
        old,
        events,
        instant=task.instant,
        file_name=task.file_name,
        task_partition=task.task_partition,
        data_schema=data_schema,
        old_tombstones=old_tombs,
        options=task.options,
        old_has_only_batch_keys=append,
    )
    if old is not None and not result.changed:
        # Only late events or no-op tombstones: keep the current slice instead of copying it.
        return FileGroupResult(
            task.bucket, task.file_id, None, task.prev_instant or "null", 0, 0, result.counts
        )
    if result.tombstones.num_rows or old_tombs is not None:
        tombstones.write(
            result.tombstones, tombstones.sidecar_path(table_path, task.file_id, task.instant)
        )
    if append:
        upserts = result.upserts
        if upserts is not None:
            upserts = upserts.cast(reader_schema(upserts.schema))
        data = encode_log_file(task.instant, task.avro_schema, upserts, result.deleted_keys)
        size = _write_atomic(data, table_path / task.file_name)
        # The next batches' appends read these columns of this (immutable) file: keep them.
        _FILE_CACHE.put(
            table_path / task.file_name,
            APPEND_COLUMNS,
            written_blocks(task.instant, upserts, result.deleted_keys),
        )
        num_writes = upserts.num_rows if upserts is not None else 0
        base_file = Path(task.prev_file).name
    else:
        size = write_base_file(result.rows, table_path / task.file_name)
        if task.avro_schema:  # Merge-on-Read only: the next batches append and read these
            _FILE_CACHE.put(
                table_path / task.file_name,
                APPEND_COLUMNS,
                result.rows.select(APPEND_COLUMNS).combine_chunks(),
            )
        num_writes = result.rows.num_rows
        base_file = None
    faults.maybe_crash("task_written", pid=task.driver_pid or None)
    return FileGroupResult(
        bucket=task.bucket,
        file_id=task.file_id,
        file_name=task.file_name,
        prev_commit=task.prev_instant or "null",
        num_writes=num_writes,
        file_size=size,
        counts=result.counts,
        base_file=base_file,
    )


def execute_tasks(tasks: list[FileGroupTask]) -> list[FileGroupResult]:
    """Run several file-group merges one after another: one Spark task's share of a batch."""
    freeze_imported_objects()
    return [execute_task(task) for task in tasks]


_frozen = False


def freeze_imported_objects() -> None:
    """Exempt the objects of the imported modules from garbage collection, once per process.

    A reused PySpark worker runs a full ``gc.collect()`` after every task; with pyarrow,
    polars and the engine imported that scan costs ~40 ms of CPU per task, more than
    most merges. Frozen objects are skipped by the collector (``gc.freeze``), so the
    per-task collection only looks at what tasks created since.
    """
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


def pack_tasks(tasks: list[FileGroupTask], slots: int) -> list[list[int]]:
    """Split task indices into at most ``slots`` bins of similar total weight.

    Every Spark task costs tens of milliseconds of scheduling and Python-worker round
    trips, so a batch runs one Spark task per core, each merging a balanced share of
    the touched file groups (longest first, each to the least loaded bin).
    """
    bins: list[list[int]] = [[] for _ in range(max(1, min(slots, len(tasks))))]
    loads = [0] * len(bins)
    for i in sorted(range(len(tasks)), key=lambda i: -tasks[i].weight):
        j = loads.index(min(loads))
        bins[j].append(i)
        loads[j] += max(tasks[i].weight, 1)
    return [b for b in bins if b]
