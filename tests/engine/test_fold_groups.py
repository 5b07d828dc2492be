"""fold_groups: several appends of one table folded at once give each group's own result.

The oracle is merge_file_group run group by group (itself checked against a plain Python
fold elsewhere). Hypothesis draws groups with disjoint keys (as the bucket index makes
them), stored rows and tombstones for some keys, and events with every op, repeated and
missing positions, two partitions, tails and tombstone expiry.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.hudi import HOODIE_RECORD_KEY, TOMBSTONE_SCHEMA
from engine.merge.rules import MergeCounts, MergeOptions, fold_groups, merge_file_group
from engine.model import KEY, POS, POS_SUB
from tests.engine.test_merge import DATA  # the row image and control columns

INSTANT = "20250101000000005"
OPS = ["r", "c", "u", "d", "x"]  # x: a Kafka tombstone (no position of its own)


def _events(rows: list[tuple[int, str, int | None, int, int]]) -> pa.Table:
    """rows: (key, op, position or None, partition, offset)."""
    keys = [str(k) for k, *_ in rows]
    ops = [op for _, op, *_ in rows]
    pos = [None if op == "x" else p for _, op, p, _, _ in rows]
    return pa.table(
        {
            "_cdc_key": pa.array(keys, pa.string()),
            "_cdc_op": pa.array(ops, pa.string()),
            "_cdc_pos": pa.array(pos, pa.int64()),
            "_cdc_pos_sub": pa.array(pos, pa.int64()),
            "_cdc_source_ts_ms": pa.array([None if op == "x" else 5 for op in ops], pa.int64()),
            "_cdc_partition": pa.array([part for *_, part, _ in rows], pa.int32()),
            "_cdc_offset": pa.array([off for *_, off in rows], pa.int64()),
            "_cdc_tx_id": pa.nulls(len(rows), pa.string()),
            "id": pa.array([int(k) for k in keys], pa.int32()),
            "name": pa.array([f"{op}{p}" for _, op, p, _, _ in rows], pa.string()),
        }
    )


def _stored(rows: list[tuple[int, int]]) -> pa.Table:
    """What an append reads of a group: record key and positions of the batch's keys."""
    return pa.table(
        {
            HOODIE_RECORD_KEY: pa.array([str(k) for k, _ in rows], pa.string()),
            POS: pa.array([p for _, p in rows], pa.int64()),
            POS_SUB: pa.array([p for _, p in rows], pa.int64()),
        }
    )


def _tombs(rows: list[tuple[int, int, int, str]]) -> pa.Table | None:
    if not rows:
        return None
    return pa.table(
        {
            KEY: [str(k) for k, *_ in rows],
            POS: [p for _, p, _, _ in rows],
            POS_SUB: [p for _, p, _, _ in rows],
            "_cdc_source_ts_ms": [ts for _, _, ts, _ in rows],
            "_cdc_instant": [i for *_, i in rows],
        },
        schema=TOMBSTONE_SCHEMA,
    )


@st.composite
def _groups(draw: st.DrawFn) -> tuple[list, MergeOptions]:
    n = draw(st.integers(2, 4))
    out = []
    offset = 0
    for g in range(n):
        keys = [g + n * j for j in range(draw(st.integers(1, 5)))]  # disjoint across groups
        stored = [(k, draw(st.integers(1, 30))) for k in keys if draw(st.booleans()) and k % 3]
        live = {k for k, _ in stored}
        tombs = [
            (
                k,
                draw(st.integers(1, 30)),
                draw(st.integers(0, 10)),
                draw(st.sampled_from(["20250101000000001", "20250101000000003"])),
            )
            for k in keys
            if k not in live and draw(st.booleans())
        ]
        rows = []
        for _ in range(draw(st.integers(0, 8))):
            offset += 1
            rows.append(
                (
                    draw(st.sampled_from(keys)),
                    draw(st.sampled_from(OPS)),
                    draw(st.integers(1, 30)),
                    draw(st.integers(0, 1)),
                    offset,
                )
            )
        out.append((_stored(stored), _events(rows), _tombs(tombs)))
    tails = tuple(
        (p, str(draw(st.integers(0, 12))), draw(st.integers(1, 30)), 0)
        for p in range(2)
        if draw(st.booleans())
    )
    expiry = draw(st.booleans())
    options = MergeOptions(
        tails=tuple((p, k, pos, pos) for p, k, pos, _ in tails),
        tombstone_min_ts=6 if expiry else None,
        tombstone_keep_after="20250101000000002" if expiry else None,
        floor=(draw(st.integers(0, 5)), 0) if draw(st.booleans()) else None,
    )
    return out, options


def _sorted(table: pa.Table | None, key: str) -> list[dict] | None:
    if table is None:
        return None
    return table.sort_by(key).to_pylist()


def _keys(arr: pa.Array | pa.ChunkedArray | None) -> list | None:
    return None if arr is None else sorted(pc.cast(arr, pa.string()).to_pylist())


@settings(max_examples=300, deadline=None)
@given(_groups())
def test_folding_groups_together_gives_each_groups_own_result(drawn) -> None:
    groups, options = drawn
    alone = [
        merge_file_group(
            old,
            events,
            instant=INSTANT,
            data_schema=DATA,
            old_tombstones=tombs,
            options=options,
            old_has_only_batch_keys=True,
        )
        for old, events, tombs in groups
    ]
    together = fold_groups(groups, instant=INSTANT, data_schema=DATA, options=options)
    assert len(together) == len(groups)
    totals_alone, totals_together = MergeCounts(), MergeCounts()
    for one, folded in zip(alone, together, strict=True):
        assert folded.changed == one.changed
        assert folded.carried.num_rows == one.carried.num_rows == 0
        assert _sorted(folded.upserts, KEY) == _sorted(one.upserts, KEY)
        assert _keys(folded.deleted_keys) == _keys(one.deleted_keys)
        assert _sorted(folded.tombstones, KEY) == _sorted(one.tombstones, KEY)
        assert _keys(folded.winner_keys) == _keys(one.winner_keys)
        for name in ("inserts", "updates", "deletes"):
            assert getattr(folded.counts, name) == getattr(one.counts, name), name
        totals_alone.add(one.counts)
        totals_together.add(folded.counts)
    assert totals_together == totals_alone
