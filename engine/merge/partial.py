"""Partial images: the newest value of each column wins, in any delivery order.

Tables of generic CDC JSON with ``images = "partial"`` (events carry only the columns
that changed) keep, per row, the position of every non-key column's value
(``_cdc_pos__c`` / ``_cdc_sub__c``) and the newest delete older than the row's values
(``_cdc_floor_pos`` / ``_cdc_floor_sub``), as Apache Paimon's partial-update sequence
groups do with one group per column. A table is partial when its data schema has
``_cdc_floor_pos`` (see :func:`is_partial`).

The rule, per key, over the stored row (as if one event carrying every column at its
stored position), the key's delete tombstone and the batch's events:

* ``D`` = the newest delete: of the batch, the tombstone, or the stored row's floor.
* The row is live iff some upsert (insert or update) is newer than ``D``.
* Each column takes the value of the newest upsert newer than ``D`` that carries it;
  none: null.
* A dead row is deleted and leaves (or keeps) a tombstone at ``D``.

"Newer" compares positions, then, on equal positions (order values: partial images
exist only in generic CDC JSON, :func:`engine.merge.positions.not_newer`), the order the
changes were read in: the stored delete (floor or tombstone) first, then the stored
values (set after it), then the batch's events by Kafka partition, offset and place in
their message. So an event at the position of a stored value or delete replaces it.

This equals applying every event in (order value, offset) order (an upsert sets the
columns it carries and creates the row when it is absent, a delete removes the row),
whatever the delivery order and however the events are cut into batches: the state
kept — the per-column positions and the floor — is all the later events need. Events
that change nothing (every column they carry has a newer value, or older than ``D``)
are late.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine.hudi import HOODIE_RECORD_KEY, only_keys
from engine.merge.positions import combined
from engine.model import (
    COLUMN_POS_PREFIX,
    FLOOR_POS,
    FLOOR_SUB,
    KEY,
    OFFSET,
    OP,
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    OP_UPDATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
    column_pos,
    column_sub,
)

_UPSERTS = [OP_READ, OP_CREATE, OP_UPDATE]
#: Read order, the tie-break after the position (``_t``): stored deletes, stored values,
#: then the batch's events in (partition, offset, place in the batch) order.
_STORED_DELETE = -2
_STORED_VALUE = -1


def is_partial(data_schema: pa.Schema) -> bool:
    """Whether a table keeps per-column positions (partial images)."""
    return FLOOR_POS in data_schema.names


def value_columns(data_schema: pa.Schema) -> list[str]:
    """The columns that have positions of their own (every non-key source column)."""
    return [
        f.name.removeprefix(COLUMN_POS_PREFIX)
        for f in data_schema
        if f.name.startswith(COLUMN_POS_PREFIX)
    ]


def _conform(table: pa.Table, schema: pa.Schema) -> list[pa.Array | pa.ChunkedArray]:
    out = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            out.append(col if col.type == f.type else col.cast(f.type))
        else:
            out.append(pa.nulls(table.num_rows, f.type))
    return out


def _candidates(events: pa.Table, stored: pa.Table, data_schema: pa.Schema) -> pa.Table:
    """The upsert events and the stored rows in one table (data schema + key, read
    order ``_t``)."""
    schema = data_schema.append(pa.field(KEY, pa.string())).append(pa.field("_t", pa.int64()))
    if FLOOR_POS not in events.column_names:
        # A full-image batch (the table's images setting changed): every upsert carries
        # every column, absent ones as null.
        for c in value_columns(data_schema):
            for name, part in ((column_pos(c), POS), (column_sub(c), POS_SUB)):
                arr = events.column(part)
                if name in events.column_names:
                    events = events.set_column(events.schema.get_field_index(name), name, arr)
                else:
                    events = events.append_column(name, arr)
    ev = pa.Table.from_arrays(
        [
            *_conform(events, data_schema),
            events.column(KEY).cast(pa.string()),
            events.column("_seq"),
        ],
        schema=schema,
    )
    m = stored.num_rows
    st = pa.Table.from_arrays(
        [
            *_conform(stored, data_schema),
            stored.column(HOODIE_RECORD_KEY).cast(pa.string()),
            pa.repeat(pa.scalar(_STORED_VALUE, pa.int64()), m),
        ],
        schema=schema,
    )
    return pa.concat_tables([ev, st])


def _deletes(events: pa.Table, stored: pa.Table, tombs: pa.Table) -> pl.DataFrame:
    """Per key the newest delete ``D`` (on equal positions the one read last), with its
    origin."""
    frames = []
    if events.num_rows:
        frames.append(
            pl.DataFrame(
                {
                    KEY: events.column(KEY).cast(pa.string()),
                    "_dpos": events.column(POS),
                    "_dsub": events.column(POS_SUB),
                    "_dts": events.column(SOURCE_TS),
                    "_dev": events.column("_ev"),
                    "_dt": events.column("_seq"),
                    "_stored": pa.repeat(pa.scalar(0, pa.int8()), events.num_rows),
                }
            )
        )
    for table, key, pos, sub in (
        (tombs, KEY, POS, POS_SUB),
        (stored, HOODIE_RECORD_KEY, FLOOR_POS, FLOOR_SUB),
    ):
        if table.num_rows:
            frames.append(
                pl.DataFrame(
                    {
                        KEY: table.column(key).cast(pa.string()),
                        "_dpos": table.column(pos).cast(pa.int64()),
                        "_dsub": table.column(sub).cast(pa.int64()),
                        "_dts": table.column(SOURCE_TS).cast(pa.int64())
                        if SOURCE_TS in table.column_names
                        else pa.nulls(table.num_rows, pa.int64()),
                        "_dev": pa.nulls(table.num_rows, pa.int64()),
                        "_dt": pa.repeat(pa.scalar(_STORED_DELETE, pa.int64()), table.num_rows),
                        "_stored": pa.repeat(pa.scalar(1, pa.int8()), table.num_rows),
                    }
                )
            )
    schema: dict[str, pl.DataType] = {
        KEY: pl.String(),
        "_dpos": pl.Int64(),
        "_dsub": pl.Int64(),
        "_dts": pl.Int64(),
        "_dev": pl.Int64(),
        "_dt": pl.Int64(),
        "_stored": pl.Int8(),
    }
    if not frames:
        return pl.DataFrame(schema=schema | {"_dc": pl.Int128()})
    frame = pl.concat([f.cast(pl.Schema(schema)) for f in frames]).filter(
        pl.col("_dpos").is_not_null()
    )
    frame = frame.with_columns(_dc=combined(pl.col("_dpos"), pl.col("_dsub").fill_null(0)))
    return frame.sort([KEY, "_dc", "_dt"]).unique(subset=[KEY], keep="last")


def fold_partial(
    events: pa.Table,
    old: pa.Table,
    tombs: pa.Table,
    data_schema: pa.Schema,
    floor: int | None,
    old_has_only_batch_keys: bool,
) -> tuple[pa.Table | None, pa.Array, pa.Array]:
    """Fold a partial-image batch into the stored rows of its keys.

    Args:
        events: The group's events (valid keys), in the batch's schema.
        old: Stored rows (whole rows, the table's file schema).
        tombs: The group's delete tombstones.
        data_schema: The table's data schema (it has the per-column positions).
        floor: The table's truncate floor as one combined position (older events are late).
        old_has_only_batch_keys: ``old`` holds the batch's keys only.

    Returns:
        The winners (one row per changed key: a live row's whole new image, or a delete
        at ``D``; columns ``_cdc_key`` + the data schema), the ops of the events that
        changed something, and those of the late ones.
    """
    batch_keys = events.column(KEY)
    stored = old if old_has_only_batch_keys else only_keys(old, batch_keys)
    tombs = tombs.filter(pc.is_in(tombs.column(KEY), value_set=batch_keys))
    events = events.append_column("_ev", pa.array(range(events.num_rows), pa.int64()))
    # Read order of the events (the tie-break of equal order values).
    read = np.lexsort(
        (
            np.arange(events.num_rows),
            events.column(OFFSET).to_numpy(),
            events.column(PARTITION).to_numpy(),
        )
    )
    seq = np.empty(events.num_rows, np.int64)
    seq[read] = np.arange(events.num_rows)
    events = events.append_column("_seq", pa.array(seq))
    # Events without a position, or at or below a truncate, take no part (late).
    position = combined(pl.col(POS), pl.col(POS_SUB).fill_null(0))
    play = position.is_not_null()
    if floor is not None:
        play = play & (position > pl.lit(floor, pl.Int128)).fill_null(False)
    frame = pl.DataFrame(events.select([POS, POS_SUB]))
    in_play = frame.select(play.alias("_play"))["_play"].to_arrow()
    ops = events.column(OP)
    is_upsert = pc.and_(in_play, pc.is_in(ops, value_set=pa.array(_UPSERTS)))
    is_delete = pc.and_(in_play, pc.equal(ops, OP_DELETE))
    upserts = events.filter(is_upsert)
    deletes = _deletes(events.filter(is_delete), stored, tombs)
    cand = _candidates(upserts, stored, data_schema)
    columns = value_columns(data_schema)

    ctl = pl.DataFrame(
        {
            KEY: cand.column(KEY),
            "_t": cand.column("_t"),
            POS: cand.column(POS),
            POS_SUB: cand.column(POS_SUB),
            **{f"_p{j}": cand.column(column_pos(c)) for j, c in enumerate(columns)},
            **{f"_s{j}": cand.column(column_sub(c)) for j, c in enumerate(columns)},
        }
    ).with_row_index("_i")
    ctl = ctl.join(deletes.select(KEY, "_dc", "_dt"), on=KEY, how="left", maintain_order="left")
    no_delete = pl.col("_dc").is_null()
    after_delete = pl.col("_t") > pl.col("_dt")

    def masked(pos: str, sub: str) -> pl.Expr:
        c = combined(pl.col(pos), pl.col(sub).fill_null(0))
        dc = pl.col("_dc")
        newer = no_delete | (c > dc) | ((c == dc) & after_delete)
        return pl.when(pl.col(pos).is_not_null() & newer).then(c)

    ctl = ctl.with_columns(
        _rc=masked(POS, POS_SUB),
        **{f"_m{j}": masked(f"_p{j}", f"_s{j}") for j in range(len(columns))},
    )
    aggs = [
        pl.col("_i").sort_by(["_rc", "_t"]).last().alias("_row"),
        pl.col("_rc").max().alias("_rmax"),
    ]
    for j in range(len(columns)):
        aggs.append(pl.col("_i").sort_by([f"_m{j}", "_t"]).last().alias(f"_w{j}"))
        aggs.append(pl.col(f"_m{j}").max().alias(f"_x{j}"))
    per_key = ctl.group_by(KEY, maintain_order=True).agg(aggs)
    per_key = per_key.with_columns(
        pl.when(pl.col("_rmax").is_not_null()).then(pl.col("_row")).alias("_row"),
        *(
            pl.when(pl.col(f"_x{j}").is_not_null()).then(pl.col(f"_w{j}")).alias(f"_w{j}")
            for j in range(len(columns))
        ),
    )
    # Keys with deletes only (no upsert candidate) come from the delete frame.
    per_key = deletes.join(per_key, on=KEY, how="full", coalesce=True)

    # Which events changed something: a row or column winner, or the newest delete.
    n_up = upserts.num_rows
    win_cols = ["_row", *(f"_w{j}" for j in range(len(columns)))]
    won = pl.concat([per_key.select(pl.col(c).alias("_i")) for c in win_cols]).drop_nulls()
    won_events = won.filter(pl.col("_i") < n_up).unique()["_i"].to_arrow().cast(pa.int64())
    applied_upserts = upserts.column("_ev").combine_chunks().take(won_events)
    applied_deletes = per_key.filter(pl.col("_stored") == 0)["_dev"].drop_nulls().to_arrow()
    applied = pa.concat_arrays([applied_upserts, applied_deletes.cast(pa.int64())])
    applied_mask = pc.is_in(events.column("_ev"), value_set=applied)
    applied_ops = events.filter(applied_mask).column(OP)
    late_ops = events.filter(pc.invert(applied_mask)).column(OP)
    changed_keys = events.filter(applied_mask).column(KEY)
    changed = pl.Series(KEY, changed_keys.combine_chunks().cast(pa.string()))
    per_key = per_key.filter(pl.col(KEY).is_in(changed.implode()))
    if per_key.height == 0:
        return None, applied_ops, late_ops

    live = per_key.filter(pl.col("_row").is_not_null())
    dead = per_key.filter(pl.col("_row").is_null())
    out_schema = pa.schema([pa.field(KEY, pa.string()), *data_schema])
    parts = []
    if live.height:
        rows = cand.take(live["_row"].to_arrow().cast(pa.int64()))
        arrays: dict[str, pa.Array | pa.ChunkedArray] = {
            name: rows.column(name) for name in cand.column_names
        }
        for j, c in enumerate(columns):
            idx = live[f"_w{j}"].to_arrow().cast(pa.int64())
            for name in (c, column_pos(c), column_sub(c)):
                if name in cand.column_names:
                    arrays[name] = cand.column(name).take(idx)
        arrays[FLOOR_POS] = live["_dpos"].to_arrow().cast(pa.int64())
        arrays[FLOOR_SUB] = live["_dsub"].to_arrow().cast(pa.int64())
        parts.append(
            pa.Table.from_arrays(
                [
                    arrays[f.name] if f.name in arrays else pa.nulls(live.height, f.type)
                    for f in out_schema
                ],
                schema=out_schema,
            )
        )
    if dead.height:
        m = dead.height
        arrays = {
            KEY: dead[KEY].to_arrow().cast(pa.string()),
            OP: pa.repeat(pa.scalar(OP_DELETE, pa.string()), m),
            POS: dead["_dpos"].to_arrow().cast(pa.int64()),
            POS_SUB: dead["_dsub"].to_arrow().cast(pa.int64()),
            SOURCE_TS: dead["_dts"].to_arrow().cast(pa.int64()),
        }
        parts.append(
            pa.Table.from_arrays(
                [
                    arrays[f.name].cast(f.type) if f.name in arrays else pa.nulls(m, f.type)
                    for f in out_schema
                ],
                schema=out_schema,
            )
        )
    return pa.concat_tables(parts), applied_ops, late_ops
