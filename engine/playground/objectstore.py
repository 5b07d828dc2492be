"""A local S3-compatible object store, so the embedded broker's topics survive a restart.

Tansu v0.6.0 keeps topics in memory, in PostgreSQL or in S3. This build refuses
``--storage-engine postgres://...`` (``FeatureNotEnabled``: compiled without it) but
accepts ``s3://BUCKET/`` (its "dynostore" engine over the ``object_store`` crate). An
:class:`S3Server` runs moto's S3 server (``moto[server]``, a test and benchmark
dependency) as a child process on a free loopback port with one bucket; an
:class:`~engine.playground.broker.EmbeddedBroker` given it stores every topic there, so
the broker can be killed and started again with its topics, messages and offsets intact
(the broker-restart test and ``bench/soak_faults.py`` do that).

Tansu reads the store's address and credentials from the environment (:meth:`env`):
``AWS_ENDPOINT`` / ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_DEFAULT_REGION`` and ``AWS_ALLOW_HTTP=true`` (the local server speaks plain HTTP).
The credentials are dummies moto accepts; nothing leaves the machine.

The moto server keeps its objects in memory: they live as long as the :class:`S3Server`
process, which outlives any number of broker restarts.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from engine.errors import EnvironmentProblem
from engine.playground.children import Service, free_port

REGION = "us-east-1"
_HINT = "pip install 'moto[server]' (a test and benchmark dependency of cdcctl)"


class S3Server(Service):
    """moto's S3 server in a child process, with one bucket (``tansu`` by default)."""

    def __init__(self, bucket: str = "tansu", start_timeout: float = 30.0) -> None:
        self.bucket = bucket
        self.port: int | None = None
        self._timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: tempfile._TemporaryFileWrapper[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self.port is None:
            raise RuntimeError("the S3 server is not running; call start() first")
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_url(self) -> str:
        """The broker's ``--storage-engine`` value: ``s3://BUCKET/``."""
        return f"s3://{self.bucket}/"

    def env(self) -> dict[str, str]:
        """The environment that points Tansu's object store at this server."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "cdcctl-playground",
            "AWS_SECRET_ACCESS_KEY": "cdcctl-playground",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def start(self) -> S3Server:
        """Start the server and create the bucket.

        Raises:
            EnvironmentProblem: moto is not installed or the server does not come up.
        """
        try:
            import moto.server  # noqa: F401
        except ImportError:
            raise EnvironmentProblem("moto's S3 server is not installed", _HINT) from None
        self.port = free_port()
        self._log = tempfile.NamedTemporaryFile(prefix="cdcctl-s3-", suffix=".log")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + self._timeout
        while True:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = Path(self._log.name).read_bytes()[-400:].decode("utf-8", "replace")
                self.stop()
                raise EnvironmentProblem(f"the S3 server did not start: {tail}", _HINT)
            try:
                status = self._request("PUT", f"/{self.bucket}")
            except OSError:
                time.sleep(0.1)
                continue
            if status in (200, 409):  # created, or already there
                return self
            time.sleep(0.1)

    def _request(self, method: str, path: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port or 0, timeout=5)
        try:
            conn.request(method, path)
            return conn.getresponse().status
        finally:
            conn.close()

    def stop(self) -> None:
        """Stop the server (idempotent); its objects are gone."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
        atexit.unregister(self.stop)


class S3Proxy:
    """An HTTP proxy in front of an S3 server (a thread of this process) that records
    every request and can drop headers: the benchmark counts the requests a replicator
    makes, and a test drops the conditional headers to play a store that ignores them.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``, what a client is pointed at instead.
        requests: ``(method, path and query, conditional header or "")`` of each request.
    """

    def __init__(self, upstream: str, drop_headers: tuple[str, ...] = ()) -> None:
        parts = urlsplit(upstream)
        target = (parts.hostname or "127.0.0.1", parts.port or 80)
        dropped = {h.lower() for h in drop_headers}
        self.requests: list[tuple[str, str, str]] = []
        record = self.requests.append

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                condition = next(
                    (f"{k}: {v}" for k, v in self.headers.items() if k.lower().startswith("if-")),
                    "",
                )
                record((self.command, self.path, condition))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                conn = http.client.HTTPConnection(*target, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                head = self.command == "HEAD"  # its Content-Length is the object's size
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                    elif k.lower() == "content-length" and head:
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> S3Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
