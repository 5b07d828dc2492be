"""Debezium's signal table, with the real connector: PostgreSQL -> Debezium 3.6.1 (Kafka
Connect standalone, one connector for the module: a signal table and two tables) -> real
Apache Kafka -> the CLI in a child process.

**Resync** (``items``): the initial snapshot and early changes are deleted from the
table's topic (Kafka's DeleteRecords, which moves the log start as retention does);
``cdcctl resync`` refuses and removes nothing. A blocking snapshot, asked for through the
signal table as the refusal's hint says, writes the table into the topic again; resync
then goes on, and the rebuilt replica equals the database (``cdcctl validate``),
including the rows that only the deleted snapshot held.

**Repair** (``stock``, while changes flow): the replica is damaged the way retention
damages one: while its table is paused, three inserts, three updates and three deletes
are made in the source and then deleted from the topic before they are read; the
replicator accepts the gap (``replicator.accept_offset_gaps``), so the replica lacks the
inserts, holds the old values of the updates and the deleted rows. ``repair --dry-run``
shows the plan and changes nothing; ``repair`` asks Debezium (its signal table found
through Kafka Connect's REST API) for an incremental snapshot of exactly the six keys that
differ and has the running replicator delete the three the source lacks, while another
connection keeps inserting, updating and deleting other rows. The replica then equals
the database, the topic holds incremental snapshot reads of the six keys only, and a key
deleted by the repair and inserted again afterwards stays. With no replicator running, a
whole-table repair (``--whole``) files its deletes and has Debezium write every row into
the topic again; the next start applies both.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

import engine
from engine.decode.positions import SNAPSHOT_END_MARKS
from tests.integration.replicas import read_replica, run_cli, validate_tables, write_config
from tests.peers.connect import ConnectStandalone, consume_all, payload, topic_names
from tests.peers.kafka import KafkaBroker
from tests.peers.test_debezium_postgres import connector_props
from tests.waiting import wait_until

#: One worker runs the module's connector (xdist_group), not both.
pytestmark = [pytest.mark.peers, pytest.mark.xdist_group("debezium_signals")]

SCHEMA = """
CREATE TABLE public.items (id integer PRIMARY KEY, name text NOT NULL);
CREATE TABLE public.stock (id integer PRIMARY KEY, name text NOT NULL, n integer);
CREATE TABLE public.dbz_signal (id varchar(64) PRIMARY KEY, type varchar(32), data text);
INSERT INTO public.items SELECT g, 'initial ' || g FROM generate_series(1, 40) g;
INSERT INTO public.stock SELECT g, 'initial ' || g, g FROM generate_series(1, 60) g;
"""


@pytest.fixture(scope="module")
def signals(scratch_postgres, kafka_broker: KafkaBroker, tmp_path_factory) -> Iterator[dict]:
    """The database and its connector, its initial snapshot in Kafka."""
    dbname = f"dbz_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    conn = scratch_postgres.connect(dbname)
    conn.execute(SCHEMA)
    tag = uuid.uuid4().hex[:6]
    prefix = f"dbzsg{tag}"
    props = connector_props(
        scratch_postgres, dbname, prefix, f"sg_{tag}",
        **{
            "table.include.list": "public.items,public.stock,public.dbz_signal",
            "signal.data.collection": "public.dbz_signal",
            "provide.transaction.metadata": "false",
        },
    )  # fmt: skip
    connect = ConnectStandalone(tmp_path_factory.mktemp("connect"), kafka_broker, {"sg": props})
    connect.start()
    try:
        for table, rows in (("items", 40), ("stock", 60)):
            topic = f"{prefix}.public.{table}"
            wait_until(lambda t=topic, n=rows: len(_all(kafka_broker, t)) == n,
                       f"the initial snapshot of {table}", 180, interval=1)  # fmt: skip
        yield {
            "conn": conn,
            "dbname": dbname,
            "prefix": prefix,
            "connect": connect,
            "dsn": f"postgresql://postgres@127.0.0.1:{scratch_postgres.port}/{dbname}",
            "pg": scratch_postgres,
        }
    finally:
        connect.stop()
        conn.close()


def _watermarks(broker: KafkaBroker, topic: str) -> tuple[int, int]:
    """The topic's log start and end offsets (partition 0)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "marks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


def _all(broker: KafkaBroker, topic: str) -> list:
    """Every record still in the topic: (key, value)."""
    if topic not in topic_names(broker):
        return []
    low, high = _watermarks(broker, topic)
    return consume_all(broker, [topic])[topic] if high > low else []


def _records(broker: KafkaBroker, topic: str) -> list[dict]:
    """The payloads of the records still in the topic ({} for a tombstone)."""
    return [payload(v) or {} for _, v in _all(broker, topic)]


def _incremental_reads(broker: KafkaBroker, topic: str) -> list[int]:
    """The keys of the incremental-snapshot reads still in the topic, in order."""
    return [
        r["after"]["id"]
        for r in _records(broker, topic)
        if r.get("op") == "r" and (r.get("source") or {}).get("snapshot") == "incremental"
    ]


def _marks(broker: KafkaBroker, topic: str) -> list[Any]:
    """``source.snapshot`` of every record now in the topic, in order."""
    return [r.get("source", {}).get("snapshot") for r in _records(broker, topic)]


def test_a_blocking_snapshot_is_the_way_out_of_a_refused_resync(
    signals: dict, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    conn, dsn, tag = signals["conn"], signals["dsn"], uuid.uuid4().hex[:6]
    topic = f"{signals['prefix']}.public.items"
    conn.execute("UPDATE public.items SET name = 'changed ' || id WHERE id <= 5")
    conn.execute("INSERT INTO public.items SELECT g, 'late ' || g FROM generate_series(41, 45) g")
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
    # The last snapshot record of items (another table's follows), then the stream.
    assert marks[19] in SNAPSHOT_END_MARKS and marks[20:30] == ["false"] * 10, marks
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


class Flow:
    """Changes to rows the damage did not touch, made on their own connection until
    stopped: an insert, an update and (every third step) a delete per step."""

    def __init__(self, pg, dbname: str) -> None:
        self.conn = pg.connect(dbname)
        self.steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            i = self.steps
            self.conn.execute("INSERT INTO public.stock VALUES (%s, 'flow', %s)", (1000 + i, i))
            self.conn.execute("UPDATE public.stock SET n = n + 1 WHERE id = %s", (30 + i % 10,))
            if i % 3 == 2:
                self.conn.execute("DELETE FROM public.stock WHERE id = %s", (1000 + i - 1,))
            self.steps += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.conn.close()


def test_repair_fixes_a_damaged_replica_while_changes_flow(
    signals: dict, kafka_broker: KafkaBroker, tmp_path: Path, replicator
) -> None:
    conn, dsn = signals["conn"], signals["dsn"]
    topic = f"{signals['prefix']}.public.stock"
    table = "public_stock"
    flow: Flow | None = None
    try:
        config = write_config(
            tmp_path / "cdcctl.toml",
            kafka_broker.bootstrap_servers,
            f"^{re.escape(topic)}$",
            tmp_path / "lake",
            source={
                "connect_url": f"http://127.0.0.1:{signals['connect'].port}",
                "database_dsn": dsn,
            },
            max_batch_seconds=0.3,
            accept_offset_gaps=[table],
        )
        work = tmp_path / "work"

        def row() -> engine.TableRecord | None:
            found = engine.read_status(work)
            return None if found is None else found.table(table)

        proc = replicator(config)
        wait_until(lambda: (r := row()) is not None and r.counters.rows == 60, "the snapshot",
                   180, child=proc)  # fmt: skip
        paused = run_cli("pause", table, "--config", str(config))
        assert paused.returncode == 0, paused.stderr

        # The damage: nine changes lost to "retention" before the replicator read them.
        conn.execute(
            "INSERT INTO public.stock SELECT g, 'lost ' || g, g FROM generate_series(61, 63) g"
        )
        conn.execute("UPDATE public.stock SET name = 'lost update' WHERE id <= 3")
        conn.execute("DELETE FROM public.stock WHERE id BETWEEN 10 AND 12")
        # (each delete is followed by a tombstone)
        wait_until(lambda: len(_records(kafka_broker, topic)) >= 60 + 9 + 3, "the lost changes",
                   120, interval=1)  # fmt: skip
        admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
        for future in admin.delete_records(
            [TopicPartition(topic, 0, _watermarks(kafka_broker, topic)[1])]
        ).values():
            future.result(60)
        resumed = run_cli("resume", table, "--config", str(config))
        assert resumed.returncode == 0, resumed.stderr

        def caught_up(rows: int | None = None) -> bool:
            r = row()
            return (
                r is not None
                and r.lag_messages == 0
                and r.state.value == "REPLICATING"
                and (rows is None or r.counters.rows == rows)
            )

        wait_until(caught_up, "the gap accepted", 120, child=proc)

        # Refused, with what to do: a pattern (one table at a time).
        pattern = run_cli("repair", "public_*", "--config", str(config), "--dry-run")
        assert pattern.returncode == 1 and "not a pattern" in pattern.stderr, pattern.stderr

        # The plan, changing nothing: the signal table found through Kafka Connect.
        signalled = conn.execute("SELECT count(*) FROM public.dbz_signal").fetchone()[0]
        dry = run_cli("repair", table, "--config", str(config), "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        plan = json.loads(dry.stdout)["plan"]
        before = plan["before"]  # validate's report
        assert before["status"] == "different" and before["extra_keys"] == ["10", "11", "12"]
        assert (plan["missing"], plan["differing"], plan["extra"]) == (3, 3, 3), plan
        assert plan["filter"] == '"id" BETWEEN 1 AND 3 OR "id" BETWEEN 61 AND 63', plan
        assert plan["signal_table"] == "public.dbz_signal", plan
        assert plan["signal"]["type"] == "incremental", plan
        assert conn.execute("SELECT count(*) FROM public.dbz_signal").fetchone()[0] == signalled
        assert not (work / "repair").exists()

        flow = Flow(signals["pg"], signals["dbname"])
        flow.start()
        done = run_cli("repair", table, "--config", str(config), "--json", "--wait", "150")
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        assert result["equal"] is True, result
        plan = result["plan"]  # keys only in flight for the flow are left out
        assert plan["filter"] == '"id" BETWEEN 1 AND 3 OR "id" BETWEEN 61 AND 63', plan
        assert (result["fixed"], result["deleted"]) == (6, 3), result
        assert result["snapshot_rows"] >= 6, result  # the six, and any key read twice
        assert result["changes"] > 0, result  # the flow went on meanwhile
        assert result["deletes"] == "repair: 3 row(s) deleted", result
        sent = dict(conn.execute("SELECT id, type FROM public.dbz_signal").fetchall())
        assert sent[result["signal_id"]] == "execute-snapshot", sent  # and the windows'

        # A key the repair deleted, inserted again after it: stays.
        conn.execute("INSERT INTO public.stock VALUES (11, 'back again', 11)")
        flow.stop()
        flow = None
        final = conn.execute("SELECT count(*) FROM public.stock").fetchone()[0]
        wait_until(lambda: caught_up(final), "the flow applied", 120, child=proc)
        report = validate_tables(config, dsn)[table]
        assert report["status"] == "equal" and report["source_rows"] == final, report

        # explain, from the connector's own events: key 11's delete by the repair and its
        # insert after it; key 2 written by the incremental snapshot read.
        told = run_cli("explain", table, "11", "2", "--config", str(config), "--json")
        assert told.returncode == 0, told.stderr
        k11, k2 = json.loads(told.stdout)["keys"]
        commits = [t for t in k11["timeline"] if t["kind"] == "commit"]
        # The delete's position comes from its tombstone; once a clean swept the sidecar
        # of its instant and the insert after it dropped the tombstone, it is unknown (a
        # plain delete without a position): seen in one CI run of four.
        deleted, inserted = commits[-2], commits[-1]
        assert inserted["change"] == "insert", commits
        if deleted["change"] == "repair-delete":
            assert deleted["position_text"].endswith(", repair"), commits
        else:
            assert deleted["change"] == "delete" and deleted["position"] is None, commits
        assert commits[-1]["position_text"].startswith("LSN 0/"), commits
        wrote = [t for t in k11["timeline"] if t["kind"] == "event" and t["wrote"]]
        assert wrote[-1]["op"] == "c" and wrote[-1]["offset"] == commits[-1]["offset"], wrote
        last = [t for t in k2["timeline"] if t["kind"] == "commit"][-1]
        assert last["op"] == "r" and last["offset"] is not None, k2["timeline"]

        # Exactly the six keys were read again, as an incremental snapshot.
        reads = _incremental_reads(kafka_broker, topic)
        assert sorted(reads) == [1, 2, 3, 61, 62, 63], reads
        status = engine.read_status(work)
        assert status is not None
        messages = [e.message for e in status.events if e.kind == "repair"]
        assert len(messages) == 1 and messages[0].startswith("deleted 3 row(s)"), messages
        assert run_cli("stop", "--config", str(config)).returncode == 0
        assert proc.wait() == 0, proc.describe()

        # With no replicator running: a delete lost to retention again. A whole-table
        # repair files the row's delete and asks for every row again; the next start
        # applies both.
        conn.execute("DELETE FROM public.stock WHERE id = 50")
        wait_until(lambda: _records(kafka_broker, topic)[-1] == {}, "the delete", 60, interval=1)
        for future in admin.delete_records(
            [TopicPartition(topic, 0, _watermarks(kafka_broker, topic)[1])]
        ).values():
            future.result(60)
        offline = run_cli("repair", table, "--config", str(config), "--whole", "--json")
        assert offline.returncode == 0, offline.stdout + offline.stderr
        result = json.loads(offline.stdout)
        plan = result["plan"]
        assert plan["extra"] == 1 and plan["filter"] is None, plan
        assert plan["signal"] == {"data-collections": ["public.stock"], "type": "incremental"}
        assert result["deletes"].startswith("waiting: no replicator runs"), result
        assert result["equal"] is None, result
        rows = conn.execute("SELECT count(*) FROM public.stock").fetchone()[0]
        wait_until(lambda: len(_incremental_reads(kafka_broker, topic)) == rows,
                   "the whole table read again", 90, interval=1)  # fmt: skip
        done = run_cli("start", "--config", str(config), "--until-caught-up")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "public_stock: repair: deleted 1 row(s)" in done.stderr, done.stderr[-3000:]
        assert not any((work / "repair" / table).iterdir())
        assert validate_tables(config, dsn)[table]["status"] == "equal"
    finally:
        if flow is not None:
            flow.stop()
