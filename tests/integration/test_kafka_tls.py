"""Kafka over TLS for real: a CA and a server certificate made here, the embedded broker
behind a TLS listener, the real CLI (`test-connection`, `start`) as the client.

The Tansu broker cannot serve TLS itself (v0.6.0: ``--cert`` and ``--key`` exclude each
other on its command line), so :class:`EmbeddedBroker` fronts it with a TLS terminator
(:mod:`engine.playground.tls`); librdkafka's side is exactly what a TLS broker sees.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from engine.playground.broker import EmbeddedBroker, produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, checks_of, run_cli, write_config
from tests.oracle import fold
from tests.tls_support import issue, make_ca, make_certs, write_key

pytestmark = [pytest.mark.kafka]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate it signed for localhost / 127.0.0.1, and an unrelated CA."""
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_broker(certs: dict[str, Path]) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tls_cert=certs["cert"], tls_key=certs["key"]) as broker:
        yield broker


def _config(tmp_path: Path, broker: EmbeddedBroker, prefix: str, ca: Path) -> Path:
    return write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(prefix)}\\.",
        tmp_path / "lake",
        source={"security_protocol": "SSL", "ssl_ca_location": str(ca)},
    )


def test_plaintext_clients_are_not_served(tls_broker: EmbeddedBroker) -> None:
    """The broker really is TLS only: a plaintext client gets no metadata."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap_servers, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)


@pytest.mark.spark
def test_test_connection_and_replication_through_tls(
    tls_broker: EmbeddedBroker, certs: dict[str, Path], topic_prefix: str, tmp_path: Path
) -> None:
    messages = list(InventoryWorkload(seed=5, prefix=topic_prefix, schemas=True).events(3000))
    produce_messages(tls_broker.bootstrap_servers, messages, config=tls_broker.client_config())
    config = _config(tmp_path, tls_broker, topic_prefix, certs["ca"])

    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    assert "Traceback" not in check.stderr, check.stderr
    found = checks_of(check)
    assert found["kafka.brokers"]["status"] == "pass", found["kafka.brokers"]
    assert "(SSL)" in found["kafka.brokers"]["detail"]
    assert "3 topics match" in found["kafka.topics"]["detail"]
    assert found["kafka.decode"]["status"] == "pass", found["kafka.decode"]

    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr
    counts = assert_replicas_match(tmp_path / "lake", fold(messages))
    assert sum(counts.values()) > 0


def test_wrong_ca_is_refused_with_the_key_to_fix(
    tls_broker: EmbeddedBroker, certs: dict[str, Path], topic_prefix: str, tmp_path: Path
) -> None:
    produce_messages(
        tls_broker.bootstrap_servers,
        [(f"{topic_prefix}.inventory.customers", b"k", b"{}")],
        config=tls_broker.client_config(),
    )
    config = _config(tmp_path, tls_broker, topic_prefix, certs["other_ca"])

    started = time.monotonic()
    check = run_cli("test-connection", "--config", str(config), "--json", timeout=120)
    assert check.returncode == 1, check.stderr
    found = checks_of(check)
    brokers = found["kafka.brokers"]
    assert brokers["status"] == "fail"
    assert "TLS handshake" in brokers["detail"] and "certificate verify failed" in brokers["detail"]
    assert "source.ssl_ca_location" in brokers["fix"]

    started = time.monotonic()
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=120)
    took = time.monotonic() - started
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert "TLS handshake with Kafka" in errors[0]
    assert "certificate verify failed" in errors[0]
    assert "source.ssl_ca_location" in run.stderr
    # Terminal, not retried: no "retrying" lines, and it stops well before a retry budget.
    assert "retry" not in run.stderr.lower(), run.stderr
    assert took < 30, took


def test_a_certificate_for_another_name_is_refused_unless_names_are_not_checked(
    tmp_path: Path,
) -> None:
    """Endpoint identification is on by default: a certificate from the right CA but for
    another host name is refused (and the message says which key relaxes it)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    from engine.config import SourceConfig
    from engine.errors import KafkaSecurityError
    from engine.source.kafka import KafkaSource

    key, cert = issue(
        make_ca(tmp_path, "name-ca"), "kafka.example", [x509.DNSName("kafka.example")]
    )
    (tmp_path / "other.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_key(key, tmp_path / "other.key")
    assert load_pem_private_key((tmp_path / "other.key").read_bytes(), None)

    with EmbeddedBroker(tls_cert=tmp_path / "other.pem", tls_key=tmp_path / "other.key") as b:
        b.create_topics(["names.t"])
        for check_names in (True, False):
            cfg = SourceConfig(
                bootstrap_servers=b.bootstrap_servers,
                topics="^names",
                security_protocol="SSL",
                ssl_ca_location=str(tmp_path / "name-ca.pem"),
                ssl_endpoint_identification=check_names,
            )
            source = KafkaSource(cfg, 100)
            try:
                if check_names:
                    with pytest.raises(KafkaSecurityError) as info:
                        source.discover()
                    assert "certificate verify failed" in info.value.message
                    assert "source.ssl_endpoint_identification = false" in info.value.hint
                else:
                    assert source.discover() == {"names.t": [0]}
            finally:
                source.close()
