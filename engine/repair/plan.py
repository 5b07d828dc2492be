"""What a repair asks for: the key ranges to snapshot again, as Debezium's signal.

Pure functions (no I/O): the keys found missing or differing become a filter on the key
columns — runs of consecutive integers as ``BETWEEN`` ranges, other keys as an ``IN``
list — that Debezium's incremental snapshot takes as ``additional-conditions``. The
filter is kept short: integer runs closest together are joined (rows in a gap between
them are read again, which changes nothing) until at most :data:`MAX_RANGES` remain; other
keys past :data:`MAX_KEYS` make the whole table the range.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: The most ``BETWEEN`` ranges one filter holds (closest runs are joined past it).
MAX_RANGES = 100
#: The most keys one ``IN`` list holds (past it the whole table is snapshotted).
MAX_KEYS = 2000


@dataclass(frozen=True)
class KeyRanges:
    """The rows to snapshot again."""

    #: The SQL condition on the key columns (None: the whole table).
    filter: str | None
    #: Ranges and single keys in it.
    pieces: int
    #: Why the whole table is read, when it is although keys were given.
    widened: str | None = None


def integer_runs(keys: Sequence[int], limit: int = MAX_RANGES) -> list[tuple[int, int]]:
    """Sorted, distinct ``keys`` as inclusive runs ``(lo, hi)``; when more than ``limit``
    runs, the two runs with the smallest gap between them are joined until ``limit``
    remain (so every key stays covered)."""
    runs: list[list[int]] = []
    for k in sorted(set(keys)):
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    excess = len(runs) - max(1, limit)
    if excess > 0:  # join the runs across the ``excess`` smallest gaps
        gaps = sorted(range(len(runs) - 1), key=lambda i: (runs[i + 1][0] - runs[i][1], i))
        join = set(gaps[:excess])
        joined = [runs[0]]
        for i, run in enumerate(runs[1:]):
            if i in join:
                joined[-1][1] = run[1]
            else:
                joined.append(run)
        runs = joined
    return [(a, b) for a, b in runs]


def _integers(columns: Sequence[str], keys: Sequence[Sequence[Any]]) -> bool:
    """Whether the keys are one integer column's (made into ranges)."""
    return len(columns) == 1 and all(
        isinstance(k[0], int) and not isinstance(k[0], bool) for k in keys
    )


def key_ranges(
    columns: Sequence[str],
    keys: Sequence[Sequence[Any]],
    quote: Callable[[str], str],
    literal: Callable[[Any], str],
    limit: int = MAX_RANGES,
) -> KeyRanges:
    """The filter selecting the rows of ``keys`` (raw key values, one list per key, in
    ``columns`` order), quoted and escaped by the source's dialect; at most ``limit``
    integer ranges."""
    if not keys:
        return KeyRanges(None, 0, "no key given")
    names = [quote(c) for c in columns]
    if _integers(columns, keys):
        runs = integer_runs([int(k[0]) for k in keys], limit)
        parts = [
            f"{names[0]} = {literal(a)}"
            if a == b
            else f"{names[0]} BETWEEN {literal(a)} AND {literal(b)}"
            for a, b in runs
        ]
        return KeyRanges(" OR ".join(parts), len(runs))
    distinct = list(dict.fromkeys(tuple(k) for k in keys))
    if len(distinct) > MAX_KEYS:
        return KeyRanges(None, 0, f"{len(distinct)} keys differ, more than {MAX_KEYS}")
    if len(columns) == 1:
        values = ", ".join(literal(k[0]) for k in distinct)
        return KeyRanges(f"{names[0]} IN ({values})", len(distinct))
    rows = ", ".join("(" + ", ".join(literal(v) for v in k) + ")" for k in distinct)
    return KeyRanges(f"({', '.join(names)}) IN ({rows})", len(distinct))


def fitted_ranges(
    columns: Sequence[str],
    keys: Sequence[Sequence[Any]],
    quote: Callable[[str], str],
    literal: Callable[[Any], str],
    data_collection: str,
    max_chars: int | None,
) -> KeyRanges:
    """:func:`key_ranges` whose signal (:func:`snapshot_signal`) fits a signal table's
    ``data`` column of ``max_chars`` characters (None: unbounded; Debezium's documented
    table has ``varchar(2048)``): integer runs are joined further until it does; a key
    list that does not fit makes the whole table the range."""

    def fits(r: KeyRanges) -> bool:
        text = json.dumps(snapshot_signal(data_collection, r))
        return max_chars is None or len(text) <= max_chars

    limit = MAX_RANGES
    while True:
        ranges = key_ranges(columns, keys, quote, literal, limit)
        if fits(ranges):
            return ranges
        if not _integers(columns, keys) or limit == 1:
            break
        limit = max(1, min(limit, ranges.pieces) // 2)
    whole = KeyRanges(None, 0, f"the keys do not fit the signal table's {max_chars} characters")
    return whole


def snapshot_signal(data_collection: str, ranges: KeyRanges) -> dict[str, Any]:
    """The ``data`` of Debezium's ``execute-snapshot`` signal for an incremental snapshot
    of ``data_collection`` restricted to ``ranges``."""
    data: dict[str, Any] = {"data-collections": [data_collection], "type": "incremental"}
    if ranges.filter is not None:
        data["additional-conditions"] = [
            {"data-collection": data_collection, "filter": ranges.filter}
        ]
    return data
