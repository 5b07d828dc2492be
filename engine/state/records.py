"""What ``cdcctl status`` shows, as typed records: :func:`engine.state.read_status`
returns a :class:`StatusRecord`; ``status --json`` prints its :meth:`~StatusRecord.to_json`.

Times are ISO 8601 text in UTC (milliseconds), as ``--json`` prints them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.state.model import COUNTER_NAMES, COUNTERS, TableCounters, TableState
from engine.state.slo import SloGoal
from engine.upstream.model import SourceView

#: Keys of a table in ``status --json``, in order (the documented ones first).
STATUS_FIELDS = (
    "table",
    "state",
    *(c.name for c in COUNTERS if c.listed),
    "lag_messages",
    "lag_seconds",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "events_per_s",
    "last_event_at",
    "last_commit_at",
    "last_error",
)


def iso(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 text in UTC (milliseconds)."""
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class ReplicatorRecord:
    """The replicator as last recorded (``--json``'s ``replicator``)."""

    #: running, paused, stopping, stopped, or failed (also: recorded as running, but its
    #: process ended without stopping cleanly).
    state: str
    #: Whether its process runs (holds the work folder's writer lock).
    alive: bool
    pid: int | None
    host: str | None
    started_at: str | None
    updated_at: str | None
    config: str | None
    error: str | None
    work_dir: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TableRecord:
    """One table as last recorded (an entry of ``--json``'s ``tables``)."""

    table: str
    topic: str | None
    state: TableState
    state_since: str | None
    #: Cumulative counters; ``this_run``: the current (or last) run's alone.
    counters: TableCounters
    this_run: TableCounters
    lag_messages: int | None
    lag_seconds: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    events_per_s: float | None
    last_event_at: str | None
    last_commit_at: str | None
    last_error: str | None
    last_error_at: str | None
    #: Events applied per second, oldest point first (see ``HISTORY_STEP_S``).
    throughput: list[float] = field(default_factory=list)
    #: Why its changes may not be reaching Kafka, at the source side's newest look: its
    #: connector or a task stopped, its replication slot lost WAL or has no reader.
    source_problems: list[str] = field(default_factory=list)
    #: The share of the SLO's window it was within its goal (``replicator.slo``; None
    #: without one, or before its first judgement), and whether that meets the SLO.
    slo_compliance: float | None = None
    slo_met: bool | None = None

    def figure(self, key: str) -> Any:
        """A field of ``--json`` by its key: a counter (cumulative) or an attribute (for
        the CLI's and the dashboard's column lists)."""
        return getattr(self.counters if key in COUNTER_NAMES else self, key)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` entry: :data:`STATUS_FIELDS`, then the rest."""
        out = {key: self.figure(key) for key in STATUS_FIELDS}
        out["state"] = self.state.value
        out.update(
            {
                "topic": self.topic,
                "state_since": self.state_since,
                **{c.name: getattr(self.counters, c.name) for c in COUNTERS if not c.listed},
                "last_error_at": self.last_error_at,
                "this_run": {c: getattr(self.this_run, c) for c in COUNTER_NAMES},
                "throughput": self.throughput,
                "source_problems": self.source_problems,
                "slo_compliance": self.slo_compliance,
                "slo_met": self.slo_met,
            }
        )
        return out


@dataclass(frozen=True)
class ControlTopicRecord:
    """A topic recognised as holding no rows, and the records it skipped this run."""

    topic: str
    kind: str
    skipped: int
    updated_at: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EventRecord:
    """An entry of the event log (``table`` None: the replicator's)."""

    at: str | None
    table: str | None
    kind: str
    message: str


@dataclass(frozen=True)
class StatusRecord:
    """What ``cdcctl status`` shows: the replicator, each table, the topics that hold no
    rows, and the newest entries of the event log (oldest first)."""

    replicator: ReplicatorRecord
    tables: list[TableRecord]
    control_topics: list[ControlTopicRecord]
    events: list[EventRecord]

    #: The source side at its newest look (None: never looked at).
    source: SourceView | None = None
    #: The replication SLO the tables are judged against (None: none configured).
    slo: SloGoal | None = None

    @property
    def slo_compliance(self) -> float | None:
        """Overall: the lowest table's (every table must be within its goal)."""
        shares = [t.slo_compliance for t in self.tables if t.slo_compliance is not None]
        return min(shares) if shares else None

    def table(self, name: str) -> TableRecord | None:
        return next((t for t in self.tables if t.table == name), None)

    def to_json(self) -> dict[str, Any]:
        """``status --json`` (the event log is left out)."""
        return {
            "replicator": self.replicator.to_json(),
            "tables": [t.to_json() for t in self.tables],
            "control_topics": [c.to_json() for c in self.control_topics],
            "source": None
            if self.source is None
            else source_json(self.source, [t.topic for t in self.tables if t.topic]),
            "slo": None
            if self.slo is None
            else {
                "percent": self.slo.percent,
                "within_seconds": self.slo.within_seconds,
                "window_seconds": self.slo.window_s,
                "compliance": self.slo_compliance,
                "met": None if self.slo_compliance is None else self.slo.met(self.slo_compliance),
            },
        }


def source_json(view: SourceView, topics: list[str]) -> dict[str, Any]:
    """``status --json``'s ``source``: the view, its times as ISO text, its problems."""
    out = view.to_json()
    out["checked_at"] = iso(view.checked_at)
    out["heartbeats"] = {prefix: iso(at) for prefix, at in view.heartbeats.items()}
    out["problems"] = view.problems(topics)
    return out
