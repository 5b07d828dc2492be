"""Generic CDC JSON with partial images through the real broker and the real CLI: events
out of order across two runs, bad messages in the dead-letter file with their
coordinates, the replica read back by hudi-rs and compared with the ordered fold."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from tests.engine.cdc_json_oracle import fold_events
from tests.integration.replicas import read_replica, run_cli, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _msg(topic: str, event: dict) -> tuple[str, bytes, bytes]:
    return (topic, json.dumps({"PK": event["PK"]}).encode(), json.dumps(event).encode())


def test_partial_images_out_of_order_across_runs_with_bad_messages(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}.public.items"
    ts = "2024-05-01T10:0{}:00Z".format
    first = [  # the update of row 2 and the delete of row 1 before the inserts they follow
        {"PK": 2, "col_3": 0.002, "updated_time": ts(5), "_action": "_update", "_timestamp": ts(5)},
        {"PK": 1, "_action": "_delete", "_timestamp": ts(4)},
    ]
    bad = [
        {"PK": 9, "col_1": "x", "_timestamp": ts(1)},  # no op field
        {"PK": 9, "col_1": "x", "_action": "_upsert", "_timestamp": ts(1)},  # unknown op
        {"PK": 9, "col_1": "x", "_action": "_insert", "_timestamp": "noon"},  # bad order value
    ]
    second = [
        {"PK": 1, "col_1": "one", "col_2": 10, "col_3": 1, "updated_time": ts(0),
         "_action": "_insert", "_timestamp": ts(0)},
        {"PK": 2, "col_1": "two", "col_2": 20, "col_3": 2, "updated_time": ts(0),
         "_action": "_insert", "_timestamp": ts(1)},
        {"PK": 3, "col_1": "three", "col_2": 30, "col_3": 3, "updated_time": ts(6),
         "_action": "_insert", "_timestamp": ts(6)},
    ]  # fmt: skip
    broker.create_topics([topic])
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        tmp_path / "lake",
        tolerance="all",
        source={"format": "cdc-json"},
        max_batch_seconds=0.3,
    )
    with config.open("a") as f:
        f.write('[source.cdc_json]\nimages = "partial"\n')

    produce_messages(broker.bootstrap_servers, [_msg(topic, e) for e in first + bad])
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 0, run.stderr
    produce_messages(broker.bootstrap_servers, [_msg(topic, e) for e in second])
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 0, run.stderr

    rows = read_replica(tmp_path / "lake" / "public_items")
    assert sorted(rows) == ["2", "3"]
    assert rows["2"] == {
        "PK": 2, "col_1": "two", "col_2": 20, "col_3": 0.002, "updated_time": ts(5),
        "_timestamp": ts(5),
    }  # fmt: skip
    assert rows == fold_events(first + second, key="PK", partial=True) | {
        "3": {**rows["3"], "col_3": 3.0}
    }
    letters = [
        json.loads(line)
        for line in (tmp_path / "work" / "deadletter" / "public_items.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [(d["topic"], d["partition"], d["offset"]) for d in letters] == [
        (topic, 0, 2),
        (topic, 0, 3),
        (topic, 0, 4),
    ]
    assert json.loads(base64.b64decode(letters[1]["value_b64"])) == bad[1]
    errors = [d["error"] for d in letters]
    assert "op field '_action' is missing" in errors[0]
    assert "unknown op value '_upsert'" in errors[1]
    assert "'noon'" in errors[2]
    [status] = json.loads(run.stdout)["tables"]
    assert status["bad"] == 3
