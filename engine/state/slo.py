"""A replication SLO: "``percent`` % of the time each table is replicated within
``within_seconds``", over the last ``window`` (``replicator.slo``).

The running replicator judges each table at every write of the state store: within its
goal while its lag time is known and at most ``within_seconds``, it is not FAILED, and
the source side names no problem of it (an idle table behind a stopped connector is out,
not in: its lag time grows with the heartbeats it misses, and a stopped connector is a
problem). The judgements are kept as segments of time, in the state store; compliance is
the share of the window, from the table's first judgement on, that in-goal segments
cover. Time no replicator judged (it was not running) counts as out: nothing replicated;
time before a table's first judgement does not count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Two judgements further apart than this do not join: the time between is unjudged.
GAP_S = 30.0


@dataclass
class Segment:
    start: float
    end: float
    ok: bool


def compliance(
    segments: Iterable[Segment], now: float, window_s: float, first: float | None
) -> float | None:
    """The share of ``[now - window_s, now]``, from the ``first`` judgement on, that
    in-goal segments cover; None before the first judgement."""
    segments = list(segments)
    if first is None:
        return None
    start = max(now - window_s, first)
    span = now - start
    if span <= 0:
        return 1.0 if segments and segments[-1].ok else 0.0
    ok = sum(max(min(s.end, now) - max(s.start, start), 0.0) for s in segments if s.ok)
    return min(ok / span, 1.0)


class SloLedger:
    """Each table's segments, extended judgement by judgement (one thread)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.segments: dict[str, list[Segment]] = {}
        #: Each table's first judgement ever (time before it is not counted).
        self.first: dict[str, float] = {}
        self._fresh: set[str] = set()

    def load(self, table: str, segments: Iterable[Segment], first: float | None) -> None:
        """A table's judgements from an earlier run: the next one begins a segment of its
        own (the time between the runs was judged by no one: out)."""
        self.segments[table] = sorted(segments, key=lambda s: s.start)
        if first is not None:
            self.first[table] = first
        self._fresh.add(table)

    def forget(self, table: str) -> None:
        self.segments.pop(table, None)
        self.first.pop(table, None)
        self._fresh.discard(table)

    def judge(self, table: str, now: float, ok: bool) -> Segment:
        """Add a judgement at ``now``; the segment it extended or began."""
        kept = self.segments.setdefault(table, [])
        self.first.setdefault(table, now)
        horizon = now - self.window_s
        while kept and kept[0].end < horizon:
            kept.pop(0)
        last = kept[-1] if kept else None
        if table in self._fresh:
            self._fresh.discard(table)
            last = None
        if last is not None and now - last.end <= GAP_S:
            if last.ok == ok:
                last.end = now
                return last
            last.end = now  # the flip happened between the two judgements: here
        segment = Segment(now, now, ok)
        kept.append(segment)
        return segment

    def compliance(self, table: str, now: float) -> float | None:
        return compliance(self.segments.get(table, ()), now, self.window_s, self.first.get(table))


@dataclass(frozen=True)
class SloGoal:
    """``replicator.slo`` as the state store keeps it."""

    percent: float
    within_seconds: float
    window_s: float

    def met(self, share: float) -> bool:
        """Whether a compliance ``share`` (0 to 1) meets the SLO."""
        return share * 100 >= self.percent

    def describe(self) -> str:
        return f"{self.percent:g}% of the time within {self.within_seconds:g} s"


def span_text(seconds: float) -> str:
    """A window as configured: ``24h``, ``30m``, ``90s``, ``7d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= max(size, 172800 if unit == "d" else 0) and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
