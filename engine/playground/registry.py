"""A small Confluent-compatible schema registry for tests, demos and benchmarks.

No schema registry that runs here installs from the package index (Karapace is not
there; Confluent's and Apicurio's are Java services), so tests run this one: an HTTP
server in a thread with the subset of the Confluent REST API that confluent-kafka's
``SchemaRegistryClient`` and ``AvroSerializer`` use:

* ``POST /subjects/{subject}/versions``: register (an identical schema keeps its id),
* ``GET /schemas/ids/{id}``, ``GET /subjects``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects/{subject}/versions/{version|latest}``,
* ``POST /subjects/{subject}``: look a schema up under a subject.

Ids are global and start at 1, like Confluent's. Optional HTTP basic authentication, and
optional TLS: with a certificate and key the registry is reached at an ``https://`` URL
through a :class:`~engine.playground.tls.TlsTerminator` (a real TLS handshake, OpenSSL on
both sides), like the embedded broker.
Errors use Confluent's body ``{"error_code": ..., "message": ...}`` (40401 subject not
found, 40402 version not found, 40403 schema not found, 401 unauthorized).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from engine.playground.children import Service

__all__ = ["SchemaRegistry"]


class _Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: dict[int, dict[str, Any]] = {}  # id -> {"schema", "schemaType"}
        self.ids: dict[tuple[str, str], int] = {}  # (type, canonical schema) -> id
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version

    @staticmethod
    def canonical(schema: str) -> str:
        try:
            return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return schema

    def register(self, subject: str, schema: str, schema_type: str, fixed_id: int | None) -> dict:
        with self.lock:
            key = (schema_type, self.canonical(schema))
            sid = self.ids.get(key)
            if sid is None:
                sid = fixed_id if fixed_id is not None else max(self.schemas, default=0) + 1
                self.ids[key] = sid
                self.schemas[sid] = {"schema": schema, "schemaType": schema_type}
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            version = versions.index(sid) + 1
        return {"id": sid, "subject": subject, "version": version, "schema": schema,
                "schemaType": schema_type}  # fmt: skip


class SchemaRegistry(Service):
    """The registry on ``127.0.0.1`` and a free port; ``url`` once started.

    Args:
        user: With ``password``: require HTTP basic authentication.
        password: The basic-auth password.
        port: The port to listen on (0: a free one); with TLS, the plaintext port behind
            the terminator.
        store: Serve the schemas of another registry's ``store`` (a registry that went
            away and came back).
        tls_cert: A PEM server certificate (chain); with ``tls_key``, ``url`` is
            ``https://127.0.0.1:<port>`` and clients speak TLS to it.
        tls_key: The PEM private key of ``tls_cert``.
    """

    def __init__(
        self,
        user: str | None = None,
        password: str | None = None,
        *,
        port: int = 0,
        store: _Store | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        self._tls = (str(tls_cert), str(tls_key)) if tls_cert and tls_key else None
        self._terminator: Any = None
        self.store = store if store is not None else _Store()
        self.port = port
        self.requests = 0
        self._auth = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self._auth = f"Basic {token}"
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the registry is not started")
        if self._terminator is not None:
            return f"https://127.0.0.1:{self._terminator.port}"
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def register(self, subject: str, schema: Any, schema_id: int | None = None) -> int:
        """Register a schema directly (tests that need a given id); returns its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        return int(self.store.register(subject, text, "AVRO", schema_id)["id"])

    def start(self) -> SchemaRegistry:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, code: int, message: str) -> None:
                self._send(status, {"error_code": code, "message": message})

            def _authorized(self) -> bool:
                registry.requests += 1
                if registry._auth is None or self.headers.get("Authorization") == registry._auth:
                    return True
                self._error(401, 401, "Unauthorized")
                return False

            def _parts(self) -> list[str]:
                return [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/") if p]

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if not self._authorized():
                    return
                parts = self._parts()
                store = registry.store
                with store.lock:
                    if parts == ["subjects"]:
                        return self._send(200, sorted(store.subjects))
                    if parts == ["schemas", "types"]:
                        return self._send(200, ["AVRO"])
                    if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                        found = store.schemas.get(int(parts[2]))
                        if found is None:
                            return self._error(404, 40403, "Schema not found")
                        return self._send(200, {"id": int(parts[2]), **found})
                    if len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
                        versions = store.subjects.get(parts[1])
                        if versions is None:
                            return self._error(404, 40401, "Subject not found")
                        if len(parts) == 3:
                            return self._send(200, list(range(1, len(versions) + 1)))
                        v = parts[3]
                        n = len(versions) if v in ("latest", "-1") else int(v) if v.isdigit() else 0
                        if not 1 <= n <= len(versions):
                            return self._error(404, 40402, "Version not found")
                        sid = versions[n - 1]
                        found = {"subject": parts[1], "version": n, "id": sid}
                        return self._send(200, {**found, **store.schemas[sid]})
                    if parts and parts[0] == "config":
                        return self._send(200, {"compatibilityLevel": "NONE"})
                return self._error(404, 404, f"no route {self.path}")

            def do_POST(self) -> None:  # noqa: N802
                if not self._authorized():
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    schema = body["schema"]
                except (ValueError, KeyError, TypeError):
                    return self._error(422, 42201, "Invalid schema")
                schema_type = body.get("schemaType") or "AVRO"
                parts = self._parts()
                store = registry.store
                if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                    return self._send(200, store.register(parts[1], schema, schema_type, None))
                if len(parts) == 2 and parts[0] == "subjects":
                    with store.lock:
                        sid = store.ids.get((schema_type, store.canonical(schema)))
                        versions = store.subjects.get(parts[1])
                    if versions is None:
                        return self._error(404, 40401, "Subject not found")
                    if sid is None or sid not in versions:
                        return self._error(404, 40403, "Schema not found")
                    return self._send(200, {"subject": parts[1], "version": versions.index(sid) + 1,
                                            "id": sid, "schema": schema})  # fmt: skip
                return self._error(404, 404, f"no route {self.path}")

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="schema-registry", daemon=True
        )
        self._thread.start()
        if self._tls is not None:
            from engine.playground.tls import TlsTerminator

            self._terminator = TlsTerminator(*self._tls)
            self._terminator.target = self._server.server_address[1]
            self._terminator.start()
        return self

    def stop(self) -> None:
        if self._terminator is not None:
            self._terminator.stop()
            self._terminator = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
