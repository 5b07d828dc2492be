"""The key ranges a repair asks Debezium to snapshot again (engine/repair/plan.py), against
a plain oracle: every differing key is covered, the ranges are few, disjoint and in order,
and with room enough they are exactly the runs of consecutive keys."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.repair.plan import (
    MAX_KEYS,
    KeyRanges,
    fitted_ranges,
    integer_runs,
    key_ranges,
    snapshot_signal,
)


def _natural_runs(keys: list[int]) -> list[tuple[int, int]]:
    """The oracle: consecutive integers grouped, one at a time."""
    out: list[tuple[int, int]] = []
    for k in sorted(set(keys)):
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-50, 400), max_size=120), st.integers(1, 30))
def test_runs_cover_every_key_within_the_limit(keys: list[int], limit: int) -> None:
    runs = integer_runs(keys, limit)
    natural = _natural_runs(keys)
    if not keys:
        assert runs == []
        return
    assert len(runs) == min(limit, len(natural))
    assert all(a <= b for a, b in runs)
    assert all(runs[i][1] < runs[i + 1][0] - 1 for i in range(len(runs) - 1))  # disjoint, gaps
    for k in keys:
        assert any(a <= k <= b for a, b in runs), (k, runs)
    # Every range starts and ends at a differing key (joined runs read only what is between).
    ends = {k for k in keys}
    assert all(a in ends and b in ends for a, b in runs)
    if len(natural) <= limit:
        assert runs == natural
    else:  # joined across the smallest gaps: no gap kept is smaller than one joined
        kept = [runs[i + 1][0] - runs[i][1] for i in range(len(runs) - 1)]
        inside = [
            natural[i + 1][0] - natural[i][1]
            for i in range(len(natural) - 1)
            if any(a <= natural[i][1] and natural[i + 1][0] <= b for a, b in runs)
        ]
        assert not kept or not inside or min(kept) >= max(inside)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: object) -> str:
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def test_filters_for_integer_text_and_composite_keys() -> None:
    ints = key_ranges(["id"], [[3], [1], [2], [9]], _quote, _literal)
    assert ints == KeyRanges('"id" BETWEEN 1 AND 3 OR "id" = 9', 2)
    text = key_ranges(["code"], [["a'b"], ["c"], ["a'b"]], _quote, _literal)
    assert text == KeyRanges("\"code\" IN ('a''b', 'c')", 2)
    pair = key_ranges(["a", "b"], [[1, "x"], [2, "y"]], _quote, _literal)
    assert pair == KeyRanges("(\"a\", \"b\") IN ((1, 'x'), (2, 'y'))", 2)
    many = key_ranges(["code"], [[f"k{i}"] for i in range(MAX_KEYS + 1)], _quote, _literal)
    assert many.filter is None and many.widened and str(MAX_KEYS) in many.widened
    bools = key_ranges(["flag"], [[True]], _quote, _literal)  # not integers
    assert bools.filter == '"flag" IN (True)'


def test_the_signal_is_debeziums_incremental_snapshot_with_conditions() -> None:
    ranges = KeyRanges('"id" = 9', 1)
    data = snapshot_signal("public.items", ranges)
    assert json.loads(json.dumps(data)) == {
        "data-collections": ["public.items"],
        "type": "incremental",
        "additional-conditions": [{"data-collection": "public.items", "filter": '"id" = 9'}],
    }
    whole = snapshot_signal("inventory.orders", KeyRanges(None, 0))
    assert whole == {"data-collections": ["inventory.orders"], "type": "incremental"}


def test_the_signal_fits_the_signal_tables_data_column() -> None:
    keys = [[i * 3] for i in range(500)]  # 500 runs of one key each
    free = fitted_ranges(["id"], keys, _quote, _literal, "public.items", None)
    assert free.pieces == 100  # MAX_RANGES
    for room in (2048, 400):
        fitted = fitted_ranges(["id"], keys, _quote, _literal, "public.items", room)
        assert fitted.filter is not None and fitted.pieces <= (100 if room == 2048 else 20)
        assert len(json.dumps(snapshot_signal("public.items", fitted))) <= room
        runs = integer_runs([k[0] for k in keys], fitted.pieces)
        assert all(any(a <= k[0] <= b for a, b in runs) for k in keys)
    tiny = fitted_ranges(["id"], keys, _quote, _literal, "public.items", 120)
    assert tiny.filter is None and "120" in (tiny.widened or "")  # not even one range fits
    texts = [[f"key-{i}"] for i in range(200)]
    whole = fitted_ranges(["code"], texts, _quote, _literal, "public.items", 2048)
    assert whole.filter is None and "2048" in (whole.widened or "")
