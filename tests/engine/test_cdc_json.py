"""Generic CDC JSON (source.format = "cdc-json") end to end: decoded, merged by the real
Spark job and Hudi writer, read back by hudi-rs, compared with an independent fold
(tests/engine/cdc_json_oracle.py). Partial images in every delivery order and batch cut."""

from __future__ import annotations

import itertools
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from engine.config import config_from_dict
from engine.hudi.table import HudiTable
from engine.replicator import Replicator
from tests.engine.cdc_json_oracle import COLUMNS, cut, fold_events, streams
from tests.engine.test_properties import Msg
from tests.integration.replicas import read_replica

pytestmark = [pytest.mark.spark]

TOPIC = "shop.public.items"
TABLE = "public_items"


def _config(tmp: Path, images: str, table_type: str = "MERGE_ON_READ") -> Any:
    return config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "format": "cdc-json",
                "cdc_json": {"key_fields": ["PK"], "images": images},
            },
            "target": {"path": str(tmp / "lake")},
            "hudi": {"num_buckets": 2, "table_type": table_type},
            "replicator": {"work_dir": str(tmp / "work")},
        }
    )


def _apply(
    tmp: Path,
    images: str,
    batches: list[list[dict]],
    spark: Any,
    table_type: str = "MERGE_ON_READ",
) -> dict[str, dict]:
    """Apply each batch through the real engine; the replica as hudi-rs reads it."""
    replicator = Replicator(_config(tmp, images, table_type), spark=spark)
    offset = 0
    for batch in batches:
        records = []
        for event in batch:
            records.append(Msg(TOPIC, None, json.dumps(event).encode(), offset))
            offset += 1
        replicator.apply(records)
    assert not list(replicator.failing()), [s.error for s in replicator.failing()]
    return read_replica(tmp / "lake" / TABLE)


T0 = "2024-05-01T10:00:00Z"
ROW1 = {"PK": 1, "col_1": "one", "col_2": 10, "col_3": 1, "updated_time": T0}
ROW2 = {"PK": 2, "col_1": "two", "col_2": 20, "col_3": 2, "updated_time": T0}
NOW = "2024-05-01T10:05:00.123456Z"
ROW3 = {"PK": 3, "col_1": "three", "col_2": 30, "col_3": 3, "updated_time": NOW}


def _events(images: str) -> tuple[list[dict], list[dict]]:
    """The two initial inserts and the three later events (delete, update, insert)."""
    initial = [
        {**ROW1, "_action": "_insert", "_timestamp": "2024-05-01T10:00:00.000001Z"},
        {**ROW2, "_action": "_insert", "_timestamp": "2024-05-01T10:00:00.000002Z"},
    ]
    update = {"PK": 2, "col_3": 0.002, "updated_time": NOW}
    if images == "full":
        update = {**ROW2, **update}
    later = [
        {"PK": 1, "_action": "_delete", "_timestamp": "2024-05-01T10:05:00.000001Z"},
        {**update, "_action": "_update", "_timestamp": "2024-05-01T10:05:00.000002Z"},
        {**ROW3, "_action": "_insert", "_timestamp": "2024-05-01T10:05:00.000003Z"},
    ]
    return initial, later


EXPECTED = {"2": {**ROW2, "col_3": 0.002, "updated_time": NOW}, "3": {**ROW3, "col_3": 3.0}}


def _scenarios() -> list[tuple[str, str, list[list[int]]]]:
    """(images, name, batches of event numbers 0..4: 0-1 initial, 2-4 later)."""
    out = []
    for images in ("full", "partial"):
        for perm in itertools.permutations([2, 3, 4]):
            # The first later event alone, the other two together: both in-batch and
            # cross-batch order are exercised.
            out.append((images, f"order{perm}", [[0, 1], [perm[0]], list(perm[1:])]))
        rng = random.Random(14)
        for n in range(3):
            events = [0, 1, 2, 3, 4]
            rng.shuffle(events)
            cut = rng.randint(1, 4)
            out.append((images, f"shuffled{n}", [events[:cut], events[cut:]]))
    return out


def test_delete_update_insert_in_every_order_and_cut(spark) -> None:
    for images, name, batches in _scenarios():
        initial, later = _events(images)
        events = initial + later
        with tempfile.TemporaryDirectory() as tmp:
            rows = _apply(Path(tmp), images, [[events[i] for i in b] for b in batches], spark)
        assert sorted(rows) == ["2", "3"], (images, name, batches, rows)
        for key, want in EXPECTED.items():
            assert rows[key] == {**want, "_timestamp": rows[key]["_timestamp"]}, (
                images,
                name,
                batches,
                rows[key],
            )
        # The same events folded in order by the oracle give the same table.
        oracle = fold_events(events, key="PK", partial=images == "partial")
        assert {k: {**v, "col_3": float(v["col_3"])} for k, v in oracle.items()} == rows


def test_late_deletes_and_hidden_positions_copy_on_write(spark) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = _apply(
            Path(tmp),
            "partial",
            [
                [
                    {"PK": 7, "a": 1, "b": 2, "_action": "_insert", "_timestamp": 10},
                    {"PK": 8, "a": 1, "b": 2, "_action": "_insert", "_timestamp": 10},
                ],
                [
                    {"PK": 7, "a": 5, "b": 6, "_action": "_insert", "_timestamp": 30},
                    {"PK": 8, "a": 3, "_action": "_update", "_timestamp": 30},
                ],
                # Late deletes: older than the re-insert of 7 (changes nothing), newer
                # than 8's column b (clears just b, the row stays: a is newer).
                [
                    {"PK": 7, "_action": "_delete", "_timestamp": 20},
                    {"PK": 8, "_action": "_delete", "_timestamp": 20},
                ],
                # Older than those deletes: late, nothing changes.
                [
                    {"PK": 7, "b": 9, "_action": "_update", "_timestamp": 15},
                    {"PK": 8, "b": 9, "_action": "_update", "_timestamp": 15},
                ],
            ],
            spark,
            table_type="COPY_ON_WRITE",
        )
        schema = HudiTable.open(Path(tmp) / "lake" / TABLE).arrow_schema()
    assert rows == {
        "7": {"PK": 7, "a": 5, "b": 6, "_timestamp": 30},
        "8": {"PK": 8, "a": 3, "b": None, "_timestamp": 30},
    }
    hidden = {"_cdc_pos__a", "_cdc_sub__a", "_cdc_pos__b", "_cdc_floor_pos", "_cdc_floor_sub"}
    assert hidden <= set(schema.names) and "_cdc_pos__PK" not in schema.names


# -- property: random partial-image streams, any delivery order, any batch cuts ---------


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stream=streams(max_events=12, max_cuts=2))
def test_partial_images_equal_the_ordered_fold(spark, stream) -> None:
    events, cuts = stream
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake" / TABLE
        _apply(Path(tmp), "partial", cut(events, cuts), spark)
        rows = read_replica(lake) if (lake / ".hoodie").is_dir() else {}
    oracle = fold_events(events, key="PK", partial=True)
    # Columns never given a value are absent from the replica: compare with None.
    columns = {"PK", "_timestamp", *COLUMNS}
    got = {k: {c: v.get(c) for c in columns} for k, v in rows.items()}
    want = {k: {c: v.get(c) for c in columns} for k, v in oracle.items()}
    assert got == want, (events, cuts)
