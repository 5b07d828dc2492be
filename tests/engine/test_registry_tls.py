"""How the Avro decoder's registry client classifies TLS failures, against the test
registry behind a real TLS listener (certificates made here): a certificate failure or
a URL that is not TLS is terminal and names the key to fix; a CA file that cannot be
loaded is a config error; an unreachable registry stays transient."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from engine.decode.debezium_avro.registry import RegistrySettings, RegistryTlsError, SchemaCache
from engine.errors import ConfigError, SourceError, TransientError
from engine.playground.registry import SchemaRegistry
from tests.tls_support import issue, make_ca, make_certs, write_key

CA_KEY = "source.schema_registry.ssl_ca_location"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certs(tmp_path_factory.mktemp("tls"))


def test_the_right_ca_reads_schemas_over_tls(certs: dict[str, Path]) -> None:
    with SchemaRegistry(tls_cert=certs["cert"], tls_key=certs["key"]) as registry:
        sid = registry.register("s-value", {"type": "string"})
        cache = SchemaCache(RegistrySettings(registry.url, ssl_ca_location=str(certs["ca"])))
        assert cache.check() == 1
        assert cache.get(sid) == {"type": "string"}


@pytest.mark.parametrize(("ca", "call"), [(None, "check"), ("other_ca", "get")])
def test_an_unknown_ca_is_terminal_and_names_the_key(
    certs: dict[str, Path], ca: str | None, call: str
) -> None:
    """Both ways in: test-connection's check and the decoder's schema fetch (the client
    tries a failed connection 4 times, ~4 s, before it gives up)."""
    with SchemaRegistry(tls_cert=certs["cert"], tls_key=certs["key"]) as registry:
        sid = registry.register("s-value", {"type": "string"})
        cache = SchemaCache(RegistrySettings(registry.url, ssl_ca_location=ca and str(certs[ca])))
        with pytest.raises(RegistryTlsError) as info:
            cache.check() if call == "check" else cache.get(sid)
    assert not isinstance(info.value, TransientError)
    assert "certificate verify failed" in info.value.message
    assert CA_KEY in info.value.hint


def test_a_certificate_for_another_host_says_so(tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    key, cert = issue(ca, "registry.example", [x509.DNSName("registry.example")])
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_key(key, tmp_path / "key.pem")
    with SchemaRegistry(tls_cert=tmp_path / "cert.pem", tls_key=tmp_path / "key.pem") as reg:
        cache = SchemaCache(RegistrySettings(reg.url, ssl_ca_location=str(tmp_path / "ca.pem")))
        with pytest.raises(RegistryTlsError) as info:
            cache.check()
    assert "mismatch" in info.value.message
    assert "does not name the host in source.schema_registry.url" in info.value.hint


def test_https_to_a_plaintext_registry_is_terminal() -> None:
    with SchemaRegistry() as registry:
        url = registry.url.replace("http://", "https://")
        with pytest.raises(RegistryTlsError) as info:
            SchemaCache(RegistrySettings(url)).check()
    assert "does not speak TLS" in info.value.message
    assert "source.schema_registry.url" in info.value.hint


def test_a_ca_file_that_cannot_be_loaded_is_a_config_error(
    certs: dict[str, Path], tmp_path: Path
) -> None:
    for path, reason in ((tmp_path / "missing.pem", "No such file"), (certs["key"], "")):
        with pytest.raises(ConfigError) as info:
            SchemaCache(RegistrySettings("https://127.0.0.1:1", ssl_ca_location=str(path)))
        assert f"{CA_KEY} = {path}: cannot load" in info.value.message
        assert reason in info.value.message


def test_an_unreachable_registry_stays_transient(certs: dict[str, Path]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = RegistrySettings(f"https://127.0.0.1:{port}", ssl_ca_location=str(certs["ca"]))
    with pytest.raises(SourceError) as info:
        SchemaCache(settings).check()
    assert isinstance(info.value, TransientError) and "cannot be reached" in info.value.message
