"""What the running replicator tells its state store, and when.

The loop calls a :class:`StateRecorder` at a few points: when a table is opened
(:meth:`~StateRecorder.adopt`: its cumulative counters are loaded and reconciled with
the commits made since the store last recorded one), after each commit
(:meth:`~StateRecorder.committed`), and once per loop turn (:meth:`~StateRecorder.sync`
with every table's status and lag), which writes at most every :data:`FLUSH_SECONDS`.
Each write is one transaction holding every table's counters together with the last
instant they count, so after a crash the counters are made exact from the commits'
``cdcctl.counts``. Control requests are read with :meth:`~StateRecorder.requests` and
answered with :meth:`~StateRecorder.answer`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.redaction import redact
from engine.state.model import (
    COUNTER_NAMES,
    COUNTERS,
    TableCounters,
    TableState,
    TableStatus,
    add_commit_counts,
)
from engine.state.slo import Segment, SloGoal, SloLedger
from engine.state.slo import span_text as _span
from engine.state.store import Request, StateStore, store_path
from engine.upstream.model import SourceView

log = logging.getLogger("cdcctl.state")

#: Shortest time between two writes of the store (unless forced).
FLUSH_SECONDS = 0.5
#: Window of the latency percentiles, and of the events/s figure.
LATENCY_WINDOW_S = 300.0
RATE_WINDOW_S = 60.0
#: Throughput history: this many points of this many seconds each.
HISTORY_POINTS, HISTORY_STEP_S = 60, 10.0

#: The event log's entry for a resync.
RESYNC_EVENT = "replica dropped; its topic is read again from the start"
#: ``cdcctl.counts`` keys of source events applied (those exported by op).
_EVENT_KEYS = tuple(c.commit_key for c in COUNTERS if c.op and c.commit_key)


@dataclass
class _Live:
    """What the recorder keeps of one table between writes."""

    topic: str
    state: TableState | None = None
    since: float = 0.0
    base: TableCounters = field(default_factory=TableCounters)
    last_instant: str | None = None
    last_commit_at: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    lag_messages: int | None = None
    #: (commit time, latencies in s, weight of each)
    latencies: deque[tuple[float, np.ndarray, float]] = field(default_factory=deque)
    #: (commit time, events applied)
    applied: deque[tuple[float, int]] = field(default_factory=deque)


def weighted_quantiles(
    values: np.ndarray, weights: np.ndarray, qs: Sequence[float]
) -> list[float | None]:
    """Quantiles of values each standing for ``weight`` events."""
    if values.size == 0:
        return [None for _ in qs]
    order = np.argsort(values)
    values, cum = values[order], np.cumsum(weights[order])
    total = cum[-1]
    return [float(values[min(np.searchsorted(cum, q * total), values.size - 1)]) for q in qs]


class StateRecorder:
    """The replicator's writer of its work folder's state store (one thread)."""

    def __init__(
        self, work_dir: Path, config_path: str | None = None, slo: SloGoal | None = None
    ) -> None:
        self.store = StateStore(store_path(work_dir))
        #: The replication SLO (``replicator.slo``), each table's judgements, and whether
        #: each table met it at the last write (for the event log).
        self.slo = slo
        self._ledger = SloLedger(slo.window_s) if slo is not None else None
        self._slo_met: dict[str, bool] = {}
        self._slo_shares: dict[str, float] = {}
        self._slo_stored: tuple[Any, dict[str, list[tuple]], dict[str, float]] | None = None
        self._slo_pruned = 0.0
        self.config_path = config_path
        self.started_at = time.time()
        self._live: dict[str, _Live] = {}
        self._events: list[tuple[str | None, str, str]] = []
        self._answers: list[tuple[int, str]] = []
        self._state = "running"
        self._error: str | None = None
        self._last_flush = 0.0
        #: Each table's row as last written (read by the metrics endpoint's thread).
        self._rows: dict[str, dict[str, Any]] = {}
        #: The storage error of the last write that failed (None: the last one worked).
        self._unwritable: str | None = None
        #: Topics holding no rows: topic -> (kind, records skipped), as last written,
        #: and as the loop last told (see :meth:`sync`).
        self._controls: dict[str, tuple[str, int]] = {}
        self._next_controls: dict[str, tuple[str, int]] = {}
        #: The newest look at the source side (:meth:`sync`), and the one last written.
        self._source: SourceView | None = None
        self._source_written: float | None = None
        #: What the event log last said of the source side: table (None: the whole
        #: source side) -> its problems then.
        self._source_said: dict[str | None, tuple[str, ...]] = {}

    # -- the replicator -------------------------------------------------------------------
    def started(self) -> None:
        with self.store.transaction() as db:
            self.store.set_replicator(
                db,
                state="running",
                pid=os.getpid(),
                host=socket.gethostname(),
                started_at=self.started_at,
                config=self.config_path,
                error=None,
            )
            self.store.clear_control_topics(db)
            self.store.add_event(db, None, "state", f"replicator started (pid {os.getpid()})")
            if self.slo is None:
                db.execute("DELETE FROM slo_goal")
            else:
                goal = self.slo
                self.store.put_slo_goal(db, goal.percent, goal.within_seconds, goal.window_s)

    def replicator_state(self, state: str, error: str | None = None) -> None:
        """Set the replicator's state (running, paused, stopping, stopped, failed).

        Error text, here and everywhere the store keeps it, is redacted (no secret)."""
        error = redact(error) if error else error
        if state != self._state:
            self._state, self._error = state, error
            message = f"replicator {state}" + (f": {error}" if error else "")
            self._events.append((None, "error" if error else "state", message))
            self._last_flush = 0.0  # written at the next sync

    @property
    def state(self) -> str:
        return self._state

    @property
    def adopted(self) -> set[str]:
        """Tables taken on (see :meth:`adopt`)."""
        return set(self._live)

    def reset(self, name: str) -> None:
        """A table starts over (resync): its counters, figures and history are dropped,
        and the event log says so (the store's row is rewritten with the next sync)."""
        live = self._live.get(name)
        if live is None:
            return
        self._live[name] = _Live(live.topic, state=live.state, since=live.since)
        self.event(name, "resync", RESYNC_EVENT)
        self._last_flush = 0.0

    def forget(self, name: str) -> None:
        """A name taken on that turned out to be no table (a topic of schema changes,
        transaction metadata, heartbeats, ...): its row leaves the store."""
        self._live.pop(name, None)
        self._rows = {k: v for k, v in self._rows.items() if k != name}
        if self._ledger is not None:
            self._ledger.forget(name)
            self._slo_met.pop(name, None)
            self._slo_shares = {k: v for k, v in self._slo_shares.items() if k != name}
        self._write(lambda db: self.store.remove_table(db, name))

    def snapshot(self) -> tuple[str, dict[str, dict[str, Any]]]:
        """The replicator's state and every table's row as last written (any thread)."""
        return self._state, self._rows

    def slo_snapshot(self) -> tuple[SloGoal | None, dict[str, float]]:
        """The SLO and each table's compliance at the last write (any thread)."""
        return self.slo, dict(self._slo_shares)  # a copy: one C call, safe from this thread

    def source_snapshot(self) -> SourceView | None:
        """The source side's newest look handed to the store (any thread)."""
        return self._source

    def control_snapshot(self) -> dict[str, tuple[str, int]]:
        """Topics holding no rows as last written: topic -> (kind, records skipped)
        this run (any thread)."""
        return self._controls

    def event(self, table: str | None, kind: str, message: str) -> None:
        """Add to the event log (written with the next sync)."""
        self._events.append((table, kind, redact(message)))

    # -- tables ---------------------------------------------------------------------------
    def adopt(
        self,
        name: str,
        topic: str,
        counters: TableCounters,
        instants: Iterable[str],
        counts_of: Callable[[str], dict[str, int]],
    ) -> TableState | None:
        """Take a table on: load its counters, add the commits the store has not counted.

        ``counters`` is updated in place; ``instants`` are the table's completed
        instants and ``counts_of`` reads one's ``cdcctl.counts``. Returns the state the
        store last recorded (None for a table it has never seen).
        """
        row = self.store.table(name)
        live = self._live[name] = _Live(topic)
        if self._ledger is not None:
            if self._slo_stored is None:  # read once, for every table taken on
                self._slo_stored = self.store.slo()
            _, segments, first = self._slo_stored
            self._ledger.load(name, (Segment(*s) for s in segments.get(name, ())), first.get(name))
        stored = None
        if row is not None:
            for counter in COUNTER_NAMES:
                setattr(counters, counter, int(row[counter]))
            if row["last_event_at"] is not None:
                counters.last_source_ts_ms = int(row["last_event_at"] * 1000)
            live.last_instant = row["last_instant"]
            live.last_commit_at = row["last_commit_at"]
            live.last_error, live.last_error_at = row["last_error"], row["last_error_at"]
            stored = TableState(row["state"])
            live.state, live.since = stored, row["state_since"] or time.time()
        missed = [i for i in instants if live.last_instant is None or i > live.last_instant]
        for instant in missed:
            add_commit_counts(counters, counts_of(instant))
            live.last_instant = instant
        if missed:
            self.event(name, "state", f"counted {len(missed)} commit(s) the store had missed")
        live.base = replace(counters)
        row = self._row(live, counters, time.time(), None)
        self._write(lambda db: self.store.put_table(db, name, row))
        return stored

    def committed(
        self, name: str, instant: str, counts: dict[str, int], source_ts_ms: np.ndarray
    ) -> None:
        """A commit of ``name`` completed, applying ``counts`` (``cdcctl.counts``);
        ``source_ts_ms`` is a sample of its events' source commit times."""
        live = self._live.get(name)
        if live is None:
            return
        now = time.time()
        live.last_instant, live.last_commit_at = instant, now
        events = sum(int(counts.get(k, 0)) for k in _EVENT_KEYS)
        live.applied.append((now, events))
        if source_ts_ms.size and events:
            latencies = np.maximum(now - source_ts_ms.astype(np.float64) / 1000.0, 0.0)
            live.latencies.append((now, latencies, events / source_ts_ms.size))

    def sync(
        self,
        statuses: Sequence[TableStatus],
        lag: dict[str, int] | None = None,
        *,
        force: bool = False,
        controls: Mapping[str, tuple[str, int]] | None = None,
        source: SourceView | None = None,
    ) -> None:
        """Note state changes and lag; write the store if due (or ``force``).

        ``controls``: the topics recognised as holding no rows, topic -> (kind, records
        skipped this run); None keeps what was last given. ``source``: the newest look
        at the source side (None keeps the last).
        """
        now = time.time()
        if controls is not None:
            self._next_controls = dict(controls)
        if source is not None and source is not self._source:
            self._source = source
            self._note_source(source)
        for s in statuses:
            live = self._live.get(s.table)
            if live is None:
                continue
            if lag is not None and s.table in lag:
                live.lag_messages = lag[s.table]
            if live.state != s.state:
                if live.state is not None:
                    self.event(s.table, "state", f"{live.state.value} -> {s.state.value}")
                live.state, live.since = s.state, now
            error = redact(s.error) if s.error else s.error
            if error and error != live.last_error:
                live.last_error, live.last_error_at = error, now
                self.event(s.table, "error", error)
        if force or self._answers or now - self._last_flush >= FLUSH_SECONDS:
            self._flush(statuses, now)

    def _note_source(self, view: SourceView) -> None:
        """Log what changed on the source side: a table's problems (its connector, its
        slot) as they appear and clear, and what could not be reached."""
        said: dict[str | None, tuple[str, ...]] = {None: view.errors}
        for name, live in self._live.items():
            said[name] = tuple(view.problems_for(live.topic))
        for table, problems in said.items():
            before = self._source_said.get(table, ())
            for problem in problems:
                if problem not in before:
                    self.event(table, "source", problem)
                    log.warning("%s%s", f"{table}: " if table else "", problem)
            if before and not problems:
                self.event(table, "source", "the source side is well again")
                log.info("%sthe source side is well again", f"{table}: " if table else "")
        self._source_said = said

    def _judge(
        self, db: sqlite3.Connection, status: TableStatus, row: dict[str, Any], now: float
    ) -> None:
        """Judge a table against the SLO now (see :mod:`engine.state.slo`), keep the
        judgement, and log when it falls out of the SLO or is back within it."""
        goal, ledger = self.slo, self._ledger
        if goal is None or ledger is None:
            return
        lag = row["lag_seconds"]
        source = self._source
        ok = (
            lag is not None
            and lag <= goal.within_seconds
            and status.state is not TableState.FAILED
            and not (source is not None and source.problems_for(row["topic"]))
        )
        kept = ledger.segments.get(status.table, [])
        before = kept[-1] if kept else None
        segment = ledger.judge(status.table, now, ok)
        if before is not None and before is not segment:
            self.store.put_slo_segment(db, status.table, before.start, before.end, before.ok)
        self.store.put_slo_segment(db, status.table, segment.start, segment.end, segment.ok)
        share = ledger.compliance(status.table, now)
        if share is None:
            return
        self._slo_shares[status.table] = share  # read by the metrics thread: one key set
        met = goal.met(share)
        said = self._slo_met.get(status.table)
        self._slo_met[status.table] = met
        if said == met or (said is None and met):
            return
        window = _span(goal.window_s)
        figure = f"{share * 100:.2f}% of the last {window} within {goal.within_seconds:g} s"
        if met:
            self.event(
                status.table, "slo", f"back within its SLO: {figure} (goal {goal.percent:g}%)"
            )
        else:
            self.event(status.table, "slo", f"out of its SLO: {figure} (goal {goal.percent:g}%)")
            log.warning("%s: out of its SLO: %s (goal %g%%)", status.table, figure, goal.percent)

    def _write(self, write: Callable[[sqlite3.Connection], None]) -> bool:
        """Run ``write`` in one store transaction; False if the storage refused it.

        The store is for people (``status``, the dashboard, metrics), not for recovery
        (the commits carry the checkpoints), so a store that cannot be written (its disk
        full or read-only) does not stop replication: it is said once, and what was not
        written is written with the first write that works again. The replicator's own
        files in the same folder fail too, and those are retried and reported."""
        try:
            with self.store.transaction() as db:
                write(db)
        except OSError as exc:
            cause = f"{exc.strerror or exc}"
            if self._unwritable is None:
                log.warning(
                    "the state store %s cannot be written (%s): `cdcctl status` and the "
                    "dashboard show older figures until it can",
                    self.store.path,
                    cause,
                )
            self._unwritable = cause
            return False
        if self._unwritable is not None:
            log.info("the state store %s is written again", self.store.path)
            self._unwritable = None
        return True

    def _flush(self, statuses: Sequence[TableStatus], now: float) -> None:
        rows = dict(self._rows)
        controls = self._next_controls
        source = self._source

        def write(db: sqlite3.Connection) -> None:
            self.store.set_replicator(db, state=self._state, error=self._error)
            if source is not None and source.checked_at != self._source_written:
                self.store.put_source(db, json.dumps(source.to_json()), source.checked_at)
            for s in statuses:
                live = self._live.get(s.table)
                if live is not None:
                    rows[s.table] = self._row(live, s.counters, now, s)
                    self.store.put_table(db, s.table, rows[s.table])
                    self._judge(db, s, rows[s.table], now)
            if self._ledger is not None and now - self._slo_pruned >= 60:
                self.store.prune_slo_segments(db, now - self._ledger.window_s)
                self._slo_pruned = now
            for topic, (kind, skipped) in controls.items():
                if self._controls.get(topic) != (kind, skipped):
                    self.store.put_control_topic(db, topic, kind, skipped)
            for table, kind, message in self._events:
                self.store.add_event(db, table, kind, message)
            for request_id, outcome in self._answers:
                self.store.answer(db, request_id, outcome)

        if not self._write(write):
            self._last_flush = now  # tried again at the next flush, events kept
            return
        self._events.clear()
        self._answers.clear()
        self._last_flush = now
        self._rows = rows  # one reference swap: a reader sees the old rows or the new
        self._controls = controls
        if source is not None:
            self._source_written = source.checked_at

    def _row(
        self,
        live: _Live,
        counters: TableCounters,
        now: float,
        status: TableStatus | None,
    ) -> dict[str, Any]:
        while live.latencies and live.latencies[0][0] < now - LATENCY_WINDOW_S:
            live.latencies.popleft()
        while live.applied and live.applied[0][0] < now - HISTORY_POINTS * HISTORY_STEP_S:
            live.applied.popleft()
        p50 = p95 = p99 = None
        if live.latencies:
            values = np.concatenate([v for _, v, _ in live.latencies])
            weights = np.concatenate([np.full(v.size, w) for _, v, w in live.latencies])
            p50, p95, p99 = weighted_quantiles(values, weights, (0.5, 0.95, 0.99))
        span = min(RATE_WINDOW_S, max(now - self.started_at, 1.0))
        recent = sum(n for t, n in live.applied if t >= now - RATE_WINDOW_S)
        history = [0.0] * HISTORY_POINTS
        for t, n in live.applied:
            slot = HISTORY_POINTS - 1 - int((now - t) // HISTORY_STEP_S)
            if 0 <= slot < HISTORY_POINTS:
                history[slot] += n / HISTORY_STEP_S
        last_event_at = (
            counters.last_source_ts_ms / 1000.0 if counters.last_source_ts_ms is not None else None
        )
        # Waiting: since the newest event applied (unknown with none applied yet).
        # Nothing waiting: since the connector's newest heartbeat, when it sends them
        # (an idle table behind a stopped connector falls behind); else 0.
        lag_seconds: float | None = 0.0
        if live.lag_messages:
            lag_seconds = None if last_event_at is None else round(max(now - last_event_at, 0), 3)
        else:
            beat = self._source.heartbeat_for(live.topic) if self._source is not None else None
            if beat is not None:
                lag_seconds = round(max(now - max(beat, last_event_at or 0.0), 0), 3)
        state = status.state if status is not None else (live.state or TableState.REPLICATING)
        row: dict[str, Any] = {
            "topic": live.topic,
            "state": state.value,
            "state_since": live.since or now,
            "last_instant": live.last_instant,
            "lag_messages": live.lag_messages,
            "lag_seconds": lag_seconds,
            "last_event_at": last_event_at,
            "last_commit_at": live.last_commit_at,
            "latency_p50_s": p50,
            "latency_p95_s": p95,
            "latency_p99_s": p99,
            "events_per_s": round(recent / span, 3),
            "throughput": json.dumps([round(v, 3) for v in history]),
            "last_error": live.last_error,
            "last_error_at": live.last_error_at,
            "updated_at": now,
        }
        for c in COUNTER_NAMES:
            row[c] = getattr(counters, c)
            row[f"run_{c}"] = getattr(counters, c) - getattr(live.base, c)
        return row

    # -- control --------------------------------------------------------------------------
    def requests(self) -> list[Request]:
        """Control requests waiting for an answer, oldest first."""
        answered = {i for i, _ in self._answers}
        waiting = [r for r in self.store.pending_requests() if r.id not in answered]
        for r in [r for r in waiting if r.created_at < self.started_at]:
            self.answer(r, "withdrawn: filed before this replicator started")
        return [r for r in waiting if r.created_at >= self.started_at]

    def answer(self, request: Request, outcome: str) -> None:
        """Record a request's outcome (written with the next sync, at once)."""
        outcome = redact(outcome)
        self._answers.append((request.id, outcome))
        what = f"{request.kind} {request.table or 'all tables'}: {outcome}"
        if request.kind == "stop":
            what = f"stop: {outcome}"
        self.event(request.table, "pause" if request.kind != "stop" else "state", what)

    def close(self) -> None:
        self.store.close()
