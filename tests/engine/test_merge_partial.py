"""The cdc-json fold without Spark or files: the real decoder's batches folded by
engine.merge.merge_file_group batch after batch (stored rows and tombstones carried
between them as the task would), against the independent ordered fold. Cheap, so many
more hypothesis examples than the Spark-backed test in test_cdc_json.py, and the issue's
five events in every delivery order and every cut, in both image forms."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import example, given, settings

from engine.config import config_from_dict
from engine.decode import RecordBatch, decoder_for
from engine.hudi import HOODIE_RECORD_KEY
from engine.merge import evolve_schema, merge_file_group
from engine.model import KEY
from tests.engine.cdc_json_oracle import COLUMNS, cut, fold_events, streams
from tests.engine.test_cdc_json import EXPECTED, _events


def _decoder(images: str) -> Any:
    return decoder_for(
        config_from_dict(
            {
                "source": {
                    "bootstrap_servers": "127.0.0.1:1",
                    "topics": ".",
                    "format": "cdc-json",
                    "cdc_json": {"key_fields": ["PK"], "images": images},
                },
                "target": {"path": str(Path("/nonexistent-cdcctl-target"))},
            }
        )
    )


def fold_batches(batches: list[list[dict]], images: list[str]) -> dict[str, dict]:
    """Decode and fold each batch (with the images setting given for it)."""
    schema = None
    old = tombs = None
    offset = 0
    for batch, image in zip(batches, images, strict=True):
        values = [json.dumps(e).encode() for e in batch]
        n = len(values)
        result = _decoder(image)(
            RecordBatch("s.app.t", [None] * n, values, [0] * n, range(offset, offset + n))
        )
        offset += n
        assert not result.bad, result.bad
        if result.batch is None:
            continue
        schema = evolve_schema(schema, result.batch.schema)
        merged = merge_file_group(
            old, result.batch, instant=f"{offset:017d}", data_schema=schema, old_tombstones=tombs
        )
        columns = [HOODIE_RECORD_KEY, *schema.names]
        parts = [merged.carried.select(columns)] if merged.carried.num_rows else []
        if merged.upserts is not None and merged.upserts.num_rows:
            up = merged.upserts.rename_columns(
                [HOODIE_RECORD_KEY if c == KEY else c for c in merged.upserts.column_names]
            )
            parts.append(
                pa.Table.from_arrays(
                    [
                        up.column(c).cast(f.type)
                        if c in up.column_names
                        else pa.nulls(up.num_rows, f.type)
                        for c, f in zip(
                            columns,
                            [pa.field(HOODIE_RECORD_KEY, pa.string()), *schema],
                            strict=True,
                        )
                    ],
                    names=columns,
                )
            )
        old = pa.concat_tables([p.cast(parts[0].schema) for p in parts]) if parts else None
        tombs = merged.tombstones
    rows = {}
    for row in old.to_pylist() if old is not None else []:
        key = row.pop(HOODIE_RECORD_KEY)
        rows[key] = {k: v for k, v in row.items() if not k.startswith("_cdc_")}
    return rows


def _compare(rows: dict[str, dict], oracle: dict[str, dict]) -> None:
    columns = {"PK", "_timestamp", *COLUMNS}
    got = {k: {c: v.get(c) for c in columns} for k, v in rows.items()}
    want = {k: {c: v.get(c) for c in columns} for k, v in oracle.items()}
    assert got == want


def _e(op: str, key: int, at: int, **columns: Any) -> dict:
    return {"PK": key, "_action": f"_{op}", "_timestamp": at, **columns}


#: A column first seen with integers, later with a fraction (it widens to double), in
#: two batches; and equal order values of one key (the event consumed last wins).
INT_THEN_FLOAT = ([_e("insert", 1, 1, a=3), _e("update", 1, 2, a=2.5)], [1])
TIES = (
    [
        _e("insert", 1, 5, a=1),
        _e("update", 1, 5, a=2, b=7),  # the same millisecond, read later: a and b set
        _e("delete", 2, 3),
        _e("insert", 2, 3, a=9),  # after a delete at its order value: the row is back
        _e("insert", 3, 4, c=1),
        _e("delete", 3, 4),  # read after the insert at its order value: the row is gone
    ],
    [2, 5],
)


@settings(max_examples=150, deadline=None)
@given(stream=streams())
@example(stream=INT_THEN_FLOAT)
@example(stream=TIES)
def test_partial_fold_equals_the_ordered_fold(stream) -> None:
    events, cuts = stream
    batches = cut(events, cuts)
    rows = fold_batches(batches, ["partial"] * len(batches))
    _compare(rows, fold_events(events, key="PK", partial=True))


@settings(max_examples=60, deadline=None)
@given(stream=streams())
def test_full_image_batches_into_a_partial_table_carry_every_column(stream) -> None:
    """A table whose images setting changes from partial to full goes on correctly for
    the columns it tracks: a full-image event sets every column (absent ones to null)."""
    events, cuts = stream
    batches = cut(events, cuts)
    if len(batches) < 2:
        return
    # A seed row makes the partial table track every column before the switch (a column
    # first seen in a full-image batch gets no position of its own: the limits of
    # Generic CDC JSON in docs/guide/formats.md).
    first = [{"PK": 99, "_action": "_insert", "_timestamp": 0, "a": 0, "b": 0, "c": 0}]
    first += batches[0]
    images = ["partial"] + ["full"] * (len(batches) - 1)
    # Full images carry the whole row: complete the later events' columns with None.
    later = [
        {**{c: None for c in COLUMNS}, **e} if e["_action"] != "_delete" else e
        for b in batches[1:]
        for e in b
    ]
    rows = fold_batches([first, later], images[:2])
    # The oracle: partial semantics where every later upsert carries every column.
    _compare(rows, fold_events(first + later, key="PK", partial=True))


@settings(max_examples=100, deadline=None)
@given(stream=streams())
@example(stream=INT_THEN_FLOAT)
@example(stream=TIES)
def test_full_fold_equals_the_ordered_fold(stream) -> None:
    """Full images: every upsert carries the whole row; on equal order values the event
    consumed last wins (two changes in one millisecond, not a replay)."""
    events, cuts = stream
    events = [{c: None for c in COLUMNS} | e if e["_action"] != "_delete" else e for e in events]
    batches = cut(events, cuts)
    rows = fold_batches(batches, ["full"] * len(batches))
    _compare(rows, fold_events(events, key="PK", partial=False))


def test_int_then_float_widens_to_double() -> None:
    events, cuts = INT_THEN_FLOAT
    rows = fold_batches(cut(events, cuts), ["partial", "partial"])
    assert rows["1"]["a"] == 2.5 and isinstance(rows["1"]["a"], float)


def test_ties_go_to_the_event_consumed_last() -> None:
    events, cuts = TIES
    want = {
        "1": {"PK": 1, "_timestamp": 5, "a": 2, "b": 7, "c": None},
        "2": {"PK": 2, "_timestamp": 3, "a": 9, "b": None, "c": None},
    }
    for batches in (cut(events, cuts), [events]):  # across batches and within one
        assert fold_batches(batches, ["partial"] * len(batches)) == want
        full = [
            [{c: None for c in COLUMNS} | e if e["_action"] != "_delete" else e for e in b]
            for b in batches
        ]
        assert fold_batches(full, ["full"] * len(batches)) == want


def test_the_five_events_in_every_order_and_every_cut() -> None:
    """The issue's generic-format example: rows 1 and 2, then DELETE 1, UPDATE 2 (col_3,
    updated_time), INSERT 3. All 120 delivery orders of the five events, each whole and
    cut into two batches at each of the 4 places, in both image forms (1200 folds):
    the replica is rows 2 (col_3 = 0.002, other columns unchanged) and 3, as the
    ordered fold says."""
    runs = 0
    for images in ("full", "partial"):
        initial, later = _events(images)
        events = initial + later
        newest = {"2": later[1]["_timestamp"], "3": later[2]["_timestamp"]}
        oracle = fold_events(events, key="PK", partial=images == "partial")
        for order in itertools.permutations(events):
            for at in range(len(order)):
                batches = [list(order)] if at == 0 else [list(order[:at]), list(order[at:])]
                rows = fold_batches(batches, [images] * len(batches))
                where = (images, [e["PK"] for e in order], [e["_action"] for e in order], at)
                assert rows == {k: {**v, "_timestamp": newest[k]} for k, v in EXPECTED.items()}, (
                    where,
                    rows,
                )
                assert rows == oracle, where
                runs += 1
    assert runs == 2 * 120 * 5
