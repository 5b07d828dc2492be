"""What only a real Apache Kafka broker can show, with the real CLI in a child process.

The broker is Apache Kafka 4.3.0 in KRaft mode from the pinned jars of ``interop/kafka``
(tests/peers/kafka.py), one per module here:

* a SCRAM-SHA-512 login that **succeeds**: the user is created with Kafka's own config
  tool (``kafka.admin.ConfigCommand --alter --add-config SCRAM-SHA-512=[...]``), cdcctl
  logs in with the password from ``${env:...}`` and ``${file:...}``, replicates, and a
  wrong password is refused at once naming the key; neither password is in any output or
  any file cdcctl writes;
* TLS served by the broker itself (an ``SSL`` and a ``SASL_SSL`` listener with a test CA),
  and a wrong CA refused naming ``source.ssl_ca_location``;
* a retention gap: Kafka's retention deletes segments under a lagging checkpoint; the
  table stops (FAILED, exit 3, ``status`` and ``test-connection`` say so) with nothing
  applied past the gap, and goes on only once the gap is accepted, which its commit
  records.

Messages are Debezium-shaped (engine/playground/workload.py, tests/builders.py); replicas
are read back with hudi-rs and compared with the oracle (tests/oracle.py).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

import engine
from engine.hudi.table import HudiTable
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests import builders
from tests.integration.replicas import (
    assert_replicas_match,
    checks_of,
    read_replica,
    run_cli,
    write_config,
)
from tests.oracle import fold
from tests.peers.kafka import KafkaBroker, KafkaOptions, Listener, TlsFiles, start_kafka
from tests.tls_support import make_certs
from tests.waiting import wait_until

#: One worker starts the module's TLS and SASL broker (xdist_group), not both.
pytestmark = [pytest.mark.peers, pytest.mark.xdist_group("secure_broker")]

SCRAM = "SCRAM-SHA-512"
SCRAM_256 = "SCRAM-SHA-256"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
PASSWORD_ENV = "CDCCTL_TEST_REAL_KAFKA_PASSWORD"


# -- the broker with security listeners -------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate it signed for 127.0.0.1, and an unrelated CA."""
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secure_broker(
    tmp_path_factory: pytest.TempPathFactory, certs: dict[str, Path]
) -> Iterator[KafkaBroker]:
    """Kafka with SASL_PLAINTEXT, SSL and SASL_SSL listeners besides PLAINTEXT; no user
    exists until a test creates one."""
    options = KafkaOptions(
        listeners=(
            Listener("SASL", "SASL_PLAINTEXT"),
            Listener("TLS", "SSL"),
            Listener("SASLTLS", "SASL_SSL"),
        ),
        tls=TlsFiles(cert=certs["cert"], key=certs["key"]),
        # SCRAM-SHA-256 as well as the SCRAM-SHA-512 tests/peers/kafka.py enables.
        config={
            "sasl.enabled.mechanisms": f"{SCRAM},{SCRAM_256}",
            **{
                f"listener.name.{name}.{SCRAM_256.lower()}.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
                for name in ("sasl", "sasltls")
            },
        },
    )
    broker = start_kafka(tmp_path_factory.mktemp("kafka-secure"), options)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def scram_user(secure_broker: KafkaBroker) -> tuple[str, str]:
    """A user with SCRAM-SHA-512 and SCRAM-SHA-256 credentials made with Kafka's config
    tool; (name, password)."""
    user, password = "cdcctl", f"scram-{uuid.uuid4().hex}"
    # One mechanism per call: Kafka 4.3 refuses to alter one user's credentials twice
    # in a request (DuplicateResourceException).
    for mechanism, iterations in ((SCRAM, 8192), (SCRAM_256, 4096)):
        secure_broker.run_tool(
            CONFIG_COMMAND,
            "--alter",
            "--entity-type", "users", "--entity-name", user,
            "--add-config", f"{mechanism}=[iterations={iterations},password={password}]",
        )  # fmt: skip
    described = secure_broker.run_tool(
        CONFIG_COMMAND, "--describe", "--entity-type", "users", "--entity-name", user
    )
    assert f"{SCRAM}=iterations=8192" in described, described
    assert f"{SCRAM_256}=iterations=4096" in described, described
    # The credential reaches the listener through the metadata log: wait for a login.
    _wait_for_login(secure_broker.address("SASL"), user, password)
    return user, password


def _wait_for_login(address: str, user: str, password: str, timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": SCRAM,
            "sasl.username": user,
            "sasl.password": password,
            "log_level": 0,
        }
    )
    wait_until(  # a KafkaException until the listener knows the credential
        lambda: admin.list_topics(timeout=3).brokers,
        f"a SCRAM login for {user}",
        timeout,
        interval=0.5,
        retry_on=(KafkaException,),
    )


def _errors(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("error:")]


def _files_holding(secret: str, *folders: Path) -> list[str]:
    needle = secret.encode()
    return [
        str(path)
        for folder in folders
        for path in folder.rglob("*")
        if path.is_file() and needle in path.read_bytes()
    ]


def _inventory(broker: KafkaBroker, prefix: str, seed: int, count: int) -> list:
    messages = list(InventoryWorkload(seed=seed, prefix=prefix, schemas=True).events(count))
    produce_messages(broker.bootstrap_servers, messages)
    return messages


# -- SASL/SCRAM ------------------------------------------------------------------------


def test_a_scram_login_succeeds_and_replicates(
    secure_broker: KafkaBroker, scram_user: tuple[str, str], topic_prefix: str, tmp_path: Path
) -> None:
    user, password = scram_user
    messages = _inventory(secure_broker, topic_prefix, seed=11, count=3000)
    lake, topics = tmp_path / "lake", f"^{re.escape(topic_prefix)}\\."
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": SCRAM, "sasl_username": user}
    (tmp_path / "conf").mkdir()
    config = write_config(
        tmp_path / "conf" / "cdcctl.toml",
        secure_broker.address("SASL"),
        topics,
        lake,
        source={**sasl, "sasl_password": "${env:" + PASSWORD_ENV + "}"},
    )
    env = {PASSWORD_ENV: password}
    runs = []

    check = run_cli("test-connection", "--config", str(config), "--json", env=env, timeout=120)
    runs.append(check)
    found = checks_of(check)
    assert found["kafka.brokers"]["status"] == "pass", found["kafka.brokers"]
    assert "(SASL_PLAINTEXT)" in found["kafka.brokers"]["detail"]
    assert "3 topics match" in found["kafka.topics"]["detail"], found["kafka.topics"]
    assert found["kafka.decode"]["status"] == "pass", found["kafka.decode"]

    run = run_cli("start", "--config", str(config), "--until-caught-up", env=env)
    runs.append(run)
    assert run.returncode == 0, run.stderr
    counts = assert_replicas_match(lake, fold(messages))
    assert sum(counts.values()) > 0

    # The same login with the password read from a file (outside every folder searched).
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    (vault / "kafka.pw").write_text(password + "\n")
    by_file = write_config(
        tmp_path / "conf" / "by-file.toml",
        secure_broker.address("SASL"),
        topics,
        lake,
        source={**sasl, "sasl_password": "${file:" + str(vault / "kafka.pw") + "}"},
    )
    check = run_cli("test-connection", "--config", str(by_file), "--json", timeout=120)
    runs.append(check)
    assert checks_of(check)["kafka.brokers"]["status"] == "pass", check.stdout
    more = _inventory(secure_broker, topic_prefix, seed=12, count=500)
    run = run_cli("start", "--config", str(by_file), "--until-caught-up")
    runs.append(run)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(lake, fold(messages + more))

    # SCRAM-SHA-256 logs in too (the same user's other credential).
    sha256 = write_config(
        tmp_path / "conf" / "sha256.toml",
        secure_broker.address("SASL"),
        topics,
        lake,
        source={
            **sasl,
            "sasl_mechanism": SCRAM_256,
            "sasl_password": "${env:" + PASSWORD_ENV + "}",
        },
    )
    check = run_cli("test-connection", "--config", str(sha256), "--json", env=env, timeout=120)
    runs.append(check)
    assert checks_of(check)["kafka.brokers"]["status"] == "pass", check.stdout

    # A wrong password: refused at once, in one line naming the key to fix, not retried.
    wrong = f"wrong-{uuid.uuid4().hex}"
    started = time.monotonic()
    refused = run_cli(
        "start", "--config", str(config), "--until-caught-up", env={PASSWORD_ENV: wrong},
        timeout=120,
    )  # fmt: skip
    took = time.monotonic() - started
    runs.append(refused)
    assert refused.returncode == 3, refused.stderr
    assert "Traceback" not in refused.stderr
    errors = _errors(refused)
    assert len(errors) == 1, refused.stderr
    assert "refused the SASL login" in errors[0], errors[0]
    assert "source.sasl_password" in refused.stderr and "source.sasl_username" in refused.stderr
    assert "retry" not in refused.stderr.lower(), refused.stderr
    assert took < 30, took
    check = run_cli(
        "test-connection", "--config", str(config), "--json", env={PASSWORD_ENV: wrong},
        timeout=120,
    )  # fmt: skip
    runs.append(check)
    assert check.returncode == 1, check.stderr
    brokers = checks_of(check)["kafka.brokers"]
    assert brokers["status"] == "fail" and "refused the SASL login" in brokers["detail"], brokers
    assert "source.sasl_password" in brokers["fix"], brokers

    # Neither password is in any output, nor in any file under the work, target and
    # config folders (the state store, cdcctl.log, spark.log, the commits).
    for secret in (password, wrong):
        leaks = [" ".join(r.args[2:4]) for r in runs if secret in r.stdout + r.stderr]
        assert not leaks, f"the password is in the output of {leaks}"
        files = _files_holding(secret, tmp_path / "work", lake, tmp_path / "conf")
        assert not files, f"the password is in {files}"
    assert (tmp_path / "work" / "state.db").exists()  # the searched folders are the right ones


def test_scram_over_tls_replicates(
    secure_broker: KafkaBroker,
    scram_user: tuple[str, str],
    certs: dict[str, Path],
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    user, password = scram_user
    messages = _inventory(secure_broker, topic_prefix, seed=13, count=1500)
    config = write_config(
        tmp_path / "cdcctl.toml",
        secure_broker.address("SASLTLS"),
        f"^{re.escape(topic_prefix)}\\.",
        tmp_path / "lake",
        source={
            "security_protocol": "SASL_SSL",
            "ssl_ca_location": str(certs["ca"]),
            "sasl_mechanism": SCRAM,
            "sasl_username": user,
            "sasl_password": "${env:" + PASSWORD_ENV + "}",
        },
    )
    env = {PASSWORD_ENV: password}
    check = run_cli("test-connection", "--config", str(config), "--json", env=env, timeout=120)
    found = checks_of(check)
    assert found["kafka.brokers"]["status"] == "pass", found["kafka.brokers"]
    assert "(SASL_SSL)" in found["kafka.brokers"]["detail"]
    run = run_cli("start", "--config", str(config), "--until-caught-up", env=env)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(tmp_path / "lake", fold(messages))


# -- TLS -------------------------------------------------------------------------------


def _tls_config(tmp_path: Path, broker: KafkaBroker, prefix: str, ca: Path) -> Path:
    return write_config(
        tmp_path / "cdcctl.toml",
        broker.address("TLS"),
        f"^{re.escape(prefix)}\\.",
        tmp_path / "lake",
        source={"security_protocol": "SSL", "ssl_ca_location": str(ca)},
    )


def test_tls_on_the_broker_replicates(
    secure_broker: KafkaBroker, certs: dict[str, Path], topic_prefix: str, tmp_path: Path
) -> None:
    messages = _inventory(secure_broker, topic_prefix, seed=14, count=3000)
    config = _tls_config(tmp_path, secure_broker, topic_prefix, certs["ca"])
    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    found = checks_of(check)
    assert found["kafka.brokers"]["status"] == "pass", found["kafka.brokers"]
    assert "(SSL)" in found["kafka.brokers"]["detail"]
    assert "3 topics match" in found["kafka.topics"]["detail"], found["kafka.topics"]
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    counts = assert_replicas_match(tmp_path / "lake", fold(messages))
    assert sum(counts.values()) > 0


def test_a_wrong_ca_is_refused_naming_the_key(
    secure_broker: KafkaBroker, certs: dict[str, Path], topic_prefix: str, tmp_path: Path
) -> None:
    _inventory(secure_broker, topic_prefix, seed=15, count=10)
    config = _tls_config(tmp_path, secure_broker, topic_prefix, certs["other_ca"])

    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    assert check.returncode == 1, check.stderr
    brokers = checks_of(check)["kafka.brokers"]
    assert brokers["status"] == "fail", brokers
    assert "TLS handshake" in brokers["detail"], brokers
    assert "certificate verify failed" in brokers["detail"], brokers
    assert "source.ssl_ca_location" in brokers["fix"], brokers

    started = time.monotonic()
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=120)
    took = time.monotonic() - started
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    errors = _errors(run)
    assert len(errors) == 1, run.stderr
    assert "TLS handshake with Kafka" in errors[0] and "certificate verify failed" in errors[0]
    assert "source.ssl_ca_location" in run.stderr
    assert "retry" not in run.stderr.lower(), run.stderr
    assert took < 30, took
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").iterdir())


# -- a retention gap -------------------------------------------------------------------

COLUMNS = [("id", "int32"), ("name", "string")]


def _readers(work: Path, lake: Path):
    """Two probes of a running replicator: a field of a table's status record (None
    before it has one) and a table's checkpoint (``None`` before its first commit)."""

    def figure(name: str, key: str) -> Any:
        found = engine.read_status(work)
        assert found is not None
        record = found.table(name)
        return record.figure(key) if record is not None else None

    def checkpoint(name: str) -> str | None:
        path = lake / name
        return HudiTable.open(path).checkpoint() if HudiTable.exists(path) else None

    return figure, checkpoint


def _rows(topic: str, keys: range, lsn: int) -> list[tuple[str, bytes, bytes]]:
    return [
        (
            topic,
            builders.key(k),
            builders.value("c", lsn + k, {"id": k, "name": f"v{lsn}"}, COLUMNS),
        )
        for k in keys
    ]


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker of its own that enforces retention every half second and deletes the
    files of removed segments at once."""
    options = KafkaOptions(
        config={"log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0"}
    )
    broker = start_kafka(tmp_path_factory.mktemp("kafka-retention"), options)
    try:
        yield broker
    finally:
        broker.stop()


def _watermarks(broker: KafkaBroker, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "probe"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low, high
    finally:
        consumer.close()


def _topic_config(broker: KafkaBroker, topic: str, *change: str) -> None:
    broker.run_tool(CONFIG_COMMAND, "--alter", "--entity-type", "topics", "--entity-name", topic,
                    *change)  # fmt: skip


def _retention_is_the_default(broker: KafkaBroker, topic: str) -> bool:
    """Whether the broker says ``topic``'s ``retention.ms`` is no longer set on the topic."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    [future] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    source = future.result(10)["retention.ms"].source
    return getattr(source, "value", source) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def _expire_past(broker: KafkaBroker, topic: str, checkpoint: int) -> int:
    """Write keys 101..200 (offsets ``checkpoint``..+99) in two segments, then let
    Kafka's retention (one second, for a while) delete segments until the log starts past
    ``checkpoint``; the default retention is back on return. Returns the log start."""
    produce_messages(broker.bootstrap_servers, _rows(topic, range(101, 151), 2000))
    time.sleep(1.5)  # the next append rolls the segment
    produce_messages(broker.bootstrap_servers, _rows(topic, range(151, 201), 3000))
    _topic_config(broker, topic, "--add-config", "retention.ms=1000")
    try:
        wait_until(
            lambda: _watermarks(broker, topic)[0] > checkpoint,
            f"Kafka's retention to delete the log of {topic} past offset {checkpoint}",
            60,
            interval=0.5,
        )
    except AssertionError as timeout:
        raise AssertionError(f"{timeout}\n{broker.log_tail()}") from None
    _topic_config(broker, topic, "--delete-config", "retention.ms")
    wait_until(  # the default retention (7 days) holds again before anything is read
        lambda: _retention_is_the_default(broker, topic),
        f"the default retention of {topic} back",
        30,
        interval=0.2,
    )
    low, high = _watermarks(broker, topic)
    assert checkpoint < low <= high == checkpoint + 100, (low, high)
    return low


def test_segments_deleted_under_a_lagging_checkpoint_stop_the_table(
    retention_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    broker = retention_broker
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    # Segments roll on the first append a second after they were opened.
    broker.create_topic(topic, config={"segment.ms": "1000"})
    first = _rows(topic, range(1, 101), 1000)  # offsets 0..99
    produce_messages(broker.bootstrap_servers, first + _rows(other, range(1, 11), 1000))
    lake = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        lake,
        max_batch_seconds=0.3,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    assert_replicas_match(lake, fold(first))

    # cdcctl is stopped (its checkpoint: offset 100) while Kafka deletes what follows.
    low = _expire_past(broker, topic, 100)
    last = _rows(topic, range(1, 21), 4000)  # updates of replicated keys, after the gap
    produce_messages(broker.bootstrap_servers, last)
    assert _watermarks(broker, topic) == (low, 220)
    gap = f"{topic}[0]: offsets 100..{low - 1} were deleted from the topic"

    # test-connection sees it before any start.
    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    assert check.returncode == 1, check.stdout
    found = checks_of(check)[f"kafka.topic {topic}"]
    assert found["status"] == "fail", found
    assert f"offsets 100..{low - 1} were deleted before they were applied" in found["detail"]
    assert "accept_offset_gaps" in found["fix"], found

    # start: the table stops loudly; the other table is untouched; nothing past the gap.
    stopped = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert stopped.returncode == 3, stopped.stderr
    assert "Traceback" not in stopped.stderr
    tables = {s["table"]: s for s in json.loads(stopped.stdout)["tables"]}
    assert tables["app_items"]["state"] == "FAILED", tables["app_items"]
    assert tables["app_other"]["state"] == "STOPPED", tables["app_other"]
    error = tables["app_items"]["last_error"]
    assert gap in error, error
    assert "replicator.accept_offset_gaps" in error and "resync" in error, error
    assert gap in stopped.stderr, stopped.stderr
    assert_replicas_match(lake, fold(first))  # nothing applied past the gap
    table = HudiTable.open(lake / "app_items")
    instants = table.completed_instants()

    status = run_cli("status", "--config", str(config), "--json", timeout=120)
    assert status.returncode == 0, status.stderr
    shown = {s["table"]: s for s in json.loads(status.stdout)["tables"]}
    assert shown["app_items"]["state"] == "FAILED", shown["app_items"]
    assert gap in shown["app_items"]["last_error"], shown["app_items"]

    # Started again, it stays stopped: no commit, no silent jump over the gap.
    again = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert again.returncode == 3, again.stderr
    assert HudiTable.open(lake / "app_items").completed_instants() == instants

    # Accepted: it goes on from the log's start and its next commit records the gap.
    accepting = tmp_path / "accepting.toml"
    accepting.write_text(config.read_text() + "accept_offset_gaps = ['app_items']\n")
    resumed = run_cli("start", "--config", str(accepting), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr
    assert "accepting a gap" in resumed.stderr
    rows = read_replica(lake / "app_items")
    assert {rows[str(k)]["name"] for k in range(1, 21)} == {"v4000"}
    assert {rows[str(k)]["name"] for k in range(21, 101)} == {"v1000"}
    kept = {k for k in range(101, 201) if 100 + (k - 101) >= low}  # offsets low..199
    assert set(rows) == {str(k) for k in [*range(1, 101), *kept]}
    table = HudiTable.open(lake / "app_items")
    extra = table.commit_metadata(table.completed_instants()[-1])["extraMetadata"]
    assert json.loads(extra["cdcctl.accepted_gaps"]) == [f"{topic}[0] 100->{low}"]


def test_a_gap_under_a_running_replicator_stops_the_table_on_resume(
    retention_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """A table paused in a running replicator while retention deletes past its
    checkpoint: on resume the broker refuses the fetch position (out of range), and the
    table stops with the gap instead of jumping over it; the replicator goes on."""
    broker = retention_broker
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    broker.create_topic(topic, config={"segment.ms": "1000"})
    first = _rows(topic, range(1, 101), 1000)
    produce_messages(broker.bootstrap_servers, first + _rows(other, range(1, 11), 1000))
    lake = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        lake,
        max_batch_seconds=0.3,
    )
    figure, checkpoint = _readers(tmp_path / "work", lake)
    proc = replicator(config)
    wait_until(lambda: checkpoint("app_items") == f"{topic},0:100", "the first rows", child=proc)
    paused = run_cli("pause", "--config", str(config), "app_items")
    assert paused.returncode == 0, paused.stderr
    wait_until(lambda: figure("app_items", "state") == "PAUSED", "the pause", child=proc)

    low = _expire_past(broker, topic, 100)
    produce_messages(broker.bootstrap_servers, _rows(other, range(11, 21), 2000))
    wait_until(lambda: checkpoint("app_other") == f"{other},0:20", "the other table", child=proc)

    resumed = run_cli("resume", "--config", str(config), "app_items")
    assert resumed.returncode == 0, resumed.stderr
    wait_until(lambda: figure("app_items", "state") == "FAILED", "the gap", child=proc)
    error = figure("app_items", "last_error")
    assert f"{topic}[0]: offsets 100..{low - 1} were deleted from the topic" in error, error
    assert "replicator.accept_offset_gaps" in error, error
    assert checkpoint("app_items") == f"{topic},0:100"
    assert_replicas_match(lake, {topic: fold(first)[topic]})

    # The replicator still runs for the other table.
    produce_messages(broker.bootstrap_servers, _rows(other, range(21, 31), 3000))
    wait_until(
        lambda: checkpoint("app_other") == f"{other},0:30", "the other table again", child=proc
    )
    assert not proc.exited(), proc.describe()
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    proc.wait(120)
    err = proc.stderr
    assert "Traceback" not in err, err
    # Found through the broker's answer to the fetch (not a periodic check).
    assert "Offset out of range" in err and "offsets 100.." in err, err


def test_a_topic_recreated_under_a_running_replicator_stops_the_table(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    """Deleted and recreated shorter while cdcctl reads it (the case librdkafka crashes
    on with the Tansu broker, tests/integration/test_offset_gaps.py): the table stops
    with the partition's new end and its checkpoint; the other table goes on."""
    broker = kafka_broker
    topic, other = f"{topic_prefix}.app.items", f"{topic_prefix}.app.other"
    first = _rows(topic, range(1, 201), 1000)
    produce_messages(broker.bootstrap_servers, first + _rows(other, range(1, 11), 1000))
    lake = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        lake,
        max_batch_seconds=0.3,
        topic_refresh_seconds=1.0,
    )
    figure, checkpoint = _readers(tmp_path / "work", lake)
    proc = replicator(config)
    wait_until(lambda: checkpoint("app_items") == f"{topic},0:200", "the first rows", child=proc)
    broker.recreate_topic(topic)
    produce_messages(broker.bootstrap_servers, _rows(topic, range(1, 51), 5000))
    wait_until(lambda: figure("app_items", "state") == "FAILED", "the gap", child=proc)
    error = figure("app_items", "last_error")
    assert f"{topic}[0]: the partition now ends at offset 50, before the checkpoint 200" in (
        error
    ), error
    assert checkpoint("app_items") == f"{topic},0:200"
    assert_replicas_match(lake, {topic: fold(first)[topic]})  # nothing of the new topic

    produce_messages(broker.bootstrap_servers, _rows(other, range(11, 21), 2000))
    wait_until(lambda: checkpoint("app_other") == f"{other},0:20", "the other table", child=proc)
    assert not proc.exited(), proc.describe()
    stopped = run_cli("stop", "--config", str(config))
    assert stopped.returncode == 0, stopped.stderr
    proc.wait(120)
    err = proc.stderr
    assert "Traceback" not in err, err


def test_a_topic_recreated_longer_than_the_checkpoint_stops_the_table(
    kafka_broker: KafkaBroker, topic_prefix: str, tmp_path: Path
) -> None:
    """Recreated while cdcctl is stopped, with more records than the checkpoint: the
    offsets alone look fine. Found here: cdcctl went on at offset 200 of the new topic,
    its records 0..199 skipped silently. Now the topic's id tells (recorded in every
    commit)."""
    broker = kafka_broker
    topic = f"{topic_prefix}.app.items"
    produce_messages(broker.bootstrap_servers, _rows(topic, range(1, 201), 1000))
    lake = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, f"^{re.escape(topic_prefix)}\\.", lake
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr

    broker.recreate_topic(topic)
    newer = _rows(topic, range(1, 301), 5000)
    produce_messages(broker.bootstrap_servers, newer)
    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    assert check.returncode == 1, check.stdout
    found = checks_of(check)[f"kafka.topic {topic}"]
    assert found["status"] == "fail", found
    assert "the topic was deleted and recreated" in found["detail"], found
    assert "offsets 0..199 of the new topic would never be read" in found["detail"], found
    stopped = run_cli("start", "--config", str(config), "--until-caught-up", "--json")
    assert stopped.returncode == 3, stopped.stderr
    error = {s["table"]: s for s in json.loads(stopped.stdout)["tables"]}["app_items"]["last_error"]
    assert f"{topic}[0]: the topic was deleted and recreated" in error, error
    assert "offsets 0..199 of the new topic were never read" in error, error
    assert {r["name"] for r in read_replica(lake / "app_items").values()} == {"v1000"}

    accepting = tmp_path / "accepting.toml"
    accepting.write_text(config.read_text() + "accept_offset_gaps = ['app_items']\n")
    resumed = run_cli("start", "--config", str(accepting), "--until-caught-up")
    assert resumed.returncode == 0, resumed.stderr
    assert_replicas_match(lake, fold(newer))
