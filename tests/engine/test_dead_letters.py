"""Dead letters survive crashes exactly once: one line per bad message, never two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.decode import BadMessage
from engine.hudi.table import HudiTable
from engine.replicator import Replicator
from engine.replicator.deadletter import DeadLetters
from tests import builders
from tests.engine.test_properties import Msg

TOPIC = "srv.app.t"
COLUMNS = [("id", "int32"), ("name", "string")]


def _bad(offset: int) -> BadMessage:
    return BadMessage(TOPIC, 0, offset, b"k", b"not json", "invalid JSON")


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
