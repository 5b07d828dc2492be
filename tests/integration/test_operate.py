"""`cdcctl resync`, `delete`, the Prometheus endpoint and the log file, on real
`cdcctl start` processes over the embedded broker.

A live resync must rebuild one table from its whole topic while the others keep
committing, a FAILED table included; an offline one must leave the next start to do
it; `delete` must remove the state (and with `--purge` the replicator's own tables) and
nothing else; the metrics scraped over HTTP must equal the events sent; the log file
must hold the batch lines, rotate as configured and never hold the SASL password.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import engine
from engine.hudi.table import HudiTable
from engine.lock import LOCK_NAME, WriterLock
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from engine.state import StateStore, store_path
from tests import builders
from tests.engine.test_decode_debezium import sample_record
from tests.integration.replicas import (
    assert_replicas_match,
    read_replica,
    run_cli,
    write_config,
)
from tests.integration.test_offset_gaps import COLUMNS as GAP_COLUMNS
from tests.integration.test_offset_gaps import _recreate as recreate_topic
from tests.integration.test_offset_gaps import _rows as gap_rows
from tests.integration.test_status import Message, _ops
from tests.oracle import fold
from tests.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PASSWORD_ENV = "CDCCTL_TEST_SASL_PASSWORD"
#: Metric op label of each status counter.
METRIC_OPS = {
    "snapshot_rows": "snapshot",
    "inserts": "insert",
    "updates": "update",
    "deletes": "delete",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, broker, prefix: str, **replicator) -> tuple[Path, Path, Path]:
    """A config with a SASL password taken from the environment (never to be written)."""
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(prefix)}\\.",
        target,
        source={"sasl_password_env": PASSWORD_ENV},
        **replicator,
    )
    return config, target, tmp_path / "work"


def _committed_to(target: Path, sent: list[Message], topics: list[str]) -> bool:
    for t in topics:
        path = target / table_name_for_topic(t)
        end = sum(1 for m in sent if m[0] == t)
        if not HudiTable.exists(path) or HudiTable.open(path).checkpoint() != f"{t},0:{end}":
            return False
    return True


def _instants(target: Path, topic: str) -> list[str]:
    path = target / table_name_for_topic(topic)
    return HudiTable.open(path).completed_instants() if HudiTable.exists(path) else []


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _applied(metrics: dict, table: str) -> dict[str, int]:
    return {
        counter: int(metrics[("cdcctl_events_applied_total", (("op", op), ("table", table)))])
        for counter, op in METRIC_OPS.items()
    }


def _no_secret(work: Path, secret: str) -> None:
    """The password is nowhere in the work folder: log files, state store, WAL, Spark log."""
    files = [p for p in work.rglob("*") if p.is_file()]
    assert any(p.name.startswith("cdcctl.log") for p in files)
    assert any(p.name == "state.db" for p in files)
    for path in files:
        assert secret.encode() not in path.read_bytes(), f"the password is in {path}"


def test_resync_a_live_table_while_the_others_go_on(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    workload = InventoryWorkload(seed=31, prefix=topic_prefix, schemas=True)
    messages: list[Message] = list(workload.events(3_000))
    topics = sorted({t for t, _, _ in messages})
    orders = next(t for t in topics if t.endswith(".orders"))
    others = [t for t in topics if t != orders]
    name = table_name_for_topic(orders)
    broker.create_topics(topics)
    port = _free_port()
    config, target, work = _config(
        tmp_path,
        broker,
        topic_prefix,
        max_batch_events=300,
        max_batch_seconds=0.3,
        metrics_port=port,
        log_format="json",
    )
    secret = f"s3cret-{uuid.uuid4().hex}"
    env = {PASSWORD_ENV: secret}
    produce_messages(broker.bootstrap_servers, messages)
    proc = replicator.cli("-v", "start", "--config", str(config), env=env)
    wait_until(lambda: _committed_to(target, messages, topics), "the first events", 180, child=proc)
    before = {t: _instants(target, t) for t in topics}

    # Events keep flowing to every table while the resync runs: until the rebuilt table
    # has made three commits and another table has committed between two of them (a
    # fixed amount of events raced a slow machine: the feed could end before the rebuild
    # began; stopping at three commits raced the consumer: the rebuilt topic's backlog,
    # read again from its start, fills the batches ahead of the others' new events).
    more: list[Message] = []
    rebuilding = threading.Event()

    def feed() -> None:
        while not rebuilding.is_set() and len(more) < 30_000:
            chunk = list(workload.stream(300))
            produce_messages(broker.bootstrap_servers, chunk)
            more.extend(chunk)
            time.sleep(0.4)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        time.sleep(0.5)  # the feed has begun
        asked = time.time()
        resynced = run_cli("resync", name, "--config", str(config))
        assert resynced.returncode == 0, resynced.stderr
        assert f"resync {name}: resyncing {name}: replica dropped" in resynced.stdout
        wait_until(
            lambda: len(set(_instants(target, orders)) - set(before[orders])) >= 3,
            "three commits of the rebuilt table",
            180,
            child=proc,
            retry_on=(engine.CdcError, OSError),  # a table folder being made anew
        )

        def others_went_on() -> bool:
            rebuilt = [i for i in _instants(target, orders) if i not in before[orders]]
            return len(rebuilt) > 1 and any(
                rebuilt[0] <= i < rebuilt[-1]
                for t in others
                for i in _instants(target, t)[len(before[t]) :]
            )

        wait_until(
            others_went_on,
            "another table's commit between two of the rebuilt table's",
            180,
            child=proc,
            retry_on=(engine.CdcError, OSError),
        )
    finally:
        rebuilding.set()
        feeder.join()
    sent = messages + more
    wait_until(lambda: _committed_to(target, sent, topics), "every table", 180, child=proc)

    # The resynced table was rebuilt: none of its old instants is left.
    rebuilt = _instants(target, orders)
    assert rebuilt and not set(rebuilt) & set(before[orders])
    assert min(rebuilt) > time.strftime("%Y%m%d%H%M%S", time.gmtime(asked - 1))
    # The others went on: every old instant is still there, with new ones after
    # the resync, some of them while the resynced table was being rebuilt.
    during = []
    for t in others:
        now = _instants(target, t)
        assert now[: len(before[t])] == before[t]
        during += [i for i in now[len(before[t]) :] if rebuilt[0] <= i <= rebuilt[-1]]
    assert during, "no other table committed while the resynced one was rebuilt"
    assert_replicas_match(target, fold(sent))

    # Its counters started over and counted the whole topic once; the others' too.
    expected = _ops(sent)

    def stored_rows() -> dict[str, engine.TableRecord]:
        status = engine.read_status(work)
        assert status is not None
        return {t.table: t for t in status.tables}

    def stored_equal() -> bool:  # the store is written at most every 0.5 s
        rows = stored_rows()
        return all(
            table in rows and {c: rows[table].figure(c) for c in counts} == counts
            for table, counts in expected.items()
        )

    wait_until(stored_equal, "the stored counters", 20, child=proc)
    rows = stored_rows()
    for table, counts in expected.items():
        assert {c: rows[table].figure(c) for c in counts} == counts, table
        assert rows[table].state == "REPLICATING"
    store = StateStore(store_path(work), create=False)
    try:
        resyncs = [e for e in store.events(1000) if e["kind"] == "resync"]
    finally:
        store.close()
    assert [e["tbl"] for e in resyncs] == [name]

    # The Prometheus endpoint serves the same counters.
    def scraped_equal() -> bool:
        metrics = _scrape(port)
        # The lag gauge of a table appears at the first batch that reads its offsets
        # after the resync (it may trail the counters by a poll).
        return all(
            _applied(metrics, table) == counts
            and ("cdcctl_lag_messages", (("table", table),)) in metrics
            for table, counts in expected.items()
        )

    wait_until(scraped_equal, "the metrics", 20, child=proc)
    metrics = _scrape(port)
    for table in expected:
        labels = (("table", table),)
        assert metrics[("cdcctl_commits_total", labels)] == len(
            HudiTable.open(target / table).completed_instants()
        )
        assert metrics[("cdcctl_late_events_total", labels)] == 0
        assert metrics[("cdcctl_rows", labels)] == len(read_replica(target / table))
        assert metrics[("cdcctl_bad_messages_total", labels)] == 0
        assert metrics[("cdcctl_events_applied_total", (("op", "truncate"), *labels))] == 0
        assert metrics[("cdcctl_table_state", (("state", "REPLICATING"), *labels))] == 1
        assert metrics[("cdcctl_table_state", (("state", "PAUSED"), *labels))] == 0
        assert metrics[("cdcctl_last_commit_timestamp_seconds", labels)] > asked
        assert ("cdcctl_lag_messages", labels) in metrics
        assert ("cdcctl_latency_seconds", (("quantile", "0.99"), *labels)) in metrics
    assert metrics[("cdcctl_replicator_state", (("state", "running"),))] == 1

    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert proc.wait() == 0, proc.describe()
    with pytest.raises(OSError):  # the endpoint ends with the replicator
        _scrape(port)

    # The log file: one JSON object a line, the batch lines among them, the resync with
    # its table; the password nowhere.
    lines = [json.loads(line) for line in (work / "cdcctl.log").read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    batches = [line for line in lines if line["logger"] == "cdcctl.progress"]
    assert batches and all(re.match(r"batch \d+: \d+ msgs", b["message"]) for b in batches)
    assert any(line.get("table") == name and "resync" in line["message"] for line in lines)
    assert lines[0]["logger"] == "cdcctl.start" and lines[0]["message"].startswith("replicating")
    assert (lines[-1]["logger"], lines[-1]["message"]) == ("cdcctl.start", "replicator stopped")
    terminal = proc.stderr
    assert "batch 1:" in terminal and "replicator stopped" not in terminal
    _no_secret(work, secret)


def test_offline_resync_then_delete_and_purge(broker, topic_prefix: str, tmp_path: Path) -> None:
    messages: list[Message] = list(
        InventoryWorkload(seed=32, prefix=topic_prefix, schemas=True).events(1_500)
    )
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    produce_messages(broker.bootstrap_servers, messages)
    config, target, work = _config(
        tmp_path,
        broker,
        topic_prefix,
        max_batch_events=100,
        max_batch_seconds=0.3,
        log_max_bytes=1024,
        log_backups=2,
    )
    secret = f"s3cret-{uuid.uuid4().hex}"
    env = {PASSWORD_ENV: secret}
    first = run_cli("-v", "start", "--config", str(config), "--until-caught-up", env=env)
    assert first.returncode == 0, first.stderr
    # The log file rotated at 1 KiB, keeping two older files.
    logs = sorted(p.name for p in work.iterdir() if p.name.startswith("cdcctl.log"))
    assert logs == ["cdcctl.log", "cdcctl.log.1", "cdcctl.log.2"]
    assert all((work / n).stat().st_size <= 1024 for n in logs)
    plain = (work / "cdcctl.log").read_text() + (work / "cdcctl.log.1").read_text()
    assert re.search(r"^\d{4}-\d\d-\d\dT[\d:.]+Z INFO +cdcctl.progress: batch \d+:", plain, re.M)
    _no_secret(work, secret)

    customers = next(t for t in topics if t.endswith(".customers"))
    name = table_name_for_topic(customers)
    old = _instants(target, customers)
    unknown = run_cli("resync", "no_such_table", "--config", str(config))
    # Exit 2 naming the known tables (issue 24: exit 1 before, "no table named ...").
    assert unknown.returncode == 2, unknown.stderr
    said = unknown.stderr.splitlines()[0]
    assert said.startswith("error: no table `no_such_table`; known tables: "), unknown.stderr
    assert all(table_name_for_topic(t) in said for t in topics), unknown.stderr
    # Offline, resync asks the broker where the topic starts: it needs the credentials.
    offline = run_cli("resync", name, "--config", str(config), env=env)
    assert offline.returncode == 0, offline.stderr
    assert f"removed {target / name}" in offline.stdout
    assert not (target / name).exists()
    assert all((target / table_name_for_topic(t)).exists() for t in topics if t != customers)
    status = engine.read_status(work)
    assert status is not None
    row = status.table(name)
    assert row is not None
    assert row.state == "STOPPED" and row.counters.commits == 0 and row.counters.inserts == 0
    assert any(e.kind == "resync" and e.table == name for e in status.events)

    second = run_cli("start", "--config", str(config), "--until-caught-up", "--json", env=env)
    assert second.returncode == 0, second.stderr
    assert not set(_instants(target, customers)) & set(old)
    assert_replicas_match(target, fold(messages))
    tables = {t["table"]: t for t in json.loads(second.stdout)["tables"]}
    for table, counts in _ops(messages).items():
        assert {c: tables[table][c] for c in counts} == counts, table

    # Things delete must leave alone: a file of the user's in the work folder, a folder
    # in the target, a Hudi table there that no topic of this config maps to.
    (work / "keep.txt").write_text("mine")
    (target / "notes").mkdir()
    (target / "notes" / "a.txt").write_text("mine")
    shutil.copytree(target / name, target / "copied_table")
    state_files = {p.name for p in work.iterdir()} - {"keep.txt"}
    assert {"state.db", "staging", "writer.lock", "spark.log", "cdcctl.log"} <= state_files

    refused = run_cli("delete", "--config", str(config))  # no terminal, no --yes
    assert refused.returncode == 2 and "pass --yes" in refused.stderr
    assert "This removes:" in refused.stderr and str(work / "state.db") in refused.stderr
    assert (work / "state.db").exists()
    lock = WriterLock(work / LOCK_NAME, "a replicator").acquire()
    try:
        running = run_cli("delete", "--config", str(config), "--yes")
        assert running.returncode == 1 and "cdcctl stop" in running.stderr
    finally:
        lock.release()
    assert (work / "state.db").exists()

    deleted = run_cli("delete", "--config", str(config), "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert sorted(p.name for p in work.iterdir()) == ["keep.txt"]
    assert {f"removed {work / n}" for n in state_files} == set(deleted.stdout.splitlines())
    assert {table_name_for_topic(t) for t in topics} <= {p.name for p in target.iterdir()}

    purged = run_cli("delete", "--config", str(config), "--purge", "--yes")
    assert purged.returncode == 0, purged.stderr
    assert sorted(p.name for p in target.iterdir()) == ["copied_table", "notes"]
    assert (target / "notes" / "a.txt").read_text() == "mine"
    assert (work / "keep.txt").read_text() == "mine"
    assert sorted(purged.stdout.splitlines()) == sorted(
        f"removed {target / table_name_for_topic(t)}" for t in topics
    )
    nothing = run_cli("delete", "--config", str(config), "--purge", "--yes")
    assert nothing.returncode == 0 and "nothing to delete" in nothing.stderr


def test_resync_a_failed_table_of_a_live_replicator(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    # A topic recreated under its table (a gap): the table is FAILED; once the new topic
    # holds a fresh snapshot, a resync rebuilds the table from it (without one it is
    # refused: tests/peers/test_resync_trimmed.py), while the replicator and the other
    # table go on.
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    produce_messages(broker.bootstrap_servers, gap_rows(topic, range(1, 201), 1000))
    produce_messages(broker.bootstrap_servers, gap_rows(other, range(1, 11), 1000))
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_seconds=0.3,
    )
    first = run_cli("start", "--config", str(config), "--until-caught-up")
    assert first.returncode == 0, first.stderr
    recreate_topic(broker, topic)
    keys = range(1, 51)
    marks = ["first"] + ["true"] * (len(keys) - 2) + ["last"]
    snapshot = [
        (
            topic,
            builders.key(k),
            builders.value("r", 5000 + k, {"id": k, "name": "v5000"}, GAP_COLUMNS, snapshot=mark),
        )
        for k, mark in zip(keys, marks, strict=True)
    ]
    produce_messages(broker.bootstrap_servers, snapshot)

    work = tmp_path / "work"
    proc = replicator(config)

    def state(table: str) -> str | None:
        found = engine.read_status(work)
        if found is None or not found.replicator.alive:
            return None
        row = found.table(table)
        return row.state if row is not None else None

    wait_until(lambda: state("app_items") == "FAILED", "the gap", 120, child=proc)
    resynced = run_cli("resync", "app_items", "--config", str(config))
    assert resynced.returncode == 0, resynced.stderr
    assert "resyncing app_items" in resynced.stdout
    produce_messages(broker.bootstrap_servers, gap_rows(other, range(11, 21), 2000))
    wait_until(
        lambda: _committed_to(
            target,
            gap_rows(topic, range(1, 51), 0) + gap_rows(other, range(1, 21), 0),
            [topic, other],
        ),
        "the rebuilt table",
        120,
        child=proc,
    )
    assert state("app_items") == "REPLICATING"
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert proc.wait() == 0, proc.describe()
    rows = read_replica(target / "app_items")
    assert sorted(int(k) for k in rows) == list(range(1, 51))
    assert {r["name"] for r in rows.values()} == {"v5000"}  # only the new topic's rows
    others = read_replica(target / "app_other")
    assert {k: r["name"] for k, r in others.items()} == {
        str(k): "v1000" if k <= 10 else "v2000" for k in range(1, 21)
    }


def test_topics_that_are_not_tables_are_counted_in_status_and_metrics(
    broker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """Logical decoding messages, heartbeats and transaction markers on topics whose
    names say nothing are recognised by content: no table, their records counted as
    skipped in `status --json`, its text and the metrics; a second run reads them again
    from their start and counts them once (the count is per run)."""
    rows: list[Message] = list(
        InventoryWorkload(seed=33, prefix=topic_prefix, schemas=True).events(300)
    )
    table_topics = sorted({t for t, _, _ in rows})
    # Names Debezium lets one configure (topic.heartbeat.prefix, topic.transaction,
    # routing SMTs), none excluded by source.exclude_topics.
    messages_topic = f"{topic_prefix}.pgmsg"
    beats_topic = f"{topic_prefix}.beats"
    tx_topic = f"{topic_prefix}.txmeta"
    kinds = {
        messages_topic: "logical decoding message",
        beats_topic: "heartbeat",
        tx_topic: "transaction metadata",
    }
    _, msg_key, msg_value = sample_record("pg-message-logical-decoding.json")
    _, _, tx_msg_value = sample_record("pg-message-transactional-docs.json")
    begin = sample_record("pg-transaction-begin-docs.json")[2]
    end = sample_record("pg-transaction-end-docs.json")[2]
    beat_schema = {"type": "struct", "name": "io.debezium.connector.common.Heartbeat"}

    def beat(ms: int) -> bytes:
        return json.dumps({"schema": beat_schema, "payload": {"ts_ms": ms}}).encode()

    def control(wave: int) -> list[Message]:
        """Wave 0, then wave 1: 3 + 2 messages, 4 + 3 heartbeats, 6 + 4 markers."""
        n_msg, n_beat, n_tx = (3, 4, 3) if wave == 0 else (2, 3, 2)
        out: list[Message] = [
            (messages_topic, msg_key, msg_value if i % 2 else tx_msg_value) for i in range(n_msg)
        ]
        out += [
            (beats_topic, b'{"serverName":"db"}', beat(1_700_000_000_000 + i))
            for i in range(n_beat)
        ]
        for _ in range(n_tx):
            out += [(tx_topic, None, begin), (tx_topic, None, end)]
        return out

    first = control(0)
    broker.create_topics([*table_topics, *kinds])
    produce_messages(broker.bootstrap_servers, rows + first)
    port = _free_port()
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        max_batch_events=200,
        max_batch_seconds=0.3,
        metrics_port=port,
    )

    def status_json() -> dict:
        run = run_cli("status", "--json", "--config", str(config))
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    def skipped_in_status() -> dict[str, tuple[str, int]]:
        return {c["topic"]: (c["kind"], c["skipped"]) for c in status_json()["control_topics"]}

    def skipped_in_metrics() -> dict[str, tuple[str, int]]:
        return {
            dict(labels)["topic"]: (dict(labels)["kind"], int(value))
            for (name, labels), value in _scrape(port).items()
            if name == "cdcctl_skipped_records_total"
        }

    def counts(sent: list[Message]) -> dict[str, tuple[str, int]]:
        return {t: (k, sum(1 for m in sent if m[0] == t)) for t, k in kinds.items()}

    proc = replicator(config)
    expected = counts(first)
    assert {n for _, n in expected.values()} == {3, 4, 6}
    wait_until(lambda: store_path(tmp_path / "work").exists(), "the state store", 60, child=proc)
    wait_until(lambda: skipped_in_status() == expected, "the first counts", 180, child=proc)
    wait_until(lambda: skipped_in_metrics() == expected, "the first metrics", 20, child=proc)
    # More records on the same topics, in later batches, add to the counts.
    second = control(1)
    produce_messages(broker.bootstrap_servers, second)
    expected = counts(first + second)
    wait_until(lambda: skipped_in_status() == expected, "the second counts", 60, child=proc)
    wait_until(lambda: skipped_in_metrics() == expected, "the second metrics", 20, child=proc)
    status = status_json()
    # The table topics are tables; the control topics are none.
    tables = {t["topic"] for t in status["tables"]}
    assert set(table_topics) <= tables and not tables & set(kinds)
    text = run_cli("status", "--config", str(config))
    assert text.returncode == 0, text.stderr
    assert "topics that are not tables (records skipped this run):" in text.stdout
    for topic, (kind, n) in expected.items():
        assert f"  {topic}: {kind}, {n} skipped" in text.stdout
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    assert proc.wait() == 0, proc.describe()
    for topic in kinds:
        assert not (target / table_name_for_topic(topic)).exists()
    # Stopped: the last run's counts are still shown.
    assert skipped_in_status() == expected
    # A second run reads those topics from their start again and counts each record once.
    again = run_cli("start", "--config", str(config), "--until-caught-up", "--json", timeout=300)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert {c["topic"]: (c["kind"], c["skipped"]) for c in summary["control_topics"]} == expected
