"""A Kafka broker that requires SASL refuses the login: the real CLI says so at once, in
one line naming the keys to fix, and does not retry.

The broker is the embedded Tansu broker with ``--authentication``. Tansu v0.6.0 checks
SCRAM logins against users in its own store, offers no PLAIN, and answers nothing but
the login before a client is authenticated; with its in-memory storage no user can be
created, so only the refused login can be tested against it (see docs/guide/limits.md);
logins that succeed are tested against Apache Kafka in tests/peers/test_real_kafka.py.
Its answer to a SCRAM login with a password it cannot match is a real SCRAM server
error (``e=unknown-user``), which librdkafka reports as an authentication failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.playground.broker import EmbeddedBroker
from tests.integration.replicas import checks_of, run_cli, write_config

pytestmark = [pytest.mark.kafka]


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(authentication=True) as broker:
        yield broker


def _config(tmp_path: Path, broker: EmbeddedBroker, mechanism: str) -> Path:
    return write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        r"^dbserver1\.",
        tmp_path / "lake",
        source={
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_username": "cdcctl",
            "sasl_password_env": "CDCCTL_TEST_KAFKA_PASSWORD",
        },
    )


def test_clients_without_a_login_are_not_served(sasl_broker: EmbeddedBroker) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap_servers, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_a_refused_login_stops_start_at_once_with_the_keys_to_fix(
    sasl_broker: EmbeddedBroker, mechanism: str, tmp_path: Path
) -> None:
    config = _config(tmp_path, sasl_broker, mechanism)
    env = {"CDCCTL_TEST_KAFKA_PASSWORD": "not-the-password"}

    started = time.monotonic()
    run = run_cli("start", "--config", str(config), "--until-caught-up", env=env, timeout=120)
    took = time.monotonic() - started
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert "refused the SASL login" in errors[0] and "authentication failed" in errors[0]
    assert "source.sasl_password_env" in run.stderr and "source.sasl_username" in run.stderr
    # Terminal: no retry lines, and over long before the first retry would even be due
    # after a failed first contact (6 s), Spark start included.
    assert "retry" not in run.stderr.lower(), run.stderr
    assert took < 30, took
    assert "not-the-password" not in run.stderr + run.stdout

    check = run_cli("test-connection", "--config", str(config), "--json", env=env, timeout=120)
    assert check.returncode == 1, check.stderr
    brokers = checks_of(check)["kafka.brokers"]
    assert brokers["status"] == "fail"
    assert "refused the SASL login" in brokers["detail"]
    assert "source.sasl_password_env" in brokers["fix"]


def test_a_mechanism_the_broker_does_not_offer_is_refused_as_such(
    sasl_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """PLAIN against a broker that offers only SCRAM: refused as a login, not retried as
    an unreachable broker."""
    config = _config(tmp_path, sasl_broker, "PLAIN")
    run = run_cli(
        "start",
        "--config",
        str(config),
        "--until-caught-up",
        env={"CDCCTL_TEST_KAFKA_PASSWORD": "x"},
        timeout=120,
    )
    assert run.returncode == 3, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert "refused the SASL login" in errors[0] and "PLAIN" in errors[0]
    assert "source.sasl_mechanism" in run.stderr
