"""The fold: one file group's stored rows and tombstones + a batch's events -> new state.

:func:`merge_file_group` is pure: Arrow tables in, Arrow tables out, no file I/O (the
task in :mod:`engine.merge.task` reads and writes through the Hudi package). Given the
group's live rows (all of them, or for an append only those of the batch's keys), its
delete tombstones and the batch's events for the group, it decides per event whether it
is late, folds the rest per key in source order, resolves TOAST placeholders and returns
which stored rows stay, the winning upserts, the deleted keys and the new tombstones.
Everything is vectorised Arrow/Polars work: no row ever becomes a Python object.

Rules (docs/guide/tables.md, "Tables"):

* Positions compare as ``(_cdc_pos, _cdc_pos_sub)``; ties break on Kafka partition and
  offset. Tombstones, and events without a source position, take the position of the
  event before them for the same key in the same partition
  (:func:`engine.merge.positions.inherit_positions`); when there is none they are
  applied unconditionally.
* An event is *late* when its position is not newer than the newest position already
  seen for its key: earlier in the batch, in the stored row, in the key's delete
  tombstone, or the table's last truncate. Late events change nothing and are counted.
  An equal Debezium position is a replay (late); an equal order value (``_cdc_by_field``)
  is another change read later, so it is newer (:func:`engine.merge.positions.not_newer`).
  Truncates always carry Debezium positions (no order-field format has one), so an event
  at a truncate's position stays gone.
* Per key the newest remaining event wins: r/c/u upsert its row image, d and tombstones
  delete the row and leave a tombstone.
* A truncate at position T removes every stored row and tombstone older than T; events
  of the batch older than T are dropped (they happened before it).
* Partial images (tables with per-column positions, :mod:`engine.merge.partial`): the
  newest value of each column wins, and a row lives iff an upsert is newer than its
  newest delete.
* A TOAST placeholder means "unchanged": the value comes from the previous event of the
  key in the batch, else from the stored row; a row never seen keeps null (counted).
* Carry-over: untouched stored rows are returned as they are (the Hudi writer keeps
  their commit time and sequence number).
* Full-row tables (``MergeOptions.copies``): the key is a hash of the row, so every event
  of a key carries the same values. Late events are dropped as above (a replayed event is
  not newer than the stored position); the others are *all* applied: the stored
  ``_cdc_copies`` plus the sum of their deltas is the new count. The newest event gives the
  position; the key stays (as an upsert with the new count) while the count is above 0,
  and is deleted (leaving a tombstone) otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine.hudi import (
    HOODIE_RECORD_KEY,
    TOMBSTONE_INSTANT,
    TOMBSTONE_SCHEMA,
    file_schema,
    only_keys,
)
from engine.merge import partial
from engine.merge.evolution import fill_columns
from engine.merge.positions import (
    KEY_GROUP,
    Tail,
    combined,
    combined_value,
    inherit_positions,
    key_starts,
    not_newer,
    sort_by_key,
    with_previous_max_rank,
)
from engine.merge.toast import DEFAULT_TOAST, has_toast, resolve_toast
from engine.model import (
    BY_FIELD,
    COPIES,
    KEY,
    NO_POS,
    OFFSET,
    OP,
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_TOMBSTONE,
    OP_UPDATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
)

#: Position of an event whose source position is unknown (before any other).
UNKNOWN_POS = NO_POS
UPSERT_OPS = pa.array([OP_READ, OP_CREATE, OP_UPDATE])
_DELETE_OPS = pa.array([OP_DELETE, OP_TOMBSTONE])


@dataclass
class MergeCounts:
    """What one file-group merge did."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    late: int = 0  # events not newer than what the table already had for their key
    toast_unresolved: int = 0  # TOAST placeholders with no earlier value anywhere
    toast_filled: int = 0  # TOAST placeholders given the previous value of their column
    carried: int = 0
    truncated: int = 0  # stored rows removed by a truncate
    #: Source events applied, by op (r, c, u, d): each event once, however later events
    #: of the batch change its key; late events and Kafka tombstones are not counted.
    events_r: int = 0
    events_c: int = 0
    events_u: int = 0
    events_d: int = 0

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
    #: Each partition's last applied keyed event of earlier batches (position inheritance).
    tails: tuple[Tail, ...] = ()
    #: Stored columns renamed by an applied schema change (old, new).
    renames: tuple[tuple[str, str], ...] = ()
    #: Write the group anew even if no event changes it (a column dropped or renamed).
    rewrite: bool = False
    #: A ``keyless = "full-row"`` table: the events' ``_cdc_copies`` deltas are added to
    #: the stored count instead of the newest event replacing the row.
    copies: bool = False
    #: Columns added with a default (``fill_defaults``): stored rows without the column
    #: get the value (name, value).
    fills: tuple[tuple[str, object], ...] = ()
    #: Stored columns whose values are discarded before ``fills`` (a column kept after a
    #: drop and added again in the source).
    resets: tuple[str, ...] = ()


@dataclass
class MergeResult:
    """A file group's new state, and what was done."""

    #: Stored rows that stay as they are (empty for an append, which rewrites none).
    carried: pa.Table
    #: The batch's winning upserts: the events' row images (record key in ``_cdc_key``).
    upserts: pa.Table | None
    #: Keys whose stored row the batch deleted (a Merge-on-Read log's delete block).
    deleted_keys: pa.Array
    tombstones: pa.Table
    counts: MergeCounts = field(default_factory=MergeCounts)
    changed: bool = False
    #: The keys the batch's winning events decided (upserts and deletes; None: none).
    winner_keys: pa.Array | pa.ChunkedArray | None = None


def _newer_than(pos: pa.ChunkedArray, sub: pa.ChunkedArray, pair: tuple[int, int]) -> pa.Array:
    """pos/sub > pair, lexicographically; null positions count as older."""
    gt = pc.or_(pc.greater(pos, pair[0]), pc.and_(pc.equal(pos, pair[0]), pc.greater(sub, pair[1])))
    return pc.fill_null(gt, False)


def _column_or_null(table: pa.Table, fld: pa.Field) -> pa.Array | pa.ChunkedArray:
    if fld.name in table.column_names:
        col = table.column(fld.name)
        return col if col.type == fld.type else col.cast(fld.type)
    return pa.nulls(table.num_rows, fld.type)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Select and cast ``table``'s columns to ``schema`` (missing columns become null)."""
    return pa.Table.from_arrays([_column_or_null(table, f) for f in schema], schema=schema)


def _stored(old: pa.Table | None, data_schema: pa.Schema) -> pa.Table:
    """Stored rows in the table's current file schema (columns added since are null)."""
    schema = file_schema(data_schema)
    return _conform(old, schema) if old is not None else schema.empty_table()


def merge_file_group(
    old: pa.Table | None,
    events: pa.Table | None,
    *,
    instant: str,
    data_schema: pa.Schema,
    old_tombstones: pa.Table | None = None,
    options: MergeOptions | None = None,
    old_has_only_batch_keys: bool = False,
) -> MergeResult:
    """Apply a bucket's events to its stored rows and tombstones.

    Args:
        old: rows of the current base file, or None for a new group.
        events: this bucket's change-batch rows (control columns + row image), or None.
        instant: the commit instant being written (recorded with new tombstones).
        data_schema: the table's data schema (source columns + replica CDC columns).
        old_tombstones: the group's current delete tombstones.
        options: truncate, floor, TOAST placeholder and tombstone retention.
        old_has_only_batch_keys: ``old`` was read for the batch's keys only (an append):
            it need not be filtered by them again, and no stored row is carried over.
    """
    opts = options or MergeOptions()
    counts = MergeCounts()
    if old is not None and opts.renames:
        renamed = dict(opts.renames)
        old = old.rename_columns([renamed.get(n, n) for n in old.column_names])
    if old is not None and opts.resets:
        old = old.drop_columns([c for c in opts.resets if c in old.column_names])
    if old is not None and opts.fills:
        old = fill_columns(old, opts.fills, data_schema)
    old = _stored(old, data_schema)
    tombs = (
        old_tombstones.cast(TOMBSTONE_SCHEMA)
        if old_tombstones is not None
        else TOMBSTONE_SCHEMA.empty_table()
    )
    changed = opts.rewrite
    before_truncate = old
    if opts.truncate is not None:
        keep = _newer_than(old.column(POS), old.column(POS_SUB), opts.truncate)
        counts.truncated = old.num_rows - (pc.sum(keep).as_py() or 0)
        changed = changed or counts.truncated > 0 or tombs.num_rows > 0
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
            keep = pc.or_(pc.invert(known), newer)
            _count_superseded(events.filter(pc.invert(keep)), before_truncate, counts)
            events = events.filter(keep)
        if events.num_rows and partial.is_partial(data_schema):
            winners, applied, late = partial.fold_partial(
                events, old, tombs, data_schema, combined_value(floor), old_has_only_batch_keys
            )
            counts.late += len(late)
            _count_ops(applied, counts)
        elif events.num_rows:
            winners, history = _decide(
                events, old, tombs, floor, opts, counts, old_has_only_batch_keys
            )
            if opts.copies and winners.num_rows:
                winners = _count_copies(winners, history, old)
                history = None

    old_keys = old.column(HOODIE_RECORD_KEY)
    upserts: pa.Table | None = None
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
            upserts = resolve_toast(upserts, history, old, opts.toast_placeholder, counts)
        deleted = winners.filter(pc.and_(is_delete, pc.is_valid(winners.column(POS))))
        fresh = pa.table(
            {
                KEY: deleted.column(KEY).cast(pa.string()),
                POS: deleted.column(POS),
                POS_SUB: deleted.column(POS_SUB),
                SOURCE_TS: _deletion_time(deleted, events, old),
                TOMBSTONE_INSTANT: pa.array([instant] * deleted.num_rows, pa.string()),
            },
            schema=TOMBSTONE_SCHEMA,
        )
        survivors = tombs.filter(
            pc.invert(pc.is_in(tombs.column(KEY), value_set=winners.column(KEY)))
        )
        new_tombs = pa.concat_tables([survivors, fresh])
    if (
        opts.tombstone_min_ts is not None
        and opts.tombstone_keep_after is not None
        and new_tombs.num_rows
    ):
        expired = pc.and_(
            pc.fill_null(pc.less(new_tombs.column(SOURCE_TS), opts.tombstone_min_ts), True),
            pc.less_equal(new_tombs.column(TOMBSTONE_INSTANT), opts.tombstone_keep_after),
        )
        if pc.any(expired).as_py():
            new_tombs = new_tombs.filter(pc.invert(expired))
            changed = True

    counts.carried = carried.num_rows
    decided = winners.column(KEY) if winners is not None and winners.num_rows else None
    return MergeResult(carried, upserts, deleted_keys, new_tombs, counts, changed, decided)


#: The column :func:`fold_groups` marks each event with its file group's place in.
GROUP = "_cdc_fold_group"


def fold_groups(
    groups: list[tuple[pa.Table, pa.Table, pa.Table | None]],
    *,
    instant: str,
    data_schema: pa.Schema,
    options: MergeOptions | None = None,
) -> list[MergeResult]:
    """:func:`merge_file_group` of several appends of one table at once: the same results,
    group by group, for the cost of one fold.

    Each group is ``(old, events, old_tombstones)`` as an append reads them (``old``: the
    stored rows of the batch's keys, the same columns in every group), with no TOAST
    placeholder among the events, of a table without partial images or row counts. A
    key lives in one file group (the bucket index hashes it), so folding the groups'
    events together decides every key as its own group would; the results are then
    split by the group each key came from. Counts: inserts, updates and deletes per
    group (the write statistics of each file); the others (late events, TOAST, events
    by op) on the first group, as the table's totals only add them up.
    """
    opts = options or MergeOptions()
    if not groups:
        return []
    events = pa.concat_tables(
        [
            e.append_column(GROUP, pa.array(np.full(e.num_rows, i, np.int32)))
            for i, (_, e, _) in enumerate(groups)
        ],
        promote_options="default",
    )
    olds = [old for old, _, _ in groups]
    tomb_parts = [t.cast(TOMBSTONE_SCHEMA) for _, _, t in groups if t is not None]
    tombs = pa.concat_tables(tomb_parts) if tomb_parts else None
    folded = merge_file_group(
        pa.concat_tables(olds, promote_options="default"),
        events,
        instant=instant,
        data_schema=data_schema,
        old_tombstones=tombs,
        options=opts,
        old_has_only_batch_keys=True,
    )
    # Which group each key belongs to: its events' group, or its stored tombstone's.
    owner = pl.concat(
        [
            pl.DataFrame({KEY: events.column(KEY).cast(pa.string()), GROUP: events.column(GROUP)}),
            *(
                pl.DataFrame(
                    {KEY: t.column(KEY).cast(pa.string()), GROUP: np.full(t.num_rows, i, np.int32)}
                )
                for i, (_, _, t) in enumerate(groups)
                if t is not None and t.num_rows
            ),
        ]
    ).unique(subset=[KEY], keep="first")

    def group_of(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        frame = pl.DataFrame({KEY: keys.cast(pa.string())})
        joined = frame.join(owner, on=KEY, how="left", maintain_order="left")
        return joined[GROUP].to_numpy()

    upserts = folded.upserts
    upsert_group = None
    if upserts is not None:
        upsert_group = upserts.column(GROUP).to_numpy()
        upserts = upserts.drop_columns([GROUP])
    deleted_group = group_of(folded.deleted_keys)
    tomb_group = group_of(folded.tombstones.column(KEY))
    decided = folded.winner_keys
    decided_group = group_of(decided) if decided is not None else np.empty(0, np.int32)
    out = []
    for i, (old, (_, _, old_tombs)) in enumerate(zip(olds, groups, strict=True)):
        counts = MergeCounts() if i else _table_counts(folded.counts)
        mine = decided_group == i
        tombstones = folded.tombstones.filter(pa.array(tomb_group == i))
        group_upserts = None
        if mine.any() and upserts is not None and upsert_group is not None:
            group_upserts = upserts.filter(pa.array(upsert_group == i))
            exists = pc.is_in(group_upserts.column(KEY), value_set=old.column(HOODIE_RECORD_KEY))
            counts.updates = pc.sum(exists).as_py() or 0
            counts.inserts = group_upserts.num_rows - counts.updates
        deleted = folded.deleted_keys.filter(pa.array(deleted_group == i))
        counts.deletes = len(deleted)
        before = old_tombs.num_rows if old_tombs is not None else 0
        # As merge_file_group decides: a group with a winning event, or whose tombstones
        # expired, changed.
        changed = opts.rewrite or bool(mine.any()) or tombstones.num_rows != before
        out.append(
            MergeResult(
                folded.carried,  # an append carries no stored row over
                group_upserts,
                deleted,
                tombstones,
                counts,
                changed,
                decided.filter(pa.array(mine)) if decided is not None and mine.any() else None,
            )
        )
    return out


def _table_counts(counts: MergeCounts) -> MergeCounts:
    """The counts that are not a file's own (late, TOAST, events by op, truncated)."""
    return replace(counts, inserts=0, updates=0, deletes=0, carried=0)


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
    by_field = BY_FIELD in events.column_names
    columns = [KEY, OP, POS, POS_SUB, PARTITION, OFFSET] + ([BY_FIELD] if by_field else [])
    ctl = sort_by_key(pl.DataFrame(events.select(columns)).with_row_index("_i"))
    # Sorted by key, repeats are neighbours. Without repeats (the common case of a
    # deduplicated or sparse batch) the per-key window work below is skipped.
    keys = ctl[KEY_GROUP]
    repeats = ctl.height > 1 and bool((keys.slice(1) == keys.slice(0, ctl.height - 1)).any())
    ctl = inherit_positions(ctl, opts.tails, repeats=repeats)
    ctl = ctl.with_columns(_c=combined(pl.col(POS), pl.col(POS_SUB).fill_null(0)))
    # Only the batch's keys matter: filter the stored rows before building frames.
    batch_keys = events.column(KEY)
    stored = _stored_positions(
        old if old_has_only_batch_keys else only_keys(old, batch_keys),
        tombs.filter(pc.is_in(tombs.column(KEY), value_set=batch_keys))
        if tombs.num_rows
        else tombs,
    )
    # Late: at or below the key's stored position, the truncate floor, or an earlier
    # event of the same key in this batch (null comparisons are "not late").
    # A Kafka tombstone comes after the event whose position it inherits. After a delete
    # it only repeats it (late, as any event at an equal position); after an upsert at
    # its position (a live stored row, or the key's previous event in the batch) it is
    # the delete itself: ExtractNewRecordState's drop mode leaves only the tombstone.
    tomb = pl.col(OP) == OP_TOMBSTONE
    # An order value equal to one already seen is another change read later (newer); a
    # Kafka tombstone never is one: it belongs to the event before it.
    equal_is_newer = pl.col(BY_FIELD).fill_null(False) & ~tomb if by_field else pl.lit(False)
    late = pl.lit(False)
    previous = pl.when(key_starts([KEY_GROUP])).then(None).otherwise(pl.col(OP).shift(1))
    after_batch_upsert = tomb & previous.is_in(UPSERT_OPS.to_pylist()).fill_null(False)
    if stored is not None:
        ctl = ctl.join(
            stored.select(KEY, "_stored", "_live"), on=KEY, how="left", maintain_order="left"
        )
        after_upsert = tomb & pl.col("_live").fill_null(False)
        if by_field and repeats:
            # A tombstone right after an order-valued upsert of this batch deletes it, even
            # when that upsert's value equals the stored position (it was newer there).
            after_field_upsert = (
                after_batch_upsert
                & pl.col(BY_FIELD).shift(1).fill_null(False)
                & ~key_starts([KEY_GROUP])
            )
            after_upsert = after_upsert | after_field_upsert
        late = late | not_newer(pl.col("_c"), pl.col("_stored"), after_upsert | equal_is_newer)
    floor_value = combined_value(floor)
    if floor_value is not None:
        late = late | (pl.col("_c") <= pl.lit(floor_value, pl.Int128))
    if repeats:
        ctl = with_previous_max_rank(ctl)
        late = late | not_newer(
            pl.col("_rank"), pl.col("_prev_rank"), after_batch_upsert | equal_is_newer
        )
    ctl = ctl.with_columns(_late=(pl.col("_c").is_not_null() & late).fill_null(False))
    counts.late += int(ctl.filter(pl.col("_late") & (pl.col(OP) != OP_TOMBSTONE)).height)
    _count_ops(ctl.filter(~pl.col("_late"))[OP].to_arrow(), counts)
    kept = ctl.filter(~pl.col("_late")).with_columns(
        pl.col("_c").fill_null(combined_value((UNKNOWN_POS, 0)))
    )
    winners_ctl = (
        kept.sort([KEY_GROUP, "_c", PARTITION, OFFSET, "_i"]).unique(
            subset=[KEY_GROUP], keep="last", maintain_order=True
        )
        if repeats
        else kept
    )
    winners = events.take(winners_ctl["_i"].to_arrow())
    pos = winners_ctl[POS].to_arrow().cast(pa.int64())
    sub = pc.if_else(pc.is_valid(pos), winners_ctl[POS_SUB].to_arrow().cast(pa.int64()), None)
    # An event without a known position keeps the stored row's (or tombstone's) position.
    if stored is not None and pos.null_count:
        found = pl.DataFrame(winners.select([KEY])).join(
            stored.select(KEY, POS, POS_SUB), on=KEY, how="left", maintain_order="left"
        )
        pos = pc.coalesce(pos, found[POS].to_arrow().cast(pa.int64()))
        sub = pc.coalesce(sub, found[POS_SUB].to_arrow().cast(pa.int64()))
    winners = winners.set_column(winners.schema.get_field_index(POS), POS, pos)
    winners = winners.set_column(winners.schema.get_field_index(POS_SUB), POS_SUB, sub)
    if opts.copies:
        return winners, events.take(kept["_i"].to_arrow())
    if not has_toast(winners, opts.toast_placeholder):
        return winners, None
    order = kept.sort([KEY, "_c", PARTITION, OFFSET, "_i"])  # by the key itself: see resolve_toast
    return winners, events.take(order["_i"].to_arrow())


def _deletion_time(deleted: pa.Table, events: pa.Table | None, old: pa.Table) -> pa.Array:
    """Source time of each new delete tombstone: the deleting event's, else (a Kafka
    tombstone that is the delete, which has none) the newest of its key's events in the
    batch, else the stored row's (when the merge read it)."""
    ts = deleted.column(SOURCE_TS).combine_chunks().cast(pa.int64())
    if not ts.null_count or events is None or not deleted.num_rows:
        return ts
    keys = pl.DataFrame({KEY: deleted.column(KEY).cast(pa.string())})
    newest = (
        pl.DataFrame({KEY: events.column(KEY).cast(pa.string()), "_t": events.column(SOURCE_TS)})
        .group_by(KEY)
        .agg(pl.col("_t").max())
    )
    stored = pl.DataFrame(
        {KEY: old.column(HOODIE_RECORD_KEY).cast(pa.string()), "_s": old.column(SOURCE_TS)}
    ).unique(subset=[KEY], keep="last")
    joined = keys.join(newest, on=KEY, how="left", maintain_order="left").join(
        stored, on=KEY, how="left", maintain_order="left"
    )
    return pc.coalesce(
        ts, joined["_t"].to_arrow().cast(pa.int64()), joined["_s"].to_arrow().cast(pa.int64())
    )


def _count_copies(winners: pa.Table, kept: pa.Table | None, old: pa.Table) -> pa.Table:
    """Full-row tables: each winner's count = stored count + the kept events' deltas.

    A winner whose count stays above 0 becomes an upsert of its row (a delete event
    carries the full before image, so its row is the row), one at 0 or below a delete.
    """
    names = [KEY, COPIES]
    deltas = (
        pl.DataFrame(kept.select(names))
        .group_by(KEY)
        .agg(pl.col(COPIES).fill_null(0).cast(pl.Int64).sum().alias("_delta"))
        if kept is not None and COPIES in kept.column_names
        else pl.DataFrame({KEY: [], "_delta": []}, schema={KEY: pl.String, "_delta": pl.Int64})
    )
    frame = pl.DataFrame(winners.select([KEY])).with_row_index("_w")
    frame = frame.join(deltas, on=KEY, how="left", maintain_order="left")
    if old.num_rows and COPIES in old.column_names:
        stored = pl.DataFrame(
            {
                KEY: old.column(HOODIE_RECORD_KEY).cast(pa.string()),
                "_stored": old.column(COPIES).cast(pa.int64()),
            }
        ).unique(subset=[KEY], keep="last")
        frame = frame.join(stored, on=KEY, how="left", maintain_order="left")
    else:
        frame = frame.with_columns(_stored=pl.lit(None, pl.Int64))
    total = (
        frame.sort("_w")
        .select((pl.col("_stored").fill_null(0) + pl.col("_delta").fill_null(0)).alias("t"))
        .to_series()
        .to_arrow()
        .cast(pa.int64())
    )
    alive = pc.greater(total, 0)
    op = winners.column(OP)
    op = pc.if_else(
        alive,
        pc.if_else(pc.is_in(op, value_set=_DELETE_OPS), pa.scalar(OP_UPDATE), op),
        pa.scalar(OP_DELETE),
    )
    winners = winners.set_column(winners.schema.get_field_index(OP), OP, op)
    if COPIES in winners.column_names:
        i = winners.schema.get_field_index(COPIES)
        winners = winners.set_column(i, winners.schema.field(i), pc.max_element_wise(total, 0))
    return winners


def _count_ops(ops: pa.Array | pa.ChunkedArray, counts: MergeCounts) -> None:
    """Add applied events by op (``events_r`` ...); tombstones are not counted."""
    for entry in pc.value_counts(ops).to_pylist():
        name = f"events_{entry['values']}"
        if name in MergeCounts.__dataclass_fields__:
            setattr(counts, name, getattr(counts, name) + entry["counts"])


def _count_superseded(gone: pa.Table, stored: pa.Table, counts: MergeCounts) -> None:
    """Count the batch's events older than its truncate: applied (then emptied by the
    truncate) once each; a repeat of one (same key, op and position: a replay, e.g. by
    Kafka Connect after a crash) or one not newer than the key's stored row is late."""
    if not gone.num_rows:
        return
    frame = pl.DataFrame(gone.select([KEY, OP, POS, POS_SUB])).filter(pl.col(OP) != OP_TOMBSTONE)
    distinct = frame.unique(subset=[KEY, OP, POS, POS_SUB], keep="first", maintain_order=True)
    late = frame.height - distinct.height
    if stored.num_rows and distinct.height:
        have = pl.DataFrame(stored.select([HOODIE_RECORD_KEY, POS, POS_SUB])).rename(
            {HOODIE_RECORD_KEY: KEY, POS: "_sp", POS_SUB: "_ss"}
        )
        joined = distinct.join(have, on=KEY, how="left")
        pos, sub = pl.col(POS), pl.col(POS_SUB).fill_null(0)
        sp, ss = pl.col("_sp"), pl.col("_ss").fill_null(0)
        older = (pos < sp) | ((pos == sp) & (sub <= ss))
        stale = joined.select(older.fill_null(False)).to_series()
        late += int(stale.sum())
        distinct = joined.filter(~stale)
    counts.late += late
    _count_ops(distinct[OP].to_arrow(), counts)


def _stored_positions(old: pa.Table, tombs: pa.Table) -> pl.DataFrame | None:
    """Per stored key (live row or tombstone) its position, also as one Int128."""
    frames = []
    for table, key_col, live in ((old, HOODIE_RECORD_KEY, True), (tombs, KEY, False)):
        if table.num_rows:
            frame = pl.DataFrame(table.select([key_col, POS, POS_SUB]))
            frames.append(frame.rename({key_col: KEY}).with_columns(_live=pl.lit(live)))
    if not frames:
        return None
    stored = pl.concat(frames).filter(pl.col(POS).is_not_null())
    stored = stored.with_columns(_stored=combined(pl.col(POS), pl.col(POS_SUB).fill_null(0)))
    return stored.sort("_stored").unique(subset=[KEY], keep="last")
