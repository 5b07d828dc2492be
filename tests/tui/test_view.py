"""The main screen's figures, as text (tui/view.py)."""

from __future__ import annotations

from tui import view


def test_durations_counts_and_sparklines() -> None:
    assert [view.duration(s) for s in (0.42, 12, 185, 3725, 2 * 86400 + 3 * 3600)] == [
        "0.4s",
        "12s",
        "3m05s",
        "1h02m",
        "2d03h",
    ]
    assert view.count(12_345, compact=True) == "12.3k" and view.count(12_345) == "12,345"
    assert view.count(1_234_567, compact=True) == "1.2M" and view.count(None) == "-"
    assert view.sparkline([0, 1, 2, 4], 4) == "▁▂▄█"
    assert view.sparkline([1, 1, 4, 4], 2) == "▂█"  # neighbours averaged


def test_names_shortened_in_the_middle_stay_apart() -> None:
    names = [f"{t}_of_the_year_{y}" for t in ("customers", "orders") for y in (2019, 2020)]
    cut = view.shortened([*names, "short"], 14)
    assert cut[-1] == "short" and all(len(c) == 14 for c in cut[:-1])
    assert len(set(cut)) == 5, cut  # apart: the start and the end both kept
    for c, name in zip(cut, names, strict=False):
        head, tail = c.split("…")
        assert name.startswith(head) and name.endswith(tail) and len(head) > len(tail)
    # Names that differ only in the middle: the cut moves until they are apart.
    middle = ["sales_north_daily", "sales_south_daily"]
    assert len(set(view.shortened(middle, 12))) == 2
