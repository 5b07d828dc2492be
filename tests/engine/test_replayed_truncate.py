"""Counting a batch that holds a truncate and a replay of the events around it, as the
``peers`` tier saw with Kafka Connect killed mid-stream (tests/peers/
test_debezium_postgres.py): Debezium wrote the tail of the stream twice, both copies
reached one batch, and the truncate and the inserts before it were counted twice."""

from __future__ import annotations

import pyarrow as pa

from engine.replicator.planning import _truncate_position
from tests.engine.test_merge import S, apply, as_dict, events


def test_replayed_events_before_a_truncate_count_once() -> None:
    stream = [("100", "c", S + 1, 0, 0, "a"), ("101", "c", S + 2, 0, 1, "b")]
    replay = [("100", "c", S + 1, 0, 3, "a"), ("101", "c", S + 2, 0, 4, "b")]
    after = [("1", "c", S + 9, 0, 6, "after"), ("1", "c", S + 9, 0, 7, "after")]
    new, counts = apply(None, events(stream + replay + after), truncate=(S + 5, S + 5))
    assert as_dict(new) == {"1": "after"}
    assert counts.events_c == 3 and counts.late == 3


def test_events_before_a_truncate_already_stored_are_late() -> None:
    first, _ = apply(None, events([("100", "c", S + 1, 0, 0, "a")]))
    # A later batch: the replay of 100 (already stored), a new key, then the truncate.
    evs = events([("100", "c", S + 1, 0, 3, "a"), ("102", "c", S + 3, 0, 4, "n")])
    new, counts = apply(first, evs, "20250101000000002", truncate=(S + 5, S + 5))
    assert as_dict(new) == {}
    assert counts.events_c == 1 and counts.late == 1 and counts.truncated == 1


def truncates(positions: list[int]) -> pa.Table:
    return pa.table(
        {
            "_cdc_op": pa.array(["t"] * len(positions) + ["c"], pa.string()),
            "_cdc_pos": pa.array([*positions, 1], pa.int64()),
            "_cdc_pos_sub": pa.array([*positions, 1], pa.int64()),
        }
    )


def test_a_replayed_truncate_counts_once() -> None:
    assert _truncate_position(truncates([5, 5])) == ((5, 5), 1)
    assert _truncate_position(truncates([5, 7, 5])) == ((7, 7), 2)
    # One already applied by an earlier commit (the table's truncate floor) is not new.
    assert _truncate_position(truncates([5]), floor=(5, 5)) == ((5, 5), 0)
