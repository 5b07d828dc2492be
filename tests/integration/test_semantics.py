"""Issue 3 end to end on the real broker: replays, schema evolution, a failing table."""

from __future__ import annotations

import json
import re

import pytest

from engine.hudi import HudiView
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests import builders
from tests.integration.replicas import (
    assert_replicas_match,
    read_replica,
    run_cli,
    with_replayed_windows,
    write_config,
)
from tests.oracle import fold
from tests.s3_support import ReplicaTarget

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_replayed_windows_are_late_and_change_nothing(
    broker, topic_prefix, tmp_path, lake: ReplicaTarget
) -> None:
    """In a folder and in a bucket."""
    workload = InventoryWorkload(seed=21, prefix=topic_prefix, schemas=False)
    clean = list(workload.events(100_000))
    topics = sorted({t for t, _, _ in clean})
    by_topic = {t: [m for m in clean if m[0] == t] for t in topics}
    sent, stale = [], 0
    for n, t in enumerate(topics):
        replayed, count = with_replayed_windows(by_topic[t], 0.01, seed=n)
        sent += replayed
        stale += count
    assert stale > 500
    assert any(b'"op":"d"' in (v or b"") for _, _, v in sent[-5000:])
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, sent)
    config = lake.config(
        tmp_path / "c.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        max_batch_events=30_000,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json", env=lake.env)
    assert run.returncode == 0, run.stderr
    status = json.loads(run.stdout)["tables"]
    # Replica == the source state (the fold of the stream without replays).
    assert_replicas_match(lake.store, fold(clean, types=None))
    assert sum(t["late"] for t in status) == stale


COLS_V1 = [("id", "int32"), ("name", "string"), ("qty", "int32")]
COLS_V2 = [*COLS_V1, ("color", "string")]
COLS_WIDE = [("id", "int32"), ("name", "string"), ("qty", "int64")]
COLS_BAD = [("id", "int32"), ("name", "string"), ("qty", "string")]


def _rows(topic: str, ids: range, lsn0: int, cols, extra: dict | None = None) -> list:
    out = []
    for n, i in enumerate(ids):
        row = {"id": i, "name": f"n{i}", "qty": i * 2, **(extra or {})}
        if dict(cols)["qty"] == "string":
            row["qty"] = f"{i * 2} pcs"
        out.append((topic, builders.key(i), builders.value("c", lsn0 + n, row, cols)))
    return out


def test_added_column_and_widened_type(broker, topic_prefix, tmp_path) -> None:
    topic = f"{topic_prefix}.app.items"
    v1 = _rows(topic, range(1, 200), 1000, COLS_V1)
    # Later events carry a new column and a widened qty (int32 -> int64).
    v2 = _rows(topic, range(200, 260), 5000, COLS_V2, {"color": "red"})
    v3 = _rows(topic, range(1, 20), 9000, COLS_WIDE)  # updates of old rows as upserts
    broker.create_topics([topic])
    produce_messages(broker.bootstrap_servers, v1)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "c.toml", broker.bootstrap_servers, f"^{re.escape(topic_prefix)}\\.", target
    )
    assert run_cli("start", "--config", str(config), "--until-caught-up").returncode == 0
    produce_messages(broker.bootstrap_servers, v2 + v3)
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    replica = target / table_name_for_topic(topic)
    rows = read_replica(replica)
    assert rows["250"]["color"] == "red"
    # The new column comes after every existing one, as Hudi's schema evolution adds it.
    avro = json.loads(HudiView.open(replica).latest_extra_metadata()["schema"])
    assert [f["name"] for f in avro["fields"]][-2:] == ["_cdc_source_ts_ms", "color"]
    assert rows["5"]["color"] is None  # old rows (old file groups) read the new column as null
    assert rows["5"]["qty"] == 10 and rows["150"]["qty"] == 300
    assert_replicas_match(
        target, {topic: {k: {"color": None, **r} for k, r in fold(v1 + v2 + v3)[topic].items()}}
    )


def test_incompatible_change_fails_one_table_others_go_on(broker, topic_prefix, tmp_path) -> None:
    bad_topic, good_topic = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    before = _rows(bad_topic, range(1, 50), 1000, COLS_V1)
    change = _rows(bad_topic, range(50, 60), 2000, COLS_BAD)  # qty int -> string
    good = _rows(good_topic, range(1, 300), 1000, COLS_V1)
    broker.create_topics([bad_topic, good_topic])
    produce_messages(broker.bootstrap_servers, before)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "c.toml", broker.bootstrap_servers, f"^{re.escape(topic_prefix)}\\.", target
    )
    assert run_cli("start", "--config", str(config), "--until-caught-up").returncode == 0
    produce_messages(broker.bootstrap_servers, change + good)
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 3
    assert "qty" in run.stderr and "int32" in run.stderr and "string" in run.stderr
    assert "rebuild" in run.stderr
    states = {t["table"]: t["state"] for t in json.loads(run.stdout)["tables"]}
    assert states == {"app_items": "FAILED", "app_other": "STOPPED"}
    assert_replicas_match(target, fold(before) | fold(good))
