"""Kafka Connect standalone (``org.apache.kafka.connect.cli.ConnectStandalone``) running
connectors (e.g. Debezium's PostgreSQL connector) against a :class:`~tests.peers.kafka.KafkaBroker`,
from the pinned jars of ``interop/kafka``.

    connect = ConnectStandalone(folder, broker, {"pg": {"connector.class": ..., ...}},
                                schemas=True)
    connect.start()                 # waits until every connector and task is RUNNING
    wait_for_record(broker, topic, lambda key, value: ...)
    connect.stop()                  # graceful: offsets flushed
    connect.kill()                  # SIGKILL: the next start replays what was not flushed
    connect.start()                 # same worker and offsets file: resumes

The worker uses Kafka's JsonConverter for keys and values (``schemas`` turns
``schemas.enable`` on or off), stores source offsets in ``<folder>/offsets.dat`` and
serves its REST API on a free loopback port. A connector can override the worker's
converter settings in its own properties (``value.converter.schemas.enable=false``), so
one worker can run a schemas-on and a schemas-off connector side by side. Its log is
``<folder>/connect.log``; a worker or connector that fails raises :class:`ConnectFailed`
with the log's tail.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.peers.jars import classpath
from tests.peers.kafka import KafkaBroker, free_port, log4j_config, tail, terminate
from tests.waiting import wait_until

MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"
JSON = "org.apache.kafka.connect.json.JsonConverter"


class ConnectFailed(RuntimeError):
    """Kafka Connect or its connector failed; the message holds the log's tail."""


class ConnectStandalone:
    def __init__(
        self,
        folder: Path,
        broker: KafkaBroker,
        connectors: Mapping[str, Mapping[str, str]],
        *,
        schemas: bool = True,
        worker: Mapping[str, str] | None = None,
        class_path: str | None = None,
    ) -> None:
        self.folder = folder
        self.broker = broker
        self.connectors = {
            name: {"name": name, "tasks.max": "1", **props} for name, props in connectors.items()
        }
        self.schemas = schemas
        self.port = free_port()
        self.extra_worker = dict(worker or {})
        #: The worker's ``java -cp`` (None: every jar of interop/kafka).
        self.class_path = class_path
        self.process: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def log(self) -> Path:
        return self.folder / "connect.log"

    def log_tail(self, chars: int = 6000) -> str:
        java = tail(self.folder / "java.log", 1500)
        return f"--- connect.log ---\n{tail(self.log, chars)}\n--- java.log ---\n{java}"

    def worker_properties(self) -> dict[str, str]:
        enabled = "true" if self.schemas else "false"
        return {
            "bootstrap.servers": self.broker.bootstrap_servers,
            "key.converter": JSON,
            "value.converter": JSON,
            "key.converter.schemas.enable": enabled,
            "value.converter.schemas.enable": enabled,
            "offset.storage.file.filename": str(self.folder / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{self.port}",
            # The connectors are on the class path; their service manifests name them.
            "plugin.discovery": "service_load",
            **self.extra_worker,
        }

    def _write(self) -> list[Path]:
        worker = self.folder / "worker.properties"
        worker.write_text("".join(f"{k}={v}\n" for k, v in self.worker_properties().items()))
        files = [worker]
        for name, props in self.connectors.items():
            files.append(self.folder / f"{name}.properties")
            files[-1].write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return files

    def start(self, timeout: float = 180) -> None:
        """Start the worker with its connectors; wait until all are RUNNING."""
        files = self._write()
        config = log4j_config(self.folder, self.log)
        cmd = [
            "java", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={config}", "-cp", self.class_path or classpath("kafka"),
            MAIN,
            *map(str, files),
        ]  # fmt: skip
        with open(self.folder / "java.log", "ab") as out:
            self.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self.wait_running(timeout)

    def status(self, name: str) -> dict[str, Any] | None:
        """The REST status of connector ``name``, or None while the worker does not answer."""
        url = f"http://127.0.0.1:{self.port}/connectors/{name}/status"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_running(self, timeout: float = 180) -> None:
        statuses: dict[str, Any] = {}

        def running() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ConnectFailed(
                    f"Kafka Connect exited with {self.process.returncode}\n" + self.log_tail()
                )
            statuses.update((name, self.status(name)) for name in self.connectors)
            ready = True
            for name, status in statuses.items():
                if not status:
                    ready = False
                    continue
                states = [status["connector"]["state"], *(t["state"] for t in status["tasks"])]
                if "FAILED" in states:
                    traces = [t.get("trace", "") for t in status["tasks"]]
                    raise ConnectFailed(f"connector {name} FAILED: {traces}\n" + self.log_tail())
                if not (status["tasks"] and all(s == "RUNNING" for s in states)):
                    ready = False
            return ready

        try:
            wait_until(running, "every connector RUNNING", timeout, interval=0.5)
        except AssertionError as waited:
            raise ConnectFailed(f"{waited} ({statuses})\n{self.log_tail()}") from None

    def check_running(self) -> None:
        """Raise :class:`ConnectFailed` if the worker ended or the connector failed."""
        self.wait_running(timeout=30)

    def stop(self) -> None:
        """Stop the worker gracefully (SIGTERM; offsets are flushed)."""
        proc, self.process = self.process, None
        terminate(proc, 60)

    def kill(self) -> None:
        """End the worker at once (SIGKILL), as a crash would: what it produced after its
        last offset flush is produced again after the next start."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)


def consume_all(
    broker: KafkaBroker, topics: list[str], timeout: float = 30
) -> dict[str, list[tuple[Any, Any]]]:
    """Every record now in ``topics`` (JSON-decoded key and value; None for null), read
    from the start up to the end offsets taken when called."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "peers-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        meta = consumer.list_topics(timeout=10)
        wanted: dict[tuple[str, int], int] = {}
        for topic in topics:
            for partition in meta.topics[topic].partitions:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10
                )
                if high > 0:
                    wanted[(topic, partition)] = high
        out: dict[str, list[tuple[Any, Any]]] = {t: [] for t in topics}
        if not wanted:
            return out
        consumer.assign([TopicPartition(t, p, 0) for t, p in wanted])
        seen: dict[tuple[str, int], int] = {}

        def at_the_end() -> bool:
            for msg in consumer.consume(500, 1.0):
                if msg.error():
                    continue
                tp = (msg.topic(), msg.partition())
                if msg.offset() >= wanted.get(tp, 0):
                    continue
                seen[tp] = msg.offset()
                key = json.loads(msg.key()) if msg.key() else None
                value = json.loads(msg.value()) if msg.value() else None
                out[msg.topic()].append((key, value))
            return all(seen.get(tp, -1) + 1 >= high for tp, high in wanted.items())

        try:
            wait_until(
                at_the_end, f"reading {topics} to the end offsets {wanted}", timeout, interval=0
            )
        except AssertionError as waited:
            raise TimeoutError(str(waited)) from None
        return out
    finally:
        consumer.close()


def payload(value: Any) -> Any:
    """The payload of a JsonConverter value, with or without its schema envelope."""
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:
        return value["payload"]
    return value


def wait_for_record(
    broker: KafkaBroker,
    topic: str,
    match: Callable[[Any, Any], bool],
    *,
    connect: ConnectStandalone | None = None,
    timeout: float = 120,
) -> None:
    """Wait until ``topic`` holds a record for which ``match(key payload, value payload)``
    is true (e.g. a marker row written last, or Debezium's last snapshot record). With
    ``connect``, fail at once with its log if the connector stops running."""

    def found() -> bool:
        if topic in topic_names(broker):
            for key, value in consume_all(broker, [topic])[topic]:
                if match(payload(key), payload(value)):
                    return True
        if connect is not None:
            connect.check_running()
        return False

    try:
        wait_until(found, f"a matching record in {topic}", timeout, interval=1)
    except AssertionError as waited:
        extra = connect.log_tail() if connect else ""
        raise TimeoutError(f"{waited}\n{extra}") from None


def topic_names(broker: KafkaBroker) -> set[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    return set(admin.list_topics(timeout=10).topics)


def wait_snapshot_done(
    broker: KafkaBroker, topics: list[str], connect: ConnectStandalone, timeout: float = 180
) -> None:
    """Wait until one of ``topics`` holds Debezium's last snapshot record."""

    def done() -> bool:
        present = [t for t in topics if t in topic_names(broker)]
        for records in consume_all(broker, present).values():
            if any(snapshot_done(None, payload(value)) for _, value in records):
                return True
        connect.check_running()
        return False

    try:
        wait_until(done, f"the last snapshot record in {topics}", timeout, interval=1)
    except AssertionError as waited:
        raise TimeoutError(f"{waited}\n{connect.log_tail()}") from None


def snapshot_done(key: Any, value: Any) -> bool:
    """Debezium's last snapshot record (``source.snapshot == "last"``)."""
    return isinstance(value, dict) and (value.get("source") or {}).get("snapshot") == "last"
