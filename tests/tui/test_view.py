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
