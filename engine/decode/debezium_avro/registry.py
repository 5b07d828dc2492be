"""Writer schemas by id from a Confluent-compatible schema registry, cached.

Uses confluent-kafka's :class:`SchemaRegistryClient` (``GET /schemas/ids/{id}``). A
schema never changes once it has an id, so each is fetched once per process.

Failures: an id the registry does not know is a property of the record (the caller
quarantines it); a registry that cannot be reached or answers 5xx is transient
(:class:`engine.errors.SourceError`, retried with backoff); refused credentials and a
failed TLS handshake (a certificate the CA file does not vouch for, a URL that is not
TLS) are terminal, like Kafka's (retrying with the same settings cannot help); a CA
file that cannot be read is a config error.
"""

from __future__ import annotations

import json
import ssl
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import CdcError, ConfigError, SourceError, TerminalError

if TYPE_CHECKING:
    from engine.config import Config


class UnknownSchema(Exception):
    """The registry has no schema with this id (or it is not an Avro schema)."""


class RegistryAuthError(TerminalError):
    """The schema registry refused the credentials."""


class RegistryTlsError(TerminalError):
    """The TLS handshake with the schema registry failed (terminal)."""


CA_KEY = "source.schema_registry.ssl_ca_location"
#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH: the
#: certificate is for another host.
_NAME_MISMATCH = (62, 64)


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    """How to reach the registry (resolved from ``[source.schema_registry]``)."""

    url: str
    user: str | None = None
    password: str | None = None
    ssl_ca_location: str | None = None

    def client_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url}
        if self.user is not None:
            conf["basic.auth.user.info"] = f"{self.user}:{self.password or ''}"
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        return conf


def settings_from_config(cfg: Config) -> RegistrySettings:
    """The registry settings of ``[source.schema_registry]`` (password resolved)."""
    registry = cfg.source.schema_registry
    if registry is None:  # config validation requires it for debezium-avro
        raise ValueError('format "debezium-avro" needs [source.schema_registry]')
    password = registry.password_value()
    return RegistrySettings(
        registry.url,
        registry.basic_auth_user,
        None if password is None else password.get_secret_value(),
        registry.ssl_ca_location,
    )


class SchemaCache:
    """Avro writer schemas (parsed JSON) by id."""

    def __init__(self, settings: RegistrySettings) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.settings = settings
        try:
            self._client = SchemaRegistryClient(settings.client_conf())
        except (OSError, ValueError) as exc:  # the CA file: missing, unreadable, not PEM
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(
                f"{CA_KEY} = {settings.ssl_ca_location}: cannot load the CA certificate(s) "
                f"({reason})",
                hint=f"set {CA_KEY} to a readable PEM file (or folder) of CA certificates",
            ) from None
        self._schemas: dict[int, Any] = {}
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> Any:
        """The schema of ``schema_id``.

        Raises:
            UnknownSchema: The registry does not know the id.
            SourceError: The registry cannot be reached (transient).
            RegistryAuthError: The registry refused the credentials.
            RegistryTlsError: The TLS handshake failed.
        """
        with self._lock:
            if schema_id in self._schemas:
                return self._schemas[schema_id]
        schema = self._fetch(schema_id)
        with self._lock:
            self._schemas[schema_id] = schema
        return schema

    def _fetch(self, schema_id: int) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        where = f"schema registry {self.settings.url}"
        try:
            found = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            if status == 404:
                raise UnknownSchema(f"schema id {schema_id} is not in the {where}") from None
            if status in (401, 403):
                raise self._refused(status) from None
            raise SourceError(
                f"{where} failed to give schema id {schema_id}: HTTP {status} {exc.error_message}",
                hint="the registry is retried; check that it is healthy",
            ) from None
        except Exception as exc:  # noqa: BLE001 - httpx / TLS / DNS failures
            raise self._unreachable(exc, "the replicator retries") from None
        if (found.schema_type or "AVRO").upper() != "AVRO":
            raise UnknownSchema(f"schema id {schema_id} is a {found.schema_type} schema, not Avro")
        text = found.schema_str or ""
        try:
            return json.loads(text)
        except ValueError:
            if text.strip():
                return text.strip().strip('"')  # a primitive written bare
            raise UnknownSchema(f"schema id {schema_id} is not valid JSON") from None

    def check(self) -> int:
        """Reach the registry once (``GET /subjects``) for ``cdcctl test-connection``;
        returns how many subjects it holds."""
        try:
            return len(self._client.get_subjects())
        except Exception as exc:  # noqa: BLE001
            status = getattr(exc, "http_status_code", None)
            if status in (401, 403):
                raise self._refused(status) from None
            if status is not None:
                raise SourceError(
                    f"schema registry {self.settings.url} answered HTTP {status}: "
                    f"{getattr(exc, 'error_message', exc)}",
                    hint="check source.schema_registry.url and that the registry is healthy",
                ) from None
            raise self._unreachable(exc) from None

    def _refused(self, status: int) -> RegistryAuthError:
        return RegistryAuthError(
            f"schema registry {self.settings.url} refused the credentials (HTTP {status})",
            hint="check source.schema_registry.basic_auth_user and its password",
        )

    def _unreachable(self, exc: BaseException, retried: str = "") -> CdcError:
        """The error for a request that got no HTTP answer: a failed TLS handshake
        (terminal, naming the key to fix) or an unreachable registry (transient)."""
        where = f"schema registry {self.settings.url}"
        cause = _tls_cause(exc)
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = cause.verify_message or "certificate verify failed"
            if cause.verify_code in _NAME_MISMATCH:
                hint = (
                    "the registry's certificate does not name the host in "
                    "source.schema_registry.url: use a host name it is issued for"
                )
            else:
                hint = (
                    f"set {CA_KEY} to the PEM file of the CA that signed the registry's certificate"
                )
            return RegistryTlsError(
                f"TLS handshake with the {where} failed: certificate verify failed: {reason}",
                hint=hint,
            )
        if cause is not None:
            plain = cause.reason == "WRONG_VERSION_NUMBER"
            why = "it does not speak TLS at that address" if plain else cause.reason or str(cause)
            return RegistryTlsError(
                f"TLS handshake with the {where} failed: {why}",
                hint="check that source.schema_registry.url names the registry's TLS (https) "
                f"port (http:// for a registry without TLS), and {CA_KEY}",
            )
        hint = "check source.schema_registry.url and that the registry is up"
        return SourceError(
            f"{where} cannot be reached: {type(exc).__name__}: {exc}",
            hint=f"{hint}; {retried}" if retried else hint,
        )


def _tls_cause(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc`` (httpx wraps it), unless it is only a connection
    cut short (EOF during the handshake: transient, like an unreachable registry)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            if isinstance(current, ssl.SSLEOFError | ssl.SSLZeroReturnError):
                return None
            return current
        current = current.__cause__ or current.__context__
    return None
