"""``cdcctl explain`` against the independent fold (tests/oracle.py), on the real broker,
the real replicator and Spark, for every event kind: snapshot reads, inserts, updates,
replays, late events, TOAST, deletes and their tombstones, a truncate, a primary-key
change, a dead letter and events not consumed yet; Copy-on-Write and Merge-on-Read (log
files not compacted yet)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.explain import explain_keys
from engine.playground.broker import produce_messages
from engine.replicator import Replicator
from tests import builders
from tests.integration.replicas import run_cli
from tests.oracle import TOAST_PLACEHOLDER, fold, fold_verdicts

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

COLS = [("id", "int32"), ("name", "string"), ("qty", "int32")]
KEYS = [str(i) for i in range(1, 10)]  # 6 has a dead letter, 9 a pending event


def _stream(topic: str) -> tuple[list, list, list, tuple]:
    """Three parts (consumed, consumed, left in the topic) and the dead letter."""

    def ev(op: str, i: int, lsn: int, snapshot: bool = False, **row) -> tuple:
        after = None if op == "d" else {"id": i, "name": f"n{i}", "qty": i, **row}
        value = builders.value(op, lsn, after, COLS, snapshot=snapshot)
        return topic, builders.key(i), value

    def tomb(i: int) -> tuple:
        return topic, builders.key(i), None

    first = [ev("r", i, 10 + i, snapshot=True) for i in (1, 2, 3)]
    first += [ev("c", 4, 100), ev("u", 4, 110, qty=40), ev("u", 4, 110, qty=40)]  # a replay
    first += [ev("u", 4, 105, qty=99)]  # late
    first += [ev("u", 2, 120, name=TOAST_PLACEHOLDER, qty=22)]  # name unchanged
    first += [ev("c", 5, 130), ev("d", 5, 140), tomb(5)]
    bad = (topic, builders.key(6), b'{"payload": {"op": "c", "after": ')
    first += [bad, ev("c", 6, 145)]
    second = [ev("c", 7, 150), ev("u", 1, 160, qty=16)]
    second += [(topic, None, builders.value("t", 170, None, COLS))]
    second += [ev("u", 7, 165, qty=77), ev("c", 7, 180, qty=78)]  # late, then after it
    # Five per batch: back after the truncate; deleted (tombstones) in the next batch
    # (key 3 becomes 9: a primary-key change), key 4 inserted again in the last.
    second += [ev("c", 4, 185), ev("c", 3, 186), ev("u", 2, 187), ev("c", 8, 188)]
    second += [ev("u", 8, 189, qty=88)]
    second += [ev("d", 4, 190), tomb(4), ev("d", 3, 210), tomb(3), ev("c", 9, 211)]
    second += [ev("c", 4, 200, qty=400)]
    third = [ev("u", 9, 220, qty=900)]
    return first, second, third, bad


def _config(root: Path, servers: str, prefix: str, table_type: str):
    return config_from_dict(
        {
            "source": {"bootstrap_servers": servers, "topics": f"^{re.escape(prefix)}\\."},
            "target": {"path": str(root / "lake")},
            "hudi": {"num_buckets": 2, "table_type": table_type, "compaction_max_log_files": 3},
            "replicator": {
                "work_dir": str(root / "work"),
                "max_batch_events": 5,
                "max_batch_seconds": 0.3,
            },
            "errors": {"tolerance": "all"},
        }
    )


def _verdict(e) -> str:
    # The fold knows no commits: an event a newer one of its batch outlived was applied.
    return "applied" if e.verdict == "superseded" else e.verdict


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_explain_matches_the_fold_for_every_event_kind(
    broker, spark, topic_prefix, tmp_path: Path, table_type: str
) -> None:
    topic = f"{topic_prefix}.app.items"
    first, second, third, bad = _stream(topic)
    broker.create_topics([topic])
    cfg = _config(tmp_path, broker.bootstrap_servers, topic_prefix, table_type)
    produce_messages(broker.bootstrap_servers, first)
    Replicator(cfg, spark=spark).run(until_caught_up=True)
    produce_messages(broker.bootstrap_servers, second)
    Replicator(cfg, spark=spark).run(until_caught_up=True)
    produce_messages(broker.bootstrap_servers, third)  # not consumed: pending
    table = "app_items"

    found = explain_keys(cfg, table, KEYS)
    consumed = [m for m in first + second if m is not bad]
    expected_rows = fold(consumed)[topic]
    assert found.topic == topic and found.kafka["messages"] == len(first + second + third)
    stories = {s.key: s for s in found.keys}
    for key in KEYS:
        story = stories[key]
        events = [e for e in story.events if e.verdict not in ("dead-letter", "pending")]
        got = [(e.op, _verdict(e)) for e in events]
        assert got == fold_verdicts(consumed, key), key
        # The row the replica holds is the fold's.
        want = expected_rows.get(key)
        row = None if story.row is None else {c: story.row[c] for c in ("id", "name", "qty")}
        assert row == want, key
        # Each commit that changed the key holds the position of exactly one event it
        # consumed (the newest applied one of its batch, or the truncate that removed
        # the row), with that event's coordinates.
        wrote = [e for e in events if e.wrote]
        changes = [c for c in story.changes if c.change != "baseline"]
        assert len(changes) == len(wrote), key
        for c, e in zip(changes, wrote, strict=True):
            assert (c.instant, c.position, c.partition, c.offset) == (
                e.instant, e.position, e.partition, e.offset,
            ), key  # fmt: skip
        for e in events:
            if e.verdict == "superseded":
                assert any(
                    w.instant == e.instant and w.verdict == "applied" and w.position > e.position
                    for w in events
                ), key

    # Kinds by key, named as a reader would look for them.
    kinds = ["insert", "truncate", "insert", "delete", "insert"]
    assert [c.change for c in stories["4"].changes] == kinds
    assert stories["4"].changes[3].position == stories["4"].events[-3].position  # its delete
    assert [e.verdict for e in stories["4"].events[-3:]] == ["applied", "tombstone", "applied"]
    toasted = [e for e in stories["2"].events if e.verdict == "toast-filled"]
    assert [e.toast for e in toasted] == [["name"]] and stories["2"].row["name"] == "n2"
    assert "truncate" in [c.change for c in stories["2"].changes]  # the truncate removed it
    assert stories["3"].changes[-1].change == "delete" and stories["3"].row is None
    assert [e.verdict for e in stories["9"].events][-1] == "pending"
    letters = [e for e in stories["6"].events if e.verdict == "dead-letter"]
    assert [(e.partition, e.offset) for e in letters] == [(0, first.index(bad))]

    if table_type == "COPY_ON_WRITE":
        return  # the CLI is the same over both: run once, on Merge-on-Read
    # The CLI: the same story as JSON; the table as text; an unknown table refused.
    config = tmp_path / "cdcctl.toml"
    config.write_text(
        f'[source]\nbootstrap_servers = "{broker.bootstrap_servers}"\n'
        f'topics = "^{re.escape(topic_prefix)}\\\\."\n'
        f'[target]\npath = "{tmp_path / "lake"}"\n'
        f'[replicator]\nwork_dir = "{tmp_path / "work"}"\n'
    )
    run = run_cli("explain", table, "4", "--config", str(config), "--json")
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)["keys"][0]
    assert [t["verdict"] for t in shown["timeline"] if t["kind"] == "event"] == [
        e.verdict for e in stories["4"].events
    ]
    text = run_cli("explain", table, "7", "--config", str(config))
    assert text.returncode == 0, text.stderr
    assert "late" in text.stdout and "not newer than the table's truncate" in text.stdout
    wrong = run_cli("explain", "nope", "1", "--config", str(config))
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
    assert "nope" in wrong.stderr
