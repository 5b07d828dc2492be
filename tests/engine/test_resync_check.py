"""The rule that decides whether a trimmed topic still rebuilds its table whole
(engine/replicator/trimmed.py), fed with the real Debezium JSON decoder's output.

The broker side (log starts, a real scan, the CLI refusing) is in
tests/peers/test_resync_trimmed.py; here the per-partition rule is walked through its
cases, including runs split across decoded chunks and end marks in another partition.
"""

from __future__ import annotations

import json

from confluent_kafka import Message

from engine.decode import RecordBatch, decode_debezium_json
from engine.replicator.trimmed import TopicCheck, _end_marks, _Partition, _Scan, _snapshot_rows
from tests import builders

COLS = [("id", "int32"), ("name", "string")]


def _scan(starts: dict[int, int], *chunks, stamps=None) -> dict[int, int]:
    """Feed ``chunks`` of (rows, ends); the partitions found whole -> their snapshot start."""
    scan = _Scan({p: _Partition(s) for p, s in starts.items()})
    for rows, ends in chunks:
        scan.feed(rows, ends, stamps or {})
    return {p: s.since for p, s in scan.parts.items() if s.whole}


def test_a_run_at_the_log_start_may_have_lost_its_head() -> None:
    rows = [(0, 20, True), (0, 21, True), (0, 22, False)]
    assert _scan({0: 20}, (rows, {(0, 21)})) == {}


def test_a_run_after_a_streamed_change_that_ends_is_whole() -> None:
    marked = [(0, 5, False), (0, 6, True), (0, 7, True)]
    assert _scan({0: 5}, (marked, {(0, 7)})) == {0: 6}
    # No end mark, but streaming resumed after it in its partition.
    followed = [(0, 5, False), (0, 6, True), (0, 7, False)]
    assert _scan({0: 5}, (followed, set())) == {0: 6}
    # Still open at the partition's end: not known to be whole.
    assert _scan({0: 5}, ([(0, 5, False), (0, 6, True)], set())) == {}


def test_a_run_split_across_chunks_is_one_run() -> None:
    chunks = (
        ([(0, 5, False), (0, 6, True)], set()),
        ([(0, 7, True), (0, 8, True)], {(0, 8)}),
    )
    assert _scan({0: 5}, *chunks) == {0: 6}
    cut = (([(0, 5, True)], set()), ([(0, 6, True)], {(0, 6)}))
    assert _scan({0: 5}, *cut) == {}


def test_an_end_mark_bounds_the_next_snapshot() -> None:
    """A cut snapshot ending at the log's head, then straight away a second one."""
    rows = [(0, 10, True), (0, 11, True), (0, 12, True), (0, 13, True)]
    assert _scan({0: 10}, (rows, {(0, 11), (0, 13)})) == {0: 12}


def test_an_end_mark_in_another_partition_ends_a_run_no_older() -> None:
    rows = [(0, 5, False), (0, 6, True), (1, 3, False), (1, 4, True)]
    newer = {(0, 6): 100, (1, 4): 150}
    assert _scan({0: 5, 1: 3}, (rows, {(1, 4)}), stamps=newer) == {0: 6, 1: 4}
    older = {(0, 6): 200, (1, 4): 150}  # that mark ended an earlier snapshot
    assert _scan({0: 5, 1: 3}, (rows, {(1, 4)}), stamps=older) == {1: 4}


def test_only_trimmed_partitions_are_judged() -> None:
    assert _scan({1: 3}, ([(0, 0, True), (1, 3, True)], set())) == {}
    assert TopicCheck("t", trimmed={}).whole
    assert not TopicCheck("t", trimmed={1: 3}).whole
    assert TopicCheck("t", trimmed={1: 3}, snapshots={1: 9}).whole


def _message(offset: int, value: bytes) -> Message:
    return Message(
        topic="t", partition=0, offset=offset, key=builders.key(offset), value=value,
        timestamp=(1, 1000 + offset),
    )  # fmt: skip


def test_the_decoder_tells_snapshot_reads_and_end_marks() -> None:
    """Snapshot reads are op r with a snapshot position; incremental snapshot reads and
    streamed changes are not; end marks are found by halving the decoded chunk."""
    marks = ["first", "true", "true", "last_in_data_collection", "true", "last"]
    values = [
        builders.value("r", 10 + i, {"id": i, "name": "s"}, COLS, snapshot=mark)
        for i, mark in enumerate(marks)
    ]
    values.append(builders.value("r", 50, {"id": 50, "name": "i"}, COLS, snapshot="incremental"))
    values.append(builders.value("u", 60, {"id": 1, "name": "u"}, COLS))
    records = [_message(i, v) for i, v in enumerate(values)]
    result = decode_debezium_json(
        RecordBatch(
            "t",
            [m.key() for m in records],
            [m.value() for m in records],
            [0] * len(records),
            list(range(len(records))),
        ),
    )
    assert result.batch is not None
    parts, offsets, snapshot = _snapshot_rows(result.batch)
    assert offsets == list(range(8)) and set(parts) == {0}
    assert snapshot == [True] * 6 + [False, False]
    ends = _end_marks(decode_debezium_json, "t", records, result)
    assert [m.offset() for m in ends] == [3, 5]
    assert json.loads(ends[1].value())["payload"]["source"]["snapshot"] == "last"


def test_what_a_refusal_says() -> None:
    cut = TopicCheck("db.items", trimmed={0: 20, 1: 4}, snapshots={1: 9}, scanned=70)
    assert cut.problem() == (
        "db.items[0] starts at offset 20 (the records before it were deleted, by retention "
        "or DeleteRecords) and what remains holds no complete snapshot"
    )
    capped = TopicCheck("db.items", trimmed={0: 20}, scanned=1_000_000, capped=True)
    assert capped.problem().endswith(
        "holds no complete snapshot in its first 1,000,000 records (the check reads no further)"
    )
    plain = TopicCheck("db.items", trimmed={0: 3}, no_snapshots=True)
    assert "this format carries no snapshot" in plain.problem()
    gone = TopicCheck("db.items", missing=True)
    assert not gone.whole and "does not exist any more" in gone.problem()
    assert "cdcctl resync items --force" in cut.advice("items")


def test_tables_with_their_own_key_fields_report_end_marks_too(tmp_path) -> None:
    """Records rewritten for ``[tables.<name>] key_fields`` keep their end mark (the
    rewrite used to drop it, so such tables found no end of their snapshot)."""
    from engine.config import config_from_dict
    from engine.decode import decoder_for

    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "a:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "tables": {"app_items": {"key_fields": ["name"]}},
        }
    )
    decode = decoder_for(cfg)
    values = [
        builders.value("r", 10 + i, {"id": i, "name": f"n{i}"}, COLS, snapshot=mark)
        for i, mark in enumerate(["first", "true", "last"])
    ]
    topic = "srv.app.items"
    assert cfg.table_name(topic) == "app_items"
    result = decode(
        RecordBatch(topic, [builders.key(i) for i in range(3)], values, [0, 0, 0], [0, 1, 2])
    )
    assert result.batch is not None and result.batch.num_rows == 3 and not result.bad
    assert result.snapshot_ended
    records = [_message(i, v) for i, v in enumerate(values)]
    assert [m.offset() for m in _end_marks(decode, topic, records, result)] == [2]
