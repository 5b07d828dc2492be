"""`cdcctl start --until-caught-up` over every Debezium sample, each on its own topic.

The 43 shared samples are an unfriendly stream: several topics map to one table name,
some messages are undecodable, some are transaction markers or heartbeats, one carries a
transaction id with no transaction topic to confirm it. The run must end — exit 3,
naming each failed table and its topic — once every table that has not failed is
caught up, with the bad messages quarantined.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from engine.model import KEY, OP
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from tests.engine.test_decode_debezium import BAD_SAMPLES, SAMPLES, decode_sample, sample_record
from tests.integration.replicas import run_cli, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_every_sample_on_its_own_topic_ends_with_the_failed_tables_named(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    names = sorted(p.name for p in SAMPLES.glob("*.json"))
    assert len(names) == 43
    messages, topic_of = [], {}
    for i, name in enumerate(names):
        topic, key, value = sample_record(name)
        rest = topic.split(".", 1)[1] if "." in topic else topic
        topic_of[name] = f"{topic_prefix}-{i:02d}.{rest}"
        messages.append((topic_of[name], key, value))
    produce_messages(broker.bootstrap_servers, messages)
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}-\\d\\d\\.",
        tmp_path / "lake",
        max_batch_seconds=0.3,
        tolerance="all",
    )
    started = time.monotonic()
    run = run_cli("start", "--config", str(config), "--until-caught-up", "--json", timeout=180)
    assert run.returncode == 3, run.stderr
    assert time.monotonic() - started < 120
    status = {s["topic"]: s for s in json.loads(run.stdout)["tables"]}

    # Topics whose names collide: the first one seen keeps the table, the others fail,
    # each named with its topic. Samples recorded without their key are row changes with
    # a null Kafka key (a table without a primary key, as far as cdcctl can tell): their
    # tables stop with the keyless refusal.
    replicated = [t for t in topic_of.values() if not t.endswith(".transaction")]
    by_name = Counter(table_name_for_topic(t) for t in replicated)
    failing = {t for t, s in status.items() if s["state"] == "FAILED"}
    keyless = {topic_of[n] for n in names if _keyless_row_change(n)}
    assert keyless and keyless <= failing, keyless - failing
    for name, count in by_name.items():
        topics = {t for t in replicated if table_name_for_topic(t) == name}
        # Every keyed topic but the name's holder fails (the holder may be a keyless one).
        collided, keyed = len(topics & failing - keyless), len(topics - keyless)
        assert collided in ((0,) if count == 1 else (max(keyed - 1, 0), keyed)), name
    for topic in failing:
        table = table_name_for_topic(topic)
        error = status[topic]["last_error"]
        collision = error.startswith(f"table name '{table}' is already used by topic")
        refused = error.startswith(f"table {table}: ")
        assert collision or (refused and topic in keyless), topic
        assert error in run.stderr  # said as it failed ...
        assert f"FAILED {table} (topic {topic})\n" in run.stderr  # ... and named at the end
    assert "without a record key" in run.stderr and "key_fields" in run.stderr

    # Undecodable samples on tables that did not fail are quarantined with coordinates.
    dead = tmp_path / "work" / "deadletter"
    quarantined = {json.loads(line)["topic"] for f in dead.glob("*.jsonl") for line in f.open()}
    expected_bad = {topic_of[n] for n in BAD_SAMPLES if topic_of[n] not in failing}
    assert expected_bad and expected_bad <= quarantined
    assert "Traceback" not in run.stderr


def _keyless_row_change(name: str) -> bool:
    """The sample is a row change (c, u, d, r) whose Kafka key is null."""
    batch = decode_sample(name).batch
    if batch is None:
        return False
    return any(row[KEY] is None and row[OP] in ("c", "u", "d", "r") for row in batch.to_pylist())
