"""`cdcctl start --until-caught-up` on flattened topics (real broker, real CLI in a child
process, replicas read back by hudi-rs): a keyed table with rewrite-mode deletes, a table
without a primary key configured `keyless = "full-row"` holding equal rows, and one left
unconfigured, which must stop with a message naming it and both fixes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from engine.playground.broker import produce_messages
from tests.integration.replicas import read_replica, run_cli, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _j(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def test_flattened_keyed_and_keyless_tables(broker, topic_prefix: str, tmp_path: Path) -> None:
    items, log, bare = (f"{topic_prefix}.app.{t}" for t in ("items", "log", "bare"))
    messages = [
        (items, _j({"id": 1}), _j({"id": 1, "name": "a", "__op": "c", "__lsn": 10})),
        (items, _j({"id": 2}), _j({"id": 2, "name": "b", "__op": "c", "__lsn": 11})),
        (items, _j({"id": 1}), _j({"id": 1, "name": "a2", "__op": "u", "__lsn": 12})),
        (items, _j({"id": 2}), _j({"id": 2, "name": "b", "__deleted": "true", "__lsn": 13})),
        (items, _j({"id": 2}), None),
        (log, None, _j({"code": "x", "n": 1, "__op": "c", "__lsn": 20})),
        (log, None, _j({"code": "x", "n": 1, "__op": "c", "__lsn": 21})),
        (log, None, _j({"code": "y", "n": 2, "__op": "c", "__lsn": 22})),
        (log, None, _j({"code": "x", "n": 1, "__op": "d", "__deleted": "true", "__lsn": 23})),
        (log, None, None),
        (bare, None, _j({"v": 1, "__op": "c", "__lsn": 30})),
    ]
    produce_messages(broker.bootstrap_servers, messages)
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        tmp_path / "lake",
        source={"format": "debezium-flat"},
        max_batch_seconds=0.3,
    )
    with config.open("a") as f:
        f.write('[tables.app_log]\nkeyless = "full-row"\n')
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json", timeout=240)
    assert run.returncode == 3, run.stderr  # app_bare failed, the others caught up
    assert "Traceback" not in run.stderr
    states = {s["table"]: s["state"] for s in json.loads(run.stdout)["tables"]}
    assert states["app_bare"] == "FAILED"
    assert states["app_items"] != "FAILED" and states["app_log"] != "FAILED"
    assert "app_bare" in run.stderr and "add a primary key" in run.stderr
    assert "[tables.app_bare] key_fields" in run.stderr

    lake = tmp_path / "lake"
    rows = read_replica(lake / "app_items")
    assert {k: r["name"] for k, r in rows.items()} == {"1": "a2"}
    assert not [c for c in rows["1"] if c.startswith("__")]
    log_rows = pa.Table.from_batches(hudi.HudiTable(str(lake / "app_log")).read()).to_pylist()
    assert sorted((r["code"], r["n"], r["_cdc_copies"]) for r in log_rows) == [
        ("x", 1, 1),
        ("y", 2, 1),
    ]
    # Nothing of the refused table was written (only the writer lock taken before it).
    assert not (lake / "app_bare" / ".hoodie" / "hoodie.properties").exists()
    assert not list((lake / "app_bare").rglob("*.parquet"))
