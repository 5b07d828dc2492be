"""Transaction metadata: every committed instant holds whole source transactions."""

from __future__ import annotations

import json
import random
import re

import pytest

from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from tests import builders
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.oracle import fold

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

COLS = [("id", "int32"), ("name", "string"), ("qty", "int32")]


def _tx_record(status: str, tx_id: str, counts: dict[str, int] | None) -> tuple[bytes, bytes]:
    value = {
        "status": status,
        "id": tx_id,
        "ts_ms": 1,
        "event_count": None,
        "data_collections": None,
    }
    if counts is not None:
        value["event_count"] = sum(counts.values())
        value["data_collections"] = [
            {"data_collection": dc, "event_count": n} for dc, n in counts.items()
        ]
    return json.dumps({"id": tx_id}).encode(), json.dumps(value).encode()


def test_batches_never_split_a_transaction(broker, topic_prefix, tmp_path) -> None:
    rng = random.Random(7)
    topics = {"a": f"{topic_prefix}.app.a", "b": f"{topic_prefix}.app.b"}
    tx_topic = f"{topic_prefix}.transaction"
    data: dict[str, list] = {t: [] for t in topics.values()}
    last_of_tx: dict[str, set[int]] = {t: set() for t in topics.values()}
    control = []
    lsn, next_id = 1000, 1
    for txid in range(1, 120):
        counts = {"a": rng.randint(0, 5), "b": rng.randint(0, 4)}
        if not any(counts.values()):
            counts["a"] = 1
        # PostgreSQL ids differ in the LSN part between BEGIN, events and END.
        control.append((tx_topic, *_tx_record("BEGIN", f"{txid}:{lsn}", None)))
        total = 0
        for name, n in counts.items():
            topic = topics[name]
            for order in range(1, n + 1):
                lsn += 1
                total += 1
                k = rng.randint(1, next_id) if rng.random() < 0.5 else next_id
                next_id += k == next_id
                row = {"id": k, "name": f"tx{txid}", "qty": order}
                value = builders.value("u", lsn, row, COLS, tx=(f"{txid}:{lsn}", total, order))
                data[topic].append((topic, builders.key(k), value))
            if n:
                last_of_tx[topic].add(len(data[topic]))  # offset after the tx's last event
        dc = {f"app.{name}": n for name, n in counts.items() if n}
        control.append((tx_topic, *_tx_record("END", f"{txid}:{lsn + 1}", dc)))
    broker.create_topics([*topics.values(), tx_topic])
    produce_messages(broker.bootstrap_servers, [m for msgs in data.values() for m in msgs])
    produce_messages(broker.bootstrap_servers, control)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "c.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.app\\.",
        target,
        max_batch_events=9,
        max_batch_seconds=0.2,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    for topic in data:
        table = HudiTable.open(target / table_name_for_topic(topic))
        instants = table.completed_instants()
        assert len(instants) > 5
        for instant in instants:
            checkpoint = table.commit_metadata(instant)["extraMetadata"][
                "deltastreamer.checkpoint.key"
            ]
            applied = int(checkpoint.rsplit(":", 1)[1])
            assert applied in last_of_tx[topic] | {0}, f"{instant} ends inside a transaction"
    assert_replicas_match(target, fold([m for msgs in data.values() for m in msgs]))
