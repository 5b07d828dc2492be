"""``cdcctl status``: the replicator's and each table's last recorded state."""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

import engine
from cdcctl.console import out, print_json

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]


def _columns() -> list[tuple[str, str]]:
    """Columns of the text table: heading, status field (the counters' from their one
    declaration, :data:`engine.COUNTERS`)."""
    return [
        ("table", "table"),
        ("state", "state"),
        *((c.heading, c.name) for c in engine.shown_counters(engine.STATUS_VIEW)),
        ("lag", "lag_messages"),
        ("lag time", "lag_seconds"),
        ("latency p50/p95/p99", "latency"),
        ("events/s", "events_per_s"),
        ("last commit", "last_commit_at"),
    ]


#: On a terminal too narrow for every column, the columns kept first (the rest in their
#: order); a column is left out whole, never cut, and the line under the table names it.
_KEEP_FIRST = (
    "table",
    "state",
    "lag_messages",
    "inserts",
    "updates",
    "deletes",
    "bad",
    "retries",
    "rows",
    "lag_seconds",
    "late",
    "last_commit_at",
)

#: Events of the log shown under the table.
RECENT_EVENTS = 5


#: Columns holding a duration in seconds.
_DURATIONS = {"lag_seconds"}


def _duration(seconds: float) -> str:
    """A short duration: ``0.42s``, ``12m``, ``5.2h``, ``31d``."""
    if seconds < 60:
        return f"{seconds:.2f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.0f}d"


def _value(table: engine.TableRecord, key: str) -> Any:
    if key == "latency":
        p = [table.latency_p50_s, table.latency_p95_s, table.latency_p99_s]
        return None if p[0] is None else "/".join(_duration(v or 0.0) for v in p)
    return table.figure(key)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in _DURATIONS:
        return _duration(value)
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, str) and len(value) > 19 and value[4:5] == "-" and "T" in value:
        return value[11:19]  # an ISO time: its UTC time of day
    return str(value)


def _fitting(keys: list[str], widths: list[int], width: int) -> list[int]:
    """Indexes of the columns (status fields ``keys``, ``widths`` wide) shown within
    ``width``, in table order: whole columns by :data:`_KEEP_FIRST`, then the others in
    order, while they fit (two spaces apart)."""
    order = [keys.index(k) for k in _KEEP_FIRST if k in keys]
    order += [i for i in range(len(keys)) if i not in order]
    shown: list[int] = []
    used = -2
    for i in order:
        if used + 2 + widths[i] <= width or len(shown) < 2:  # name and state always
            shown.append(i)
            used += 2 + widths[i]
    return sorted(shown)


def _headline(rep: engine.ReplicatorRecord) -> str:
    line = f"replicator: {rep.state}"
    if rep.alive:
        line += f" (pid {rep.pid} on {rep.host}, since {rep.started_at})"
    else:
        line += f" (not running; last update {rep.updated_at or 'never'})"
    if rep.error:
        line += f"\n  error: {rep.error}"
    return line


def slo_line(status: engine.StatusRecord) -> str:
    """The SLO and each table's compliance with it: ``SLO 99% of the time within 60 s
    over 24h: MET (99.95%); a_table 99.95%, b_table 100.00%``."""
    goal = status.slo
    assert goal is not None
    overall = status.slo_compliance
    if overall is None:
        verdict = "not judged yet"
    else:
        verdict = f"{'MET' if goal.met(overall) else 'MISSED'} ({overall * 100:.2f}%)"
    shares = ", ".join(
        f"{t.table} {t.slo_compliance * 100:.2f}%{'' if t.slo_met else ' MISSED'}"
        for t in status.tables
        if t.slo_compliance is not None
    )
    window = engine.slo_window_text(goal.window_s)
    return f"SLO {goal.describe()} over {window}: {verdict}" + (f"; {shares}" if shares else "")


def source_lines(view: engine.SourceView, topics: list[str]) -> list[str]:
    """The source side as ``status`` prints it: each connector and its tasks, each
    replication slot, each connector's newest heartbeat, and what could not be read."""
    at = time.time()
    when = dt.datetime.fromtimestamp(view.checked_at, dt.UTC).strftime("%H:%M:%S")
    lines = [f"source side (looked at {when} UTC):"]
    for c in view.connectors or ():
        tasks = ", ".join(f"task {t.id} {t.state}" for t in c.tasks) or "no task"
        lines.append(f"  connector {c.name} (topics {c.prefix or '?'}.*): {c.state}, {tasks}")
    for s in view.slots or ():
        kept = s.kept_text
        wal = f", WAL {s.wal_status}" if s.wal_status else ""
        lines.append(
            f"  replication slot {s.name}: {'read' if s.active else 'NOT READ'}{wal}{kept}"
        )
    for b in view.binlogs:
        at_end = f"{b.server_file}:{b.server_pos}"
        if b.connector_file is None:
            lines.append(f"  binlog {at_end}; connector {b.connector} has recorded no position")
        else:
            behind = "?" if b.behind_bytes is None else f"{b.behind_bytes:,}"
            lines.append(
                f"  binlog {at_end}; connector {b.connector} at "
                f"{b.connector_file}:{b.connector_pos}, {behind} bytes behind"
            )
    for prefix, beat in sorted(view.heartbeats.items()):
        lines.append(f"  heartbeat of {prefix}: {_duration(max(at - beat, 0.0))} ago")
    if len(lines) == 1:
        lines.append(
            "  nothing watched (set source.connect_url, source.database_dsn, or "
            "heartbeat.interval.ms on the connectors)"
        )
    lines += [f"  PROBLEM: {p}" for p in view.problems(topics)]
    return lines


def print_status(status: engine.StatusRecord, json_out: bool, *, after_run: bool = False) -> None:
    """Print a :func:`engine.read_status` record: JSON, a Rich table, or plain columns,
    then each FAILING or FAILED table's error and the newest events (``after_run``:
    ``start``'s exit summary, which leaves these out: the run said them as they came)."""
    if json_out:
        print_json(status.to_json())
        return
    print(_headline(status.replicator))
    columns = _columns()
    rows = [[_cell(key, _value(t, key)) for _, key in columns] for t in status.tables]
    headings = [h for h, _ in columns]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headings)]
    if sys.stdout.isatty():
        keys = [key for _, key in columns]
        shown = _fitting(keys, widths, out.width - 2)  # a margin for the edges
        table = Table(
            *(headings[i] for i in shown),
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        for i, column in zip(shown, table.columns, strict=True):  # nothing is cut
            column.min_width = widths[i]
            column.no_wrap = True
        for row in rows:
            table.add_row(*(row[i] for i in shown))
        out.print(table)
        hidden = [headings[i] for i in range(len(columns)) if i not in shown]
        if hidden:
            print(f"(not shown at {out.width} columns: {', '.join(hidden)}; --json has all)")
    else:
        for row in [headings, *rows]:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    for t in () if after_run else status.tables:
        if t.last_error and t.state in ("FAILING", "FAILED"):
            print(f"{t.table}: {t.state}: {t.last_error}")
        for problem in t.source_problems:
            print(f"{t.table}: SOURCE: {problem}")
    if status.source is not None and not after_run:
        topics = [t.topic for t in status.tables if t.topic]
        for line in source_lines(status.source, topics):
            print(line)
    if status.slo is not None:
        print(slo_line(status))
    if status.control_topics:
        print("topics that are not tables (records skipped this run):")
        for c in status.control_topics:
            print(f"  {c.topic}: {c.kind}, {c.skipped:,} skipped")
    if status.events and not after_run:
        print("recent events:")
        for e in status.events[-RECENT_EVENTS:]:
            print(f"  {e.at} {e.kind:<6} {e.table or '-'}: {e.message}")


def status(
    config: ConfigOpt = Path("cdcctl.toml"),
    json_out: Annotated[bool, typer.Option("--json", help="print the status as JSON")] = False,
) -> None:
    """Show the replicator's and each table's state.

    Works whether the replicator runs or not: the last state it recorded in its work
    folder's state store, and whether it is alive.
    """
    cfg = engine.load_config(config)
    found = engine.read_status(cfg.work_path())
    if found is None:
        raise engine.StateError(
            f"no replicator state in {cfg.work_path()}: `cdcctl start` has not run "
            "with this work folder (replicator.work_dir)"
        )
    print_status(found, json_out)
