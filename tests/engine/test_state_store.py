"""The state store (SQLite, WAL) and its writer, the replicator's StateRecorder."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.config import config_from_dict
from engine.lock import LOCK_NAME, WriterLock
from engine.replicator import Replicator
from engine.state import StateRecorder, StateStore, TableCounters, TableState, TableStatus
from engine.state.control import read_status, send_request
from engine.state.recorder import add_commit_counts, weighted_quantiles
from engine.state.store import MAX_EVENTS, store_path
from tests import builders
from tests.engine.test_properties import Msg
from tests.integration.replicas import applied_counts, read_replica
from tests.waiting import wait_until


def _status(name: str, counters: TableCounters, state=TableState.REPLICATING, error=None):
    return TableStatus(name, f"srv.app.{name}", state, error, counters)


def test_store_is_private_and_in_wal_mode(tmp_path: Path) -> None:
    store = StateStore(store_path(tmp_path))
    assert stat.S_IMODE(store_path(tmp_path).stat().st_mode) == 0o600
    mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    store.close()


def test_a_store_being_made_reads_as_no_store_yet(tmp_path: Path) -> None:
    """`status` while `start` makes the store: the file exists, its tables not yet."""
    path = store_path(tmp_path)
    path.touch()  # what StateStore does before SQLite makes the tables
    assert read_status(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        StateStore(path, create=False)
    StateStore(path).close()  # the writer makes every table in one transaction
    status = read_status(tmp_path)
    assert status is not None and status.tables == []


def test_readers_never_wait_for_the_writer_nor_it_for_them(tmp_path: Path) -> None:
    writer = StateStore(store_path(tmp_path))
    with writer.transaction() as db:
        writer.put_table(db, "a", {"topic": "t", "state": "REPLICATING", "inserts": 1})
    reader = StateStore(store_path(tmp_path), create=False)
    # A write transaction in progress: the reader sees the last committed state at once.
    with writer.transaction() as db:
        writer.put_table(db, "a", {"topic": "t", "state": "REPLICATING", "inserts": 2})
        started = time.monotonic()
        assert reader.table("a")["inserts"] == 1
        assert time.monotonic() - started < 0.5
    assert reader.table("a")["inserts"] == 2
    # A reader inside a long read transaction does not hold the writer up either.
    reader._db.execute("BEGIN")
    assert reader.table("a")["inserts"] == 2
    started = time.monotonic()
    with writer.transaction() as db:
        writer.put_table(db, "a", {"topic": "t", "state": "REPLICATING", "inserts": 3})
    assert time.monotonic() - started < 0.5
    assert reader.table("a")["inserts"] == 2  # its snapshot
    reader._db.execute("COMMIT")
    assert reader.table("a")["inserts"] == 3
    reader.close()
    writer.close()


def test_counters_are_cumulative_and_reconciled_with_missed_commits(tmp_path: Path) -> None:
    commits = {
        "001": {"events_r": 10, "events_c": 2, "inserts": 12},
        "002": {"events_c": 3, "events_u": 4, "late": 1, "inserts": 3},
        "003": {"events_d": 5, "events_t": 1, "bad": 2, "deletes": 4, "truncated": 6},
    }
    first = StateRecorder(tmp_path)
    first.started()
    counters = TableCounters()
    assert first.adopt("a", "srv.app.a", counters, [], commits.__getitem__) is None
    for instant in ("001", "002"):  # what the loop does after each commit
        add_commit_counts(counters, commits[instant])
        counters.last_source_ts_ms = int(time.time() * 1000) - 2000
        first.committed("a", instant, commits[instant], np.array([time.time() * 1000 - 2000]))
    first.sync([_status("a", counters)], {"a": 7}, force=True)
    first.close()
    row = StateStore(store_path(tmp_path)).table("a")
    assert (row["snapshot_rows"], row["inserts"], row["updates"], row["late"]) == (10, 5, 4, 1)
    assert row["commits"] == 2 and row["last_instant"] == "002" and row["lag_messages"] == 7
    assert 1.5 < row["latency_p50_s"] < 10 and row["lag_seconds"] > 0

    # A crash after commit 003 was made, before the store counted it: the next run
    # counts it from the commit, and only it.
    second = StateRecorder(tmp_path)
    again = TableCounters()
    second.adopt("a", "srv.app.a", again, ["001", "002", "003"], commits.__getitem__)
    assert (again.snapshot_rows, again.inserts, again.updates, again.deletes) == (10, 5, 4, 5)
    assert (again.truncates, again.bad, again.commits) == (1, 2, 3)
    assert again.rows == 12 + 3 - 4 - 6  # rows inserted, less those deleted or truncated
    second.sync([_status("a", again)], {"a": 0}, force=True)
    row = StateStore(store_path(tmp_path)).table("a")
    assert row["deletes"] == 5 and row["run_deletes"] == 0 and row["lag_seconds"] == 0
    second.close()


def test_a_store_made_before_a_counter_gets_its_column(tmp_path: Path) -> None:
    StateStore(store_path(tmp_path)).close()
    old = sqlite3.connect(store_path(tmp_path))  # as it was before `rows` was counted
    old.execute("ALTER TABLE tables DROP COLUMN rows")
    old.execute("ALTER TABLE tables DROP COLUMN run_rows")
    old.execute("INSERT INTO tables (name, state) VALUES ('a', 'REPLICATING')")
    old.commit()
    old.close()
    # Read only (cdcctl status, the dashboard): no migration runs, the counter reads 0.
    status = read_status(tmp_path)
    assert status is not None and status.tables[0].counters.rows == 0
    store = StateStore(store_path(tmp_path))
    row = store.table("a")
    assert row is not None and row["rows"] == 0 and row["run_rows"] == 0
    store.close()


def test_topics_that_are_not_tables_are_recorded_per_run(tmp_path: Path) -> None:
    first = StateRecorder(tmp_path)
    first.started()
    first.sync([], force=True, controls={"s.beats": ("heartbeat", 4)})
    first.sync([], controls={"s.beats": ("heartbeat", 9), "s.tx": ("transaction metadata", 2)})
    assert first.control_snapshot() == {"s.beats": ("heartbeat", 4)}  # not due yet
    first.sync([], force=True)  # None keeps the last given
    assert first.control_snapshot() == {
        "s.beats": ("heartbeat", 9),
        "s.tx": ("transaction metadata", 2),
    }
    first.close()
    status = read_status(tmp_path)
    assert status is not None
    assert [(c.topic, c.kind, c.skipped) for c in status.control_topics] == [
        ("s.beats", "heartbeat", 9),
        ("s.tx", "transaction metadata", 2),
    ]
    # A new run reads those topics from their start again: the last run's counts go.
    second = StateRecorder(tmp_path)
    second.started()
    second.close()
    status = read_status(tmp_path)
    assert status is not None and status.control_topics == []


def test_a_store_made_before_control_topics_reads_none(tmp_path: Path) -> None:
    StateStore(store_path(tmp_path)).close()
    old = sqlite3.connect(store_path(tmp_path))
    old.execute("DROP TABLE control_topics")
    old.commit()
    old.close()
    status = read_status(tmp_path)  # read only: no migration
    assert status is not None and status.control_topics == []
    StateStore(store_path(tmp_path)).close()  # a replicator's store gets the table
    db = sqlite3.connect(store_path(tmp_path))
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "control_topics" in names


def test_state_changes_errors_and_a_bounded_event_log(tmp_path: Path) -> None:
    rec = StateRecorder(tmp_path)
    rec.started()
    counters = TableCounters()
    rec.adopt("a", "srv.app.a", counters, [], dict)
    rec.sync([_status("a", counters)], force=True)
    rec.sync([_status("a", counters, TableState.FAILING, "boom")], force=True)
    row = rec.store.table("a")
    assert row["state"] == "FAILING" and row["last_error"] == "boom" and row["last_error_at"]
    kinds = [(e["kind"], e["message"]) for e in rec.store.events()]
    assert ("state", "REPLICATING -> FAILING") in kinds and ("error", "boom") in kinds
    for n in range(MAX_EVENTS + 50):
        rec.event("a", "retry", f"retry {n}")
    rec.sync([_status("a", counters, TableState.FAILING, "boom")], force=True)
    count = rec.store._db.execute("SELECT count(*) FROM events").fetchone()[0]
    assert count == MAX_EVENTS
    assert rec.store.events(1)[0]["message"] == f"retry {MAX_EVENTS + 49}"
    rec.close()


def test_requests_are_answered_by_the_live_replicator_only(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None
    rec = StateRecorder(tmp_path)
    rec.started()
    # No replicator holds the work folder: nothing is filed.
    assert send_request(tmp_path, "pause", ["a"], 0.2) is None
    lock = WriterLock(tmp_path / LOCK_NAME, "work").acquire()
    try:

        def answer() -> None:
            def answered() -> bool:
                for request in rec.requests():
                    rec.answer(request, f"paused {request.table}")
                    rec.sync([], force=True)
                    return True
                return False

            wait_until(answered, "the pause request", 5, interval=0.05)

        thread = threading.Thread(target=answer)
        thread.start()
        answers = send_request(tmp_path, "pause", ["a"], 5)
        thread.join()
        assert answers is not None and [(a.kind, a.table, a.outcome) for a in answers] == [
            ("pause", "a", "paused a")
        ]
        # Not picked up in time: withdrawn, so that no later replicator acts on it.
        late = send_request(tmp_path, "stop", [], 0.2)
        assert late is not None and late[0].outcome == "not picked up within 0.2 s"
        assert rec.requests() == []
        status = read_status(tmp_path)
        assert status is not None and status.replicator.alive is True
        assert status.replicator.state == "running"
    finally:
        lock.release()
    status = read_status(tmp_path)
    assert status is not None and status.replicator.state == "failed"
    rec.close()


def test_a_request_filed_before_the_replicator_started_is_withdrawn(tmp_path: Path) -> None:
    StateRecorder(tmp_path).close()
    store = StateStore(store_path(tmp_path))
    [stale] = store.request("stop", [None])
    time.sleep(0.01)
    rec = StateRecorder(tmp_path)
    assert rec.requests() == []
    rec.sync([], force=True)
    [answered] = store.requests([stale])
    assert answered.outcome and answered.outcome.startswith("withdrawn")
    rec.close()
    store.close()


def test_weighted_quantiles() -> None:
    values = np.array([1.0, 2.0, 3.0, 10.0])
    assert weighted_quantiles(values, np.ones(4), (0.5, 0.99)) == [2.0, 10.0]
    # One sample standing for 100 events outweighs the others.
    assert weighted_quantiles(values, np.array([1.0, 1.0, 100.0, 1.0]), (0.5,)) == [3.0]
    assert weighted_quantiles(np.array([]), np.array([]), (0.5,)) == [None]


@pytest.mark.spark
def test_events_count_once_by_op_and_a_snapshot_shows(spark, tmp_path: Path) -> None:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    cols = [("id", "int32"), ("name", "string")]
    topic = "srv.app.items"

    def event(op: str, lsn: int, k: int) -> tuple[str, bytes, bytes | None]:
        row = None if op == "d" else {"id": k, "name": f"{op}{lsn}"}
        return topic, builders.key(k), builders.value(op, lsn, row, cols, snapshot=op == "r")

    offset = 0

    def batch(events: list[tuple[str, bytes, bytes | None]]) -> list[Msg]:
        nonlocal offset
        out = [Msg(t, k, v, offset + i) for i, (t, k, v) in enumerate(events)]
        offset += len(out)
        return out

    replicator = Replicator(cfg, spark=spark)
    replicator.apply(batch([event("r", 10 + k, k) for k in range(5)]))
    rt = replicator.tables[topic]
    assert rt.state is TableState.SNAPSHOTTING and rt.counters.snapshot_rows == 5
    # Key 9 inserted, updated and deleted in one batch (then its tombstone): three
    # events, each counted once; a replayed update of key 1 is late, not an update.
    replicator.apply(
        batch(
            [
                event("c", 100, 9),
                event("u", 101, 9),
                event("d", 102, 9),
                (topic, builders.key(9), None),
                event("u", 103, 1),
                event("u", 103, 1),
                event("c", 104, 11),
            ]
        )
    )
    c = rt.counters
    assert rt.state is TableState.REPLICATING
    assert (c.snapshot_rows, c.inserts, c.updates, c.deletes, c.late) == (5, 2, 2, 1, 1)
    assert c.commits == 2
    # Rows in the replica: 5 snapshot rows and key 11 (key 9 came and went).
    assert c.rows == 6 == len(read_replica(tmp_path / "lake" / rt.name))
    recorded = applied_counts(tmp_path / "lake" / rt.name)
    assert {k: recorded[k] for k in ("events_r", "events_c", "events_u", "events_d")} == {
        "events_r": 5,
        "events_c": 2,
        "events_u": 2,
        "events_d": 1,
    }
