"""Debezium Avro end to end: a real broker, the test schema registry reached over HTTP by
confluent-kafka's client, `cdcctl init --format debezium-avro` and two `cdcctl start`
child processes, real Spark, replicas read by hudi-rs and compared with the oracle.

The messages are the demo workload's JsonConverter messages (inserts, updates, deletes,
tombstones, snapshot reads) re-serialized as Confluent's AvroConverter would write them
(tests/avro_support.py; confluent-kafka's AvroSerializer makes the bytes). The oracle
(tests/oracle.py) folds the JSON originals, so it shares nothing with the Avro path. Part
way through the second run a column is added to ``customers``: its messages switch to a
new schema id in the middle of a batch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from engine.playground.registry import SchemaRegistry
from engine.playground.workload import InventoryWorkload
from tests.avro_support import JsonToAvro
from tests.integration.replicas import assert_replicas_match, run_cli
from tests.oracle import fold

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ADDED = "tier"


def _add_column(value: bytes | None, n: int) -> bytes | None:
    """The customers message with a new optional string column (a schema change)."""
    if value is None:
        return None
    msg = json.loads(value)
    for part in ("before", "after"):
        field = next(f for f in msg["schema"]["fields"] if f["field"] == part)
        field["fields"].append({"type": "string", "optional": True, "field": ADDED})
        row = msg["payload"][part]
        if row is not None:
            row[ADDED] = f"t{n % 3}" if n % 4 else None
    return json.dumps(msg, separators=(",", ":")).encode()


def _with_added_nulls(expected: dict, topic: str) -> dict:
    """Rows written before the column existed read null in it."""
    rows = expected[topic]
    expected[topic] = {k: {ADDED: None, **row} for k, row in rows.items()}
    return expected


def test_avro_two_runs_with_a_schema_change(broker, topic_prefix: str, tmp_path: Path) -> None:
    messages = list(InventoryWorkload(seed=21, prefix=topic_prefix, schemas=True).events(8000))
    customers = f"{topic_prefix}.inventory.customers"
    cut = int(len(messages) * 0.75)
    messages = [
        (t, k, _add_column(v, i) if t == customers and i >= cut else v)
        for i, (t, k, v) in enumerate(messages)
    ]
    assert sum(v is None for _, _, v in messages) > 100  # tombstones after deletes
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    target = tmp_path / "lake"
    config = tmp_path / "cdcctl.toml"

    with SchemaRegistry() as registry:
        avro = JsonToAvro(registry.url)
        avro_messages = [avro.message(*m) for m in messages]
        assert all(v is None or v[0] == 0 for _, _, v in avro_messages)
        ids = {v[1:5] for t, _, v in avro_messages if t == customers and v is not None}
        assert len(ids) == 2  # the column addition is a new schema id

        init = run_cli(
            "init",
            "--bootstrap-servers", broker.bootstrap_servers,
            "--topics", f"^{re.escape(topic_prefix)}\\.",
            "--target", str(target),
            "--format", "debezium-avro",
            "--schema-registry-url", registry.url,
            "--output", str(config),
        )  # fmt: skip
        assert init.returncode == 0, init.stderr
        assert "[source.schema_registry]" in config.read_text()

        half = len(messages) // 2
        produce_messages(broker.bootstrap_servers, avro_messages[:half])
        first = run_cli("start", "--config", str(config), "--until-caught-up")
        assert first.returncode == 0, first.stderr
        assert_replicas_match(target, fold(messages[:half]))

        checks = run_cli("test-connection", "--config", str(config), "--json")
        found = {c["name"]: c for c in json.loads(checks.stdout)["checks"]}
        assert found["registry.reachable"]["status"] == "pass", found["registry.reachable"]
        assert found["kafka.decode"]["status"] == "pass", found["kafka.decode"]

        produce_messages(broker.bootstrap_servers, avro_messages[half:])
        second = run_cli("start", "--config", str(config), "--until-caught-up")
        assert second.returncode == 0, second.stderr
        counts = assert_replicas_match(target, _with_added_nulls(fold(messages), customers))
        assert counts[customers] > 0

    # Without its registry the replicator cannot decode: test-connection says so.
    checks = run_cli("test-connection", "--config", str(config), "--json")
    found = {c["name"]: c for c in json.loads(checks.stdout)["checks"]}
    assert checks.returncode == 1
    assert found["registry.reachable"]["status"] == "fail"
    assert "cannot be reached" in found["registry.reachable"]["detail"]


def test_registry_outage_is_retried(broker, topic_prefix: str, tmp_path: Path, replicator) -> None:
    """A registry that cannot be reached is a transient failure: `cdcctl start` retries
    (from the tables' checkpoints) and, once the registry is back, replicates everything."""

    from tests.integration.replicas import write_config

    messages = list(InventoryWorkload(seed=4, prefix=topic_prefix, schemas=True).events(600))
    topics = sorted({t for t, _, _ in messages})
    broker.create_topics(topics)
    with SchemaRegistry() as first:
        convert = JsonToAvro(first.url)
        produce_messages(broker.bootstrap_servers, [convert.message(*m) for m in messages])
        url, store, port = first.url, first.store, int(first.url.rsplit(":", 1)[1])
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        source={"format": "debezium-avro"},
    )
    with config.open("a") as f:
        f.write(f'[source.schema_registry]\nurl = "{url}"\n')
    proc = replicator(config, "--until-caught-up")
    proc.wait_for_output("cannot be reached", 300, stream="stderr")
    with SchemaRegistry(port=port, store=store) as again:
        assert again.url == url
        code = proc.wait(300)
        stderr = proc.stderr
        assert code == 0, stderr
        assert "retry" in stderr
    assert_replicas_match(target, fold(messages))


def test_registry_password_is_used_and_never_shown(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    """The basic-auth password, referenced as ${env:...}, reaches the registry (which
    requires it) and appears in no output and no file; a wrong one stops `start` with a
    clear error naming the key, not a traceback."""
    import uuid

    from tests.integration.replicas import write_config

    secret = f"planted-{uuid.uuid4().hex}"
    env_name = "CDCCTL_TEST_REGISTRY_SECRET"
    workload = InventoryWorkload(seed=6, prefix=topic_prefix, schemas=True)
    messages = list(workload.events(300))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        source={"format": "debezium-avro"},
    )
    runs = []
    with SchemaRegistry(user="cdcctl", password=secret) as registry:
        # The producer side registers through an open twin serving the same schemas.
        with SchemaRegistry(store=registry.store) as producer_side:
            convert = JsonToAvro(producer_side.url)
            produce_messages(broker.bootstrap_servers, [convert.message(*m) for m in messages])
            with config.open("a") as f:
                f.write(
                    f'[source.schema_registry]\nurl = "{registry.url}"\n'
                    f'basic_auth_user = "cdcctl"\nbasic_auth_password = "${{env:{env_name}}}"\n'
                )
            assert secret not in config.read_text()
            started = run_cli(
                "start", "--config", str(config), "--until-caught-up", env={env_name: secret}
            )
            runs.append(started)
            assert started.returncode == 0, started.stderr
            assert registry.requests > 0
            assert_replicas_match(target, fold(messages))

            more = list(workload.stream(50))
            produce_messages(broker.bootstrap_servers, [convert.message(*m) for m in more])
        # A wrong password is as secret as the right one: it is the value sent here.
        wrong_secret = f"wrong-{uuid.uuid4().hex}"
        wrong = run_cli(
            "start", "--config", str(config), "--until-caught-up", env={env_name: wrong_secret}
        )
        runs.append(wrong)
        assert wrong.returncode == 3, wrong.stderr
        assert "refused the credentials" in wrong.stderr, wrong.stderr
        assert "basic_auth" in wrong.stderr and "Traceback" not in wrong.stderr
    for value in (secret, wrong_secret):
        assert all(value not in r.stdout + r.stderr for r in runs), value
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert value.encode() not in path.read_bytes(), (value, path)


def test_registry_over_tls(broker, topic_prefix: str, tmp_path: Path) -> None:
    """An https registry whose certificate a CA made here signed: with that CA in
    source.schema_registry.ssl_ca_location `test-connection` passes and `start`
    replicates; without it (or with another CA) both stop at once with one line naming
    the key, not a traceback and not a retry loop."""
    import time

    from tests.integration.replicas import write_config
    from tests.tls_support import make_certs

    (tmp_path / "tls").mkdir()
    certs = make_certs(tmp_path / "tls")
    messages = list(InventoryWorkload(seed=8, prefix=topic_prefix, schemas=True).events(300))
    broker.create_topics(sorted({t for t, _, _ in messages}))

    def config(name: str, ca: Path | None) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        path = write_config(
            folder / "cdcctl.toml",
            broker.bootstrap_servers,
            f"^{re.escape(topic_prefix)}\\.",
            folder / "lake",
            source={"format": "debezium-avro"},
        )
        with path.open("a") as f:
            f.write(f'[source.schema_registry]\nurl = "{registry.url}"\n')
            if ca is not None:
                f.write(f'ssl_ca_location = "{ca}"\n')
        return path

    def checks(path: Path) -> tuple[int, dict]:
        run = run_cli("test-connection", "--config", str(path), "--json", timeout=120)
        assert "Traceback" not in run.stderr, run.stderr
        return run.returncode, {c["name"]: c for c in json.loads(run.stdout)["checks"]}

    with SchemaRegistry(tls_cert=certs["cert"], tls_key=certs["key"]) as registry:
        assert registry.url.startswith("https://")
        # The producer side registers through a plaintext twin serving the same schemas.
        with SchemaRegistry(store=registry.store) as producer_side:
            convert = JsonToAvro(producer_side.url)
            produce_messages(broker.bootstrap_servers, [convert.message(*m) for m in messages])

        for name, ca in (("no-ca", None), ("other-ca", certs["other_ca"])):
            code, found = checks(config(name, ca))
            reachable = found["registry.reachable"]
            assert code == 1 and reachable["status"] == "fail", reachable
            assert "TLS handshake with the schema registry" in reachable["detail"], reachable
            assert "certificate verify failed" in reachable["detail"], reachable
            assert "source.schema_registry.ssl_ca_location" in reachable["fix"], reachable

            if name == "other-ca":  # start refuses it as it refuses no CA (below): once
                continue
            started = time.monotonic()
            run = run_cli("start", "--config", str(tmp_path / name / "cdcctl.toml"),
                          "--until-caught-up", timeout=300)  # fmt: skip
            took = time.monotonic() - started
            assert run.returncode == 3, run.stderr
            assert "Traceback" not in run.stderr, run.stderr
            errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
            assert len(errors) == 1, run.stderr
            assert "TLS handshake with the schema registry" in errors[0], run.stderr
            assert "certificate verify failed" in errors[0], run.stderr
            assert "source.schema_registry.ssl_ca_location" in run.stderr, run.stderr
            # Terminal: not retried (a retry loop would take until retry_max_seconds).
            assert "retry" not in run.stderr.lower(), run.stderr
            assert took < 120, took

        good = config("ca", certs["ca"])
        code, found = checks(good)
        assert found["registry.reachable"]["status"] == "pass", found["registry.reachable"]
        assert found["kafka.decode"]["status"] == "pass", found["kafka.decode"]
        run = run_cli("start", "--config", str(good), "--until-caught-up")
        assert run.returncode == 0, run.stderr
    counts = assert_replicas_match(tmp_path / "ca" / "lake", fold(messages))
    assert sum(counts.values()) > 0


_TX_VALUE_SCHEMA = {
    "type": "struct",
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "optional": False,
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {
            "type": "array",
            "optional": True,
            "field": "data_collections",
            "items": {
                "type": "struct",
                "name": "event.collection",
                "optional": False,
                "fields": [
                    {"type": "string", "optional": False, "field": "data_collection"},
                    {"type": "int64", "optional": False, "field": "event_count"},
                ],
            },
        },
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ],
}
_TX_KEY_SCHEMA = {
    "type": "struct",
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "optional": False,
    "fields": [{"type": "string", "optional": False, "field": "id"}],
}


def _tx_record(status: str, tx_id: str, counts: dict[str, int] | None) -> tuple[bytes, bytes]:
    value: dict = {"status": status, "id": tx_id, "event_count": None,
                   "data_collections": None, "ts_ms": 1}  # fmt: skip
    if counts is not None:
        value["event_count"] = sum(counts.values())
        value["data_collections"] = [
            {"data_collection": dc, "event_count": n} for dc, n in counts.items()
        ]
    key = {"schema": _TX_KEY_SCHEMA, "payload": {"id": tx_id}}
    return json.dumps(key).encode(), json.dumps(
        {"schema": _TX_VALUE_SCHEMA, "payload": value}
    ).encode()


def test_avro_transaction_metadata_keeps_transactions_whole(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    """BEGIN/END records in Avro on ``<prefix>.transaction`` are read (not only JSON ones):
    small batches never end inside a source transaction, and nothing stalls."""
    import random

    from engine.hudi.table import HudiTable
    from engine.naming import table_name_for_topic
    from tests import builders
    from tests.integration.replicas import write_config

    cols = [("id", "int32"), ("name", "string"), ("qty", "int32")]
    rng = random.Random(9)
    topic = f"{topic_prefix}.app.a"
    tx_topic = f"{topic_prefix}.transaction"
    data: list = []
    control: list = []
    ends: set[int] = set()
    lsn = 1000
    for txid in range(1, 60):
        n = rng.randint(1, 5)
        control.append((tx_topic, *_tx_record("BEGIN", f"{txid}:{lsn}", None)))
        for order in range(1, n + 1):
            lsn += 1
            row = {"id": rng.randint(1, 40), "name": f"tx{txid}", "qty": order}
            value = builders.value("u", lsn, row, cols, tx=(f"{txid}:{lsn}", order, order))
            data.append((topic, builders.key(row["id"]), value))
        ends.add(len(data))
        control.append((tx_topic, *_tx_record("END", f"{txid}:{lsn + 1}", {"app.a": n})))
    broker.create_topics([topic, tx_topic])
    target = tmp_path / "lake"
    with SchemaRegistry() as registry:
        convert = JsonToAvro(registry.url)
        produce_messages(broker.bootstrap_servers, [convert.message(*m) for m in data])
        produce_messages(broker.bootstrap_servers, [convert.message(*m) for m in control])
        config = write_config(
            tmp_path / "c.toml",
            broker.bootstrap_servers,
            f"^{re.escape(topic_prefix)}\\.app\\.",
            target,
            source={"format": "debezium-avro"},
            max_batch_events=9,
            max_batch_seconds=0.2,
        )
        with config.open("a") as f:
            f.write(f'[source.schema_registry]\nurl = "{registry.url}"\n')
        run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=400)
        assert run.returncode == 0, run.stderr
    table = HudiTable.open(target / table_name_for_topic(topic))
    instants = table.completed_instants()
    assert len(instants) > 5
    for instant in instants:
        checkpoint = table.commit_metadata(instant)["extraMetadata"]["deltastreamer.checkpoint.key"]
        applied = int(checkpoint.rsplit(":", 1)[1])
        assert applied in ends | {0}, f"{instant} ends inside a transaction"
    assert_replicas_match(target, fold(data))
