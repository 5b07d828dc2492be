"""Equal positions (issue 22, item 1): a Debezium position names one change, so an event
at a position its key already has is a replay and is dropped; an order value does not
(two changes in one millisecond share it), so the later Kafka offset wins, within a
batch and across batches, as Hudi's DefaultHoodieRecordPayload does.

Without Spark or files: the real decoders' batches folded by
``engine.merge.merge_file_group`` batch after batch (stored rows, tombstones and each
partition's tail carried between them as the replicator does), against the independent
folds of tests/oracle.py (flattened events) and tests/engine/cdc_json_oracle.py.
The same rules through Spark, Hudi and hudi-rs: tests/cases/*/ties-*.json; through the
real CLI and broker: tests/integration/test_order_ties_run.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.decode import RecordBatch, decoder_for, rewrite
from engine.hudi import HOODIE_RECORD_KEY
from engine.merge import MergeOptions, evolve_schema, merge_file_group
from engine.merge.positions import Tail, not_newer
from engine.model import (
    BY_FIELD,
    COPIES,
    KEY,
    OFFSET,
    PARTITION,
    POS,
    POS_SUB,
    STREAMED_BIT,
)
from tests.engine.cdc_json_oracle import fold_events
from tests.oracle import fold, fold_flattened

TOPIC = "srv.app.items"
_NOWHERE = str(Path("/nonexistent-cdcctl-target"))

#: A message: (key object or None, value object or None for a tombstone, partition).
Message = tuple[Any, Any, int]


def _config(source: dict, tables: dict | None = None) -> Any:
    return config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ".", **source},
            "target": {"path": _NOWHERE},
            **({"tables": tables} if tables else {}),
        }
    )


FLAT = {"format": "debezium-flat", "flattened": {"order_field": "__source_ts_ms"}}
CDC_JSON = {"format": "cdc-json", "cdc_json": {"key_fields": ["PK"]}}


@contextmanager
def _bulk(on: bool) -> Iterator[None]:
    """Flattened topics: the bulk decode path (on) or the per-record one (off)."""
    before = rewrite.BULK
    rewrite.BULK = on
    try:
        yield
    finally:
        rewrite.BULK = before


class Folder:
    """A table's state carried from batch to batch as the replicator carries it."""

    def __init__(self, cfg: Any, copies: bool = False) -> None:
        self.decode = decoder_for(cfg)
        self.copies = copies
        self.schema: pa.Schema | None = None
        self.old: pa.Table | None = None
        self.tombs: pa.Table | None = None
        self.tails: dict[int, Tail] = {}
        self.next_offset: dict[int, int] = {}
        self.late = 0
        self.applied = 0

    def batch(self, messages: list[Message]) -> None:
        keys, values, parts, offs = [], [], [], []
        for key, value, part in messages:
            keys.append(None if key is None else json.dumps(key).encode())
            values.append(None if value is None else json.dumps(value).encode())
            parts.append(part)
            offs.append(self.next_offset.get(part, 0))
            self.next_offset[part] = offs[-1] + 1
        result = self.decode(RecordBatch(TOPIC, keys, values, parts, offs))
        assert not result.bad, [b.reason for b in result.bad]
        events = result.batch
        if events is None:
            return
        self.schema = evolve_schema(self.schema, events.schema)
        merged = merge_file_group(
            self.old,
            events,
            instant=f"{sum(self.next_offset.values()):017d}",
            data_schema=self.schema,
            old_tombstones=self.tombs,
            options=MergeOptions(tails=tuple(self.tails.values()), copies=self.copies),
        )
        self.late += merged.counts.late
        counts = merged.counts
        self.applied += counts.events_c + counts.events_u + counts.events_d + counts.events_r
        columns = [HOODIE_RECORD_KEY, *self.schema.names]
        fields = [pa.field(HOODIE_RECORD_KEY, pa.string()), *self.schema]
        parts_out = [merged.carried.select(columns)] if merged.carried.num_rows else []
        if merged.upserts is not None and merged.upserts.num_rows:
            up = merged.upserts.rename_columns(
                [HOODIE_RECORD_KEY if c == KEY else c for c in merged.upserts.column_names]
            )
            parts_out.append(
                pa.Table.from_arrays(
                    [
                        up.column(c).cast(f.type)
                        if c in up.column_names
                        else pa.nulls(up.num_rows, f.type)
                        for c, f in zip(columns, fields, strict=True)
                    ],
                    names=columns,
                )
            )
        self.old = (
            pa.concat_tables([p.cast(parts_out[0].schema) for p in parts_out])
            if parts_out
            else None
        )
        self.tombs = merged.tombstones
        # Each partition's last keyed event (ProgressState.record_tails).
        frame = pl.DataFrame(events.select([KEY, PARTITION, OFFSET, POS, POS_SUB]))
        for last in frame.sort(OFFSET).group_by(PARTITION).last().iter_rows(named=True):
            if last[POS] is None:
                self.tails.pop(last[PARTITION], None)
            else:
                self.tails[last[PARTITION]] = (
                    last[PARTITION],
                    last[KEY],
                    last[POS],
                    last[POS_SUB] or 0,
                )

    def rows(self) -> dict[str, dict]:
        out = {}
        for row in self.old.to_pylist() if self.old is not None else []:
            key = row.pop(HOODIE_RECORD_KEY)
            if self.copies and row.get(COPIES) is not None:
                key = (key, row[COPIES])
            out[key] = {k: v for k, v in row.items() if not k.startswith("_cdc_")}
        return out


def run(cfg: Any, batches: list[list[Message]], copies: bool = False) -> Folder:
    folder = Folder(cfg, copies)
    for batch in batches:
        folder.batch(batch)
    return folder


def flat(key: int, name: str | None, ts: int, op: str = "u", **more: Any) -> Message:
    """A flattened event (ExtractNewRecordState, rewrite mode for deletes)."""
    value = {"id": key, "name": name, "__op": op, "__source_ts_ms": ts, **more}
    if op == "d":
        value["__deleted"] = "true"
    return ({"id": key}, value, 0)


def tombstone(key: int, partition: int = 0) -> Message:
    return ({"id": key}, None, partition)


def cdc(key: int, op: str, ts: Any, partition: int = 0, **columns: Any) -> Message:
    return ({"PK": key}, {"PK": key, "_action": f"_{op}", "_timestamp": ts, **columns}, partition)


def names(folder: Folder) -> dict[str, Any]:
    return {k: v.get("name") for k, v in folder.rows().items()}


# -- the rule itself -----------------------------------------------------------------


def test_not_newer_is_the_one_comparison() -> None:
    frame = pl.DataFrame({"c": [1, 2, 2, 3], "seen": [2, 2, 2, 2], "eq": [True, False, True, True]})
    late = frame.select(not_newer(pl.col("c"), pl.col("seen"), pl.col("eq")))
    assert late.to_series().to_list() == [True, True, False, False]


# -- decoders mark what an order value positions ------------------------------------


@pytest.mark.parametrize("bulk", [True, False])
def test_flattened_marks_order_field_events_not_lsn_events_or_tombstones(bulk: bool) -> None:
    msgs = [
        flat(1, "a", 5),
        ({"id": 2}, {"id": 2, "name": "b", "__op": "c", "__lsn": 77, "__source_ts_ms": 5}, 0),
        tombstone(1),
    ]
    with _bulk(bulk):
        batch = (
            run(_config(FLAT), [])
            .decode(
                RecordBatch(
                    TOPIC,
                    [json.dumps(k).encode() for k, _, _ in msgs],
                    [None if v is None else json.dumps(v).encode() for _, v, _ in msgs],
                    [0, 0, 0],
                    [0, 1, 2],
                )
            )
            .batch
        )
    assert batch is not None
    assert batch.column(BY_FIELD).to_pylist() == [True, False, False]
    assert batch.column(POS).to_pylist()[:2] == [STREAMED_BIT | 5, STREAMED_BIT | 77]


def test_flattened_without_order_field_has_no_mark() -> None:
    cfg = _config({"format": "debezium-flat"})
    value = {"id": 1, "name": "a", "__op": "c", "__lsn": 9}
    batch = decoder_for(cfg)(
        RecordBatch(TOPIC, [b'{"id":1}'], [json.dumps(value).encode()], [0], [0])
    ).batch
    assert batch is not None and BY_FIELD not in batch.column_names


def test_cdc_json_marks_every_event_and_the_mark_is_no_column() -> None:
    folder = run(_config(CDC_JSON), [[cdc(1, "insert", 5, a=1)]])
    assert folder.schema is not None and BY_FIELD not in folder.schema.names
    assert folder.rows() == {"1": {"PK": 1, "_timestamp": 5, "a": 1}}


# -- full images: flattened events and generic CDC JSON ------------------------------


def test_two_updates_in_one_millisecond_the_later_offset_wins() -> None:
    # In one batch, and with the second in a later batch (the stored row is at 5).
    one = run(_config(FLAT), [[flat(1, "a", 5, "c"), flat(1, "first", 5), flat(1, "second", 5)]])
    assert names(one) == {"1": "second"} and one.late == 0 and one.applied == 3
    two = run(_config(FLAT), [[flat(1, "a", 5, "c"), flat(1, "first", 5)], [flat(1, "second", 5)]])
    assert names(two) == {"1": "second"} and two.late == 0
    # An older value is still late, in the batch and against the stored row.
    three = run(_config(FLAT), [[flat(1, "b", 6), flat(1, "old", 5)], [flat(1, "older", 4)]])
    assert names(three) == {"1": "b"} and three.late == 2


def test_lsn_positions_stay_replays() -> None:
    # The same topic's events with an LSN: an equal LSN is the same change (a replay).
    def lsn(name: str, at: int) -> Message:
        return ({"id": 1}, {"id": 1, "name": name, "__op": "u", "__lsn": at}, 0)

    one = run(_config(FLAT), [[lsn("a", 5), lsn("replay", 5)], [lsn("again", 5)]])
    assert names(one) == {"1": "a"} and one.late == 2


@pytest.mark.parametrize("cut", [None, 1])
def test_delete_then_insert_in_one_millisecond_leaves_the_row(cut: int | None) -> None:
    events = [flat(1, "a", 3, "c"), flat(1, "a", 5, "d"), flat(1, "back", 5, "c")]
    batches = [events] if cut is None else [events[: cut + 1], events[cut + 1 :]]
    assert names(run(_config(FLAT), batches)) == {"1": "back"}
    # And the other way round: the delete read last removes the row.
    events = [flat(1, "a", 5, "c"), flat(1, "a", 5, "d")]
    assert names(run(_config(FLAT), [events])) == {}
    assert names(run(_config(FLAT), [events[:1], events[1:]])) == {}


def test_tombstones_keep_their_rule_at_equal_order_values() -> None:
    # Drop mode: the tombstone alone is the delete (it follows an upsert at its position),
    # even when the upsert tied with the stored row; a later change at the same value wins.
    drop = run(
        _config(FLAT),
        [[flat(1, "a", 5, "c")], [flat(1, "b", 5), tombstone(1)], [tombstone(1)]],
    )
    assert names(drop) == {}
    back = run(_config(FLAT), [[flat(1, "a", 5, "c"), tombstone(1), flat(1, "c", 5)]])
    assert names(back) == {"1": "c"}
    # Rewrite mode: the tombstone after the delete repeats it (nothing to do), and an
    # insert in the same millisecond after both brings the row back.
    rewrite_mode = run(
        _config(FLAT),
        [[flat(1, "a", 5, "c"), flat(1, "a", 5, "d"), tombstone(1)], [flat(1, "z", 5, "c")]],
    )
    assert names(rewrite_mode) == {"1": "z"}
    # A tombstone first in a batch inherits its partition's tail across the cut.
    cut = run(_config(FLAT), [[flat(1, "a", 4, "c"), flat(1, "b", 5)], [tombstone(1)]])
    assert names(cut) == {}


def test_ties_across_partitions_go_to_the_higher_partition_in_a_batch() -> None:
    # A key in two partitions has no order between them; in one batch the documented
    # tie-break is (partition, offset), across batches the later batch wins.
    p0, p1 = flat(1, "p0", 5), flat(1, "p1", 5)
    p1 = (p1[0], p1[1], 1)
    assert names(run(_config(FLAT), [[p1, p0]])) == {"1": "p1"}
    assert names(run(_config(FLAT), [[p1], [p0]])) == {"1": "p0"}


def test_arrival_order_ties_are_other_partitions() -> None:
    # arrival_order: the Kafka offset is the position; offsets 0 of partitions 0 and 1.
    cfg = _config({"format": "debezium-flat", "flattened": {"arrival_order": True}})
    a = ({"id": 1}, {"id": 1, "name": "p0", "__op": "u"}, 0)
    b = ({"id": 1}, {"id": 1, "name": "p1", "__op": "u"}, 1)
    assert names(run(cfg, [[a, b]])) == {"1": "p1"}
    assert names(run(cfg, [[b], [a]])) == {"1": "p0"}


def test_cdc_json_records_field_later_in_the_message_wins() -> None:
    # Events of one message share its offset: their place in the message orders them.
    cfg = _config({**CDC_JSON, "cdc_json": {"key_fields": ["PK"], "records_field": "events"}})
    events = [{"PK": 1, "_action": "_insert", "_timestamp": 7, "a": n} for n in ("first", "second")]
    folder = run(cfg, [[({"PK": 1}, {"events": events}, 0)]])
    assert folder.rows() == {"1": {"PK": 1, "_timestamp": 7, "a": "second"}}


def test_full_row_tables_count_both_copies_of_one_millisecond() -> None:
    # keyless = "full-row": two equal rows inserted in one millisecond are two copies;
    # the same two rows with an LSN and an equal one are one row and its replay.
    cfg = _config(FLAT, {"app_items": {"keyless": "full-row"}})
    row = {"name": "x", "__op": "c", "__source_ts_ms": 5}
    folder = run(cfg, [[(None, row, 0), (None, row, 0)]], copies=True)
    assert [k[1] for k in folder.rows()] == [2]
    folder = run(cfg, [[(None, row, 0)], [(None, row, 0)]], copies=True)
    assert [k[1] for k in folder.rows()] == [2]
    replay = {"name": "x", "__op": "c", "__lsn": 5}
    folder = run(cfg, [[(None, replay, 0), (None, replay, 0)]], copies=True)
    assert [k[1] for k in folder.rows()] == [1]


def test_toast_placeholder_takes_the_value_of_the_same_millisecond() -> None:
    # A flattened PostgreSQL update whose TOASTed column did not change carries the
    # placeholder: its value is that of the change before it, even at an equal value.
    ph = "__debezium_unavailable_value"
    events = [
        flat(1, "a", 5, "c", doc="big"),
        flat(1, "b", 5, doc="bigger"),
        flat(1, "c", 5, doc=ph),
    ]
    for batches in ([events], [events[:2], events[2:]]):
        rows = run(_config(FLAT), batches).rows()
        assert rows == {"1": {"id": 1, "name": "c", "doc": "bigger"}}


# -- partial images ------------------------------------------------------------------


def test_partial_images_equal_values_replace_stored_columns_and_deletes() -> None:
    cfg = _config({**CDC_JSON, "cdc_json": {"key_fields": ["PK"], "images": "partial"}})
    folder = run(
        cfg,
        [
            [cdc(1, "insert", 5, a=1, b=1), cdc(2, "insert", 5, a=1)],
            [cdc(1, "update", 5, a=2), cdc(2, "delete", 5)],  # the stored values are at 5
            [cdc(2, "update", 5, b=3)],  # after the delete at 5: a new row of b alone
        ],
    )
    assert folder.rows() == {
        "1": {"PK": 1, "_timestamp": 5, "a": 2, "b": 1},
        "2": {"PK": 2, "_timestamp": 5, "a": None, "b": 3},
    }
    assert folder.late == 0


# -- Debezium envelopes keep replays (tests/oracle.py) -------------------------------


def test_debezium_envelopes_equal_lsn_is_a_replay() -> None:
    def env(name: str, lsn: int) -> Message:
        source = {"connector": "postgresql", "lsn": lsn, "snapshot": "false", "ts_ms": 1}
        return ({"id": 1}, {"op": "u", "after": {"id": 1, "name": name}, "source": source}, 0)

    batches = [[env("a", 10), env("replay", 10)], [env("again", 10)]]
    folder = run(_config({"format": "debezium-json"}), batches)
    messages = [(TOPIC, json.dumps(k), json.dumps(v)) for b in batches for k, v, _ in b]
    assert names(folder) == {"1": "a"} == {k: v["name"] for k, v in fold(messages)[TOPIC].items()}


# -- properties: random streams with ties against the oracles ------------------------


@st.composite
def flat_streams(draw: st.DrawFn, max_events: int = 14) -> tuple[list[Message], list[int]]:
    """Flattened events of up to 3 keys with few distinct order values (ties are common),
    in any order (late events and late deletes), duplicates (a producer's retry), and
    tombstones right after an event of their key (a delete's, or drop mode's alone)."""
    n = draw(st.integers(1, max_events))
    out: list[Message] = []
    for i in range(n):
        if out and draw(st.integers(0, 7)) == 0:
            dup = draw(st.sampled_from([m for m in out if m[1] is not None]))
            out.append(dup)
            continue
        key = draw(st.integers(1, 3))
        op = draw(st.sampled_from(["c", "u", "u", "d"]))
        out.append(flat(key, f"v{i}", draw(st.integers(1, 5)), op))
        if draw(st.integers(0, 4)) == 0:
            out.append(tombstone(key))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(out) - 1)), max_size=3, unique=True)))
    return out, [c for c in cuts if c < len(out)]


def _cut(events: list, cuts: list[int]) -> list[list]:
    bounds = [0, *cuts, len(events)]
    return [events[lo:hi] for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


#: Two same-millisecond updates after the insert, the second in a later batch; a late
#: delete; a delete and re-insert in one millisecond; drop mode's lone tombstone.
_TIES_EXAMPLE = (
    [
        flat(1, "a", 2, "c"),
        flat(1, "b", 3),
        flat(2, "x", 4, "c"),
        flat(1, "c", 3),
        flat(1, "gone", 1, "d"),
        flat(2, "x", 4, "d"),
        flat(2, "y", 4, "c"),
        flat(3, "p", 1, "c"),
        tombstone(3),
    ],
    [3, 6],
)


#: Found by hypothesis: a key deleted by a tombstone, re-inserted at the same value in a
#: later batch and deleted again by a tombstone there (the tombstone follows that upsert,
#: so it is the delete, though its inherited value equals the stored tombstone's).
_TOMBSTONE_AFTER_TIE = (
    [flat(2, "v1", 1, "c"), tombstone(2), flat(2, "v6", 1, "c"), tombstone(2)],
    [2],
)


@settings(max_examples=200, deadline=None)
@given(stream=flat_streams())
@example(stream=_TIES_EXAMPLE)
@example(stream=_TOMBSTONE_AFTER_TIE)
def test_flattened_order_field_equals_the_oracle(stream: tuple[list[Message], list[int]]) -> None:
    events, cuts = stream
    messages = [(TOPIC, json.dumps(k), None if v is None else json.dumps(v)) for k, v, _ in events]
    want = fold_flattened(messages, "__source_ts_ms").get(TOPIC, {})
    for bulk in (True, False):
        with _bulk(bulk):
            got = run(_config(FLAT), _cut(events, cuts)).rows()
        assert got == want, (bulk, events, cuts)


@st.composite
def cdc_streams(draw: st.DrawFn) -> tuple[list[Message], list[int]]:
    """Generic CDC JSON events with ties, duplicates and late deletes, any order."""
    n = draw(st.integers(1, 14))
    out: list[Message] = []
    for i in range(n):
        if out and draw(st.integers(0, 7)) == 0:
            out.append(draw(st.sampled_from(out)))
            continue
        key = draw(st.integers(1, 3))
        op = draw(st.sampled_from(["insert", "update", "update", "delete"]))
        columns = {} if op == "delete" else {"a": i, "b": draw(st.sampled_from([None, i]))}
        out.append(cdc(key, op, draw(st.integers(1, 4)), **columns))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=3, unique=True)))
    return out, [c for c in cuts if c < len(out)]


@settings(max_examples=150, deadline=None)
@given(stream=cdc_streams(), images=st.sampled_from(["full", "partial"]))
def test_cdc_json_with_ties_equals_the_oracle(
    stream: tuple[list[Message], list[int]], images: str
) -> None:
    events, cuts = stream
    cfg = _config({**CDC_JSON, "cdc_json": {"key_fields": ["PK"], "images": images}})
    got = run(cfg, _cut(events, cuts)).rows()
    want = fold_events([v for _, v, _ in events], key="PK", partial=images == "partial")
    columns = ("PK", "_timestamp", "a", "b")
    assert {k: {c: r.get(c) for c in columns} for k, r in got.items()} == {
        k: {c: r.get(c) for c in columns} for k, r in want.items()
    }, (images, events, cuts)


@pytest.mark.parametrize("bulk", [True, False])
def test_a_row_column_named_like_the_mark_is_a_bad_message(bulk: bool) -> None:
    value = {"id": 1, BY_FIELD: True, "__op": "u", "__source_ts_ms": 5}
    with _bulk(bulk):
        result = decoder_for(_config(FLAT))(
            RecordBatch(TOPIC, [b'{"id":1}'], [json.dumps(value).encode()], [0], [0])
        )
    assert result.batch is None and "control column" in result.bad[0].reason
