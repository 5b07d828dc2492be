"""Reading a work folder's state and steering its replicator, from another process.

:func:`read_status` is what ``cdcctl status`` shows: the last state the replicator
recorded, whether it is alive (a live process holds the work folder's writer lock), and
each table's state, counters, lag and latency, and the topics that hold no rows.
:func:`send_request` files a pause,
resume or stop request and waits (bounded) for the running replicator's answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.lock import LOCK_NAME, held
from engine.state.model import COUNTER_NAMES, TableCounters, TableState
from engine.state.records import (
    ControlTopicRecord,
    EventRecord,
    ReplicatorRecord,
    StatusRecord,
    TableRecord,
    iso,
)
from engine.state.slo import Segment, SloGoal, compliance
from engine.state.store import Request, StateStore, store_path
from engine.upstream.model import SourceView

#: How often a running replicator measures every table's lag (also while idle).
LAG_EVERY_SECONDS = 3.0


def alive(work_dir: Path) -> bool:
    """Whether a replicator runs on this work folder (it holds the writer lock)."""
    return held(work_dir / LOCK_NAME)


def open_store(work_dir: Path) -> StateStore | None:
    """The work folder's state store, or None when no replicator ever ran there."""
    try:
        return StateStore(store_path(work_dir), create=False)
    except FileNotFoundError:
        return None


def read_status(work_dir: Path) -> StatusRecord | None:
    """The replicator, each table, the topics that hold no rows and the newest events,
    as last recorded; None without a store.

    ``control_topics`` are the topics the last (or running) replicator recognised as
    holding no rows (transaction markers, heartbeats, logical decoding messages, ...):
    each one's ``topic``, ``kind`` and the records it ``skipped`` in that run.

    A replicator recorded as running (or paused, stopping) whose process has ended
    without stopping cleanly (killed, crashed) is reported ``failed``. While no replicator
    runs, each table reads :meth:`~engine.state.model.TableState.at_rest` (STOPPED since
    the replicator's last update, unless PAUSED or FAILED).
    """
    store = open_store(work_dir)
    if store is None:
        return None
    try:
        rep = store.replicator() or {"state": "stopped"}
        tables = store.tables()
        controls = store.control_topics()
        events = store.events(20)
        source_text = store.source()
        goal_row, segments, first = store.slo()
    finally:
        store.close()
    is_alive = alive(work_dir)
    if not is_alive and rep.get("state") in ("running", "paused", "stopping"):
        rep["state"] = "failed"
        rep["error"] = (
            f"the replicator (pid {rep.get('pid')}) ended without stopping cleanly; "
            "`cdcctl start` resumes from each table's last commit"
        )
    source = None if source_text is None else SourceView.from_json(json.loads(source_text))
    goal = None if goal_row is None else SloGoal(*goal_row)
    now = time.time()

    def slo_of(name: str) -> dict[str, Any]:
        """A table's ``slo_compliance`` and ``slo_met``."""
        if goal is None:
            return {}
        kept = [Segment(*s) for s in segments.get(name, ())]
        # A live replicator judged the table at its last write: as of then (the time
        # since is not out); with none running, as of now (nothing replicates).
        at = min(now, kept[-1].end) if is_alive and kept else now
        share = compliance(kept, at, goal.window_s, first.get(name))
        return {"slo_compliance": share, "slo_met": None if share is None else goal.met(share)}

    replicator = ReplicatorRecord(
        state=rep["state"],
        alive=is_alive,
        pid=rep.get("pid"),
        host=rep.get("host"),
        started_at=iso(rep.get("started_at")),
        updated_at=iso(rep.get("updated_at")),
        config=rep.get("config"),
        error=rep.get("error"),
        work_dir=str(work_dir),
    )
    return StatusRecord(
        replicator=replicator,
        tables=[
            replace(_table(t, is_alive, rep.get("updated_at"), source), **slo_of(t["name"]))
            for t in tables
        ],
        control_topics=[
            ControlTopicRecord(c["topic"], c["kind"], c["skipped"], iso(c["updated_at"]))
            for c in controls
        ],
        events=[EventRecord(iso(e["at"]), e["tbl"], e["kind"], e["message"]) for e in events],
        source=source,
        slo=goal,
    )


def _table(
    row: dict[str, Any], running: bool, stopped_at: float | None, source: SourceView | None
) -> TableRecord:
    """A table's record from its row in the store (not ``running``: as it rests, since
    the replicator's last update ``stopped_at``), with the problems ``source`` (the
    source side's newest look) has for its topic."""
    state, since = TableState(row["state"]), row["state_since"]
    if not running and state.at_rest() is not state:
        state, since = state.at_rest(), stopped_at or since
    return TableRecord(
        table=row["name"],
        topic=row["topic"],
        state=state,
        state_since=iso(since),
        counters=TableCounters(**{c: row[c] for c in COUNTER_NAMES}),
        this_run=TableCounters(**{c: row[f"run_{c}"] for c in COUNTER_NAMES}),
        lag_messages=row["lag_messages"],
        lag_seconds=row["lag_seconds"],
        latency_p50_s=row["latency_p50_s"],
        latency_p95_s=row["latency_p95_s"],
        latency_p99_s=row["latency_p99_s"],
        events_per_s=row["events_per_s"],
        last_event_at=iso(row["last_event_at"]),
        last_commit_at=iso(row["last_commit_at"]),
        last_error=row["last_error"],
        last_error_at=iso(row["last_error_at"]),
        throughput=row["throughput"],
        source_problems=source.problems_for(row["topic"]) if source and row["topic"] else [],
    )


def written_at(status: StatusRecord) -> float | None:
    """When the replicator last wrote the state store (a time; None: never)."""
    from datetime import datetime

    updated = status.replicator.updated_at
    return datetime.fromisoformat(updated).timestamp() if updated else None


def caught_up_since(work_dir: Path, table: str, since: float) -> bool:
    """Whether the running replicator had applied everything its topics held for
    ``table`` at a lag measurement made after ``since`` (a time): no message waiting."""
    from engine.state.recorder import FLUSH_SECONDS

    status = read_status(work_dir)
    row = status.table(table) if status is not None else None
    written = written_at(status) if status is not None else None
    if row is None or written is None:
        return False
    measured_after = written - LAG_EVERY_SECONDS - FLUSH_SECONDS
    return alive(work_dir) and row.lag_messages == 0 and measured_after >= since


def wait_stopped(work_dir: Path, timeout: float) -> bool:
    """Wait until no replicator runs on the work folder; whether it stopped in time."""
    deadline = time.monotonic() + timeout
    while alive(work_dir):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def send_request(
    work_dir: Path, kind: str, tables: Sequence[str], wait_seconds: float = 5.0
) -> list[Request] | None:
    """File a request per table (none: one for all) and wait for the answers.

    Returns None, filing nothing, when no replicator runs on the work folder; else the
    requests as answered within ``wait_seconds`` (one not picked up by then is withdrawn,
    its outcome says so, so that no later replicator acts on it).
    """
    store = open_store(work_dir)
    if store is None or not alive(work_dir):
        if store is not None:
            store.close()
        return None
    try:
        ids = store.request(kind, list(tables) or [None])
        deadline = time.monotonic() + wait_seconds
        while time.monotonic() < deadline:
            if all(r.done_at is not None for r in store.requests(ids)):
                break
            time.sleep(0.1)
        else:
            store.withdraw(ids, f"not picked up within {wait_seconds:g} s")
        return store.requests(ids)
    finally:
        store.close()
