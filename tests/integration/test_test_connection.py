"""`cdcctl test-connection` against real components: the embedded broker with Debezium
topics, scratch PostgreSQL clusters with and without logical decoding (wal_level=logical,
wal_level=replica), a scratch MariaDB without a binlog, a real Spark start."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import run_cli, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _config(tmp_path: Path, bootstrap: str, prefix: str) -> Path:
    return write_config(tmp_path / "cdcctl.toml", bootstrap, rf"^{prefix}\.", tmp_path / "lake")


def _run(cfg: Path, *args: str, timeout: float = 120) -> tuple[int, list[dict], str]:
    """Run test-connection with --json; the exit code, the checks, stderr."""
    r = run_cli("test-connection", "--config", str(cfg), "--json", *args, timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc) == ["checks"]
    for check in doc["checks"]:
        assert list(check) == ["name", "status", "detail", "fix"], check
        assert check["status"] in ("pass", "warn", "fail"), check
        assert check["detail"], check
        # A warning or a failure always says what to do; a pass has nothing to fix.
        assert bool(check["fix"]) == (check["status"] != "pass"), check
    return r.returncode, doc["checks"], r.stderr


def _by_name(checks: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in checks}


def _failures(checks: list[dict], area: str) -> list[dict]:
    return [c for c in checks if c["name"].startswith(area) and c["status"] != "pass"]


def test_debezium_topics_pass_with_partitions_and_waiting_messages(
    broker, topic_prefix, tmp_path
) -> None:
    workload = InventoryWorkload(seed=3, prefix=topic_prefix, schemas=True)
    messages = list(workload.events(3000))
    produce_messages(broker.bootstrap_servers, messages, partitions=2)
    cfg = _config(tmp_path, broker.bootstrap_servers, topic_prefix)

    code, checks, stderr = _run(cfg)
    assert code == 0, checks
    assert not [c for c in checks if c["status"] == "fail"], checks
    found = _by_name(checks)
    assert found["kafka.brokers"]["status"] == "pass"
    assert "3 topics match" in found["kafka.topics"]["detail"]
    for table, topic in workload.topics.items():
        line = found[f"kafka.topic {topic}"]
        assert line["status"] == "pass"
        produced = sum(1 for t, _, _ in messages if t == topic)
        assert "2 partitions" in line["detail"], line
        assert f"~{produced:,} messages waiting from the log start" in line["detail"], line
        assert f"no table inventory_{table} yet" in line["detail"], line
    assert found["kafka.decode"]["status"] == "pass"
    assert "decode as debezium-json" in found["kafka.decode"]["detail"]
    for name in ("target.folder", "target.free_space", "engine.java", "engine.spark"):
        assert found[name]["status"] == "pass", found[name]
    assert "database: not checked" in stderr

    # After a run, the tables are there and their checkpoints name their topics.
    r = run_cli("start", "--config", str(cfg), "--until-caught-up", timeout=300)
    assert r.returncode == 0, r.stderr
    code, checks, _ = _run(cfg)
    assert code == 0, checks
    found = _by_name(checks)
    for table, topic in workload.topics.items():
        assert (
            "~0 messages waiting since the checkpoint of table"
            in found[f"kafka.topic {topic}"]["detail"]
        )
        line = found[f"target.table inventory_{table}"]
        assert line["status"] == "pass" and f"checkpoint {topic} 0:" in line["detail"], line


def test_plain_output_names_an_undecodable_message_and_a_broken_table(
    broker, topic_prefix, tmp_path
) -> None:
    workload = InventoryWorkload(seed=5, prefix=topic_prefix, schemas=True)
    messages = list(workload.events(400))
    produce_messages(broker.bootstrap_servers, messages, partitions=1)
    orders = workload.topic("orders")
    offset = sum(1 for t, _, _ in messages if t == orders)
    produce_messages(broker.bootstrap_servers, [(orders, b'{"id": 1}', b"not json {")])
    tx_end = b'{"status": "END", "id": "1:2", "event_count": 0, "data_collections": []}'
    produce_messages(broker.bootstrap_servers, [(f"{topic_prefix}.transaction", None, tx_end)])
    cfg = _config(tmp_path, broker.bootstrap_servers, topic_prefix)
    # A folder that looks like a table but is not one.
    (tmp_path / "lake" / "broken" / ".hoodie").mkdir(parents=True)

    r = run_cli("test-connection", "--config", str(cfg), timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    bad = [i for i, line in enumerate(lines) if line.startswith("FAIL kafka.decode:")]
    assert bad, r.stdout
    assert f"{orders}[0]@{offset}" in lines[bad[0]], lines[bad[0]]
    assert lines[bad[0] + 1].strip().startswith("fix: "), r.stdout
    assert "JsonConverter" in lines[bad[0] + 1]
    assert any(line.startswith(f"PASS kafka.topic {orders}: 1 partition,") for line in lines)
    assert f"PASS kafka.transactions {topic_prefix}.transaction: present (1 partition" in r.stdout
    assert "FAIL target.table broken: not a readable Hudi table" in r.stdout
    assert "2 failed" in r.stderr


def test_everything_unreachable_fails_fast(tmp_path) -> None:
    cfg = write_config(tmp_path / "c.toml", "127.0.0.1:1", r"^dbserver1\.", tmp_path / "lake")
    started = time.monotonic()
    code, checks, _ = _run(cfg, "--source", "postgresql://postgres:s3cret@127.0.0.1:1/postgres")
    took = time.monotonic() - started
    assert took < 15, took
    assert code == 1
    found = _by_name(checks)
    assert found["kafka.brokers"]["status"] == "fail"
    assert "cannot reach Kafka at 127.0.0.1:1" in found["kafka.brokers"]["detail"]
    assert "source.bootstrap_servers" in found["kafka.brokers"]["fix"]
    assert found["postgres.connect"]["status"] == "fail"
    assert "postgresql://postgres:***@127.0.0.1:1/postgres" in found["postgres.connect"]["detail"]
    assert "s3cret" not in json.dumps(checks)
    # Kafka and the database are unreachable, the rest still answers.
    assert found["engine.spark"]["status"] == "pass", found["engine.spark"]

    plain = run_cli("test-connection", "--config", str(cfg), "--source", "mysql://root@127.0.0.1:1")
    assert plain.returncode == 1
    assert plain.stdout.startswith("FAIL kafka.brokers: cannot reach Kafka"), plain.stdout
    assert "FAIL mysql.connect: cannot connect to mysql://root@127.0.0.1:1" in plain.stdout


def test_usage_and_config_errors_exit_2(tmp_path) -> None:
    r = run_cli("test-connection", "--config", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    cfg = write_config(tmp_path / "c.toml", "127.0.0.1:1", "x", tmp_path / "lake")
    r = run_cli("test-connection", "--config", str(cfg), "--source", "redis://h:1")
    assert r.returncode == 2 and "not a database URL" in r.stderr, r.stderr
    text = cfg.read_text()
    cfg.write_text(text.replace("[target]", 'database_dsn = "postgresql://u:pw@h/db"\n[target]'))
    r = run_cli("test-connection", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    assert "source.database_dsn" in r.stderr and "password" in r.stderr
    assert "pw@" not in r.stderr


def test_scratch_postgres_with_logical_decoding_passes(
    broker, topic_prefix, tmp_path, scratch_postgres
) -> None:
    table = f"tc_ok_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as conn:
        conn.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, name text, doc jsonb)")
        conn.execute(f"ALTER TABLE public.{table} REPLICA IDENTITY FULL")
    try:
        broker.create_topics([f"{topic_prefix}.public.{table}"])
        cfg = _config(tmp_path, broker.bootstrap_servers, topic_prefix)
        code, checks, _ = _run(cfg, "--source", scratch_postgres.dsn)
        found = _by_name(checks)
        assert found["postgres.wal_level"] == {
            "name": "postgres.wal_level",
            "status": "pass",
            "detail": "logical",
            "fix": "",
        }
        for name in ("connect", "replication_slots", "wal_senders", "role", "publication"):
            assert found[f"postgres.{name}"]["status"] == "pass", found[f"postgres.{name}"]
        assert f"public.{table}" in found["postgres.tables"]["detail"]
        # The scratch cluster keeps WAL for slots without bound: the one warning, with its fix.
        problems = _failures(checks, "postgres.")
        assert [c["name"] for c in problems] == ["postgres.max_slot_wal_keep_size"], problems
        assert "ALTER SYSTEM SET max_slot_wal_keep_size" in problems[0]["fix"]
        assert code == 0, checks
    finally:
        with scratch_postgres.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS public.{table}")


@pytest.fixture
def replica_pg_dsn(scratch_postgres_replica):
    """The DSN of a fresh database on a cluster with wal_level=replica, dropped after."""
    name = f"cdcctl_tc_{uuid.uuid4().hex[:10]}"
    with scratch_postgres_replica.connect() as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{scratch_postgres_replica.port}/{name}"
    finally:
        with scratch_postgres_replica.connect() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_postgres_without_logical_decoding_names_wal_level_and_tables(
    broker, topic_prefix, tmp_path, replica_pg_dsn
) -> None:
    dsn = replica_pg_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE no_pk (id int, name text)")
        conn.execute("CREATE TABLE toasty (id int PRIMARY KEY, body text, tags int[])")
        conn.execute("CREATE TABLE fine (id int PRIMARY KEY, n bigint)")
    broker.create_topics([f"{topic_prefix}.public.{t}" for t in ("no_pk", "toasty", "fine")])
    cfg = _config(tmp_path, broker.bootstrap_servers, topic_prefix)

    code, checks, _ = _run(cfg, "--source", dsn)
    assert code == 1
    found = _by_name(checks)
    wal = found["postgres.wal_level"]
    assert wal["status"] == "fail" and wal["detail"].startswith("replica")
    assert wal["fix"] == "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"
    no_pk = found["postgres.table public.no_pk"]
    assert no_pk["status"] == "fail" and "no primary key" in no_pk["detail"]
    assert no_pk["fix"].startswith('ALTER TABLE "public"."no_pk" ADD PRIMARY KEY')
    toasty = found["postgres.table public.toasty"]
    assert toasty["status"] == "warn", toasty
    assert "REPLICA IDENTITY DEFAULT" in toasty["detail"] and "body, tags" in toasty["detail"]
    assert toasty["fix"] == 'ALTER TABLE "public"."toasty" REPLICA IDENTITY FULL;'
    assert "public.fine" in found["postgres.tables"]["detail"]
    assert "postgres.table public.fine" not in found


@pytest.fixture
def mariadb_database(scratch_mariadb_no_binlog):
    """A database on a MariaDB without a binlog, dropped after."""
    name = f"cdcctl_tc_{uuid.uuid4().hex[:10]}"
    conn = scratch_mariadb_no_binlog.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
            cur.execute(f"CREATE TABLE {name}.no_pk (id int, name varchar(20)) ENGINE=InnoDB")
            cur.execute(f"CREATE TABLE {name}.old (id int PRIMARY KEY) ENGINE=MyISAM")
            cur.execute(f"CREATE TABLE {name}.fine (id int PRIMARY KEY) ENGINE=InnoDB")
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.close()


def test_mariadb_without_binlog_names_settings_and_tables(
    broker, topic_prefix, tmp_path, mariadb_database, scratch_mariadb_no_binlog
) -> None:
    # No topic exists yet: the tables come from source.topics (prefix and database).
    cfg = write_config(
        tmp_path / "c.toml",
        broker.bootstrap_servers,
        rf"^{topic_prefix}\.{mariadb_database}\.",
        tmp_path / "lake",
    )
    code, checks, _ = _run(cfg, "--source", scratch_mariadb_no_binlog.dsn)
    assert code == 1
    found = _by_name(checks)
    assert found["kafka.topics"]["status"] == "warn"
    log_bin = found["mysql.log_bin"]
    assert log_bin["status"] == "fail" and log_bin["fix"].endswith(
        "log_bin = mysql-bin (then restart the server)"
    )
    fmt = found["mysql.binlog_format"]
    assert fmt["status"] == "fail" and "binlog_format = ROW" in fmt["fix"]
    no_pk = found[f"mysql.table {mariadb_database}.no_pk"]
    assert no_pk["status"] == "fail" and "no primary key" in no_pk["detail"]
    assert (
        no_pk["fix"] == f"ALTER TABLE `{mariadb_database}`.`no_pk` ADD PRIMARY KEY (<key columns>);"
    )
    old = found[f"mysql.table {mariadb_database}.old"]
    assert old["status"] == "warn" and "ENGINE=MyISAM" in old["detail"]
    assert old["fix"] == f"ALTER TABLE `{mariadb_database}`.`old` ENGINE=InnoDB;"
    assert f"{mariadb_database}.fine" in found["mysql.tables"]["detail"]
    for name in ("mysql.server_id", "mysql.gtid", "mysql.privileges"):
        assert found[name]["status"] == "pass", found[name]
