"""MySQL schema changes end to end: a real broker, `cdcctl start` in a child process, a
schema change topic next to two table topics (and a transaction topic with a name
Debezium's default exclusion does not catch), replicas read back by hudi-rs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from tests.cases.mysql.make_cases import customer, ddl, row, sample
from tests.integration.replicas import read_replica, run_cli, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _wire(messages: list[dict]) -> list[tuple[str, bytes | None, bytes | None]]:
    def enc(v: object) -> bytes | None:
        return None if v is None else json.dumps(v).encode()

    return [(m["topic"], enc(m["key"]), enc(m["value"])) for m in messages]


def _status(config: Path) -> dict[str, dict]:
    shown = run_cli("status", "--config", str(config), "--json")
    assert shown.returncode == 0, shown.stderr
    return {t["table"]: t for t in json.loads(shown.stdout)["tables"]}


def _rename_rows(p: str) -> tuple[list[dict], dict, list[dict]]:
    """Rows of customers before a column rename (email -> mail), the rename, the rows
    after it (binlog positions 154-170, 500, 600-610)."""
    before = [
        row("c", customer(1, "a", "a@x"), 154, prefix=p),
        row("c", customer(2, "b", "b@x"), 160, prefix=p),
        row("u", customer(1, "a", "a2@x"), 170, prefix=p),
    ]
    rename = ddl(
        "ALTER TABLE customers RENAME COLUMN email TO mail",
        500,
        columns=["id", "first_name", "last_name", "mail"],
        renamed={"mail": "email"},
        prefix=p,
    )
    after = [
        row("u", {"id": 2, "first_name": "b", "last_name": "T", "mail": "b2@x"}, 600, prefix=p),
        row("c", {"id": 3, "first_name": "c", "last_name": "T", "mail": "c@x"}, 610, prefix=p),
    ]
    return before, rename, after


def _given(source, msgs: list, keep: list) -> list:
    """What a stand-in poll hands over of what the real one read: ``keep``; the rest is
    sought back (per partition, to its first message not kept) and read again later."""
    back: dict[tuple[str, int], int] = {}
    for m in msgs:
        if m not in keep:
            tp = (m.topic(), m.partition())
            back[tp] = min(back.get(tp, m.offset()), m.offset())
    if back:
        source.seek(back)
    return keep


def _config(broker, p: str, tmp_path: Path, policy: str):
    """A replicator's config for the topics under ``p`` with ``source.ddl = policy``."""
    from engine.config import config_from_dict

    return config_from_dict(
        {
            "source": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topics": f"^{re.escape(p)}",
                "ddl": policy,
            },
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 1},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )


def _ends_past(monkeypatch, partitions: set[tuple[str, int]], beyond: int) -> None:
    """Make ``KafkaSource.end_offsets`` report ``partitions`` ``beyond`` offsets past
    their end (what transaction markers leave: offsets no consumer is handed; Tansu has
    no transactions, and its own end lags a record batch behind)."""
    from engine.source import KafkaSource

    real = KafkaSource.end_offsets

    def end_offsets(self, asked, cached: bool = False) -> dict:
        ends = real(self, asked, cached)
        return {tp: o + beyond if tp in partitions else o for tp, o in ends.items()}

    monkeypatch.setattr(KafkaSource, "end_offsets", end_offsets)


def _replicate_and_check(broker, spark, p: str, tmp_path: Path, policy: str) -> None:
    """Run a replicator over the topics until caught up; the replica must be the fold of
    :func:`_rename_rows` in binlog order: under ``apply`` every row under the new name,
    under ``fail`` the rows before the rename, the table stopped at it."""
    from engine.replicator import Replicator

    replicator = Replicator(_config(broker, p, tmp_path, policy), spark=spark)
    replicator.run(until_caught_up=True)
    got = read_replica(tmp_path / "lake" / "inventory_customers")
    if policy == "apply":
        assert {k: r["mail"] for k, r in got.items()} == {"1": "a2@x", "2": "b2@x", "3": "c@x"}
        assert all("email" not in r for r in got.values())
    else:
        assert {k: r["email"] for k, r in got.items()} == {"1": "a2@x", "2": "b@x"}
        rt = replicator.tables.get(f"{p}.inventory.customers")
        assert rt is not None and rt.state.stopped


def test_schema_change_topic_with_cdcctl_start(broker, topic_prefix: str, tmp_path: Path) -> None:
    p = topic_prefix
    txmeta = f"{p}-txmeta"  # not *.transaction: recognised by its records
    first = [
        row("c", customer(1001, "Sally"), 154, prefix=p),
        row("c", customer(1002, "George"), 300, prefix=p),
        row("c", {"id": 1, "first_name": "o", "email": "e"}, 160, table="orders", prefix=p),
        ddl("TRUNCATE TABLE customers", 570, changes=False, prefix=p),
        ddl(
            "ALTER TABLE orders DROP COLUMN email",
            580,
            table="orders",
            columns=["id", "first_name"],
            prefix=p,
        ),
        row("c", customer(1003, "Ann"), 700, prefix=p),
        row("c", {"id": 2, "first_name": "p"}, 710, table="orders", prefix=p),
        {"topic": txmeta, "key": None, "value": sample("mysql-transaction-begin-docs")["value"]},
        {"topic": txmeta, "key": None, "value": sample("mysql-transaction-end-docs")["value"]},
    ]
    wire = _wire(first)
    broker.create_topics(sorted({t for t, _, _ in wire}))
    produce_messages(broker.bootstrap_servers, wire)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, f"^{re.escape(p)}", target
    )

    # Default policy: the truncate applies, the column drop stops `orders` alone.
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 3, run.stderr
    assert f"FAILED inventory_orders (topic {p}.inventory.orders)" in run.stderr
    assert "dropped email" in run.stderr and 'source.ddl = "apply"' in run.stderr
    assert sorted(p.name for p in target.iterdir()) == ["inventory_customers", "inventory_orders"]
    assert set(read_replica(target / "inventory_customers")) == {"1003"}
    assert read_replica(target / "inventory_orders") == {
        "1": {"id": 1, "first_name": "o", "email": "e"}
    }
    status = _status(config)
    assert sorted(status) == ["inventory_customers", "inventory_orders"]  # no DDL/tx table
    assert status["inventory_customers"]["ddl"] == 1
    assert status["inventory_customers"]["truncates"] == 1
    assert status["inventory_orders"]["state"] == "FAILED"
    assert "dropped email" in status["inventory_orders"]["last_error"]
    assert status["inventory_orders"]["ddl"] == 1
    text = run_cli("status", "--config", str(config))
    assert text.returncode == 0, text.stderr
    header = next(line for line in text.stdout.splitlines() if "truncates" in line)
    assert re.search(r"truncates\W+ddl\b", header), header
    log = (tmp_path / "work" / "cdcctl.log").read_text()
    assert f"topic '{p}' holds schema change records" in log
    assert f"topic '{txmeta}' holds transaction metadata records" in log

    # The operator applies drops for orders and restarts: the schema change topic is read
    # again, the drop applies to orders, the truncate is not applied twice.
    with config.open("a") as f:
        f.write('[tables.inventory_orders]\nddl = "apply"\n')
    more = [
        row("c", customer(1004, "Bob"), 800, prefix=p),
        row("c", {"id": 3, "first_name": "q"}, 810, table="orders", prefix=p),
    ]
    produce_messages(broker.bootstrap_servers, _wire(more), create_topics=False)
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    assert set(read_replica(target / "inventory_customers")) == {"1003", "1004"}
    assert read_replica(target / "inventory_orders") == {
        "1": {"id": 1, "first_name": "o"},
        "2": {"id": 2, "first_name": "p"},
        "3": {"id": 3, "first_name": "q"},
    }
    status = _status(config)
    assert status["inventory_customers"]["ddl"] == 1  # handled once, across both runs
    assert status["inventory_customers"]["truncates"] == 1
    assert status["inventory_orders"]["state"] == "STOPPED"
    assert status["inventory_orders"]["ddl"] == 2  # failed once, then applied


@pytest.mark.parametrize(
    ("policy", "delivered"),
    [("apply", 0), ("apply", 1), ("fail", 1)],
    ids=[
        "apply-rename-held",
        "apply-rename-read-later-one-held",
        "fail-rename-read-later-one-held",
    ],
)
def test_rows_read_before_their_schema_change_wait_for_it(
    broker, spark, topic_prefix: str, tmp_path: Path, monkeypatch, policy: str, delivered: int
) -> None:
    """Two topics have no order between them: the consumer may hand over a table's rows
    before the schema change its connector wrote ahead of them. Here it is made to (the
    one stand-in of the test, since the real consumer's order cannot be chosen): the real
    consumer's first poll that holds both is given with only the first ``delivered`` of
    the schema change topic's records, the rest sought back. The rows wait for the schema
    change topic (read again by the next poll), and so does a change read while they
    wait (it is decided with them), and the column rename lands between the rows before
    and after it, as a fold of the rows in binlog order says: under ``apply`` one column
    of both (without the wait the renamed column took the rows after the rename for an
    added one); under ``fail`` the rows before it, the table stopped at it."""
    from engine.source import KafkaSource

    p = topic_prefix
    before, rename, after = _rename_rows(p)
    # Another table's change after it (no such topic here: skipped), so that the rename
    # can be read while the schema change topic still has a record to read.
    other = ddl("TRUNCATE TABLE other", 550, table="other", changes=False, prefix=p)
    wire = _wire([*before, rename, *after])
    broker.create_topics(sorted({t for t, _, _ in wire}))
    produce_messages(broker.bootstrap_servers, wire)
    # A record batch of its own: Tansu's high watermark counts a batch as one offset.
    produce_messages(broker.bootstrap_servers, _wire([other]))
    real_poll = KafkaSource.poll
    withheld: list[int] = []

    def poll(self, max_events: int, max_seconds: float, until=None) -> list:
        msgs = real_poll(self, max_events, max_seconds, until)
        if withheld or not msgs:
            return msgs
        schema = sorted((m for m in msgs if m.topic() == p), key=lambda m: m.offset())
        rows = len(msgs) - len(schema)
        if len(schema) < 2 or rows < len(before) + len(after):
            return _given(self, msgs, [])  # a short poll: until one holds everything
        withheld.append(rows)
        return _given(self, msgs, [m for m in msgs if m.topic() != p] + schema[:delivered])

    monkeypatch.setattr(KafkaSource, "poll", poll)
    _replicate_and_check(broker, spark, p, tmp_path, policy)
    assert withheld == [len(before) + len(after)]  # the rows came before the rename once


@pytest.mark.parametrize(
    ("policy", "third"),
    [("apply", 2), ("apply", 4), ("fail", 2), ("fail", 4)],
    ids=["apply-before-only", "apply-across", "fail-before-only", "fail-across"],
)
def test_a_schema_change_waits_for_the_rows_read_before_it(
    broker, spark, topic_prefix: str, tmp_path: Path, monkeypatch, policy: str, third: int
) -> None:
    """Polls that split the two topics (as a short poll may): the table's rows first
    (they wait: the schema change topic is unread), then the schema change topic alone,
    then the rows again, only the first ``third`` of them, then the rest. The rename read
    in the second poll must wait for the rows read in the first (decided without them,
    it found no replica and no rows: the rows' old column was lost); rows of the third
    poll from after it (``third`` = 4 holds one) must follow it, not come before it
    (under ``fail`` such a row would be committed past the stop). Checked against a
    fold of the rows in binlog order. The one stand-in: the poll's split, made by
    seeking the real consumer back (its order cannot be chosen)."""
    from confluent_kafka import Message

    from engine.source import KafkaSource

    p = topic_prefix
    rows_topic = f"{p}.inventory.customers"
    before, rename, after = _rename_rows(p)
    wire = _wire([*before, rename, *after])
    broker.create_topics(sorted({t for t, _, _ in wire}))
    produce_messages(broker.bootstrap_servers, wire)
    # Each step: the topic a poll may hand over, and at most how many of its records.
    script = [(rows_topic, 5), (p, 1), (rows_topic, third)]
    steps: list[int] = []
    real_poll = KafkaSource.poll

    def poll(self, max_events: int, max_seconds: float, until=None) -> list:
        msgs = real_poll(self, max_events, max_seconds, until)
        if len(steps) == len(script) or not msgs:
            return msgs
        topic, most = script[len(steps)]
        mine = sorted((m for m in msgs if m.topic() == topic), key=Message.offset)
        # Nothing until the step can be given whole: everything is read again.
        keep = mine[:most] if len(mine) >= most else []
        if keep:
            steps.append(len(keep))
        return _given(self, msgs, keep)

    monkeypatch.setattr(KafkaSource, "poll", poll)
    _replicate_and_check(broker, spark, p, tmp_path, policy)
    assert steps == [5, 1, third]  # the rows, the schema change topic, some rows again


def test_a_partition_short_of_its_end_holds_a_schema_change_only_a_while(
    broker, spark, topic_prefix: str, tmp_path: Path, monkeypatch
) -> None:
    """A table topic of two partitions whose end is one offset past its last record in
    one of them (what a transaction marker, or a compacted or expired record, leaves: an
    offset no consumer is handed). A rename read with the table's rows waits for the rows
    written before it, up to each partition's end: the short partition never gets there,
    and without a limit the rename waited forever while the other partition's rows after
    it were cut and read again every turn (the run never caught up). Once that read
    position has not moved for ``ROWS_WAIT_SECONDS`` the rename goes on: the replica is the
    fold. The stand-ins: the end offset reported one further (Tansu has no transactions),
    and a short wait."""
    from confluent_kafka import Producer

    from engine.replicator import Replicator, ddl_router

    p = topic_prefix
    before, rename, after = _rename_rows(p)
    rows_topic = f"{p}.inventory.customers"
    broker.create_topics([rows_topic], partitions=2)
    wire = _wire([*before, rename, *after])
    broker.create_topics(sorted({t for t, _, _ in wire}))
    # Every row in partition 0: partition 1 holds nothing but the offset past its end.
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for topic, key, value in wire:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0
    _ends_past(monkeypatch, {(rows_topic, 1)}, 1)
    monkeypatch.setattr(ddl_router, "ROWS_WAIT_SECONDS", 0.5)
    replicator = Replicator(_config(broker, p, tmp_path, "apply"), spark=spark)
    replicator.run(until_caught_up=True, max_batches=200)
    assert replicator.committer.batches < 200  # caught up, not stopped by the bound
    got = read_replica(tmp_path / "lake" / "inventory_customers")
    assert {k: r["mail"] for k, r in got.items()} == {"1": "a2@x", "2": "b2@x", "3": "c@x"}


def test_a_waiting_schema_change_goes_on_while_nothing_more_arrives(
    broker, spark, topic_prefix: str, tmp_path: Path, monkeypatch
) -> None:
    """A live run (not until caught up) where the rename is the last record of all and
    its table's end is past its last row (transaction markers' offsets): the rename
    waits for rows that never come, the wait runs out, and it must be carried out on an
    idle turn (before, a waiting change was looked at again only when a batch was read:
    here never, the replica kept the old column). The stand-ins: the end offset reported
    further (Tansu has no transactions), and a short wait."""
    import threading
    import time

    from engine.replicator import Replicator, ddl_router

    p = topic_prefix
    before, rename, _ = _rename_rows(p)
    rows_topic = f"{p}.inventory.customers"
    wire = _wire([*before, rename])
    broker.create_topics(sorted({t for t, _, _ in wire}))
    produce_messages(broker.bootstrap_servers, wire)
    _ends_past(monkeypatch, {(rows_topic, 0)}, 10)
    monkeypatch.setattr(ddl_router, "ROWS_WAIT_SECONDS", 2.0)
    replicator = Replicator(_config(broker, p, tmp_path, "apply"), spark=spark)
    run = threading.Thread(target=replicator.run, daemon=True)
    run.start()
    table = tmp_path / "lake" / "inventory_customers"
    got: dict = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and run.is_alive():
        # The table is readable once hoodie.properties is there: creation makes the
        # .hoodie folders first and writes the properties last.
        if (table / ".hoodie" / "hoodie.properties").is_file():
            got = read_replica(table)
            if got and all("mail" in r for r in got.values()):
                break
        time.sleep(0.2)
    replicator.request_stop()
    run.join(60)
    assert not run.is_alive()
    assert {k: r.get("mail") for k, r in got.items()} == {"1": "a2@x", "2": "b@x"}
