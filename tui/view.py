"""What the main screen shows, computed from a status record: pure functions, no widgets.

The status record is :func:`engine.read_status`'s (an :class:`engine.StatusRecord`, what
``cdcctl status --json`` prints); times in it are ISO 8601 strings. ``now`` is always
passed in, so that every "ago" and uptime is reproducible (the snapshot tests freeze it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

import engine

#: Each table state: its style (in the order of trouble: sorting by state puts FAILED
#: first) (colour plus a weight that reads in monochrome) and mark.
STATE_STYLES = {
    "STOPPED": ("dim", "■"),
    "REPLICATING": ("green", "▶"),
    "SNAPSHOTTING": ("bold blue", "◆"),
    "PAUSED": ("yellow", "‖"),
    "FAILING": ("bold dark_orange", "!"),
    "FAILED": ("bold red reverse", "✖"),
}
#: The replicator's states: their styles.
REPLICATOR_STYLES = {
    "running": "bold green",
    "paused": "bold yellow",
    "stopping": "bold yellow",
    "stopped": "bold",
    "failed": "bold red",
}


@dataclass(frozen=True)
class Column:
    """A column of the tables table: its key, heading, and the status field it sorts by."""

    key: str
    heading: str
    #: Right-aligned (numbers).
    numeric: bool = True


#: The columns, most wanted first: an 80-column terminal shows the name, the state, the
#: lag and the counters of :data:`engine.TABLES_VIEW` (inserts, updates, deletes,
#: retries); 120 columns add those of :data:`engine.NEXT_VIEW` (late, bad), events/s and
#: a 10-minute sparkline; the rest follow, reached with ``→`` and ``End`` (the name and
#: the state stay in view) where the terminal is narrower than all of them.
COLUMNS = (
    Column("table", "table", numeric=False),
    Column("state", "state", numeric=False),
    Column("lag_messages", "lag"),
    *(Column(c.name, c.heading) for c in engine.shown_counters(engine.TABLES_VIEW)),
    *(Column(c.name, c.heading) for c in engine.shown_counters(engine.NEXT_VIEW)),
    Column("events_per_s", "events/s"),
    Column("throughput", "10 min", numeric=False),
    *(Column(c.name, c.heading) for c in engine.shown_counters(engine.WIDE_VIEW)),
    Column("lag_seconds", "lag s"),
    Column("last_commit_at", "last commit"),
)
#: Bars of the sparkline column (60 ten-second steps, 6 to a bar).
SPARK_WIDTH = 10
COLUMN_KEYS = tuple(c.key for c in COLUMNS)
#: The first columns, which an 80-column terminal shows whole (the name, shortened in
#: its middle where it must, gives way to them).
FIRST = 3 + len(engine.shown_counters(engine.TABLES_VIEW))
#: Shortest a shortened name gets.
NAME_MIN = 12
#: Bars of a text sparkline, lowest first.
BARS = " ▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int) -> str:
    """``values`` as ``width`` bars (neighbours averaged), scaled to the largest."""
    values = list(values)
    if len(values) > width:
        step = len(values) / width
        values = [
            sum(values[int(i * step) : int((i + 1) * step)])
            / max(int((i + 1) * step) - int(i * step), 1)
            for i in range(width)
        ]
    top = max(values, default=0.0)
    if top <= 0:
        return "▁" * len(values)
    return "".join(BARS[max(1, round(v / top * (len(BARS) - 1)))] if v > 0 else "▁" for v in values)


def epoch(value: str | float | None) -> float | None:
    """A time of the status record (ISO 8601 text, or already Unix time) as Unix time."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return dt.datetime.fromisoformat(value).timestamp()


def duration(seconds: float | None) -> str:
    """A short duration: ``0.4s``, ``12s``, ``3m05s``, ``1h02m``, ``2d03h``."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def count(value: float | None, *, compact: bool = False) -> str:
    """A count: ``1,234,567``, or with ``compact`` ``1.2M`` (for narrow terminals)."""
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        if compact and abs(value) >= 10_000:
            return count(round(value), compact=True)
        return f"{value:,.1f}"
    n = int(value)
    if compact:
        for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (10_000, "k")):
            if abs(n) >= size:
                scaled = n / (size if unit != "k" else 1_000)
                return f"{scaled:.1f}{unit}" if abs(scaled) < 100 else f"{scaled:.0f}{unit}"
    return f"{n:,}"


def state_text(table: engine.TableRecord, *, compact: bool = False) -> Text:
    """A table's state as words (never colour alone): SNAPSHOTTING with its rows so far
    (unless ``compact``: the snapshot column has them), FAILING with this run's retries."""
    state = table.state
    style, mark = STATE_STYLES.get(state, ("", "?"))
    label = f"{mark} {state}"
    if state == "SNAPSHOTTING" and not compact:
        label += f" {count(table.counters.snapshot_rows, compact=True)}"
    elif state == "FAILING":
        label += f" ×{table.this_run.retries}"
    text = Text(label, style=style)
    if table.source_problems:  # its connector or slot stopped: loud, whatever its state
        text.append(" ✗ SOURCE", style="bold red")
    return text


def sort_value(table: engine.TableRecord, key: str) -> tuple[int, Any]:
    """The value a column sorts by (unknowns last)."""
    value = table.figure(key)
    if key == "throughput":
        value = sum(value or [])
    if key == "state":
        value = list(STATE_STYLES).index(table.state) if table.state in STATE_STYLES else 9
    return (value is None, value if value is not None else 0)


def visible_tables(
    tables: Sequence[engine.TableRecord], sort_key: str, reverse: bool, filter_text: str
) -> list[engine.TableRecord]:
    """The tables shown: those whose name or state contains ``filter_text`` (any case),
    sorted by ``sort_key`` (ties by name)."""
    needle = filter_text.strip().lower()
    shown = [
        t for t in tables if not needle or needle in t.table.lower() or needle in t.state.lower()
    ]
    shown.sort(key=lambda t: t.table)
    unknown = [t for t in shown if sort_value(t, sort_key)[0]]
    known = [t for t in shown if not sort_value(t, sort_key)[0]]
    known.sort(key=lambda t: sort_value(t, sort_key)[1], reverse=reverse)
    return known + unknown


def shortened(names: Sequence[str], width: int) -> list[str]:
    """``names`` in ``width`` cells at most, the longer ones cut in the middle
    (``inventory_c…r_2019``): the same cut for all, about two thirds of the name's start
    and a third of its end, moved where needed so that different names stay apart."""
    width = max(width, 3)
    heads = sorted(range(1, width - 1), key=lambda h: abs(h - 2 * (width - 1) // 3))
    best: list[str] = []
    for head in heads:
        cut = [
            n if len(n) <= width else n[:head] + "…" + n[len(n) - (width - 1 - head) :]
            for n in names
        ]
        if len(set(cut)) > len(set(best)):
            best = cut
        if len(set(cut)) == len(set(names)):
            break
    return best


def cells(table: engine.TableRecord, now: float, *, compact: bool) -> list[str | Text]:
    """A table's row of cells, in :data:`COLUMNS` order."""
    out: list[str | Text] = [table.table, state_text(table, compact=compact)]
    for column in COLUMNS[2:]:
        value = table.figure(column.key)
        if column.key == "lag_seconds":
            text = duration(value)
        elif column.key == "last_commit_at":
            at = epoch(value)
            text = "-" if at is None else f"{duration(now - at)} ago"
        elif column.key == "throughput":
            out.append(Text(sparkline(value or [], SPARK_WIDTH), style="cyan"))
            continue
        else:
            text = count(value, compact=compact)
        out.append(Text(text, justify="right"))
    return out


def event_lines(events: Sequence[engine.EventRecord], limit: int) -> Text:
    """The newest ``limit`` entries of the event log, newest last, one a line."""
    text = Text(no_wrap=True, overflow="ellipsis")
    styles = {"error": "bold red", "retry": "dark_orange", "pause": "yellow", "resync": "blue"}
    for e in list(events)[-limit:]:
        at = e.at[11:19] if e.at else "--:--:--"
        text.append(f"{at} ", style="dim")
        text.append(f"{e.kind:<6} ", style=styles.get(e.kind, "bold"))
        text.append(f"{e.table or '-'}: ", style="bold")
        text.append(f"{e.message}\n")
    text.rstrip()
    return text


@dataclass(frozen=True)
class Headline:
    """The header's figures."""

    state: str
    alive: bool
    uptime: float | None
    events_per_s: float
    history: list[float]
    lag_messages: int | None
    lag_seconds: float | None
    last_commit_ago: float | None
    updated_ago: float | None
    error: str | None
    #: The source side's problems at its newest look (connectors, slots, unreachable).
    source_problems: tuple[str, ...] = ()
    #: The lowest table's compliance with ``replicator.slo``, and whether it meets it.
    slo_compliance: float | None = None
    slo_met: bool | None = None


def headline(status: engine.StatusRecord, now: float) -> Headline:
    """The header's figures from a status record, as of ``now``."""
    rep = status.replicator
    tables = status.tables
    started = epoch(rep.started_at)
    updated = epoch(rep.updated_at)
    commits = [c for c in (epoch(t.last_commit_at) for t in tables) if c is not None]
    lags = [t.lag_messages for t in tables if t.lag_messages is not None]
    lag_times = [t.lag_seconds for t in tables if t.lag_seconds is not None]
    points = max((len(t.throughput or []) for t in tables), default=0)
    history = [0.0] * points
    for t in tables:
        series = t.throughput or []
        for i, v in enumerate(series, start=points - len(series)):
            history[i] += v
    alive = rep.alive
    return Headline(
        state=rep.state or "unknown",
        alive=alive,
        uptime=now - started if alive and started is not None else None,
        events_per_s=sum(t.events_per_s or 0.0 for t in tables),
        history=history,
        lag_messages=sum(lags) if lags else None,
        lag_seconds=max(lag_times) if lag_times else None,
        last_commit_ago=now - max(commits) if commits else None,
        updated_ago=now - updated if updated is not None else None,
        error=rep.error,
        source_problems=tuple(status.source.problems(t.topic for t in tables if t.topic))
        if status.source is not None
        else (),
        slo_compliance=status.slo_compliance,
        slo_met=None
        if status.slo is None or status.slo_compliance is None
        else status.slo.met(status.slo_compliance),
    )


def not_running_notice(head: Headline) -> str | None:
    """What to say when the replicator is not running (its last known state is shown)."""
    if head.alive:
        return None
    when = f", last update {duration(head.updated_ago)} ago" if head.updated_ago is not None else ""
    notice = f"The replicator is not running ({head.state}{when}): showing its last known state."
    if head.error:
        notice += f" {head.error}"
    return notice
