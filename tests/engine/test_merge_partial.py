"""The partial-image fold without Spark or files: the real decoder's batches folded by
engine.merge.merge_file_group batch after batch (stored rows and tombstones carried
between them as the task would), against the independent ordered fold. Cheap, so many
more hypothesis examples than the Spark-backed test in test_cdc_json.py."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.decode import decoder_for
from engine.hudi import HOODIE_RECORD_KEY
from engine.merge import evolve_schema, merge_file_group
from engine.model import KEY
from tests.engine.cdc_json_oracle import fold_events

_COLUMNS = ("a", "b", "c")


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
        result = _decoder(image)("s.app.t", [None] * n, values, [0] * n, range(offset, offset + n))
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


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[dict], list[int]]:
    n = draw(st.integers(1, 16))
    stamps = draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n, unique=True))
    events = []
    for ts in stamps:
        key = draw(st.integers(1, 3))
        op = draw(st.sampled_from(["_insert", "_update", "_update", "_delete"]))
        event: dict[str, Any] = {"PK": key, "_action": op, "_timestamp": ts}
        if op != "_delete":
            carried = draw(st.lists(st.sampled_from(_COLUMNS), min_size=1, unique=True))
            for column in carried:
                event[column] = draw(st.one_of(st.none(), st.integers(-50, 50)))
        events.append(event)
    delivery = draw(st.permutations(events))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4, unique=True)))
    return delivery, [c for c in cuts if c < n]


def _cut(events: list[dict], cuts: list[int]) -> list[list[dict]]:
    bounds = [0, *cuts, len(events)]
    return [events[lo:hi] for lo, hi in itertools.pairwise(bounds) if hi > lo]


def _compare(rows: dict[str, dict], oracle: dict[str, dict]) -> None:
    columns = {"PK", "_timestamp", *_COLUMNS}
    got = {k: {c: v.get(c) for c in columns} for k, v in rows.items()}
    want = {k: {c: v.get(c) for c in columns} for k, v in oracle.items()}
    assert got == want


@settings(max_examples=150, deadline=None)
@given(stream=_streams())
def test_partial_fold_equals_the_ordered_fold(stream) -> None:
    events, cuts = stream
    batches = _cut(events, cuts)
    rows = fold_batches(batches, ["partial"] * len(batches))
    _compare(rows, fold_events(events, key="PK", partial=True))


@settings(max_examples=60, deadline=None)
@given(stream=_streams())
def test_full_image_batches_into_a_partial_table_carry_every_column(stream) -> None:
    """A table whose images setting changes from partial to full goes on correctly for
    the columns it tracks: a full-image event sets every column (absent ones to null)."""
    events, cuts = stream
    batches = _cut(events, cuts)
    if len(batches) < 2:
        return
    # A seed row makes the partial table track every column before the switch (a column
    # first seen in a full-image batch gets no position of its own: README limits).
    first = [{"PK": 99, "_action": "_insert", "_timestamp": 0, "a": 0, "b": 0, "c": 0}]
    first += batches[0]
    images = ["partial"] + ["full"] * (len(batches) - 1)
    # Full images carry the whole row: complete the later events' columns with None.
    later = [
        {**{c: None for c in _COLUMNS}, **e} if e["_action"] != "_delete" else e
        for b in batches[1:]
        for e in b
    ]
    rows = fold_batches([first, later], images[:2])
    # The oracle: partial semantics where every later upsert carries every column.
    _compare(rows, fold_events(first + later, key="PK", partial=True))
