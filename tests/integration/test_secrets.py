"""A planted secret never leaves the process: the real CLI runs with a unique random
password referenced as ``${env:...}`` (SASL and database passwords) and as
``${file:...}``, and every output and every file it writes is searched for it.

The broker for the replicating run is the plaintext embedded broker (librdkafka ignores
the SASL password under PLAINTEXT); the SASL refusal runs against the embedded broker
with ``--authentication``; the database password is used by ``test-connection`` against
the machine's PostgreSQL (its trust authentication ignores it).
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
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import run_cli, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MACHINE_PG = "postgresql://postgres@127.0.0.1:5432/postgres"
SECRET_ENV = "CDCCTL_TEST_PLANTED_SECRET"


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(authentication=True) as broker:
        yield broker


def _config(folder: Path, bootstrap: str, topics: str, tmp_path: Path, **source) -> Path:
    folder.mkdir(exist_ok=True)
    return write_config(
        folder / "cdcctl.toml",
        bootstrap,
        topics,
        tmp_path / "lake",
        source={
            "database_dsn": MACHINE_PG,
            "database_password": "${env:" + SECRET_ENV + "}",
            **source,
        },
    )


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


def test_a_planted_secret_is_in_no_output_and_no_file(
    broker, sasl_broker: EmbeddedBroker, topic_prefix: str, tmp_path: Path
) -> None:
    secret = f"planted-{uuid.uuid4().hex}"
    env = {SECRET_ENV: secret}
    workload = InventoryWorkload(seed=5, prefix=topic_prefix, schemas=True)
    produce_messages(broker.bootstrap_servers, list(workload.events(200)))
    conf = tmp_path / "conf"
    config = _config(
        conf,
        broker.bootstrap_servers,
        rf"^{topic_prefix}\.",
        tmp_path,
        sasl_password="${env:" + SECRET_ENV + "}",
    )
    assert secret not in config.read_text()
    runs = []

    start = run_cli("start", "--config", str(config), "--until-caught-up", env=env)
    runs.append(start)
    assert start.returncode == 0, start.stderr
    status = run_cli("status", "--config", str(config), "--json", env=env, timeout=120)
    runs.append(status)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tables"], status.stdout
    # An error whose text holds the secret (injected at a commit, then retried): every
    # place that shows or keeps it — stderr, the log file, the state store's event log,
    # status — shows *** instead.
    produce_messages(broker.bootstrap_servers, list(workload.stream(50)))
    fault = {
        **env,
        "CDCCTL_CRASH_AT": "before_commit:1:oserror",
        "CDCCTL_CRASH_DETAIL": f"password {secret} rejected",
    }
    retried = run_cli("start", "--config", str(config), "--until-caught-up", env=fault)
    runs.append(retried)
    assert retried.returncode == 0, retried.stderr
    assert "injected I/O error at before_commit (password *** rejected)" in retried.stderr
    log = (tmp_path / "work" / "cdcctl.log").read_text()
    assert "(password *** rejected)" in log
    with sqlite3.connect(tmp_path / "work" / "state.db") as db:
        retries = [m for (m,) in db.execute("SELECT message FROM events WHERE kind = 'retry'")]
    assert any("(password *** rejected)" in m for m in retries), retries
    events = run_cli("status", "--config", str(config), "--json", env=env, timeout=120)
    runs.append(events)
    check = run_cli("test-connection", "--config", str(config), "--json", env=env, timeout=120)
    runs.append(check)
    checks = {c["name"]: c for c in json.loads(check.stdout)["checks"]}
    assert checks["postgres.connect"]["status"] == "pass", checks["postgres.connect"]

    # Failing runs whose errors are about the config: a refused SASL login (the secret
    # is the password sent), a bad database, and an unset reference.
    sasl_conf = tmp_path / "conf-sasl"
    sasl_config = _config(
        sasl_conf,
        sasl_broker.bootstrap_servers,
        rf"^{topic_prefix}\.",
        tmp_path,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="cdcctl",
        sasl_password="${env:" + SECRET_ENV + "}",
    )
    refused = run_cli("start", "--config", str(sasl_config), "--until-caught-up", env=env)
    runs.append(refused)
    assert refused.returncode == 3, refused.stderr
    assert "refused the SASL login" in refused.stderr and "source.sasl_password" in refused.stderr
    refused_check = run_cli("test-connection", "--config", str(sasl_config), "--json", env=env)
    runs.append(refused_check)
    assert refused_check.returncode == 1, refused_check.stderr

    bad_db = tmp_path / "conf-db"
    bad_db_config = _config(bad_db, broker.bootstrap_servers, rf"^{topic_prefix}\.", tmp_path)
    text = bad_db_config.read_text().replace("/postgres'", "/no_such_db_for_secrets'")
    bad_db_config.write_text(text)
    bad = run_cli("test-connection", "--config", str(bad_db_config), "--json", env=env)
    runs.append(bad)
    assert bad.returncode == 1, bad.stderr
    connect = {c["name"]: c for c in json.loads(bad.stdout)["checks"]}["postgres.connect"]
    assert connect["status"] == "fail" and "no_such_db_for_secrets" in connect["detail"]

    unset = run_cli(
        "status",
        "--config",
        str(config),
        env={k: v for k, v in os.environ.items() if k != SECRET_ENV},
        timeout=120,
    )
    runs.append(unset)
    assert unset.returncode == 2, unset.stderr
    assert f"source.sasl_password = ${{env:{SECRET_ENV}}}" in unset.stderr, unset.stderr

    assert _leaks(secret, runs) == []
    work, lake = tmp_path / "work", tmp_path / "lake"
    assert (work / "spark.log").is_file() and (work / "cdcctl.log").is_file()
    assert _files_holding(secret, work, lake, conf, sasl_conf, bad_db) == []

    # The work folder is the owner's only; the files that hold state and logs too.
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    for name in ("state.db", "cdcctl.log", "spark.log"):
        assert stat.S_IMODE((work / name).stat().st_mode) == 0o600, name
    exposed = [
        str(p)
        for p in work.rglob("*")
        if p.is_file() and p.stat().st_mode & 0o077 and p.parent == work
    ]
    assert exposed == []
