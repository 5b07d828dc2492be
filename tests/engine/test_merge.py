"""merge_file_group: fold per key in source order, replays, deletes, tombstones, carry-over."""

from __future__ import annotations

import itertools

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.hudi.file_slice import base_rows
from engine.merge.positions import (
    KEY_GROUP,
    combined,
    fill_positions_forward,
    sort_by_key,
    with_previous_max_rank,
)
from engine.merge.rules import UNKNOWN_POS, MergeOptions, merge_file_group
from engine.model import KEY, OFFSET, PARTITION, POS, POS_SUB, STREAMED_BIT

DATA = pa.schema(
    [
        pa.field("id", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("_cdc_op", pa.string()),
        pa.field("_cdc_pos", pa.int64()),
        pa.field("_cdc_pos_sub", pa.int64()),
        pa.field("_cdc_source_ts_ms", pa.int64()),
    ]
)


def events(rows: list[tuple]) -> pa.Table:
    """rows: (key, op, pos, partition, offset, name)."""
    cols: dict[str, list] = {k: [] for k in ("k", "op", "pos", "part", "off", "name")}
    for key, op, pos, part, off, name in rows:
        for col, v in zip(cols, (key, op, pos, part, off, name), strict=True):
            cols[col].append(v)
    return pa.table(
        {
            "_cdc_key": pa.array(cols["k"], pa.string()),
            "_cdc_op": pa.array(cols["op"], pa.string()),
            "_cdc_pos": pa.array(cols["pos"], pa.int64()),
            "_cdc_pos_sub": pa.array(cols["pos"], pa.int64()),
            "_cdc_source_ts_ms": pa.array([1] * len(rows), pa.int64()),
            "_cdc_partition": pa.array(cols["part"], pa.int32()),
            "_cdc_offset": pa.array(cols["off"], pa.int64()),
            "_cdc_tx_id": pa.nulls(len(rows), pa.string()),
            "id": pa.array([int(k) if k else None for k in cols["k"]], pa.int32()),
            "name": pa.array(cols["name"], pa.string()),
        }
    )


def apply(old, evs, instant="20250101000000001", tombs=None, **options):
    """Merge and return (rows, counts); the result's tombstones go to LAST_TOMBS."""
    result = merge_file_group(
        old,
        evs,
        instant=instant,
        data_schema=DATA,
        old_tombstones=tombs,
        options=MergeOptions(**options),
    )
    LAST_TOMBS[0] = result.tombstones
    # The base file the Hudi writer would write from the fold's result.
    rows = base_rows(
        result.carried,
        result.upserts,
        "_cdc_key",
        instant=instant,
        task_partition=0,
        file_name=f"f-0_0-1-0_{instant}.parquet",
        data_schema=DATA,
    )
    return rows, result.counts


LAST_TOMBS: list = [None]


def as_dict(table: pa.Table) -> dict[str, str]:
    return {r["_hoodie_record_key"]: r["name"] for r in table.to_pylist()}


S = STREAMED_BIT


def test_newest_position_wins_not_arrival_order() -> None:
    evs = events([("1", "u", S + 30, 0, 5, "late-arrival-newest"), ("1", "u", S + 20, 0, 6, "old")])
    new, counts = apply(None, evs)
    assert as_dict(new) == {"1": "late-arrival-newest"}
    assert counts.inserts == 1


def test_delete_then_reinsert_and_tombstone() -> None:
    first, _ = apply(None, events([("1", "r", 10, 0, 0, "a"), ("2", "r", 10, 0, 1, "b")]))
    evs = events(
        [
            ("1", "d", S + 20, 0, 2, None),
            ("1", "x", None, 0, 3, None),  # tombstone follows its delete
            ("2", "d", S + 21, 0, 4, None),
            ("2", "x", None, 0, 5, None),
            ("2", "c", S + 22, 0, 6, "b2"),  # re-insert after delete
        ]
    )
    new, counts = apply(first, evs, "20250101000000002")
    assert as_dict(new) == {"2": "b2"}
    assert (counts.deletes, counts.updates, counts.inserts) == (1, 1, 0)


def test_lone_tombstone_deletes_stored_row() -> None:
    first, _ = apply(None, events([("1", "r", 10, 0, 0, "a")]))
    new, counts = apply(first, events([("1", "x", None, 0, 9, None)]), "20250101000000002")
    assert as_dict(new) == {}
    assert counts.deletes == 1


def test_replay_of_older_event_changes_nothing() -> None:
    first, _ = apply(None, events([("1", "c", S + 50, 0, 0, "current")]))
    new, counts = apply(first, events([("1", "u", S + 40, 0, 1, "stale")]), "20250101000000002")
    assert as_dict(new) == {"1": "current"}
    assert counts.late == 1 and counts.updates == 0
    # Same position again (an exact replay) is also stale.
    _, counts = apply(first, events([("1", "c", S + 50, 0, 7, "current")]), "20250101000000003")
    assert counts.late == 1


def test_snapshot_read_orders_before_streamed_change() -> None:
    first, _ = apply(None, events([("1", "u", S + 5, 0, 0, "streamed")]))
    new, counts = apply(first, events([("1", "r", 1000, 0, 1, "snapshot")]), "20250101000000002")
    assert as_dict(new) == {"1": "streamed"}


def test_carry_over_keeps_meta_of_untouched_rows() -> None:
    first, _ = apply(None, events([("1", "c", S + 1, 0, 0, "a"), ("2", "c", S + 2, 0, 1, "b")]))
    new, _ = apply(first, events([("2", "u", S + 3, 0, 2, "b2")]), "20250101000000002")
    rows = {r["_hoodie_record_key"]: r for r in new.to_pylist()}
    assert rows["1"]["_hoodie_commit_time"] == "20250101000000001"
    before = {r["_hoodie_record_key"]: r for r in first.to_pylist()}
    assert rows["1"]["_hoodie_commit_seqno"] == before["1"]["_hoodie_commit_seqno"]
    assert rows["2"]["_hoodie_commit_time"] == "20250101000000002"
    assert rows["2"]["_hoodie_commit_seqno"].startswith("20250101000000002_0_")
    assert {r["_hoodie_file_name"] for r in rows.values()} == {
        "f-0_0-1-0_20250101000000002.parquet"
    }


def test_ties_break_on_offset() -> None:
    evs = events([("1", "u", S + 5, 0, 2, "second"), ("1", "u", S + 5, 1, 1, "other-part")])
    new, _ = apply(None, evs)
    assert as_dict(new) == {"1": "second"}


def test_unknown_position_applies_and_keeps_stored_position() -> None:
    first, _ = apply(None, events([("1", "c", S + 50, 0, 0, "a")]))
    evs = events([("1", "u", None, 0, 3, "incremental-snapshot")])
    new, _ = apply(first, evs, "20250101000000002")
    row = new.to_pylist()[0]
    assert row["name"] == "incremental-snapshot"
    assert row["_cdc_pos"] == S + 50
    assert UNKNOWN_POS not in new.column("_cdc_pos").to_pylist()


@pytest.mark.parametrize("n", [1, 1000])
def test_seqno_record_index_counts_within_file(n: int) -> None:
    new, _ = apply(None, events([(str(i), "c", S + i, 0, i, "x") for i in range(1, n + 1)]))
    idx = sorted(int(s.rsplit("_", 1)[1]) for s in new.column("_hoodie_commit_seqno").to_pylist())
    assert idx == list(range(n))


def test_late_update_after_delete_is_dropped_by_tombstone() -> None:
    first, _ = apply(None, events([("1", "c", S + 10, 0, 0, "a")]))
    _, counts = apply(first, events([("1", "d", S + 20, 0, 1, None)]), "20250101000000002")
    assert counts.deletes == 1
    tombs = LAST_TOMBS[0]
    assert tombs.column("_cdc_key").to_pylist() == ["1"]
    empty, _ = apply(first, events([("1", "d", S + 20, 0, 1, None)]), "20250101000000002")
    # A late update (older than the delete) must not resurrect the row.
    new, counts = apply(
        empty, events([("1", "u", S + 15, 0, 2, "zombie")]), "20250101000000003", tombs=tombs
    )
    assert as_dict(new) == {} and counts.late == 1
    # A genuine re-insert (newer) does, and clears the tombstone.
    new, counts = apply(
        empty, events([("1", "c", S + 30, 0, 3, "back")]), "20250101000000004", tombs=tombs
    )
    assert as_dict(new) == {"1": "back"} and counts.inserts == 1
    assert LAST_TOMBS[0].num_rows == 0


def test_late_counts_every_stale_event_in_a_replayed_window() -> None:
    stream = [
        ("1", "c", S + 1, 0, 0, "a"),
        ("1", "u", S + 2, 0, 1, "b"),
        ("1", "u", S + 3, 0, 2, "c"),
    ]
    replay = [("1", "u", S + 2, 0, 3, "b"), ("1", "u", S + 3, 0, 4, "c")]
    new, counts = apply(None, events(stream + replay))
    assert as_dict(new) == {"1": "c"} and counts.late == 2


def test_truncate_empties_then_later_changes_apply() -> None:
    first, _ = apply(None, events([("1", "c", S + 1, 0, 0, "a"), ("2", "c", S + 2, 0, 1, "b")]))
    evs = events([("3", "c", S + 3, 0, 2, "before-truncate"), ("2", "u", S + 9, 0, 4, "after")])
    new, counts = apply(first, evs, "20250101000000002", truncate=(S + 5, S + 5))
    assert as_dict(new) == {"2": "after"}
    assert counts.truncated == 2 and counts.late == 0
    # Later, an event older than the truncate is late.
    new2, counts = apply(
        new, events([("1", "u", S + 4, 0, 5, "zombie")]), "20250101000000003", floor=(S + 5, S + 5)
    )
    assert as_dict(new2) == {"2": "after"} and counts.late == 1


def test_toast_placeholder_takes_previous_value() -> None:
    ph = "__debezium_unavailable_value"
    first, _ = apply(
        None, events([("1", "c", S + 1, 0, 0, "big-text"), ("2", "c", S + 2, 0, 1, "x")])
    )
    # In-batch predecessor wins over the stored value; stored value used otherwise.
    evs = events(
        [
            ("1", "u", S + 3, 0, 2, "newer-text"),
            ("1", "u", S + 4, 0, 3, ph),
            ("2", "u", S + 5, 0, 4, ph),
            ("9", "u", S + 6, 0, 5, ph),
        ]
    )
    new, counts = apply(first, evs, "20250101000000002")
    assert as_dict(new) == {"1": "newer-text", "2": "x", "9": None}
    assert counts.toast_unresolved == 1 and counts.toast_filled == 2
    # Events applied by op: each once, whatever later events do to its key.
    assert (counts.events_u, counts.events_c, counts.late) == (4, 0, 0)
    assert ph not in [v for v in new.column("name").to_pylist()]


def test_lone_tombstone_keeps_existing_tombstone() -> None:
    first, _ = apply(None, events([("1", "c", S + 10, 0, 0, "a")]))
    empty, _ = apply(first, events([("1", "d", S + 20, 0, 1, None)]), "20250101000000002")
    tombs = LAST_TOMBS[0]
    # The delete's own tombstone arrives in the next batch: nothing to delete, and the
    # stored tombstone (position S+20) must survive so a late update stays dropped.
    _, _ = apply(empty, events([("1", "x", None, 0, 2, None)]), "20250101000000003", tombs=tombs)
    assert LAST_TOMBS[0].column("_cdc_pos").to_pylist() == [S + 20]


def test_tombstone_right_after_an_upsert_deletes_it() -> None:
    # ExtractNewRecordState's drop mode (and a compacted topic) leave only the tombstone
    # of a delete: it follows an insert or update and takes its position.
    evs = events([("1", "c", S + 10, 0, 0, "a"), ("1", "x", None, 0, 1, None)])
    new, _ = apply(None, evs)
    assert as_dict(new) == {}
    tombs = LAST_TOMBS[0]
    assert tombs.column("_cdc_pos").to_pylist() == [S + 10]
    # It has the source time of the change it follows (so it expires like any other).
    assert tombs.column("_cdc_source_ts_ms").to_pylist() == [1]
    # Across batches: the stored row is at the position the tombstone inherits (tail).
    first, _ = apply(None, events([("1", "c", S + 10, 0, 0, "a")]))
    tails = ((0, "1", S + 10, S + 10),)
    new, counts = apply(
        first, events([("1", "x", None, 0, 1, None)]), "20250101000000002", tails=tails
    )
    assert as_dict(new) == {} and counts.deletes == 1
    assert LAST_TOMBS[0].column("_cdc_source_ts_ms").to_pylist() == [1]  # the stored row's
    # After a delete the tombstone only repeats it: the delete's tombstone (and its
    # source time) stays.
    apply(None, events([("1", "d", S + 20, 0, 0, None), ("1", "x", None, 0, 1, None)]))
    assert LAST_TOMBS[0].column("_cdc_source_ts_ms").to_pylist() == [1]


def _copies_events(rows: list[tuple]) -> pa.Table:
    """rows: (key, op, pos, offset, name, delta) of a full-row table."""
    evs = events([(k, op, pos, 0, off, name) for k, op, pos, off, name, _ in rows])
    return evs.append_column("_cdc_copies", pa.array([d for *_, d in rows], pa.int64()))


COPIES_DATA = pa.schema([*DATA, pa.field("_cdc_copies", pa.int64())])


def _apply_copies(old, evs, instant, tombs=None):
    result = merge_file_group(
        old,
        evs,
        instant=instant,
        data_schema=COPIES_DATA,
        old_tombstones=tombs,
        options=MergeOptions(copies=True),
    )
    rows = base_rows(
        result.carried,
        result.upserts,
        "_cdc_key",
        instant=instant,
        task_partition=0,
        file_name=f"f-0_0-1-0_{instant}.parquet",
        data_schema=COPIES_DATA,
    )
    return rows, result


def test_full_row_counts_add_up_and_replays_are_late() -> None:
    # Key "7" = one row value: inserted three times, deleted once in the same batch.
    first, _ = _apply_copies(
        None,
        _copies_events(
            [
                ("7", "c", S + 1, 0, "v", 1),
                ("7", "c", S + 2, 1, "v", 1),
                ("7", "c", S + 3, 2, "v", 1),
                ("7", "d", S + 4, 3, "v", -1),
                ("8", "c", S + 5, 4, "w", 1),
            ]
        ),
        "20250101000000001",
    )
    assert {r["_hoodie_record_key"]: r["_cdc_copies"] for r in first.to_pylist()} == {
        "7": 2,
        "8": 1,
    }
    # Next batch: a replayed old insert (late), one more delete of 7, 8 deleted twice.
    evs = _copies_events(
        [
            ("7", "c", S + 2, 5, "v", 1),
            ("7", "d", S + 6, 6, "v", -1),
            ("8", "d", S + 7, 7, "w", -1),
            ("8", "d", S + 8, 8, "w", -1),
        ]
    )
    new, result = _apply_copies(first, evs, "20250101000000002")
    assert {r["_hoodie_record_key"]: r["_cdc_copies"] for r in new.to_pylist()} == {"7": 1}
    assert result.counts.late == 1
    assert result.tombstones.column("_cdc_key").to_pylist() == ["8"]


# -- run-based helpers against the per-key window formulation they replace ----------------

_run_rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "ключ"]),  # key
        st.integers(0, 2),  # partition
        st.one_of(st.none(), st.integers(-3, 3)),  # position
        st.one_of(st.none(), st.integers(0, 2)),  # position sub-part
    ),
    max_size=40,
)


def _run_frame(rows: list[tuple[str, int, int | None, int | None]]) -> pl.DataFrame:
    frame = pl.DataFrame(
        {
            KEY: [r[0] for r in rows],
            PARTITION: [r[1] for r in rows],
            OFFSET: list(range(len(rows))),
            POS: [r[2] for r in rows],
            POS_SUB: [r[3] for r in rows],
        },
        schema={
            KEY: pl.String,
            PARTITION: pl.Int32,
            OFFSET: pl.Int64,
            POS: pl.Int64,
            POS_SUB: pl.Int64,
        },
    )
    return sort_by_key(frame)


@given(_run_rows)
def test_events_sort_into_one_run_per_key_even_when_hashes_collide(rows: list) -> None:
    frame = pl.DataFrame(
        {
            KEY: [r[0] for r in rows],
            PARTITION: [r[1] for r in rows],
            OFFSET: list(range(len(rows))),
        },
        schema={KEY: pl.String, PARTITION: pl.Int32, OFFSET: pl.Int64},
    )
    by_length = (lambda key: key.str.len_bytes().cast(pl.UInt64),)  # "a", "b", "c" collide
    for hashed in (sort_by_key(frame), sort_by_key(frame, *by_length)):
        assert hashed.height == frame.height
        # Each key is one run, in (partition, offset) order, and KEY_GROUP tells the runs apart.
        runs = [
            (k, g)
            for k, g in itertools.groupby(
                zip(hashed[KEY], hashed[KEY_GROUP], strict=True), key=lambda x: x[0]
            )
        ]
        assert len(runs) == frame[KEY].n_unique()
        assert hashed.group_by(KEY_GROUP).agg(pl.col(KEY).n_unique())[KEY].max() in (None, 1)
        for key in set(frame[KEY]):
            part = hashed.filter(pl.col(KEY) == key).select(PARTITION, OFFSET).rows()
            assert part == sorted(part)


@given(_run_rows)
def test_forward_fill_by_runs_equals_per_key_partition_window(rows: list) -> None:
    frame = _run_frame(rows)
    expected = frame.with_columns(
        pl.col(POS).forward_fill().over([KEY, PARTITION]),
        pl.col(POS_SUB).forward_fill().over([KEY, PARTITION]),
    )
    assert fill_positions_forward(frame).equals(expected)


@given(_run_rows)
def test_previous_max_by_runs_equals_per_key_window(rows: list) -> None:
    frame = _run_frame(rows).with_columns(_c=combined(pl.col(POS), pl.col(POS_SUB).fill_null(0)))
    window = frame.with_columns(_prev=pl.col("_c").cum_max().shift(1).over(KEY))
    ranked = with_previous_max_rank(frame)
    # The previous maximum, where there is one, is the value of that rank.
    values = dict(zip(ranked["_rank"].to_list(), ranked["_c"].to_list(), strict=True))
    got = [None if r is None else values[r] for r in ranked["_prev_rank"].to_list()]
    assert got == window["_prev"].to_list()
