"""Writer schemas by id from a Confluent-compatible schema registry, cached.

Uses confluent-kafka's :class:`SchemaRegistryClient` (``GET /schemas/ids/{id}``). A
schema never changes once it has an id, so each is fetched once per process.

Failures: an id the registry does not know is a property of the record (the caller
quarantines it); a registry that cannot be reached or answers 5xx is transient
(:class:`engine.errors.SourceError`, retried with backoff); refused credentials are
terminal.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import CdcError, SourceError

if TYPE_CHECKING:
    from engine.config import Config


class UnknownSchema(Exception):
    """The registry has no schema with this id (or it is not an Avro schema)."""


class RegistryAuthError(CdcError):
    """The schema registry refused the credentials."""


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
        self._client = SchemaRegistryClient(settings.client_conf())
        self._schemas: dict[int, Any] = {}
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> Any:
        """The schema of ``schema_id``.

        Raises:
            UnknownSchema: The registry does not know the id.
            SourceError: The registry cannot be reached (transient).
            RegistryAuthError: The registry refused the credentials.
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
                raise RegistryAuthError(
                    f"{where} refused the credentials (HTTP {status})",
                    hint="check source.schema_registry.basic_auth_user and its password",
                ) from None
            raise SourceError(
                f"{where} failed to give schema id {schema_id}: HTTP {status} {exc.error_message}",
                hint="the registry is retried; check that it is healthy",
            ) from None
        except Exception as exc:  # noqa: BLE001 - httpx / TLS / DNS failures: unreachable
            raise SourceError(
                f"{where} cannot be reached: {type(exc).__name__}: {exc}",
                hint="check source.schema_registry.url and that the registry is up; "
                "the replicator retries",
            ) from None
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
                raise RegistryAuthError(
                    f"schema registry {self.settings.url} refused the credentials (HTTP {status})",
                    hint="check source.schema_registry.basic_auth_user and its password",
                ) from None
            raise SourceError(
                f"schema registry {self.settings.url} cannot be reached: {exc}",
                hint="check source.schema_registry.url and that the registry is up",
            ) from None
