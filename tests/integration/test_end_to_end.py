"""The spine end to end: real broker, real `cdcctl start` processes, real Spark, hudi-rs reads.

Expected tables come from tests/oracle.py, a plain-Python fold of the same messages
written independently of the engine.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import applied_counts, assert_replicas_match, run_cli, write_config
from tests.oracle import fold

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_100k_events_three_tables_in_two_runs(broker, topic_prefix: str, tmp_path: Path) -> None:
    messages = list(InventoryWorkload(seed=11, prefix=topic_prefix, schemas=True).events(110_000))
    topics = sorted({t for t, _, _ in messages})
    assert len(topics) == 3
    ops = {}
    for _, _, value in messages:
        if value is not None:
            op = re.search(rb'"op":"(\w)"', value)
            ops[op.group(1)] = ops.get(op.group(1), 0) + 1
    assert ops.get(b"c", 0) and ops.get(b"u", 0) and ops.get(b"d", 0) and ops.get(b"r", 0)
    broker.create_topics(topics)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_events=25_000,
    )

    half = len(messages) // 2
    produce_messages(broker.bootstrap_servers, messages[:half])
    first = run_cli("start", "--config", str(config), "--until-caught-up")
    assert first.returncode == 0, first.stderr
    assert_replicas_match(target, fold(messages[:half]))
    # The JVM's own output goes to the work directory's log, not the terminal.
    spark_log = target.parent / "work" / "spark.log"
    assert "incubator" in spark_log.read_text() and "incubator" not in first.stderr

    produce_messages(broker.bootstrap_servers, messages[half:])
    second = run_cli("start", "--config", str(config), "--until-caught-up")
    assert second.returncode == 0, second.stderr
    counts = assert_replicas_match(target, fold(messages))
    assert sum(counts.values()) > 10_000

    per_topic = {t: sum(1 for m in messages if m[0] == t) for t in topics}
    for topic in topics:
        table = HudiTable.open(target / table_name_for_topic(topic))
        assert len(table.completed_instants()) >= 2
        assert table.checkpoint() == f"{topic},0:{per_topic[topic]}"
        # Each commit records what it applied; over both runs they add up to the table.
        applied = applied_counts(target / table_name_for_topic(topic))
        live = applied["inserts"] - applied["deletes"] - applied["truncated"]
        assert live == counts[topic], (topic, live, counts)


def test_spark_that_cannot_start_is_one_clear_error(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    """A JVM that refuses to start (here: a heap size it cannot parse) is reported in
    one line with the log that holds its output, not as a py4j traceback."""
    messages = list(InventoryWorkload(seed=3, prefix=topic_prefix).events(200))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, f"^{re.escape(topic_prefix)}\\.", target
    )
    with config.open("a") as f:
        f.write('[spark]\ndriver_memory = "12zz"\n')
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=120)
    assert run.returncode == 3, run.stderr
    spark_log = target.parent / "work" / "spark.log"
    assert "error: Spark's JVM did not start" in run.stderr
    assert str(spark_log) in run.stderr and "Traceback" not in run.stderr
    assert "12zz" in spark_log.read_text()
