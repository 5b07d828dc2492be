"""Certificates for TLS tests, made on the spot with ``cryptography``: a CA, a server
certificate it signed for ``localhost`` / ``127.0.0.1``, an unrelated CA, and a client
certificate whose private key is encrypted with a password (``ssl_key_password``)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: str | None = None) -> Path:
    """``key`` as PEM (PKCS#8), encrypted with ``password`` when one is given."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password is not None
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return path


def make_ca(folder: Path, common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA, its certificate written to ``folder/<common>.pem``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(common))
        .issuer_name(name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    (folder / f"{common}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def issue(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate],
    common: str,
    san: list[x509.GeneralName] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A certificate for ``common`` (and ``san``) signed by ``ca``."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(common))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def make_certs(folder: Path, client_key_password: str | None = None) -> dict[str, Path]:
    """Files in ``folder``: ``ca`` (test-ca.pem), ``other_ca`` (an unrelated CA),
    ``cert`` / ``key`` (a server certificate for localhost and 127.0.0.1 signed by the
    CA), and with ``client_key_password`` also ``client_cert`` / ``client_key`` (a client
    certificate whose key is encrypted with that password)."""
    ca = make_ca(folder, "test-ca")
    make_ca(folder, "other-ca")
    local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_key, server = issue(ca, "localhost", local)
    (folder / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    write_key(server_key, folder / "server.key")
    files = {
        "ca": folder / "test-ca.pem",
        "other_ca": folder / "other-ca.pem",
        "cert": folder / "server.pem",
        "key": folder / "server.key",
    }
    if client_key_password is not None:
        client_key, client = issue(ca, "cdcctl")
        (folder / "client.pem").write_bytes(client.public_bytes(serialization.Encoding.PEM))
        write_key(client_key, folder / "client.key", client_key_password)
        files["client_cert"] = folder / "client.pem"
        files["client_key"] = folder / "client.key"
    return files
