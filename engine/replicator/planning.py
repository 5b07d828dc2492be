"""Planning one table's share of a batch: instant, touched file groups, merge tasks.

In: the table's decoded change batch (after transaction cuts) and the offsets it reads
to. Out: a :class:`TablePlan`: a started instant, the data schema after evolution, the
extra metadata its commit will carry, and one :class:`~engine.merge.MergeTask` per
touched file group, whose events are staged as an Arrow IPC file in the work folder.
Keys map to buckets with Hudi's hashing; a truncate touches every group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.config import Config
from engine.errors import KeylessTableError, SchemaEvolutionError
from engine.files import private_dir, private_file
from engine.hudi import FileSlice, HudiWriter
from engine.hudi.retention import Retention
from engine.merge import MergeOptions, MergeTask, evolve_schema
from engine.merge.evolution import CDC_FIELDS
from engine.merge.positions import Tail
from engine.model import (
    KEY,
    OP,
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    POS,
    POS_SUB,
    SOURCE_TS,
)
from engine.replicator import schema_changes
from engine.replicator.batches import DdlItem
from engine.replicator.compaction import choose_rewrites
from engine.replicator.tables import TableRuntime

#: The table's ordering (precombine) field: the source position of each row.
ORDERING_FIELD = POS
#: The folder, in a table's staging folder, of its base files' key indexes (shared by
#: the merge workers; removed with the staging folder on reset and resync).
KEY_INDEX_DIR = "key-index"


@dataclass
class TablePlan:
    """One table's instant in a batch, ready for the merge job and then the commit."""

    rt: TableRuntime
    instant: str
    #: The checkpoint the commit records: next offset per partition.
    offsets: dict[int, int]
    schema: pa.Schema
    extra: dict[str, str]
    tasks: list[MergeTask]
    #: Truncate events the batch applies.
    truncates: int = 0
    #: Whether the batch changes the table's schema.
    schema_changed: bool = False
    #: Schema change events (the MySQL schema change topic) handled with this commit.
    ddl_events: int = 0
    #: Those events, as the replicator tracks them until the commit lands.
    ddl_items: list[DdlItem] = field(default_factory=list)
    #: The batch holds the table's last snapshot record: its snapshot is complete.
    snapshot_ended: bool = False
    #: Schema changes seen in the events, one line each (logged and put in the event log).
    schema_notes: list[str] = field(default_factory=list)


def _truncate_position(
    batch: pa.Table, floor: tuple[int, int] | None = None
) -> tuple[tuple[int, int] | None, int]:
    """The newest truncate's position in the batch, and how many distinct truncates it
    applies: a repeat of one (a replay, same position) and one not newer than ``floor``
    (the table's last truncate in earlier commits) are not counted again."""
    is_truncate = pc.equal(batch.column(OP), OP_TRUNCATE)
    if not pc.any(is_truncate).as_py():
        return None, 0
    rows = batch.filter(is_truncate).select([POS, POS_SUB])
    pairs = sorted(
        (p, s or 0)
        for p, s in zip(*(c.to_pylist() for c in rows.columns), strict=True)
        if p is not None
    )
    distinct = {p for p in pairs if floor is None or p > floor}
    return (pairs[-1] if pairs else None), len(distinct)


def _split_by_bucket(writer: HudiWriter, keyed: pa.Table) -> dict[int, pa.Table]:
    """The keyed events of each bucket, in their original order."""
    chunks: dict[int, pa.Table] = {}
    if keyed.num_rows == 0:
        return chunks
    buckets = writer.bucket_ids(keyed.column(KEY))
    order = np.argsort(buckets, kind="stable")
    sorted_buckets = buckets[order]
    keyed = keyed.take(pa.array(order))
    present = np.unique(sorted_buckets)
    starts = np.searchsorted(sorted_buckets, present, side="left")
    ends = np.searchsorted(sorted_buckets, present, side="right")
    for b, lo, hi in zip(present.tolist(), starts, ends, strict=True):
        chunks[b] = keyed.slice(int(lo), int(hi - lo))
    return chunks


def _task_weight(current: FileSlice | None, events: pa.Table | None, append: bool) -> int:
    """Rough bytes a task reads and writes: all of the slice for a rewrite, about the key
    and position columns of it for an append, plus its events."""
    stored = current.base_size + current.log_size if current else 0
    return (stored // 8 if append else stored) + (events.nbytes if events is not None else 0)


def retention(cfg: Config) -> Retention:
    """The cleaning policy of the config's ``[hudi]`` keys: by hours unless
    ``clean_retain_commits`` is set (see :mod:`engine.hudi.retention`)."""
    h = cfg.hudi
    if h.clean_retain_commits is not None:
        return Retention(commits=h.clean_retain_commits)
    return Retention(hours=h.clean_retain_hours)


def _merge_options(
    cfg: Config,
    rt: TableRuntime,
    writer: HudiWriter,
    truncate: tuple[int, int] | None,
    tails: tuple[Tail, ...],
    renames: dict[str, str],
    rewrite: bool,
) -> MergeOptions:
    min_ts = keep_after = None
    progress = rt.progress
    # Tombstones of commits the cleaning policy still retains stay (readers may be there).
    retained = writer.retained_from(retention(cfg))
    if progress.max_source_ts is not None and retained is not None:
        retention_ms = int(cfg.replicator.tombstone_retention_hours * 3_600_000)
        min_ts = progress.max_source_ts - retention_ms
        keep_after = retained
    return MergeOptions(
        truncate=truncate,
        floor=progress.floor,
        toast_placeholder=cfg.source.toast_placeholder,
        tombstone_min_ts=min_ts,
        tombstone_keep_after=keep_after,
        tails=tails,
        renames=tuple(renames.items()),
        rewrite=rewrite,
        copies=cfg.table_config(rt.name).keyless == "full-row",
    )


_ROW_OPS = pa.array([OP_READ, OP_CREATE, OP_UPDATE, OP_DELETE])


def _refuse_keyless(cfg: Config, rt: TableRuntime, batch: pa.Table) -> None:
    """Row events without a record key (a source table without a primary key) stop the
    table unless ``[tables.<name>]`` says how to identify its rows (JSON formats; Avro
    messages carry their keys, so the fix is in the source or the connector)."""
    keys = batch.column(KEY)
    if not keys.null_count:
        return
    keyless = pc.and_(pc.is_null(keys), pc.is_in(batch.column(OP), value_set=_ROW_OPS))
    if not pc.any(keyless).as_py():
        return
    if cfg.source.typed_messages:
        hint = (
            "add a primary key to the source table, or have Debezium key the topic with "
            'the connector option message.key.columns = "<schema>.<table>:<col>,..." '
            "(with Avro, rows are identified by the message keys alone; "
            'docs/guide/tables.md "Tables without a primary key")'
        )
    else:
        hint = (
            "add a primary key to the source table, or name the columns that identify a "
            f'row: [tables.{rt.name}] key_fields = ["col", ...] (or keyless = '
            '"full-row" when no columns do; '
            'docs/guide/tables.md "Tables without a primary key")'
        )
    raise KeylessTableError(
        f"table {rt.name}: {pc.sum(keyless).as_py()} row change(s) without a record key "
        f"(null Kafka key on topic {rt.topic}: the source table has no primary key)",
        hint=hint,
    )


def _reshape(
    current: pa.Schema | None,
    key_fields: list[str],
    drop_columns: list[str] | None,
    renames: dict[str, str] | None,
) -> tuple[pa.Schema | None, bool]:
    """The table's schema with columns dropped and renamed; whether that changed it.

    Raises:
        SchemaEvolutionError: a primary key column would be dropped or renamed.
    """
    drop, renames = set(drop_columns or ()), renames or {}
    if current is None or not (drop or renames):
        return current, False
    touched_keys = [k for k in key_fields if k in drop or k in renames]
    if touched_keys:
        raise SchemaEvolutionError(
            f"a schema change drops or renames the primary key column(s) {', '.join(touched_keys)}",
            hint="a key change redefines the table: rebuild it with `cdcctl resync <table>`",
        )
    cdc = {f.name for f in CDC_FIELDS}
    fields = [
        f.with_name(renames.get(f.name, f.name))
        for f in current
        if f.name in cdc or f.name not in drop
    ]
    reshaped = pa.schema(fields)
    return reshaped, not reshaped.equals(current)


def plan_table(
    cfg: Config,
    rt: TableRuntime,
    batch: pa.Table | None,
    key_fields: list[str],
    first_task: int,
    offsets: dict[int, int],
    staging: Path,
    *,
    drop_columns: list[str] | None = None,
    renames: dict[str, str] | None = None,
    ddl_events: int = 0,
    row_schemas: list | None = None,
) -> TablePlan | None:
    """Create or open the table, start an instant and stage one task per touched group.

    Returns None when there is nothing to commit and no table yet (a batch of only
    ignored or held-back records before the table's first row).

    Raises:
        SchemaEvolutionError: The batch's schema or key cannot be applied to the table.

    ``drop_columns`` / ``renames``: column drops and renames applied by a schema change
    (``source.ddl = "apply"``); the table's every file group is rewritten in the new shape.
    ``row_schemas``: the value schemas of the batch's events (DecodeResult.row_schemas),
    judged per ``schema_changes`` (:mod:`engine.replicator.schema_changes`).
    """
    has_rows = batch is not None and batch.num_rows > 0
    created = rt.writer is None
    if has_rows:
        _refuse_keyless(cfg, rt, batch)
    if rt.writer is None:
        if batch is None or not has_rows or not key_fields:
            return None
        rt.writer = HudiWriter.create(
            rt.store,
            name=rt.name,
            record_key_fields=key_fields,
            ordering_field=ORDERING_FIELD,
            num_buckets=cfg.hudi.num_buckets,
            schema=evolve_schema(None, batch.schema),
            table_type=cfg.hudi.table_type,
        )
        if rt.lease is not None:
            rt.writer.fence(rt.lease)
    writer = rt.writer
    if has_rows and key_fields and list(key_fields) != list(writer.record_key_fields):
        raise SchemaEvolutionError(
            f"the primary key changed from ({', '.join(writer.record_key_fields)}) to "
            f"({', '.join(key_fields)})",
            hint=f"a key change redefines the table: move {rt.location} away and restart "
            "to rebuild it from the topic",
        )
    current = writer.schema()
    reshaped, rewrite_all = _reshape(current, writer.record_key_fields, drop_columns, renames)
    schema, fills, notes, resets = reshaped, {}, [], []
    if batch is not None and has_rows:
        keys = writer.record_key_fields
        known = None if created else reshaped
        batch, ev = schema_changes.evolve(cfg, rt, batch, row_schemas or [], known, keys)
        schema, fills, notes, resets = ev.schema, ev.fills, ev.notes, ev.readded
        if ev.drop or fills or resets:  # every stored row changes shape or value
            rewrite_all = rewrite_all or not created
    if schema is None:
        raise SchemaEvolutionError(f"{rt.location}: the table records no schema")
    if has_rows:
        writer.check_schema(schema)  # an unstorable column fails this table, before writing
    progress = rt.progress
    truncate, truncates = None, 0
    keyed = None
    tails = progress.tails()  # as of the previous batch: what this batch's events inherit
    if batch is not None and has_rows:
        truncate, truncates = _truncate_position(batch, progress.floor)
        keyed = (
            batch.filter(pc.is_valid(batch.column(KEY))) if batch.column(KEY).null_count else batch
        )
        progress.record_tails(keyed)
        ts = pc.max(batch.column(SOURCE_TS)).as_py()
        if ts is not None:
            progress.max_source_ts = max(ts, progress.max_source_ts or 0)
    floor_after = progress.floor
    if truncate is not None and (floor_after is None or truncate > floor_after):
        floor_after = truncate
    extra = progress.extra(rt.topic, floor_after)
    instant = writer.begin()
    options = _merge_options(cfg, rt, writer, truncate, tails, renames or {}, rewrite_all)
    if fills or resets:
        options = replace(options, fills=tuple(fills.items()), resets=tuple(resets))
    progress.floor = floor_after
    changed = current is not None and not schema.equals(current)
    plan = TablePlan(rt, instant, offsets, schema, extra, [], truncates, changed, ddl_events)
    plan.schema_notes = notes
    groups = writer.file_groups()
    chunks = _split_by_bucket(writer, keyed) if keyed is not None else {}
    # Which buckets get a task: those with events, and every group on a truncate.
    everything = truncate is not None or rewrite_all
    touched = sorted(set(chunks) | (set(groups) if everything else set()))
    if not touched:
        return plan
    # On a cluster the events travel with their tasks and each worker keeps its key
    # indexes: no executor needs the driver's work folder.
    ship = cfg.spark.on_cluster
    stage = staging / rt.name / instant
    index_dir = staging / rt.name / KEY_INDEX_DIR
    if not ship:
        for folder in (staging, staging / rt.name, stage, index_dir):  # message contents
            private_dir(folder)  # owner-only
    schema_ipc = schema.serialize().to_pybytes()
    rewrite = choose_rewrites(writer, groups, touched, schema, everything, cfg.hudi)
    writes = writer.plan_writes(instant, groups, touched, rewrite, schema, first_task)
    for write in writes:
        events_file = events_ipc = None
        chunk = chunks.get(write.bucket)
        if chunk is not None and ship:
            events_ipc = _ipc_bytes(chunk)
        elif chunk is not None:
            events_file = private_file(stage / f"bucket-{write.bucket:08d}.arrow")
            with pa.OSFile(str(events_file), "wb") as sink:
                with pa.ipc.new_file(sink, chunk.schema) as ipc:
                    ipc.write_table(chunk)
        plan.tasks.append(
            MergeTask(
                slice=write,
                events_file=str(events_file) if events_file else None,
                data_schema_ipc=schema_ipc,
                options=options,
                driver_pid=os.getpid(),
                weight=_task_weight(groups.get(write.bucket), chunk, write.append),
                index_dir=str(index_dir) if writer.is_mor and not ship else None,
                events_ipc=events_ipc,
            )
        )
    return plan


def _ipc_bytes(chunk: pa.Table) -> bytes:
    """``chunk`` as the bytes of an Arrow IPC file (what a staged file would hold),
    compressed: the tasks of a batch travel through Spark's RPC, whose messages have a
    size limit (``spark.rpc.message.maxSize``, 128 MiB)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(sink, chunk.schema, options=options) as ipc:
        ipc.write_table(chunk)
    return sink.getvalue().to_pybytes()
