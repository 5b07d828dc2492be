"""Dead letters survive crashes exactly once: one line per bad message, never two; a
replay applies each once, even across a crash; errors.tolerance = "none" stops a table
at its first bad message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.decode import BadMessage
from engine.hudi import HudiWriter
from engine.hudi.table import HudiTable
from engine.replicator import Replicator
from engine.replicator.deadletter import REPLAYED_KEY, DeadLetters
from tests import builders
from tests.engine.test_properties import Msg
from tests.integration.replicas import read_replica

TOPIC = "srv.app.t"
COLUMNS = [("id", "int32"), ("name", "string")]


def _bad(offset: int) -> BadMessage:
    return BadMessage(TOPIC, 0, offset, b"k", b"not json", "invalid JSON")


def _config(tmp_path: Path, tolerance: str = "all", max_message_bytes: int | None = None):
    source = {"bootstrap_servers": "127.0.0.1:1", "topics": "."}
    if max_message_bytes is not None:
        source["max_message_bytes"] = max_message_bytes
    return config_from_dict(
        {
            "source": source,
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
            "errors": {"tolerance": tolerance},
        }
    )


def _row(i: int, lsn: int, name: str, op: str = "c") -> tuple[bytes, bytes]:
    return builders.key(i), builders.value(op, lsn, {"id": i, "name": name}, COLUMNS)


def test_records_carry_error_time_and_text_and_old_files_are_read(tmp_path: Path) -> None:
    letters = DeadLetters(tmp_path)
    letters.quarantine("t", [_bad(3)])
    record = json.loads(letters.path("t").read_text())
    assert record["error"] == "invalid JSON" and record["value"] == "not json"
    assert record["key_b64"] == "aw==" and record["time"].endswith("+00:00")
    with letters.path("t").open("a") as fh:  # a line as older versions wrote it
        fh.write(
            json.dumps(
                {
                    "topic": TOPIC,
                    "partition": 0,
                    "offset": 4,
                    "reason": "old",
                    "key_b64": None,
                    "value_b64": "eA==",
                }
            )
            + "\n"
        )
    old = DeadLetters(tmp_path).pending("t")[1]
    assert (old.offset, old.error, old.value, old.time) == (4, "old", b"x", None)


def test_a_message_quarantined_before_a_crash_is_not_written_again(tmp_path: Path) -> None:
    letters = DeadLetters(tmp_path)
    assert letters.quarantine("t", [_bad(3), _bad(5)]) == 2
    # A new run (after a crash before the commit) reads the same batch again.
    again = DeadLetters(tmp_path)
    assert again.quarantine("t", [_bad(3), _bad(5), _bad(8)]) == 1
    lines = [json.loads(line) for line in letters.path("t").read_text().splitlines()]
    assert [line["offset"] for line in lines] == [3, 5, 8]


def test_a_line_cut_short_by_a_crash_does_not_swallow_the_next(tmp_path: Path) -> None:
    letters = DeadLetters(tmp_path)
    letters.quarantine("t", [_bad(1)])
    with letters.path("t").open("a") as fh:
        fh.write('{"topic": "srv.app.t", "partition": 0, "off')  # the crash
    assert DeadLetters(tmp_path).quarantine("t", [_bad(2)]) == 1
    lines = letters.path("t").read_text().splitlines()
    assert json.loads(lines[0])["offset"] == 1 and json.loads(lines[-1])["offset"] == 2


@pytest.mark.spark
def test_replicator_crash_before_commit_keeps_one_dead_letter(
    tmp_path: Path, spark, monkeypatch
) -> None:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    good = builders.value("c", 10, {"id": 1, "name": "a"}, COLUMNS)
    batch = [Msg(TOPIC, builders.key(1), good, 0), Msg(TOPIC, builders.key(2), b"{oops", 1)]

    def crash(*_args, **_kwargs):
        raise RuntimeError("simulated crash before the commit")

    with monkeypatch.context() as patch:
        patch.setattr(HudiTable, "commit", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            Replicator(cfg, spark=spark).apply(batch)
    Replicator(cfg, spark=spark).apply(batch)  # restart: rollback, same batch again
    lines = (tmp_path / "work" / "deadletter" / "app_t.jsonl").read_text().splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [1]


@pytest.mark.spark
def test_tolerance_none_stops_the_table_at_its_first_bad_message(tmp_path: Path, spark) -> None:
    cfg = _config(tmp_path, "none")
    batch = [
        Msg(TOPIC, *_row(1, 10, "a"), 0),
        Msg(TOPIC, builders.key(2), b"{oops", 1),
        Msg(TOPIC, *_row(3, 12, "c"), 2),
        Msg(TOPIC, builders.key(4), b"{oops", 3),
    ]
    replicator = Replicator(cfg, spark=spark)
    replicator.apply(batch)
    [status] = replicator.status()
    assert status.state.stopped
    assert f"{TOPIC}[0] offset 1" in status.error and "errors.tolerance" in status.error
    rt = replicator.tables[TOPIC]
    assert rt.progress.committed == {0: 1}  # the checkpoint stays at the bad message
    assert HudiWriter.open(tmp_path / "lake" / "app_t").checkpoint(TOPIC) == {0: 1}
    assert set(read_replica(tmp_path / "lake" / "app_t")) == {"1"}  # nothing after it
    lines = (tmp_path / "work" / "deadletter" / "app_t.jsonl").read_text().splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [1]


@pytest.mark.spark
def test_a_replay_interrupted_after_its_commit_is_not_applied_twice(
    tmp_path: Path, spark, monkeypatch
) -> None:
    big = "x" * 2000
    batch = [
        Msg(TOPIC, *_row(1, 10, "a"), 0),
        Msg(TOPIC, *_row(2, 11, big), 1),  # larger than the limit: quarantined
        Msg(TOPIC, *_row(3, 12, "c"), 2),
    ]
    limit = max(len(m._key or b"") + len(m._value or b"") for m in (batch[0], batch[2]))
    Replicator(_config(tmp_path, "all", limit), spark=spark).apply(batch)
    assert set(read_replica(tmp_path / "lake" / "app_t")) == {"1", "3"}
    fixed = _config(tmp_path, "all", 100_000)

    def crash(*_args, **_kwargs):
        raise RuntimeError("simulated crash before the replay is logged")

    with monkeypatch.context() as patch:
        patch.setattr(DeadLetters, "record_replay", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            Replicator(fixed, spark=spark).replay("app_t")
    table = HudiTable.open(tmp_path / "lake" / "app_t")
    newest = table.completed_instants()[-1]
    extra = table.commit_metadata(newest)["extraMetadata"]
    assert json.loads(extra[REPLAYED_KEY]) == [f"{TOPIC}:0:1"]
    assert read_replica(tmp_path / "lake" / "app_t")["2"]["name"] == big

    again = Replicator(fixed, spark=spark).replay("app_t")
    assert (again.applied, again.reconciled) == (0, 1)
    assert HudiTable.open(tmp_path / "lake" / "app_t").completed_instants()[-1] == newest
    assert DeadLetters(tmp_path / "work" / "deadletter").pending("app_t") == []
