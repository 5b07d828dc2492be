"""Planted secrets never leave the process: the real CLI runs with a unique random
password for each secret key, referenced both ways (``${env:...}`` for the SASL and the
schema registry passwords, ``${file:...}`` for the TLS key and database passwords), and
every output and every file it writes is searched for each of them.

Each password is really used where it can be here:

* the broker is the embedded broker behind TLS, and cdcctl presents a client
  certificate whose private key is encrypted with ``source.ssl_key_password``
  (librdkafka cannot load the key without it; a wrong one is a run that fails);
* the messages are Avro and the schema registry requires
  ``source.schema_registry.basic_auth_password``; one failing run sends it to a registry
  that refuses it;
* ``source.database_password`` goes to the session's scratch PostgreSQL in
  ``test-connection`` (its trust authentication ignores it);
* ``source.sasl_password`` is resolved (and redacted) in every run, but librdkafka has no
  use for it on an SSL listener: it is sent in the refused SASL login against the
  embedded broker with ``--authentication``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.playground.broker import EmbeddedBroker, produce_messages
from engine.playground.registry import SchemaRegistry
from engine.playground.workload import InventoryWorkload
from tests.avro_support import JsonToAvro
from tests.integration.replicas import checks_of, run_cli, write_config
from tests.tls_support import make_certs

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SASL_ENV = "CDCCTL_TEST_PLANTED_SASL"
REGISTRY_ENV = "CDCCTL_TEST_PLANTED_REGISTRY"
WRONG_KEY_ENV = "CDCCTL_TEST_PLANTED_WRONG_KEY"
REGISTRY_USER = "cdcctl"


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(authentication=True) as broker:
        yield broker


def _config(
    folder: Path,
    bootstrap: str,
    topics: str,
    lake: Path,
    *,
    registry: tuple[str, str] | None = None,
    **source: str,
) -> Path:
    """A config in ``folder`` (work folder beside ``lake``); ``registry``: the schema
    registry's URL and basic-auth user (the password is always the planted reference)."""
    folder.mkdir(exist_ok=True)
    path = write_config(
        folder / "cdcctl.toml", bootstrap, topics, lake, tolerance="all", source=source
    )
    if registry is not None:
        url, user = registry
        with path.open("a") as f:
            f.write(
                f'[source.schema_registry]\nurl = "{url}"\nbasic_auth_user = "{user}"\n'
                f'basic_auth_password = "${{env:{REGISTRY_ENV}}}"\n'
            )
    return path


def _files_holding(secret: str, *folders: Path) -> list[str]:
    """Every file under ``folders`` whose bytes contain ``secret`` (none may)."""
    found = []
    needle = secret.encode()
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and needle in path.read_bytes():
                found.append(str(path))
    return found


def _leaks(secret: str, runs: list[subprocess.CompletedProcess]) -> list[str]:
    return [" ".join(r.args[2:4]) for r in runs if secret in (r.stdout or "") + (r.stderr or "")]


def _exposed(work: Path) -> list[str]:
    """Everything under ``work`` (itself included) that is not the owner's only:
    folders must be 0700, files must give no permission to group or others."""
    found = []
    for path in [work, *work.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir() and mode != 0o700 or not path.is_dir() and mode & 0o077:
            found.append(f"{path} {mode:o}")
    return found


def test_a_planted_secret_is_in_no_output_and_no_file(
    sasl_broker: EmbeddedBroker, topic_prefix: str, tmp_path: Path, scratch_postgres
) -> None:
    names = ("sasl", "key", "registry", "db", "wrong-key")
    secrets = {k: f"planted-{k}-{uuid.uuid4().hex}" for k in names}
    env = {SASL_ENV: secrets["sasl"], REGISTRY_ENV: secrets["registry"]}
    # The password files live outside every folder searched below, as in /etc/cdcctl/.
    vault = tmp_path / "vault"
    vault.mkdir(mode=0o700)
    for name in ("key", "db"):
        (vault / f"{name}.pw").write_text(secrets[name] + "\n")
    (tmp_path / "certs").mkdir()
    certs = make_certs(tmp_path / "certs", client_key_password=secrets["key"])
    topics = rf"^{topic_prefix}\."
    workload = InventoryWorkload(seed=5, prefix=topic_prefix, schemas=True)

    with (
        EmbeddedBroker(tls_cert=certs["cert"], tls_key=certs["key"]) as broker,
        SchemaRegistry(user=REGISTRY_USER, password=secrets["registry"]) as registry,
        SchemaRegistry(store=registry.store) as producer_side,
    ):
        convert = JsonToAvro(producer_side.url)

        def produce(messages: list) -> None:
            avro = [convert.message(*m) for m in messages]
            produce_messages(broker.bootstrap_servers, avro, config=broker.client_config())

        produce(list(workload.events(200)))
        # A bad message, so that a dead-letter file exists (errors.tolerance = "all").
        bad = [(f"{topic_prefix}.inventory.customers", b"\x00bad-key", b"not avro")]
        produce_messages(broker.bootstrap_servers, bad, config=broker.client_config())

        tls = {
            "security_protocol": "SSL",
            "ssl_ca_location": str(certs["ca"]),
            "ssl_certificate_location": str(certs["client_cert"]),
            "ssl_key_location": str(certs["client_key"]),
            "ssl_key_password": "${file:" + str(vault / "key.pw") + "}",
        }
        database = {
            "database_dsn": scratch_postgres.dsn,
            "database_password": "${file:" + str(vault / "db.pw") + "}",
        }
        conf, lake = tmp_path / "conf", tmp_path / "lake"
        config = _config(
            conf,
            broker.bootstrap_servers,
            topics,
            lake,
            registry=(registry.url, REGISTRY_USER),
            format="debezium-avro",
            sasl_password="${env:" + SASL_ENV + "}",
            **tls,
            **database,
        )
        assert not [s for s in secrets.values() if s in config.read_text()]
        runs = []

        start = run_cli("start", "--config", str(config), "--until-caught-up", env=env)
        runs.append(start)
        assert start.returncode == 0, start.stderr
        assert registry.requests > 0
        work = tmp_path / "work"
        assert list((work / "deadletter").glob("*.jsonl")), start.stderr
        status = run_cli("status", "--config", str(config), "--json", env=env, timeout=120)
        runs.append(status)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["tables"], status.stdout

        # An error whose text holds a secret (injected at a commit, then retried): every
        # place that shows or keeps it — stderr, the log file, the state store's event
        # log, status — shows *** instead.
        produce(list(workload.stream(50)))
        fault = {
            **env,
            "CDCCTL_CRASH_AT": "before_commit:1:oserror",
            "CDCCTL_CRASH_DETAIL": f"password {secrets['registry']} rejected",
        }
        retried = run_cli("start", "--config", str(config), "--until-caught-up", env=fault)
        runs.append(retried)
        assert retried.returncode == 0, retried.stderr
        assert "injected I/O error at before_commit (password *** rejected)" in retried.stderr
        assert "(password *** rejected)" in (work / "cdcctl.log").read_text()
        with sqlite3.connect(work / "state.db") as db:
            retries = [m for (m,) in db.execute("SELECT message FROM events WHERE kind = 'retry'")]
        assert any("(password *** rejected)" in m for m in retries), retries
        events = run_cli("status", "--config", str(config), "--json", env=env, timeout=120)
        runs.append(events)
        check = run_cli("test-connection", "--config", str(config), "--json", env=env)
        runs.append(check)
        checks = checks_of(check)
        for name in ("kafka.brokers", "registry.reachable", "postgres.connect"):
            assert checks[name]["status"] == "pass", checks[name]

        # The registry refuses the basic-auth password it is sent (here: for another
        # user): start stops with an error naming the key, test-connection fails.
        refused_conf = tmp_path / "conf-refused"
        refused_config = _config(
            refused_conf,
            broker.bootstrap_servers,
            topics,
            tmp_path / "refused" / "lake",
            registry=(registry.url, "intruder"),
            format="debezium-avro",
            **tls,
        )
        refused_registry = run_cli(
            "start", "--config", str(refused_config), "--until-caught-up", env=env
        )
        runs.append(refused_registry)
        assert refused_registry.returncode == 3, refused_registry.stderr
        assert "refused the credentials" in refused_registry.stderr
        assert "source.schema_registry.basic_auth_user" in refused_registry.stderr
        refused_check = run_cli("test-connection", "--config", str(refused_config), "--json",
                                env=env)  # fmt: skip
        runs.append(refused_check)
        assert refused_check.returncode == 1, refused_check.stderr
        reachable = checks_of(refused_check)["registry.reachable"]
        assert reachable["status"] == "fail" and "refused the credentials" in reachable["detail"]

        # A wrong key password (the value given to librdkafka): a config error naming the
        # key, at once, not a retry loop.
        wrong_key_conf = tmp_path / "conf-wrong-key"
        wrong_key_config = _config(
            wrong_key_conf,
            broker.bootstrap_servers,
            topics,
            lake,
            **{**tls, "ssl_key_password": "${env:" + WRONG_KEY_ENV + "}"},
        )
        wrong_key = run_cli("start", "--config", str(wrong_key_config), "--until-caught-up",
                            env={WRONG_KEY_ENV: secrets["wrong-key"]})  # fmt: skip
        runs.append(wrong_key)
        assert wrong_key.returncode == 2, wrong_key.stderr
        assert "cannot create a Kafka consumer: ssl.key.location failed" in wrong_key.stderr
        assert "source.ssl_key_password" in wrong_key.stderr
        assert "retry" not in wrong_key.stderr.lower(), wrong_key.stderr

        # A database that refuses: its name is in the error, its password is not.
        bad_db = tmp_path / "conf-db"
        bad_db.mkdir()
        bad_db_config = bad_db / "cdcctl.toml"
        bad_db_config.write_text(
            config.read_text().replace("/postgres'", "/no_such_db_for_secrets'")
        )
        bad = run_cli("test-connection", "--config", str(bad_db_config), "--json", env=env)
        runs.append(bad)
        assert bad.returncode == 1, bad.stderr
        connect = checks_of(bad)["postgres.connect"]
        assert connect["status"] == "fail" and "no_such_db_for_secrets" in connect["detail"]

    # A refused SASL login (the SASL password is what is sent).
    sasl_conf = tmp_path / "conf-sasl"
    sasl_config = _config(
        sasl_conf,
        sasl_broker.bootstrap_servers,
        topics,
        lake,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="cdcctl",
        sasl_password="${env:" + SASL_ENV + "}",
        **database,
    )
    refused = run_cli("start", "--config", str(sasl_config), "--until-caught-up", env=env)
    runs.append(refused)
    assert refused.returncode == 3, refused.stderr
    assert "refused the SASL login" in refused.stderr and "source.sasl_password" in refused.stderr
    refused_sasl_check = run_cli("test-connection", "--config", str(sasl_config), "--json", env=env)
    runs.append(refused_sasl_check)
    assert refused_sasl_check.returncode == 1, refused_sasl_check.stderr

    # An unset reference is named by its key and reference, never resolved to a value.
    unset = run_cli(
        "status",
        "--config",
        str(config),
        env={k: v for k, v in os.environ.items() if k != SASL_ENV},
        timeout=120,
    )
    runs.append(unset)
    assert unset.returncode == 2, unset.stderr
    assert f"source.sasl_password = ${{env:{SASL_ENV}}}" in unset.stderr, unset.stderr

    assert (work / "spark.log").is_file() and (work / "cdcctl.log").is_file()
    refused_work = tmp_path / "refused" / "work"
    searched = (work, lake, conf, refused_work, refused_conf, wrong_key_conf, sasl_conf, bad_db)
    for name, secret in secrets.items():
        assert _leaks(secret, runs) == [], name
        assert _files_holding(secret, *searched) == [], name

    # Every folder under the work folder is the owner's only (0700) and every file in
    # it (state store, logs, Spark's log, dead letters, lock files) too.
    for name in ("state.db", "cdcctl.log", "spark.log"):
        assert stat.S_IMODE((work / name).stat().st_mode) == 0o600, name
    assert _exposed(work) == []
    assert _exposed(refused_work) == []
