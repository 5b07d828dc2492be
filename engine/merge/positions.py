"""Source positions inside a fold: comparing them, grouping by key, inheriting them.

Positions are the pair ``(_cdc_pos, _cdc_pos_sub)`` (see :mod:`engine.model`), compared
lexicographically; here both parts become one Int128 so that Polars compares, ranks and
takes maxima of a single column. Events of a batch are grouped by key (then partition
and offset) with :func:`sort_by_key`.

Equal positions (:func:`not_newer`, the one rule of it): a Debezium position names one
change, so an event at a position already seen for its key is a replay (late). An order
value (events marked ``_cdc_by_field``: generic CDC JSON, flattened events ordered by
``order_field`` or by Kafka offset) does not: two changes in one millisecond share it,
and the one read later wins, as Hudi's ``DefaultHoodieRecordPayload`` lets an incoming
record with an equal ordering value replace the stored one. Read later means the later
Kafka offset within a partition; in one batch, events of a key in different partitions
are ordered by (partition, offset), and an event of a later batch comes after every
stored one (an applied offset is never read again: the checkpoint is in the commit).

The one rule of position inheritance lives here (:func:`inherit_positions`): an event
without a source position — a Kafka tombstone (null value), which Debezium writes right
after the delete it belongs to — takes the position of the previous event of the same
key in the same partition: earlier in the batch, or else the partition's last applied
event (the *tail*, kept by the replicator across batches) when it is of the same key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import polars as pl

from engine.model import KEY, OFFSET, PARTITION, POS, POS_SUB

_SHIFT = 2**64
_BIAS = 2**63
#: The column that groups a batch's events by key: the key's 64-bit hash where the batch
#: has no two keys with the same hash, else the key itself (see :func:`sort_by_key`).
KEY_GROUP = "_key_group"

#: A partition's last applied keyed event: (partition, key, position, sub-position).
Tail = tuple[int, str, int, int]


def combined(pos: pl.Expr, sub: pl.Expr) -> pl.Expr:
    """Both position parts as one Int128, ordered like the (pos, sub) pair."""
    return pos.cast(pl.Int128) * _SHIFT + (sub.cast(pl.Int128) + _BIAS)


def combined_value(pair: tuple[int, int] | None) -> int | None:
    return None if pair is None else pair[0] * _SHIFT + pair[1] + _BIAS


def sort_by_key(
    ctl: pl.DataFrame, key_hash: Callable[[pl.Expr], pl.Expr] = pl.Expr.hash
) -> pl.DataFrame:
    """Sort events by key, then partition and offset, and add the grouping column ``KEY_GROUP``.

    Sorting by the keys' 64-bit hashes is several times faster than comparing the key
    strings, and groups the same events whenever no two different keys of the batch
    share a hash. That is checked exactly (equal-hash neighbours must have equal keys);
    otherwise the batch is sorted and grouped by the key strings.
    """
    # Stable: events of one message (generic CDC JSON's records_field) share an offset
    # and keep their order in it.
    hashed = ctl.with_columns(key_hash(pl.col(KEY)).alias(KEY_GROUP)).sort(
        [KEY_GROUP, PARTITION, OFFSET], maintain_order=True
    )
    if hashed.height < 2:
        return hashed
    same_hash = hashed[KEY_GROUP].slice(1) == hashed[KEY_GROUP].slice(0, hashed.height - 1)
    same_key = hashed[KEY].slice(1) == hashed[KEY].slice(0, hashed.height - 1)
    if not (same_hash & ~same_key).any():
        return hashed
    return ctl.with_columns(pl.col(KEY).alias(KEY_GROUP)).sort(
        [KEY_GROUP, PARTITION, OFFSET], maintain_order=True
    )


def key_starts(columns: list[str]) -> pl.Expr:
    """True on the first row of each run of equal ``columns`` (the frame is sorted)."""
    start = pl.lit(False)
    for name in columns:
        start = start | (pl.col(name) != pl.col(name).shift(1))
    return start.fill_null(True)


def fill_positions_forward(ctl: pl.DataFrame) -> pl.DataFrame:
    """Fill null positions from the previous event of the same key and partition.

    The frame is sorted by (key, partition, offset), so each (key, partition) is a run
    of rows: a global forward fill is right wherever the value it carries was seen in
    the same run. Run boundaries replace a per-group window (several times faster).
    """
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    ctl = ctl.with_columns(
        _start=pl.when(key_starts([KEY_GROUP, PARTITION])).then(row).forward_fill()
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


def _from_tails(ctl: pl.DataFrame, tails: Sequence[Tail]) -> pl.DataFrame:
    """Give the first event of each (key, partition) run without a position the position
    of its partition's tail, when the tail is an event of the same key."""
    frame = pl.DataFrame(
        {
            PARTITION: [t[0] for t in tails],
            KEY: [t[1] for t in tails],
            "_tail_pos": [t[2] for t in tails],
            "_tail_sub": [t[3] for t in tails],
        },
        schema={
            PARTITION: ctl.schema[PARTITION],
            KEY: ctl.schema[KEY],
            "_tail_pos": pl.Int64,
            "_tail_sub": pl.Int64,
        },
    )
    joined = ctl.join(frame, on=[PARTITION, KEY], how="left", maintain_order="left")
    take = key_starts([KEY_GROUP, PARTITION]) & pl.col(POS).is_null()
    return joined.with_columns(
        pl.when(take).then(pl.col("_tail_pos")).otherwise(pl.col(POS)).alias(POS),
        pl.when(take).then(pl.col("_tail_sub")).otherwise(pl.col(POS_SUB)).alias(POS_SUB),
    ).drop("_tail_pos", "_tail_sub")


def inherit_positions(
    ctl: pl.DataFrame, tails: Sequence[Tail] = (), *, repeats: bool = True
) -> pl.DataFrame:
    """Fill events without a position from the previous event of their key and partition.

    Args:
        ctl: Events sorted by :func:`sort_by_key` (needs ``KEY_GROUP``, key, partition, offset,
            positions).
        tails: Each partition's last applied keyed event from earlier batches.
        repeats: Whether any key occurs twice in ``ctl`` (without repeats no event has
            an earlier event of its key in the batch, and the in-batch fill is skipped).
    """
    if not ctl[POS].null_count():
        return ctl
    if tails:
        ctl = _from_tails(ctl, tails)
    if repeats:
        ctl = fill_positions_forward(ctl)
    return ctl


def not_newer(position: pl.Expr, seen: pl.Expr, equal_is_newer: pl.Expr) -> pl.Expr:
    """Whether an event at ``position`` is late against ``seen``, the newest position
    already known for its key (stored, or an earlier event of the batch): older, or
    equal unless ``equal_is_newer`` (an order value read later: another change)."""
    return pl.when(equal_is_newer).then(position < seen).otherwise(position <= seen)


def with_previous_max_rank(ctl: pl.DataFrame) -> pl.DataFrame:
    """Add ``_rank`` (dense rank of ``_c``) and ``_prev_rank``: the largest rank of the
    key's earlier events in the frame (null for a key's first event, and where the
    previous event has no position, as a per-key ``cum_max().shift(1)`` would give).

    Ranks fit in 64 bits, so each key's run can be offset above all earlier runs and one
    global running maximum serves every key: no per-key window (4x faster at 10k rows).
    """
    start = key_starts([KEY_GROUP])
    run = start.cum_sum().cast(pl.Int64)
    stride = ctl.height + 1
    ctl = ctl.with_columns(_rank=pl.col("_c").rank("dense").cast(pl.Int64))
    offset = pl.col("_rank") + run * stride
    previous = offset.cum_max().shift(1) - run * stride
    return ctl.with_columns(_prev_rank=pl.when(start).then(None).otherwise(previous))
