"""Two changes of one key in the same millisecond, through the real broker and the real
CLI: for formats ordered by a configured field (generic CDC JSON's ``order_field``,
flattened events' ``source.flattened.order_field``), equal order values are two
changes and the later Kafka offset wins, in one batch and against the stored row in a
later run. The replica is read back by hudi-rs and compared with the independent folds
(tests/engine/cdc_json_oracle.py, tests/oracle.py ``fold_flattened``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import hudi
import pytest

from engine.model import BY_FIELD
from engine.playground.broker import produce_messages
from tests.engine.cdc_json_oracle import fold_events
from tests.integration.replicas import read_replica, run_cli, status_tables, write_config
from tests.oracle import fold_flattened

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

TABLE = "public_items"


def _no_mark_column(table: Path) -> None:
    """The decoders' mark of order-value positions is never a replica column."""
    read = hudi.HudiTable(str(table)).read()
    assert read and all(BY_FIELD not in b.schema.names for b in read)


def _replicate(config: Path) -> None:
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert run.returncode == 0, run.stderr[-3000:]


def _config(tmp_path: Path, broker, topic_prefix: str, source: dict, section: str) -> Path:
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        tmp_path / "lake",
        source=source,
        max_batch_seconds=0.3,
    )
    with config.open("a") as f:
        f.write(section)
    return config


def test_cdc_json_same_millisecond_updates_the_later_wins(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    topic = f"{topic_prefix}.public.items"
    at = "2024-05-01T10:00:00.123Z"

    def event(action: str, name: str, ts: str = at) -> dict:
        return {"PK": 1, "name": name, "_action": action, "_timestamp": ts}

    first = [
        event("_insert", "created", "2024-05-01T10:00:00.100Z"),
        event("_update", "first", at),
        event("_update", "second", at),  # the same millisecond, one offset later
    ]
    later = [event("_update", "third", at)]  # equal to the stored row's order value
    broker.create_topics([topic])
    config = _config(tmp_path, broker, topic_prefix, {"format": "cdc-json"}, "")

    def produce(events: list[dict]) -> None:
        messages = [(topic, json.dumps({"PK": 1}).encode(), json.dumps(e).encode()) for e in events]
        produce_messages(broker.bootstrap_servers, messages)

    produce(first)
    _replicate(config)
    rows = read_replica(tmp_path / "lake" / TABLE)
    assert rows == {"1": {"PK": 1, "name": "second", "_timestamp": at}}
    assert rows == fold_events(first, key="PK", partial=False)

    produce(later)
    _replicate(config)
    rows = read_replica(tmp_path / "lake" / TABLE)
    assert rows == {"1": {"PK": 1, "name": "third", "_timestamp": at}}
    assert rows == fold_events(first + later, key="PK", partial=False)
    _no_mark_column(tmp_path / "lake" / TABLE)
    status = status_tables(config)[TABLE]
    assert (status["late"], status["inserts"], status["updates"]) == (0, 1, 3)


def test_flattened_order_field_same_millisecond_updates_the_later_wins(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    # ExtractNewRecordState with add.fields=op,source.ts_ms and no LSN: the events are
    # ordered by source.flattened.order_field = "__source_ts_ms".
    topic = f"{topic_prefix}.public.items"

    def event(op: str, name: str, ts: int = 1_714_557_600_123) -> dict:
        return {"id": 1, "name": name, "__op": op, "__source_ts_ms": ts}

    first = [event("c", "created", 1_714_557_600_100), event("u", "first"), event("u", "second")]
    later = [event("u", "third")]
    broker.create_topics([topic])
    config = _config(
        tmp_path,
        broker,
        topic_prefix,
        {"format": "debezium-flat"},
        '[source.flattened]\norder_field = "__source_ts_ms"\n',
    )

    def messages(events: list[dict]) -> list[tuple[str, bytes, bytes]]:
        return [(topic, json.dumps({"id": 1}).encode(), json.dumps(e).encode()) for e in events]

    produce_messages(broker.bootstrap_servers, messages(first))
    _replicate(config)
    rows = read_replica(tmp_path / "lake" / TABLE)
    assert rows == {"1": {"id": 1, "name": "second"}}
    assert rows == fold_flattened(messages(first), "__source_ts_ms")[topic]

    produce_messages(broker.bootstrap_servers, messages(later))
    _replicate(config)
    rows = read_replica(tmp_path / "lake" / TABLE)
    assert rows == {"1": {"id": 1, "name": "third"}}
    assert rows == fold_flattened(messages(first + later), "__source_ts_ms")[topic]
    _no_mark_column(tmp_path / "lake" / TABLE)
    status = status_tables(config)[TABLE]
    assert (status["late"], status["inserts"], status["updates"]) == (0, 1, 3)
