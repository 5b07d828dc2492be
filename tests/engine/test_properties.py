"""Property tests: the real engine (decode, Spark merge, Hudi commit, hudi-rs read-back)
equals the independent oracle fold for generated Debezium streams.

Streams model a PostgreSQL source: inserts, updates (some with unchanged TOAST columns),
deletes with tombstones, re-inserts, primary-key changes (delete + create), truncates and
a column added mid-stream. Delivery then adds disorder Debezium really produces:
replayed windows (connector restarts), late single events, and the stream is cut into
random micro-batches with restarts and crashes before the commit (the batch is redone
from the checkpoint after a restart).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.replicator import Replicator
from tests import builders
from tests.integration.replicas import read_replica
from tests.oracle import TOAST_PLACEHOLDER, fold

pytestmark = [pytest.mark.spark]

TOPICS = ("srv.app.items", "srv.app.notes")


@dataclass
class Msg:
    """A Kafka record as the engine sees it."""

    _topic: str
    _key: bytes | None
    _value: bytes | None
    _offset: int
    _partition: int = 0

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


BASE_COLUMNS = [("id", "int32"), ("name", "string"), ("note", "string")]
EXTRA_COLUMNS = [*BASE_COLUMNS, ("extra", "int64")]


def _key(k: int) -> bytes:
    return builders.key(k)


def _value(
    op: str, lsn: int, after: dict | None, with_extra: bool, snapshot: bool = False
) -> bytes:
    columns = EXTRA_COLUMNS if with_extra else BASE_COLUMNS
    return builders.value(op, lsn, after, columns, snapshot=snapshot)


OPS = st.sampled_from(
    ["insert"] * 4
    + ["update"] * 5
    + ["toast"] * 2
    + ["delete"] * 2
    + ["rekey", "truncate", "addcol"]
)


def build_stream(
    topic: str, ops: list[tuple[str, int, int]]
) -> list[tuple[str, bytes | None, bytes | None]]:
    """Simulate the source table and emit Debezium messages in source order."""
    rows: dict[int, dict] = {}
    lsn, extra, out, next_id = 100, False, [], 1
    # A short snapshot first.
    for _ in range(3):
        row = {"id": next_id, "name": f"n{next_id}", "note": f"long-{next_id}"}
        rows[next_id] = row
        out.append((topic, _key(next_id), _value("r", lsn, row, extra, snapshot=True)))
        next_id += 1
    lsn += 10
    for kind, pick, val in ops:
        lsn += 1 + val % 3
        live = sorted(rows)
        if kind == "addcol":
            extra = True
            continue
        if kind == "truncate":
            rows.clear()
            out.append((topic, None, _value("t", lsn, None, extra)))
            continue
        if kind == "insert" or not live:
            row = {"id": next_id, "name": f"n{next_id}-{val}", "note": f"long-{val}"}
            if extra:
                row["extra"] = val
            rows[next_id] = row
            out.append((topic, _key(next_id), _value("c", lsn, row, extra)))
            next_id += 1
            continue
        k = live[pick % len(live)]
        if kind in ("update", "toast"):
            row = dict(rows[k], name=f"n{k}-{val}")
            if extra:
                row["extra"] = val
            if kind == "toast":
                sent = dict(row, note=TOAST_PLACEHOLDER)
            else:
                row["note"] = f"note-{val}" if val % 5 else None
                sent = row
            rows[k] = row
            out.append((topic, _key(k), _value("u", lsn, sent, extra)))
        elif kind == "delete":
            del rows[k]
            out.append((topic, _key(k), _value("d", lsn, None, extra)))
            out.append((topic, _key(k), None))
        elif kind == "rekey":
            row = dict(rows.pop(k), id=next_id)
            out.append((topic, _key(k), _value("d", lsn, None, extra)))
            out.append((topic, _key(k), None))
            rows[next_id] = row
            out.append((topic, _key(next_id), _value("c", lsn + 1, row, extra)))
            next_id += 1
            lsn += 1
    return out


def disorder(msgs: list, replays: list[tuple[int, int, int]], moves: list[tuple[int, int]]) -> list:
    """Add replayed windows and late single events, as connector restarts produce."""
    msgs = list(msgs)
    for start, length, where in replays:
        if not msgs:
            break
        i = start % len(msgs)
        while i < len(msgs) and msgs[i][2] is None:
            i += 1  # a window starts at an event, not at a tombstone
        j = min(len(msgs), i + 1 + length % 6)
        if j < len(msgs) and msgs[j][2] is None:
            j += 1  # keep a delete and its tombstone together
        window = msgs[i:j]
        at = max(j, where % (len(msgs) + 1))
        msgs[at:at] = window
    for src, distance in moves:
        if len(msgs) < 2:
            break
        i = src % len(msgs)
        value = msgs[i][2]
        if value is None or b'"op": "u"' not in value:
            continue  # only updates arrive late; deletes keep their tombstone adjacent
        msg = msgs.pop(i)
        msgs.insert(min(len(msgs), i + 1 + distance % 5), msg)
    return msgs


#: Table layouts: Copy-on-Write; Merge-on-Read compacting every 3rd log (appends and
#: compactions interleave); Merge-on-Read with the default size-based compaction.
LAYOUTS = {
    "cow": {"table_type": "COPY_ON_WRITE"},
    "mor-3-logs": {"compaction_max_log_files": 3, "compaction_max_log_ratio": 1000.0},
    "mor-default": {},
}


def replicate(
    msgs_by_topic: dict[str, list],
    cuts: list[int],
    crashes: set[int],
    root: Path,
    layout: str = "mor-3-logs",
) -> Path:
    """Feed the messages to the engine in batches, with restarts and crashes."""
    target = root / "lake"
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(target)},
            "hudi": {"num_buckets": 3, "clean_retain_commits": 2, **LAYOUTS[layout]},
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    records = {
        t: [Msg(t, k, v, i) for i, (_, k, v) in enumerate(msgs)]
        for t, msgs in msgs_by_topic.items()
    }
    replicator = Replicator(cfg, spark=SPARK[0])
    step = 0
    while True:
        # Each table resumes from its own checkpoint, as the Kafka source would.
        batch = []
        size = cuts[step % len(cuts)]
        for topic, recs in records.items():
            rt = replicator.tables.get(topic)
            start = rt.progress.committed.get(0, 0) if rt else 0
            batch.extend(recs[start : start + size])
        if not batch:
            return target
        if step in crashes:
            original = HudiTable.commit

            def boom(*_a, **_k):
                raise RuntimeError("simulated crash before the commit")

            HudiTable.commit = boom  # type: ignore[method-assign]
            try:
                with pytest.raises(RuntimeError):
                    replicator.apply(batch)
            finally:
                HudiTable.commit = original  # type: ignore[method-assign]
            replicator = Replicator(cfg, spark=SPARK[0])  # restart: rollback + checkpoint
        elif step % 4 == 3:
            replicator = Replicator(cfg, spark=SPARK[0])  # clean restart
            replicator.apply(batch)
        else:
            replicator.apply(batch)
        step += 1


SPARK: list = [None]


@pytest.fixture(autouse=True)
def _spark(spark):
    SPARK[0] = spark


def _normalise(rows: dict[str, dict], columns: set[str]) -> dict[str, dict]:
    return {k: {c: r.get(c) for c in columns} for k, r in rows.items()}


def check(ops_a, ops_b, replays, moves, cuts, crashes, layout="mor-3-logs") -> None:
    streams = {
        TOPICS[0]: disorder(build_stream(TOPICS[0], ops_a), replays, moves),
        TOPICS[1]: disorder(build_stream(TOPICS[1], ops_b), replays[::-1], moves[::-1]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        target = replicate(streams, cuts, set(crashes), Path(tmp), layout)
        for topic, msgs in streams.items():
            expected = fold(msgs).get(topic, {})
            path = target / table_name_for_topic(topic)
            actual = read_replica(path) if HudiTable.exists(path) else {}
            columns = {"id", "name", "note"} | {c for r in actual.values() for c in r}
            assert _normalise(actual, columns) == _normalise(expected, columns)


ops_strategy = st.lists(st.tuples(OPS, st.integers(0, 50), st.integers(0, 1000)), max_size=40)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops_a=ops_strategy,
    ops_b=ops_strategy,
    replays=st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 10), st.integers(0, 300)), max_size=3
    ),
    moves=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 10)), max_size=3),
    cuts=st.lists(st.integers(1, 25), min_size=1, max_size=6),
    crashes=st.lists(st.integers(0, 8), max_size=2),
    layout=st.sampled_from(sorted(LAYOUTS)),
)
@example(  # delete, its tombstone in the next batch, then a late update of the same key
    ops_a=[("insert", 0, 1), ("delete", 3, 2), ("update", 0, 3)],
    ops_b=[],
    replays=[(4, 1, 9)],
    moves=[],
    cuts=[5, 1, 2],
    crashes=[],
    layout="mor-3-logs",
)
@example(  # TOAST update right after insert in one batch, then truncate and re-insert
    ops_a=[("insert", 0, 1), ("toast", 3, 2), ("truncate", 0, 0), ("insert", 0, 4)],
    ops_b=[("addcol", 0, 0), ("update", 1, 7)],
    replays=[],
    moves=[],
    cuts=[25],
    crashes=[0],
    layout="cow",
)
@example(  # MOR: updates and deletes appended as logs, a crash, then compaction
    ops_a=[
        ("insert", 0, 1),
        ("insert", 1, 2),
        ("update", 0, 3),
        ("delete", 1, 0),
        ("toast", 0, 4),
        ("insert", 1, 5),
        ("update", 1, 6),
        ("delete", 0, 0),
    ],
    ops_b=[],
    replays=[(2, 2, 5)],
    moves=[],
    cuts=[1],
    crashes=[3],
    layout="mor-3-logs",
)
def test_engine_equals_oracle(ops_a, ops_b, replays, moves, cuts, crashes, layout) -> None:
    check(ops_a, ops_b, replays, moves, cuts, crashes, layout)
