"""Bad messages under both tolerance policies, listed and replayed, on the real broker and CLI.

The fixable cause: messages larger than ``source.max_message_bytes`` are bad; raising the
limit in the config fixes them, and ``cdcctl deadletters replay`` applies them. A message
that is not JSON cannot be fixed by any config: it stays a dead letter with its error.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from engine.state.control import alive
from tests import builders
from tests.integration.replicas import applied_counts, assert_replicas_match, run_cli, write_config
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

COLS = [("id", "int32"), ("name", "string"), ("qty", "int32")]
BIG = "x" * 3000
GARBAGE = b"not json {"


def _event(topic: str, i: int, lsn: int, name: str | None = None, op: str = "c") -> tuple:
    row = {"id": i, "name": name or f"n{i}", "qty": i}
    return (topic, builders.key(i), builders.value(op, lsn, row, COLS))


def _limit(messages: list) -> int:
    """A max_message_bytes every small message fits (and no BIG one)."""
    small = [len(k) + len(v) for _, k, v in messages if v is not None and BIG not in v.decode()]
    return max(small) + 100


def _config(tmp_path: Path, bootstrap: str, prefix: str, tolerance: str, limit: int) -> Path:
    return write_config(
        tmp_path / "cdcctl.toml",
        bootstrap,
        f"^{re.escape(prefix)}\\.",
        tmp_path / "lake",
        tolerance=tolerance,
        source={"max_message_bytes": limit},
        max_batch_seconds=0.3,
    )


def _letters(tmp_path: Path, table: str) -> list[dict]:
    path = tmp_path / "work" / "deadletter" / f"{table}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tolerance_all_dead_letters_listed_and_replayed_by_the_running_replicator(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    topic = f"{topic_prefix}.app.items"
    msgs = [_event(topic, i, 1000 + i) for i in range(1, 41)]  # offsets 0..39
    msgs += [_event(topic, 100, 2000, BIG)]  # 40: too big, a new row
    msgs += [_event(topic, 5, 2001, BIG, "u")]  # 41: too big, the newest image of row 5
    msgs += [(topic, builders.key(99), GARBAGE)]  # 42: never decodable
    msgs += [_event(topic, 7, 2500, BIG, "u")]  # 43: too big, and row 7 changes again next:
    msgs += [_event(topic, 7, 3000, "seven", "u")]  # 44: ...so replaying 43 is late
    msgs += [_event(topic, i, 4000 + i) for i in range(41, 60)]  # 45..63
    bad_offsets = [40, 41, 42, 43]
    broker.create_topics([topic])
    produce_messages(broker.bootstrap_servers, msgs)
    limit = _limit(msgs)
    config = _config(tmp_path, broker.bootstrap_servers, topic_prefix, "all", limit)
    target = tmp_path / "lake"

    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 0, run.stderr
    good = [m for n, m in enumerate(msgs) if n not in bad_offsets]
    assert_replicas_match(target, fold(good))  # every other event applied
    [status] = json.loads(run.stdout)["tables"]
    assert status["bad"] == 4 and status["late"] == 0

    letters = _letters(tmp_path, "app_items")
    assert [(d["topic"], d["partition"], d["offset"]) for d in letters] == [
        (topic, 0, o) for o in bad_offsets
    ]
    for d in letters:
        assert base64.b64decode(d["value_b64"]) == msgs[d["offset"]][2]
        assert d["time"] and d["error"]
    assert "max_message_bytes" in letters[0]["error"] and "JSON" in letters[2]["error"]

    listed = run_cli("deadletters", "--config", str(config), "--json")
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)["deadletters"]
    assert [(r["table"], r["topic"], r["partition"], r["offset"]) for r in records] == [
        ("app_items", topic, 0, o) for o in bad_offsets
    ]
    assert records[2]["key"] == msgs[42][1].decode() and records[0]["time"] == letters[0]["time"]
    text = run_cli("deadletters", "app_items", "--config", str(config))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["table", "topic", "partition", "offset", "time", "error", "key"]
    assert [line.split()[3] for line in lines[1:]] == [str(o) for o in bad_offsets]
    # A table that is no table is the unknown-table error (issue 24: it listed nothing, exit 0).
    none = run_cli("deadletters", "app_other", "--config", str(config), "--json")
    assert none.returncode == 2 and none.stdout == "", none.stderr
    assert none.stderr.startswith("error: no table `app_other`; known tables: app_items\n")

    # The fix: a larger limit. A replicator runs with it; the replay goes through it.
    config = _config(tmp_path, broker.bootstrap_servers, topic_prefix, "all", 100_000)
    child = replicator(config)
    wait_until(lambda: alive(tmp_path / "work"), "the replicator's store", 60, child=child)
    replay = run_cli("deadletters", "replay", "app_items", "--config", str(config))
    assert replay.returncode == 1, replay.stderr  # the garbage still fails
    assert "by the running replicator" in replay.stdout
    assert "3 applied" in replay.stdout and "1 still fail" in replay.stdout
    assert_replicas_match(target, fold([m for n, m in enumerate(msgs) if n != 42]))
    assert applied_counts(target / "app_items")["late"] == 1  # offset 43 was stale
    left = json.loads(run_cli("deadletters", "--config", str(config), "--json").stdout)
    assert [(r["offset"], "JSON" in r["error"]) for r in left["deadletters"]] == [(42, True)]
    stop = run_cli("stop", "--config", str(config))
    assert stop.returncode == 0, stop.stderr
    assert child.wait() == 0, child.describe()
    status = json.loads(run_cli("status", "--config", str(config), "--json").stdout)
    [table] = status["tables"]
    assert (table["bad"], table["late"]) == (4, 1)
    assert len(_letters(tmp_path, "app_items")) == 4  # the file itself is never rewritten


def test_tolerance_none_stops_the_table_at_the_bad_message_and_all_resumes_there(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    before = [_event(topic, i, 1000 + i) for i in range(1, 21)]  # offsets 0..19
    bad = _event(topic, 50, 2000, BIG)  # offset 20
    after = [_event(topic, i, 3000 + i) for i in range(21, 31)]
    after += [_event(topic, 3, 4000, "three", "u")]
    fine = [_event(other, i, 1000 + i) for i in range(1, 16)]
    broker.create_topics([topic, other])
    produce_messages(broker.bootstrap_servers, [*before, bad, *after, *fine])
    limit = _limit([*before, *after])
    config = _config(tmp_path, broker.bootstrap_servers, topic_prefix, "none", limit)
    target = tmp_path / "lake"

    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 3, run.stderr
    assert f"{topic}[0] offset 20" in run.stderr and "errors.tolerance" in run.stderr
    states = {t["table"]: t["state"] for t in json.loads(run.stdout)["tables"]}
    assert states["app_items"] == "FAILED" and states["app_other"] == "STOPPED"
    assert_replicas_match(target, fold(before) | fold(fine))  # nothing after the bad one
    assert [d["offset"] for d in _letters(tmp_path, "app_items")] == [20]
    listed = json.loads(run_cli("deadletters", "--config", str(config), "--json").stdout)
    assert [(r["table"], r["offset"]) for r in listed["deadletters"]] == [("app_items", 20)]

    # Going on without the bad message: replication resumes exactly at it.
    config = _config(tmp_path, broker.bootstrap_servers, topic_prefix, "all", limit)
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 0, run.stderr
    assert_replicas_match(target, fold(before + after) | fold(fine))
    assert [d["offset"] for d in _letters(tmp_path, "app_items")] == [20]  # not written twice
    items = {t["table"]: t for t in json.loads(run.stdout)["tables"]}["app_items"]
    assert items["bad"] == 1

    # The fix, with no replicator running: the replay runs in the CLI process.
    config = _config(tmp_path, broker.bootstrap_servers, topic_prefix, "all", 100_000)
    replay = run_cli("deadletters", "replay", "app_items", "--config", str(config))
    assert replay.returncode == 0, replay.stderr
    assert "offline" in replay.stdout and "1 applied" in replay.stdout
    assert_replicas_match(target, fold([*before, bad, *after]) | fold(fine))
    listed = json.loads(run_cli("deadletters", "--config", str(config), "--json").stdout)
    assert listed == {"deadletters": []}
    again = run_cli("deadletters", "replay", "app_items", "--config", str(config))
    assert again.returncode == 0 and "0 applied" in again.stdout, again.stderr
