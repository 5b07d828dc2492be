"""Merge one micro-batch into one Hudi file group: the unit of work of a Spark task.

The driver splits each table's decoded events by Hudi bucket and stages them as Arrow
IPC files; Spark runs one task per touched file group (:func:`execute_task`), in
parallel across buckets and tables. A task reads the group's current base file, folds
the events per key in source order, applies them, and writes the group's next file
slice. Everything is vectorised Arrow/Polars work: no row ever becomes a Python object.

Semantics (see README "How changes are applied"):

* Per key, the event with the greatest ``(_cdc_pos, _cdc_pos_sub)`` wins; Kafka
  partition and offset break ties. Tombstones, and events without a source position,
  take the position of the event before them for the same key in the same partition.
* An event whose position is not newer than the stored row's changes nothing (replays).
* A delete (or tombstone) removes the row; r/c/u upsert the row image.
* Carry-over rule: untouched rows keep their ``_hoodie_commit_time``/``_commit_seqno``;
  only ``_hoodie_file_name`` changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine import faults
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
    OP_UPDATE,
    PARTITION,
    POS,
    POS_SUB,
)

#: Position of an event whose source position is unknown: it loses to every positioned
#: event of the same batch and is applied to the stored row unconditionally.
UNKNOWN_POS = -(2**63)
UPSERT_OPS = pa.array([OP_READ, OP_CREATE, OP_UPDATE])


@dataclass
class MergeCounts:
    """What one file-group merge did."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    stale: int = 0  # events not newer than the stored row (replays, late events)
    carried: int = 0


def fold_events(events: pa.Table) -> pa.Table:
    """Reduce events to the winning event per key, in source order.

    Returns the winners with ``_cdc_pos``/``_cdc_pos_sub`` filled (``UNKNOWN_POS`` where
    no position could be inherited).
    """
    ctl = pl.from_arrow(events.select([KEY, POS, POS_SUB, PARTITION, OFFSET]))
    assert isinstance(ctl, pl.DataFrame)
    ctl = ctl.with_row_index("_i")
    if ctl[POS].null_count():
        # Tombstones and position-less events sit right after the event they follow in
        # their partition; inherit its position so the tie is broken by offset.
        ctl = ctl.sort([KEY, PARTITION, OFFSET]).with_columns(
            pl.col(POS).forward_fill().over([KEY, PARTITION]),
            pl.col(POS_SUB).forward_fill().over([KEY, PARTITION]),
        )
        ctl = ctl.with_columns(pl.col(POS).fill_null(UNKNOWN_POS), pl.col(POS_SUB).fill_null(0))
    winners = (
        ctl.sort([KEY, POS, POS_SUB, PARTITION, OFFSET])
        .unique(subset=[KEY], keep="last", maintain_order=True)
    )
    idx = winners["_i"].to_arrow()
    out = events.take(idx)
    out = out.set_column(out.schema.get_field_index(POS), POS, winners[POS].to_arrow().cast(pa.int64()))
    return out.set_column(
        out.schema.get_field_index(POS_SUB), POS_SUB, winners[POS_SUB].to_arrow().cast(pa.int64())
    )


def _column_or_null(table: pa.Table, field: pa.Field) -> pa.Array | pa.ChunkedArray:
    if field.name in table.column_names:
        col = table.column(field.name)
        return col if col.type == field.type else col.cast(field.type)
    return pa.nulls(table.num_rows, field.type)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast ``table``'s columns to ``schema`` (missing columns become null)."""
    return pa.Table.from_arrays([_column_or_null(table, f) for f in schema], schema=schema)


def file_schema(data_schema: pa.Schema) -> pa.Schema:
    """Full base-file schema: the five Hudi meta columns, then the data columns."""
    meta = [pa.field(name, pa.string()) for name in HOODIE_META_COLUMNS]
    return pa.schema(meta + list(data_schema))


def merge_file_group(
    old: pa.Table | None,
    events: pa.Table | None,
    *,
    instant: str,
    file_name: str,
    task_partition: int,
    data_schema: pa.Schema,
) -> tuple[pa.Table, MergeCounts]:
    """Apply a bucket's events to its stored rows; return the new slice's rows.

    Args:
        old: rows of the current base file (full file schema), or None for a new group.
        events: this bucket's change-batch rows (control columns + row image), or None.
        instant: the commit instant being written.
        file_name: the new base file's name (goes into ``_hoodie_file_name``).
        task_partition: Spark task partition id (part of ``_hoodie_commit_seqno``).
        data_schema: the table's data schema (source columns + replica CDC columns).
    """
    schema = file_schema(data_schema)
    counts = MergeCounts()
    old = _conform(old, schema) if old is not None else schema.empty_table()
    if events is None or events.num_rows == 0:
        winners = None
    else:
        winners = fold_events(events.filter(pc.is_valid(events.column(KEY))))
    old_keys = old.column(HOODIE_RECORD_KEY)
    if winners is not None and winners.num_rows:
        idx = pc.index_in(winners.column(KEY), value_set=old_keys)
        exists = pc.is_valid(idx)
        if old.num_rows:
            stored_pos = old.column(POS).take(idx)
            stored_sub = old.column(POS_SUB).take(idx)
            wpos, wsub = winners.column(POS), winners.column(POS_SUB)
            not_newer = pc.or_(
                pc.less(wpos, stored_pos),
                pc.and_(pc.equal(wpos, stored_pos), pc.less_equal(wsub, stored_sub)),
            )
            stale = pc.and_(
                pc.and_(exists, pc.not_equal(wpos, UNKNOWN_POS)), pc.fill_null(not_newer, False)
            )
            counts.stale = pc.sum(stale).as_py() or 0
            if counts.stale:
                keep = pc.invert(stale)
                winners, exists, idx = winners.filter(keep), exists.filter(keep), idx.filter(keep)
                stored_pos, stored_sub = stored_pos.filter(keep), stored_sub.filter(keep)
            # An event without a position keeps the stored row's position.
            unknown = pc.equal(winners.column(POS), UNKNOWN_POS)
            if pc.any(unknown).as_py():
                winners = winners.set_column(
                    winners.schema.get_field_index(POS),
                    POS,
                    pc.if_else(pc.and_(unknown, exists), stored_pos, winners.column(POS)),
                )
        is_upsert = pc.is_in(winners.column(OP), value_set=UPSERT_OPS)
        counts.inserts = pc.sum(pc.and_(is_upsert, pc.invert(exists))).as_py() or 0
        counts.updates = pc.sum(pc.and_(is_upsert, exists)).as_py() or 0
        counts.deletes = pc.sum(pc.and_(pc.invert(is_upsert), exists)).as_py() or 0
        touched = pc.is_in(old_keys, value_set=winners.column(KEY))
        carried = old.filter(pc.invert(touched))
        upserts = winners.filter(is_upsert)
    else:
        carried, upserts = old, None

    counts.carried = carried.num_rows
    parts = []
    if carried.num_rows:
        carried = carried.set_column(
            carried.schema.get_field_index(HOODIE_FILE_NAME),
            HOODIE_FILE_NAME,
            pa.array(np.full(carried.num_rows, file_name, dtype=object), pa.string()),
        )
        parts.append(carried)
    if upserts is not None and upserts.num_rows:
        n = upserts.num_rows
        record_index = pa.array(np.arange(carried.num_rows, carried.num_rows + n)).cast(pa.string())
        seqno = pc.binary_join_element_wise(f"{instant}_{task_partition}_", record_index, "")
        meta = {
            HOODIE_COMMIT_TIME: pa.array(np.full(n, instant, dtype=object), pa.string()),
            HOODIE_COMMIT_SEQNO: seqno,
            HOODIE_RECORD_KEY: upserts.column(KEY).cast(pa.string()),
            HOODIE_PARTITION_PATH: pa.array(np.full(n, "", dtype=object), pa.string()),
            HOODIE_FILE_NAME: pa.array(np.full(n, file_name, dtype=object), pa.string()),
        }
        columns = [
            meta[f.name] if f.name in meta else _column_or_null(upserts, f) for f in schema
        ]
        parts.append(pa.Table.from_arrays(columns, schema=schema))
    result = pa.concat_tables(parts) if parts else schema.empty_table()
    return result, counts


@dataclass
class FileGroupTask:
    """Everything a Spark task needs to rewrite one file group (picklable, paths only)."""

    table_path: str
    instant: str
    bucket: int
    file_id: str
    file_name: str
    prev_file: str | None
    prev_instant: str | None
    events_file: str | None
    data_schema_ipc: bytes
    task_partition: int
    driver_pid: int = 0


@dataclass
class FileGroupResult:
    """What a task wrote: the input of the commit's write stats."""

    bucket: int
    file_id: str
    file_name: str | None  # None: nothing changed, no new slice was written
    prev_commit: str
    num_writes: int
    file_size: int
    counts: MergeCounts


def write_base_file(table: pa.Table, path: Path) -> int:
    """Write a base file atomically (staged without the .parquet suffix); return its size."""
    tmp = path.with_name("." + path.name + ".tmp")
    pq.write_table(table, tmp, compression="snappy", write_statistics=[HOODIE_RECORD_KEY])
    os.replace(tmp, path)
    return path.stat().st_size


def execute_task(task: FileGroupTask) -> FileGroupResult:
    """Run one file-group merge (inside a Spark task or, for tests, in-process)."""
    data_schema = pa.ipc.read_schema(pa.py_buffer(task.data_schema_ipc))
    old = pq.read_table(task.prev_file) if task.prev_file else None
    events = None
    if task.events_file:
        with pa.memory_map(task.events_file) as source:
            events = pa.ipc.open_file(source).read_all()
    result, counts = merge_file_group(
        old,
        events,
        instant=task.instant,
        file_name=task.file_name,
        task_partition=task.task_partition,
        data_schema=data_schema,
    )
    changed = counts.inserts + counts.updates + counts.deletes
    if old is not None and changed == 0:
        # Only replays or no-op tombstones: keep the current slice instead of copying it.
        return FileGroupResult(
            task.bucket, task.file_id, None, task.prev_instant or "null", 0, 0, counts
        )
    size = write_base_file(result, Path(task.table_path) / task.file_name)
    faults.maybe_crash("task_written", pid=task.driver_pid or None)
    return FileGroupResult(
        bucket=task.bucket,
        file_id=task.file_id,
        file_name=task.file_name,
        prev_commit=task.prev_instant or "null",
        num_writes=result.num_rows,
        file_size=size,
        counts=counts,
    )
