"""A real single-node Apache Kafka broker (KRaft, combined broker and controller) for the
``peers`` tier, run from the pinned jars of ``interop/kafka`` (see tests/peers/jars.py).

``start_kafka(folder)`` formats a log folder with Kafka's storage tool and starts the
server with ``java -cp``; every listener binds a free loopback port. The ``PLAINTEXT``
listener always exists (the broker's own inter-broker listener, and what
:attr:`KafkaBroker.bootstrap_servers` names). More listeners are asked for with
:class:`KafkaOptions`:

    opts = KafkaOptions(
        listeners=(Listener("SASL", "SASL_PLAINTEXT"), Listener("TLS", "SSL")),
        scram_users={"alice": "alice-secret"},   # SCRAM-SHA-512, created at format time
        tls=TlsFiles(cert=..., key=...),          # PEM, e.g. tests/tls_support.make_certs
        config={"log.retention.check.interval.ms": "1000"},
    )
    broker = start_kafka(tmp / "kafka", opts)
    broker.address("SASL")   # "127.0.0.1:<port>"
    broker.stop()

SASL listeners enable SCRAM-SHA-512 (users from ``scram_users``; more can be added later
with Kafka's config tool, :meth:`KafkaBroker.run_tool`). The broker's log
(``<folder>/server.log``) and its stdout/stderr (``<folder>/java.log``) stay in the folder;
a broker that does not come up raises :class:`BrokerFailed` with their tails.
"""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.peers.jars import classpath
from tests.waiting import wait_until

STORAGE_TOOL = "kafka.tools.StorageTool"
SERVER = "kafka.Kafka"
JVM_OPTS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
SCRAM = "SCRAM-SHA-512"

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRefs = file
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
"""


class BrokerFailed(RuntimeError):
    """The broker (or one of Kafka's tools) did not do what was asked; the message holds
    the tail of its log."""


def terminate(proc: subprocess.Popen | None, grace: float) -> None:
    """End a JVM peer: SIGTERM (it flushes and closes), SIGKILL after ``grace`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log4j_config(folder: Path, log: Path) -> Path:
    """A Log4j 2 properties file sending every line to ``log`` (for a Kafka JVM)."""
    path = folder / "log4j2.properties"
    path.write_text(LOG4J2.format(log=log))
    return path


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"({path} not written)"


@dataclass(frozen=True)
class Listener:
    """A listener besides ``PLAINTEXT``: its name (upper case letters, digits, ``_``) and
    security protocol (``SASL_PLAINTEXT``, ``SSL``, ``SASL_SSL`` or ``PLAINTEXT``)."""

    name: str
    protocol: str


@dataclass(frozen=True)
class TlsFiles:
    """The broker's certificate and unencrypted PKCS#8 private key, both PEM (what
    tests/tls_support.make_certs writes as ``cert`` and ``key``)."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class KafkaOptions:
    listeners: tuple[Listener, ...] = ()
    scram_users: Mapping[str, str] = field(default_factory=dict)  # SCRAM-SHA-512 name -> password
    tls: TlsFiles | None = None
    config: Mapping[str, str] = field(default_factory=dict)  # more server.properties keys


@dataclass
class KafkaBroker:
    folder: Path
    options: KafkaOptions
    ports: dict[str, int]  # listener name -> port (PLAINTEXT and CONTROLLER included)
    process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The ``PLAINTEXT`` listener, ``127.0.0.1:<port>``."""
        return self.address("PLAINTEXT")

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def log_tail(self, chars: int = 4000) -> str:
        java = tail(self.folder / "java.log", 1500)
        return f"--- server.log ---\n{tail(self.log, chars)}\n--- java.log ---\n{java}"

    # -- configuration ------------------------------------------------------------------

    def properties(self) -> dict[str, str]:
        opts = self.options
        listeners = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
        for extra in opts.listeners:
            if extra.protocol not in PROTOCOLS:
                raise ValueError(f"listener {extra.name}: unknown protocol {extra.protocol}")
            if extra.name in listeners:
                raise ValueError(f"listener {extra.name} given twice")
            listeners[extra.name] = extra.protocol
        cport = self.ports["CONTROLLER"]
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{cport}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(f"{n}://127.0.0.1:{self.ports[n]}" for n in listeners),
            "advertised.listeners": ",".join(
                f"{n}://127.0.0.1:{self.ports[n]}" for n in listeners if n != "CONTROLLER"
            ),
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in listeners.items()),
            "log.dirs": str(self.folder / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        if any("SASL" in p for p in listeners.values()):
            props["sasl.enabled.mechanisms"] = SCRAM
            for name, protocol in listeners.items():
                if "SASL" in protocol:
                    props[f"listener.name.{name.lower()}.{SCRAM.lower()}.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    )
        if any("SSL" in p for p in listeners.values()):
            if opts.tls is None:
                raise ValueError("an SSL listener needs KafkaOptions.tls (certificate and key)")
            keystore = self.folder / "keystore.pem"
            keystore.write_text(opts.tls.key.read_text() + opts.tls.cert.read_text())
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(keystore)
        props.update(opts.config)
        return props

    def write_properties(self) -> Path:
        path = self.folder / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        return path

    # -- life cycle ---------------------------------------------------------------------

    def java(self, main: str, *args: str, log: Path | None = None) -> list[str]:
        """The command running ``main`` from the Kafka jars, logging into ``log`` (the
        broker's log by default)."""
        log = log or self.log
        config = log4j_config(log.parent, log)
        return [
            "java", *JVM_OPTS, f"-Dlog4j2.configurationFile={config}",
            f"-Dkafka.logs.dir={self.folder}", "-cp", classpath("kafka"), main, *args,
        ]  # fmt: skip

    def format(self) -> None:
        """Format the log folder (a new cluster id; SCRAM users added to its metadata)."""
        properties = self.write_properties()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # "--cluster-id=<id>": an id may start with "-" (1 in 64), which the storage tool's
        # parser takes for an option when given as a separate argument (seen on CI).
        args = ["format", "--config", str(properties), f"--cluster-id={cluster_id}"]
        for user, password in self.options.scram_users.items():
            args += ["--add-scram", f"{SCRAM}=[name={user},password={password}]"]
        done = subprocess.run(
            self.java(STORAGE_TOOL, *args), capture_output=True, text=True, timeout=120
        )
        if done.returncode:
            raise BrokerFailed(
                f"kafka-storage format failed ({done.returncode}): {done.stderr[-3000:]}"
                f"{done.stdout[-1000:]}"
            )

    def start(self, timeout: float = 120) -> None:
        """Start the server and wait until the PLAINTEXT listener answers metadata."""
        properties = self.folder / "server.properties"
        with open(self.folder / "java.log", "ab") as out:
            self.process = subprocess.Popen(
                self.java(SERVER, str(properties)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})

        def up() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerFailed(
                    f"the Kafka broker exited with {self.process.returncode} while starting\n"
                    + self.log_tail()
                )
            return bool(admin.list_topics(timeout=2).brokers)

        try:  # a KafkaException while it is not up yet
            wait_until(up, "the Kafka broker", timeout, interval=0.5, retry_on=(KafkaException,))
        except AssertionError as waited:
            self.stop()
            raise BrokerFailed(f"{waited}\n{self.log_tail()}") from None

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 30 s)."""
        proc, self.process = self.process, None
        terminate(proc, 30)

    # -- tools --------------------------------------------------------------------------

    def run_tool(self, main: str, *args: str, timeout: float = 120) -> str:
        """Run one of Kafka's command-line tools (by main class, e.g.
        ``org.apache.kafka.tools.TopicCommand`` or ``kafka.admin.ConfigCommand``) against
        this broker's PLAINTEXT listener; returns its stdout, raises
        :class:`BrokerFailed` on a non-zero exit."""
        tools_log = self.folder / "tools" / "tools.log"
        cmd = self.java(main, "--bootstrap-server", self.bootstrap_servers, *args, log=tools_log)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise BrokerFailed(f"{main} {' '.join(args)} failed: {done.stderr[-3000:]}")
        return done.stdout

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        """Create a topic (replication factor 1) with topic-level ``config``."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        topic = NewTopic(name, partitions, 1, config=dict(config or {}))
        admin.create_topics([topic])[name].result(60)

    def recreate_topic(self, name: str) -> None:
        """Delete topic ``name`` and create it again (a new topic id, offsets from 0)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        admin.delete_topics([name])[name].result(60)
        wait_until(  # "already exists" until the deletion is done
            lambda: self.create_topic(name) or True,
            f"topic {name} to be created again",
            60,
            interval=0.5,
            retry_on=(KafkaException,),
        )


def start_kafka(folder: Path, options: KafkaOptions | None = None) -> KafkaBroker:
    """Format ``folder`` and start a broker there; every listener on a free loopback port."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tools").mkdir(exist_ok=True)
    options = options or KafkaOptions()
    names = ["PLAINTEXT", "CONTROLLER", *(listener.name for listener in options.listeners)]
    broker = KafkaBroker(folder, options, {n: free_port() for n in names})
    broker.format()
    try:
        broker.start()
    except BaseException:  # an interrupt while it comes up must not leave the JVM running
        broker.stop()
        raise
    return broker
