"""The state store: a SQLite database ``<work_dir>/state.db`` the replicator keeps.

The running replicator writes its own state, each table's state, counters, lag and
latency figures, the topics it found to hold no rows with the records each skipped this
run, a bounded event log, and answers control requests; ``cdcctl status``,
``pause``, ``resume`` and ``stop`` read it and write requests into it, whether or not a
replicator runs. WAL mode: readers never block the writer, nor it them. The file is
created readable by its owner only (0600).

Only the replicator's own thread writes replicator and table rows (a few transactions a
second at most, see :class:`engine.state.recorder.StateRecorder`); the CLI writes only
``requests`` rows, except an offline ``cdcctl resync``, which resets a table's row while
it holds the work folder's writer lock (no replicator runs).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.files import private_dir, private_file
from engine.state.model import COUNTER_NAMES

#: The store's file name in the work folder.
STORE_NAME = "state.db"
#: Events kept in the event log (the oldest are dropped).
MAX_EVENTS = 1000

#: What a control request may ask for.
REQUEST_KINDS = (
    "pause", "resume", "stop", "replay", "resync", "resync-force", "epoch", "repair"
)  # fmt: skip

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS replicator (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    state TEXT NOT NULL,
    pid INTEGER,
    host TEXT,
    started_at REAL,
    config TEXT,
    updated_at REAL,
    error TEXT
);
CREATE TABLE IF NOT EXISTS tables (
    name TEXT PRIMARY KEY,
    topic TEXT,
    state TEXT NOT NULL,
    state_since REAL,
    {", ".join(f"{c} INTEGER NOT NULL DEFAULT 0" for c in COUNTER_NAMES)},
    {", ".join(f"run_{c} INTEGER NOT NULL DEFAULT 0" for c in COUNTER_NAMES)},
    last_instant TEXT,
    lag_messages INTEGER,
    lag_seconds REAL,
    last_event_at REAL,
    last_commit_at REAL,
    latency_p50_s REAL,
    latency_p95_s REAL,
    latency_p99_s REAL,
    events_per_s REAL,
    throughput TEXT,
    last_error TEXT,
    last_error_at REAL,
    updated_at REAL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    tbl TEXT,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS control_topics (
    topic TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    skipped INTEGER NOT NULL DEFAULT 0,
    updated_at REAL
);
CREATE TABLE IF NOT EXISTS source (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    view TEXT NOT NULL,
    checked_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS slo_goal (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    percent REAL NOT NULL,
    within_seconds REAL NOT NULL,
    window_seconds REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS slo_origin (
    tbl TEXT PRIMARY KEY,
    first_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS slo_segments (
    tbl TEXT NOT NULL,
    start REAL NOT NULL,
    end_at REAL NOT NULL,
    ok INTEGER NOT NULL,
    PRIMARY KEY (tbl, start)
);
CREATE INDEX IF NOT EXISTS slo_segments_end ON slo_segments (end_at);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ({", ".join(f"'{k}'" for k in REQUEST_KINDS)})),
    tbl TEXT,
    created_at REAL NOT NULL,
    done_at REAL,
    outcome TEXT
);
"""

#: Columns of a table row a writer sets (everything but the key).
TABLE_COLUMNS = (
    "topic",
    "state",
    "state_since",
    *COUNTER_NAMES,
    *(f"run_{c}" for c in COUNTER_NAMES),
    "last_instant",
    "lag_messages",
    "lag_seconds",
    "last_event_at",
    "last_commit_at",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "events_per_s",
    "throughput",
    "last_error",
    "last_error_at",
    "updated_at",
)


@dataclass(frozen=True)
class Request:
    """A control request: pause, resume, stop or resync, for one table or (None) all."""

    id: int
    kind: str
    table: str | None
    created_at: float
    done_at: float | None = None
    outcome: str | None = None


def store_path(work_dir: Path) -> Path:
    """Where a work folder's state store lives."""
    return work_dir / STORE_NAME


#: SQLite result codes (primary, the low byte) that say the storage failed.
_SQLITE_STORAGE = {
    8: errno.EROFS,  # SQLITE_READONLY
    10: errno.EIO,  # SQLITE_IOERR (a full tmpfs fails the WAL index with it)
    13: errno.ENOSPC,  # SQLITE_FULL
    14: errno.EIO,  # SQLITE_CANTOPEN
}


def storage_error(exc: sqlite3.Error, path: Path) -> OSError | None:
    """The storage failure behind an SQLite error on the store at ``path``, as the
    ``OSError`` the replicator's retries and messages understand (None: not storage).

    SQLite reports a full disk as SQLITE_FULL only when a write says so; a full tmpfs
    often fails the shared-memory index as a plain I/O error instead. So the folder's
    file system is looked at: no room left is ENOSPC, mounted read-only is EROFS."""
    code = getattr(exc, "sqlite_errorcode", None)
    number = _SQLITE_STORAGE.get((code or 0) & 0xFF)
    if number is None:
        return None
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        fs = None
    if fs is not None and fs.f_flag & os.ST_RDONLY:
        number = errno.EROFS
    elif fs is not None and fs.f_bavail * fs.f_frsize < 1 << 20:
        number = errno.ENOSPC
    return OSError(number, f"{os.strerror(number)} (SQLite: {exc})", str(path))


class StateStore:
    """One connection to a work folder's state store.

    A failure of the storage under it (full, read-only) is raised as an ``OSError``
    (:func:`storage_error`) when the store is opened and by :meth:`transaction`.
    """

    def __init__(self, path: Path, *, create: bool = True) -> None:
        """Open (and with ``create``, create, 0600) the store at ``path``.

        Raises:
            FileNotFoundError: ``create`` is false and there is no store.
        """
        self.path = path
        if not path.exists():
            if not create:
                raise FileNotFoundError(path)
            private_dir(path.parent)
            private_file(path)
        with self._storage():
            self._db = sqlite3.connect(
                path, timeout=10, isolation_level=None, check_same_thread=False
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=10000")
            if (
                not create
                and not self._db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'requests'"
                ).fetchone()
            ):
                # A replicator is making the store this moment (the file exists, its
                # tables not yet): for a reader that is no store yet.
                self._db.close()
                raise FileNotFoundError(path)
            if create:
                # One transaction: a reader sees every table or none of them.
                self._db.executescript(f"BEGIN;\n{_SCHEMA}COMMIT;\n")
                self._migrate_requests()
                self._migrate_counters()
                for suffix in ("-wal", "-shm"):  # SQLite creates them with the umask's mode
                    side = path.with_name(path.name + suffix)
                    if side.exists():
                        os.chmod(side, 0o600)

    @contextmanager
    def _storage(self) -> Iterator[None]:
        """SQLite errors that are storage failures, raised as ``OSError``."""
        try:
            yield
        except sqlite3.Error as exc:
            cause = storage_error(exc, self.path)
            if cause is None:
                raise
            raise cause from exc

    def _migrate_requests(self) -> None:
        """A store made before a request kind existed refuses it (SQLite cannot alter a
        CHECK): the requests table is made again with every kind, its rows kept."""
        row = self._db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'requests'"
        ).fetchone()
        if row is None or all(f"'{k}'" in row["sql"] for k in REQUEST_KINDS):
            return
        create = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS requests") :]
        with self.transaction() as db:
            db.execute("ALTER TABLE requests RENAME TO requests_old")
            db.execute(create)
            db.execute("INSERT INTO requests SELECT * FROM requests_old")
            db.execute("DROP TABLE requests_old")

    def _migrate_counters(self) -> None:
        """A store made before a counter existed gets its columns (at 0)."""
        have = {r["name"] for r in self._db.execute("PRAGMA table_info(tables)").fetchall()}
        for name in (*COUNTER_NAMES, *(f"run_{c}" for c in COUNTER_NAMES)):
            if name not in have:
                self._db.execute(f"ALTER TABLE tables ADD COLUMN {name} INTEGER NOT NULL DEFAULT 0")

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: writers queue, readers go on)."""
        with self._storage():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # (a COMMIT that failed leaves it open)
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    # -- the replicator's rows -------------------------------------------------------
    def set_replicator(self, db: sqlite3.Connection, **values: Any) -> None:
        """Insert or update the one replicator row (``state`` required on insert)."""
        values = {**values, "updated_at": time.time()}
        cols = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        updates = ", ".join(f"{k} = excluded.{k}" for k in values)
        db.execute(
            f"INSERT INTO replicator (id, {cols}) VALUES (1, {marks}) "
            f"ON CONFLICT (id) DO UPDATE SET {updates}",
            list(values.values()),
        )

    def put_table(self, db: sqlite3.Connection, name: str, values: dict[str, Any]) -> None:
        """Insert or update a table's row with ``values`` (columns of :data:`TABLE_COLUMNS`)."""
        unknown = set(values) - set(TABLE_COLUMNS)
        if unknown:
            raise ValueError(f"unknown table columns {sorted(unknown)}")
        cols = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        updates = ", ".join(f"{k} = excluded.{k}" for k in values) or "name = name"
        db.execute(
            f"INSERT INTO tables (name, {cols}) VALUES (?, {marks}) "
            f"ON CONFLICT (name) DO UPDATE SET {updates}",
            [name, *values.values()],
        )

    def remove_table(self, db: sqlite3.Connection, name: str) -> None:
        """Drop a table's row (a name that is no table after all)."""
        db.execute("DELETE FROM tables WHERE name = ?", (name,))

    def reset_table(self, db: sqlite3.Connection, name: str, topic: str | None) -> None:
        """Start a table's row over: counters at 0, REPLICATING, no figures (a resync)."""
        db.execute("DELETE FROM tables WHERE name = ?", (name,))
        now = time.time()
        values = {"topic": topic, "state": "REPLICATING", "state_since": now, "updated_at": now}
        self.put_table(db, name, values)

    def put_control_topic(
        self, db: sqlite3.Connection, topic: str, kind: str, skipped: int
    ) -> None:
        """Insert or update a topic that holds no rows: its kind and records skipped."""
        db.execute(
            "INSERT INTO control_topics (topic, kind, skipped, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (topic) DO UPDATE SET kind = excluded.kind, "
            "skipped = excluded.skipped, updated_at = excluded.updated_at",
            (topic, kind, skipped, time.time()),
        )

    def put_slo_goal(
        self, db: sqlite3.Connection, percent: float, within_s: float, window_s: float
    ) -> None:
        """The SLO the segments are judged against (``replicator.slo``)."""
        db.execute(
            "INSERT INTO slo_goal (id, percent, within_seconds, window_seconds) "
            "VALUES (1, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET percent = excluded.percent, "
            "within_seconds = excluded.within_seconds, window_seconds = excluded.window_seconds",
            (percent, within_s, window_s),
        )

    def put_slo_segment(
        self, db: sqlite3.Connection, table: str, start: float, end: float, ok: bool
    ) -> None:
        """A table's stretch of time judged within its SLO (``ok``) or not (the first
        one of a table is its origin: time before it is not judged)."""
        db.execute(
            "INSERT INTO slo_origin (tbl, first_at) VALUES (?, ?) ON CONFLICT (tbl) DO NOTHING",
            (table, start),
        )
        db.execute(
            "INSERT INTO slo_segments (tbl, start, end_at, ok) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tbl, start) DO UPDATE SET end_at = excluded.end_at, ok = excluded.ok",
            (table, start, end, int(ok)),
        )

    def prune_slo_segments(self, db: sqlite3.Connection, before: float) -> None:
        db.execute("DELETE FROM slo_segments WHERE end_at < ?", (before,))

    def slo(
        self,
    ) -> tuple[tuple[float, float, float] | None, dict[str, list[tuple]], dict[str, float]]:
        """The SLO (percent, within seconds, window seconds), each table's segments
        ``(start, end, ok)`` in time order, and each table's first judgement; (None, {},
        {}) in a store without them."""
        try:
            goal = self._db.execute("SELECT * FROM slo_goal WHERE id = 1").fetchone()
            rows = self._db.execute(
                "SELECT tbl, start, end_at, ok FROM slo_segments ORDER BY tbl, start"
            ).fetchall()
            origins = self._db.execute("SELECT tbl, first_at FROM slo_origin").fetchall()
        except sqlite3.OperationalError as exc:  # a store from before, read only
            if "no such table" not in str(exc):
                raise
            return None, {}, {}
        segments: dict[str, list[tuple]] = {}
        for r in rows:
            segments.setdefault(r["tbl"], []).append((r["start"], r["end_at"], bool(r["ok"])))
        first = {r["tbl"]: float(r["first_at"]) for r in origins}
        if goal is None:
            return None, segments, first
        return (goal["percent"], goal["within_seconds"], goal["window_seconds"]), segments, first

    def put_source(self, db: sqlite3.Connection, view: str, checked_at: float) -> None:
        """The newest look at the source side (:class:`engine.upstream.SourceView` JSON)."""
        db.execute(
            "INSERT INTO source (id, view, checked_at) VALUES (1, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET view = excluded.view, checked_at = excluded.checked_at",
            (view, checked_at),
        )

    def clear_control_topics(self, db: sqlite3.Connection) -> None:
        """Forget the topics of the last run that held no rows (a run reads them again
        from their start, and counts again)."""
        db.execute("DELETE FROM control_topics")

    def add_event(self, db: sqlite3.Connection, table: str | None, kind: str, message: str) -> None:
        """Append to the event log, dropping the oldest past :data:`MAX_EVENTS`."""
        db.execute(
            "INSERT INTO events (at, tbl, kind, message) VALUES (?, ?, ?, ?)",
            (time.time(), table, kind, message),
        )
        db.execute("DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - ?", (MAX_EVENTS,))

    # -- requests ------------------------------------------------------------------------
    def request(self, kind: str, tables: Sequence[str | None]) -> list[int]:
        """File control requests (one per table; ``[None]``: all tables); their ids."""
        ids = []
        with self.transaction() as db:
            for table in tables:
                cur = db.execute(
                    "INSERT INTO requests (kind, tbl, created_at) VALUES (?, ?, ?)",
                    (kind, table, time.time()),
                )
                ids.append(int(cur.lastrowid or 0))
        return ids

    def pending_requests(self) -> list[Request]:
        """Requests not yet answered, oldest first."""
        rows = self._db.execute(
            "SELECT id, kind, tbl, created_at FROM requests WHERE done_at IS NULL ORDER BY id"
        ).fetchall()
        return [Request(r["id"], r["kind"], r["tbl"], r["created_at"]) for r in rows]

    def answer(self, db: sqlite3.Connection, request_id: int, outcome: str) -> None:
        db.execute(
            "UPDATE requests SET done_at = ?, outcome = ? WHERE id = ?",
            (time.time(), outcome, request_id),
        )

    def withdraw(self, ids: Sequence[int], outcome: str) -> None:
        """Answer the requests among ``ids`` still waiting with ``outcome`` (withdrawn)."""
        with self.transaction() as db:
            for request_id in ids:
                db.execute(
                    "UPDATE requests SET done_at = ?, outcome = ? WHERE id = ? AND done_at IS NULL",
                    (time.time(), outcome, request_id),
                )

    def requests(self, ids: Sequence[int]) -> list[Request]:
        """Requests by id (answered or not)."""
        marks = ", ".join("?" for _ in ids)
        rows = self._db.execute(
            f"SELECT * FROM requests WHERE id IN ({marks}) ORDER BY id", list(ids)
        ).fetchall()
        return [
            Request(r["id"], r["kind"], r["tbl"], r["created_at"], r["done_at"], r["outcome"])
            for r in rows
        ]

    # -- reading -------------------------------------------------------------------------
    def replicator(self) -> dict[str, Any] | None:
        row = self._db.execute("SELECT * FROM replicator WHERE id = 1").fetchone()
        if row is None:
            return None
        out = dict(row)
        out.pop("id")
        return out

    def tables(self) -> list[dict[str, Any]]:
        """Every table's row, by name."""
        rows = self._db.execute("SELECT * FROM tables ORDER BY name").fetchall()
        out = []
        for row in rows:
            record = dict(row)
            for name in COUNTER_NAMES:  # a store from before a counter existed, read only
                record.setdefault(name, 0)
                record.setdefault(f"run_{name}", 0)
            record["throughput"] = json.loads(record["throughput"] or "[]")
            out.append(record)
        return out

    def table(self, name: str) -> dict[str, Any] | None:
        return next((t for t in self.tables() if t["name"] == name), None)

    def control_topics(self) -> list[dict[str, Any]]:
        """Every topic recognised as holding no rows (``topic``, ``kind``, ``skipped``,
        ``updated_at``), by topic; none in a store made before they were recorded."""
        try:
            rows = self._db.execute("SELECT * FROM control_topics ORDER BY topic").fetchall()
        except sqlite3.OperationalError as exc:  # a store from before, read only
            if "no such table" not in str(exc):
                raise
            return []
        return [dict(r) for r in rows]

    def source(self) -> str | None:
        """The newest look at the source side as JSON; None if none was recorded (or the
        store was made before they were)."""
        try:
            row = self._db.execute("SELECT view FROM source WHERE id = 1").fetchone()
        except sqlite3.OperationalError as exc:  # a store from before, read only
            if "no such table" not in str(exc):
                raise
            return None
        return None if row is None else str(row["view"])

    def events(self, limit: int = 50, table: str | None = None) -> list[dict[str, Any]]:
        """The newest events of the log (with ``table``: of that table), oldest first."""
        where, args = ("WHERE tbl = ? ", [table]) if table is not None else ("", [])
        rows = self._db.execute(
            f"SELECT at, tbl, kind, message FROM events {where}ORDER BY id DESC LIMIT ?",
            [*args, limit],
        ).fetchall()
        return [dict(r) for r in reversed(rows)]
