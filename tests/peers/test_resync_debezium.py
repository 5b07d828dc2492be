"""The way out of a refused resync, with the real connector: PostgreSQL -> Debezium 3.6.1
(Kafka Connect standalone) -> real Apache Kafka -> the CLI in a child process.

The initial snapshot and early changes are deleted from the table's topic (Kafka's
DeleteRecords, which moves the log start as retention does); ``cdcctl resync`` refuses
and removes nothing. A blocking snapshot, asked for through Debezium's signal table as the
refusal's hint says, writes the table into the topic again; resync then goes on, and the
rebuilt replica equals the database (``cdcctl validate``), including the rows that only
the deleted snapshot held.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.replicas import read_replica, run_cli, validate_tables, write_config
from tests.peers.connect import ConnectStandalone, consume_all, payload, topic_names
from tests.peers.kafka import KafkaBroker
from tests.peers.test_debezium_postgres import connector_props
from tests.waiting import wait_until

pytestmark = [pytest.mark.peers]

SCHEMA = """
CREATE TABLE public.items (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE public.dbz_signal (id varchar(64) PRIMARY KEY, type varchar(32), data text);
INSERT INTO public.items SELECT g, 'initial ' || g FROM generate_series(1, 40) g;
"""


def _marks(broker: KafkaBroker, topic: str) -> list[str | None]:
    """``source.snapshot`` of every record now in the topic, in order."""
    if topic not in topic_names(broker):
        return []
    records = consume_all(broker, [topic])[topic]
    return [(payload(v) or {}).get("source", {}).get("snapshot") for _, v in records]


def test_a_blocking_snapshot_is_the_way_out_of_a_refused_resync(
    scratch_postgres, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    dbname = f"dbz_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    conn = scratch_postgres.connect(dbname)
    conn.execute(SCHEMA)
    tag = uuid.uuid4().hex[:6]
    prefix = f"dbzrs{tag}"
    props = connector_props(
        scratch_postgres, dbname, prefix, f"rs_{tag}",
        **{
            "table.include.list": "public.items,public.dbz_signal",
            "signal.data.collection": "public.dbz_signal",
            "provide.transaction.metadata": "false",
        },
    )  # fmt: skip
    topic = f"{prefix}.public.items"
    connect = ConnectStandalone(tmp_path / "connect", kafka_broker, {"rs": props})
    connect.start()
    try:
        wait_until(
            lambda: len(_marks(kafka_broker, topic)) == 40, "the initial snapshot", 180, interval=1
        )
        conn.execute("UPDATE public.items SET name = 'changed ' || id WHERE id <= 5")
        conn.execute(
            "INSERT INTO public.items SELECT g, 'late ' || g FROM generate_series(41, 45) g"
        )
        wait_until(
            lambda: len(_marks(kafka_broker, topic)) == 50, "the streamed changes", 180, interval=1
        )

        lake = tmp_path / "lake"
        config = write_config(
            tmp_path / "cdcctl.toml",
            kafka_broker.bootstrap_servers,
            f"^{re.escape(topic)}$",
            lake,
            max_batch_seconds=0.3,
        )
        table = "public_items"
        done = run_cli("start", "--config", str(config), "--until-caught-up")
        assert done.returncode == 0, done.stderr[-3000:]
        dsn = f"postgresql://postgres@127.0.0.1:{scratch_postgres.port}/{dbname}"
        assert validate_tables(config, dsn)[table]["status"] == "equal"
        before = read_replica(lake / table)

        # The snapshot's first 20 rows are deleted from the topic.
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
            future.result(60)
        refused = run_cli("resync", "--config", str(config), table)
        assert refused.returncode == 1, refused.stderr
        assert f"{topic}[0] starts at offset 20" in refused.stderr, refused.stderr
        assert "execute-snapshot with type blocking" in refused.stderr, refused.stderr
        assert read_replica(lake / table) == before

        # What the hint says: a blocking snapshot through the signal table.
        signal = {"data-collections": ["public.items"], "type": "blocking"}
        conn.execute(
            "INSERT INTO public.dbz_signal VALUES (%s, 'execute-snapshot', %s)",
            (f"blocking-{tag}", json.dumps(signal)),
        )
        wait_until(
            lambda: len(_marks(kafka_broker, topic)) == 30 + 45,
            "the blocking snapshot",
            180,
            interval=1,
        )
        marks = _marks(kafka_broker, topic)
        assert marks[19:30] == ["last"] + ["false"] * 10, marks  # the remaining stream
        # Debezium 3.6.1 marks the blocking snapshot as an initial one: first ... last.
        assert marks[30:] == ["first"] + ["true"] * 43 + ["last"], marks[30:]

        resync = run_cli("resync", "--config", str(config), table)
        assert resync.returncode == 0, resync.stderr
        assert f"{topic} was trimmed, but holds a complete snapshot ([0] from offset 50)" in (
            resync.stderr
        ), resync.stderr
        done = run_cli("start", "--config", str(config), "--until-caught-up")
        assert done.returncode == 0, done.stderr[-3000:]
        report = validate_tables(config, dsn)[table]
        assert report["status"] == "equal" and report["source_rows"] == 45, report
        assert read_replica(lake / table) == before
    finally:
        connect.stop()
        conn.close()
