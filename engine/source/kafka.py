"""Kafka side of the pipeline: topic discovery, explicit assignment, batched consumption.

Partitions are *assigned* (not subscribed through a consumer group): the replicator
decides where each partition starts, from the checkpoint in the table's newest
completed Hudi commit. Group offsets are still committed, after the Hudi commit, so
that external lag tools see progress; they are never read back for recovery.

librdkafka's defaults stall between fetches (``fetch.queue.backoff.ms`` is 1 s); a short
backoff and a ``queued.min.messages`` at least the batch size keep the pipe full. The
backoff must not be 0: while the driver decodes, the prefetch queue is full and a zero
backoff makes the broker thread re-check it in a busy loop (measured: 9.5 CPU-s of the
1M-event catch-up's 18 on the driver, against 0.4 s with 10 ms).
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from engine.config import SourceConfig
from engine.errors import ConfigError, KafkaSecurityError, SourceError
from engine.source.transactions import transaction_topic

#: Operations on the broker wait at most this long before the error is reported.
TIMEOUT_S = 15.0
#: How long a consumer's close is waited for. librdkafka's close waits for the group
#: offset commits still in flight, which a broker that went away never answers: measured
#: over two minutes, and a retry after an outage waited ~45 s for it. The close goes on
#: in its own thread; nothing depends on those commits (lag display only).
CLOSE_WAIT_S = 5.0
#: The first contact gives up sooner: an unreachable broker is reported within seconds.
FIRST_CONTACT_S = 6.0
#: The longest single wait of an adaptive poll (``KafkaSource.poll`` with ``until``):
#: how late a poll notices that the batch in flight has merged. (librdkafka's
#: ``consume`` returns only once it has read as many messages as asked or its timeout
#: has passed, however many it could hand over before.)
POLL_SLICE_SECONDS = 0.01

log = logging.getLogger("cdcctl.source")


# librdkafka's own log lines (e.g. one "Connect ... failed" line every few ms while a
# broker is down) go to this logger instead of raw stderr. It has a NullHandler, so they
# show only where an application configures logging; the engine reports broker errors itself.
KAFKA_LOG = logging.getLogger("cdcctl.kafka")
KAFKA_LOG.addHandler(logging.NullHandler())


def kafka_reason(exc: KafkaException) -> str:
    """The readable part of a librdkafka error ("Failed to get metadata: ...")."""
    first = exc.args[0] if exc.args else exc
    return first.str() if isinstance(first, KafkaError) else str(exc)


def unreachable_why(bootstrap_servers: str, timeout: float = 1.0) -> str:
    """Why the bootstrap servers cannot be reached, as far as a plain TCP connection
    tells ("" when one accepts it: the trouble is beyond the socket, e.g. TLS or SASL):
    a host name that does not resolve, nothing listening, or no answer at all."""
    reasons = []
    for server in bootstrap_servers.split(","):
        server = re.sub(r"^\w+://", "", server.strip())
        host, _, port = server.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            continue
        try:
            socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            reasons.append(f"{host}: the host name does not resolve (DNS)")
            continue
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return ""
        except ConnectionRefusedError:
            reasons.append(f"{server}: connection refused (nothing listens on that port)")
        except OSError as exc:
            reasons.append(f"{server}: no answer ({exc.strerror or type(exc).__name__})")
    return "; ".join(reasons)


#: librdkafka errors that a retry cannot cure: the TLS handshake or the SASL login failed.
SECURITY_ERRORS = frozenset(
    {KafkaError._SSL, KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED}
)


#: A TLS handshake that ended because the connection did (not a certificate problem).
_CUT = re.compile(r"disconnect|eof|reset by peer|timed out|broken pipe", re.IGNORECASE)


def security_error(err: KafkaError, cfg: SourceConfig) -> KafkaSecurityError | None:
    """The terminal error for a failed TLS handshake or SASL login (None: another error),
    in one line that names the problem and the config key to fix."""
    if err.code() not in SECURITY_ERRORS:
        return None
    text = err.str()
    # "ssl://host:port/bootstrap: SSL handshake failed: error:0A000086:SSL routines::
    # certificate verify failed: broker certificate could not be verified, verify that
    # ssl.ca.location is correctly configured or ... (after 3ms in state SSL_HANDSHAKE)"
    text = re.sub(r"^\S+://\S+?: ", "", text).removeprefix("SSL handshake failed: ")
    text = re.sub(r" \(after \d+ms in state \w+\)$", "", text)
    text = re.sub(r"error:[0-9A-F]+:[^:]*::", "", text)
    text = re.sub(r", verify that ssl\.ca\.location .*$", "", text)
    text = text.removeprefix("SASL authentication error: ").strip().rstrip(":").strip()
    where = cfg.kafka.bootstrap_servers
    if err.code() == KafkaError._SSL:
        lowered = text.lower()
        if "verify" in lowered or "certificate" in lowered:
            # OpenSSL says "certificate verify failed" for an unknown CA and for a
            # certificate that does not name the host alike.
            hint = (
                "set source.ssl_ca_location to the PEM file of the CA that signed the "
                "brokers' certificates"
            )
            if cfg.security.ssl_endpoint_identification:
                hint += (
                    "; if it is right, the certificate does not name the host in "
                    "source.bootstrap_servers (source.ssl_endpoint_identification = false "
                    "skips that check)"
                )
        else:
            hint = (
                "check source.security_protocol (SSL / SASL_SSL only for TLS listeners), "
                "source.ssl_ca_location, source.ssl_certificate_location and "
                "source.ssl_key_location"
            )
        return KafkaSecurityError(f"TLS handshake with Kafka at {where} failed: {text}", hint)
    return KafkaSecurityError(
        f"Kafka at {where} refused the SASL login: {text}",
        "check source.sasl_mechanism, source.sasl_username and the password in "
        f"{_password_key(cfg)}",
    )


def creation_error(exc: KafkaException) -> ConfigError:
    """librdkafka refused to create a consumer: nothing was sent yet, so its settings are
    wrong (a key that cannot be loaded or decrypted, an unreadable CA file, a bad
    option) and retrying cannot help."""
    reason = kafka_reason(exc).removeprefix("Failed to create consumer: ")
    if "ssl.key" in reason or "ssl.certificate" in reason:
        hint = (
            "check source.ssl_certificate_location, source.ssl_key_location and the "
            "password of an encrypted key in source.ssl_key_password"
        )
    elif "ssl.ca" in reason:
        hint = "set source.ssl_ca_location to a readable PEM file of CA certificates"
    else:
        hint = "check the source settings it names (and source.kafka_options)"
    return ConfigError(f"cannot create a Kafka consumer: {reason}", hint=hint)


def _password_key(cfg: SourceConfig) -> str:
    """The config key the SASL password comes from."""
    for key in ("sasl_password", "sasl_password_env", "sasl_password_file"):
        if getattr(cfg.security, key):
            return f"source.{key}"
    return "source.sasl_password"


def consumer_settings(cfg: SourceConfig, batch_size: int) -> dict[str, object]:
    """librdkafka settings for the replicator (contains the secret: never log it)."""
    settings: dict[str, object] = {
        "bootstrap.servers": cfg.kafka.bootstrap_servers,
        "group.id": cfg.kafka.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Never jump silently: a position outside the log is an error the replicator
        # reports (a gap), not a reason to restart from either end. New partitions are
        # assigned from the beginning explicitly.
        "auto.offset.reset": "error",
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": max(100_000, batch_size),
        # Bounds prefetch memory (a 250k batch of typical events is ~125 MB).
        "queued.max.messages.kbytes": 262_144,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "fetch.wait.max.ms": 50,
        "security.protocol": cfg.security.security_protocol,
        "client.id": "cdcctl",
        "logger": KAFKA_LOG,
    }
    if cfg.security.sasl_mechanism:
        settings["sasl.mechanism"] = cfg.security.sasl_mechanism
    if cfg.security.sasl_username:
        settings["sasl.username"] = cfg.security.sasl_username
    password = cfg.security.sasl_password_value()
    if password is not None:
        settings["sasl.password"] = password.get_secret_value()
    if cfg.security.security_protocol in ("SSL", "SASL_SSL"):
        settings["ssl.endpoint.identification.algorithm"] = (
            "https" if cfg.security.ssl_endpoint_identification else "none"
        )
        for key, value in (
            ("ssl.ca.location", cfg.security.ssl_ca_location),
            ("ssl.certificate.location", cfg.security.ssl_certificate_location),
            ("ssl.key.location", cfg.security.ssl_key_location),
        ):
            if value:
                settings[key] = value
        key_password = cfg.security.ssl_key_password_value()
        if key_password is not None:
            settings["ssl.key.password"] = key_password.get_secret_value()
    settings.update(cfg.kafka.kafka_options)
    return settings


#: Settings an admin client shares with the consumer (the connection and its security).
_CLIENT_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.", "client.")
#: The id Kafka gives no topic (a broker that reports no topic ids).
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def close_quietly(consumer: Consumer) -> None:
    """Close a consumer, whatever librdkafka says of it."""
    try:
        consumer.close()
    except (KafkaException, RuntimeError):
        pass


def admin_settings(cfg: SourceConfig) -> dict[str, Any]:
    """librdkafka settings for an admin client: the consumer's connection and security
    settings only (contains the secret: never log it)."""
    return {
        k: v
        for k, v in consumer_settings(cfg, 1).items()
        if k.startswith(_CLIENT_PREFIXES) or k == "logger"
    }


#: The timestamps that ask Kafka's ListOffsets for a partition's end and its start.
_LATEST, _EARLIEST = -1, -2


def _listed_offsets(
    consumer: Consumer, partitions: list[tuple[str, int]], which: int
) -> dict[tuple[str, int], int] | None:
    """Every partition's end (``_LATEST``: the high watermark, or for a read-committed
    consumer the last stable offset) or start (``_EARLIEST``) in one ListOffsets request
    per broker, where asking each partition's watermarks is a request each (100 idle
    tables cost ~0.6 s per topic refresh that way). None when any partition has no
    answer: the caller asks them one by one, whose error names the partition."""
    asked = [TopicPartition(topic, part, which) for topic, part in partitions]
    try:
        found = consumer.offsets_for_times(asked, timeout=TIMEOUT_S)
    except KafkaException:
        return None
    if len(found) != len(asked) or any(tp.error is not None or tp.offset < 0 for tp in found):
        return None
    return {(tp.topic, tp.partition): tp.offset for tp in found}


def _watermarks(
    consumer: Consumer, partitions: Iterable[tuple[str, int]], cached: bool = False
) -> dict[tuple[str, int], int]:
    partitions = list(partitions)
    if not cached and len(partitions) > 1:
        listed = _listed_offsets(consumer, partitions, _LATEST)
        if listed is not None:
            return listed
    out = {}
    for topic, part in partitions:
        try:
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, part), timeout=TIMEOUT_S, cached=cached
            )
        except KafkaException as exc:
            raise SourceError(
                f"cannot read end offsets of {topic}[{part}]: {kafka_reason(exc)}"
            ) from None
        out[(topic, part)] = high
    return out


def _exact_ends(
    probe: Consumer,
    marks: dict[tuple[str, int], int],
    check: Iterable[tuple[str, int]],
    timeout: float,
) -> dict[tuple[str, int], int]:
    """``marks`` (high watermarks) with the partitions of ``check`` settled by reading
    their last record batch from ``high - 1`` (see :meth:`KafkaSource.exact_end_offsets`);
    a partition that does not answer within ``timeout`` keeps its watermark."""
    out = dict(marks)
    todo = {tp: marks[tp] for tp in check if marks.get(tp, 0) > 0}
    if not todo:
        return out
    probe.assign([TopicPartition(t, p, high - 1) for (t, p), high in todo.items()])
    waiting = set(todo)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Once every partition answered, a short wait collects the rest of the
        # last record batches (delivered together with their first message).
        msgs = probe.consume(100_000, min(0.5, timeout) if waiting else 0.05)
        for m in msgs:
            topic, part, offset = m.topic(), m.partition(), m.offset()
            if m.error() is None and topic and part is not None and offset is not None:
                tp = (topic, part)
                waiting.discard(tp)
                out[tp] = max(out[tp], offset + 1)
        if not waiting and not msgs:
            break
    return out


def partition_ends(
    cfg: SourceConfig, topic: str, applied: dict[int, int], timeout: float
) -> dict[int, int]:
    """The end offset (next offset to be written) of each partition of ``topic``, asked
    of the broker by a consumer of its own, every wait bounded by ``timeout`` ({}: the
    broker has no such topic).

    A high watermark below the offset ``applied`` says a partition was read up to (the
    Tansu broker's watermark lags within a record batch) is settled by reading the
    partition's last batch, as the replicator does. Used by readers that must not wait
    long (the dashboard's detail screen).

    Raises:
        SourceError: the broker did not answer in time.
    """
    settings = {
        **consumer_settings(cfg, 1000),
        "group.id": cfg.kafka.group_id + "-probe",
        "socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
    }
    try:
        probe = Consumer(settings)
    except KafkaException as exc:
        raise creation_error(exc) from None
    try:
        try:
            meta = probe.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise SourceError(
                f"Kafka at {cfg.kafka.bootstrap_servers} did not answer within {timeout:g} s: "
                f"{kafka_reason(exc)}"
            ) from None
        found = meta.topics.get(topic)
        if found is None or found.error is not None:
            return {}
        parts = [(topic, p) for p in sorted(found.partitions)]
        marks: dict[tuple[str, int], int] = {}
        for tp in parts:
            try:
                _, high = probe.get_watermark_offsets(TopicPartition(*tp), timeout=timeout)
            except KafkaException as exc:
                raise SourceError(
                    f"cannot read end offsets of {topic}[{tp[1]}]: {kafka_reason(exc)}"
                ) from None
            marks[tp] = high
        suspects = [tp for tp in parts if applied.get(tp[1], 0) > marks[tp]]
        ends = _exact_ends(probe, marks, suspects, timeout)
        return {p: ends[(t, p)] for t, p in parts}
    finally:
        try:
            probe.close()
        except (KafkaException, RuntimeError):
            pass


def topic_matches(cfg: SourceConfig, topic: str) -> bool:
    """Whether a topic is selected by ``source.topics`` and ``source.exclude_topics``."""
    if not re.search(cfg.kafka.topics, topic):
        return False
    return not (cfg.kafka.exclude_topics and re.search(cfg.kafka.exclude_topics, topic))


def topic_ids(cfg: SourceConfig, topics: Iterable[str]) -> dict[str, str]:
    """Each topic's id (the UUID Kafka gives a topic when it is created: a deleted and
    recreated topic has a new one). Topics the broker gives no id for, or that it
    does not describe now, are left out."""
    names = sorted(set(topics))
    if not names:
        return {}
    out: dict[str, str] = {}
    try:
        # A client per call (rare: at start and when topics appear), so that no idle
        # connection of its own outlives it and reports a broker going away.
        admin = AdminClient(admin_settings(cfg))
        futures = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        for name, future in futures.items():
            try:
                found = str(future.result(TIMEOUT_S).topic_id or "")
            except Exception:  # noqa: BLE001 - deleted meanwhile, or no answer
                continue
            if found and found != _NO_TOPIC_ID:
                out[name] = found
    except (KafkaException, ValueError, RuntimeError) as exc:
        log.debug("cannot describe topics %s: %s", names, exc)
    return out


class KafkaSource:
    """A consumer over every topic matching the configured pattern."""

    def __init__(self, cfg: SourceConfig, batch_size: int) -> None:
        self._cfg = cfg
        #: Set by librdkafka's error callback when every broker connection is down.
        self._down: str | None = None
        #: Set by the error callback when a TLS handshake or SASL login failed.
        self._refused: KafkaSecurityError | None = None
        settings = {**consumer_settings(cfg, batch_size), "error_cb": self._on_error}
        try:
            self._consumer = Consumer(settings)
        except KafkaException as exc:
            raise creation_error(exc) from None
        self._assigned: set[tuple[str, int]] = set()
        # Transaction-metadata topics are read ahead by their own consumer, so their END
        # records are known before the data they describe is cut into batches.
        self._tx_settings = {
            **consumer_settings(cfg, 10_000),
            "group.id": cfg.kafka.group_id + "-tx",
        }
        self._tx_consumer: Consumer | None = None
        self._tx_assigned: set[tuple[str, int]] = set()
        self._reached = False
        #: Consumer errors seen, by error name: logged and counted, never dropped.
        self.errors: Counter[str] = Counter()
        #: Partitions whose fetch position fell outside the log (checked by the caller).
        self.out_of_range: set[tuple[str, int]] = set()

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (called inside poll): note a lost broker."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._down = "every broker connection is down"
        elif self._refused is None:
            refused = security_error(err, self._cfg)
            if refused is not None and self._reached and _CUT.search(refused.message):
                # A TLS connection cut mid-handshake after the brokers were reached is a
                # broker going away (transient, noticed as such), not a refusal.
                return
            self._refused = refused

    def _check_refused(self) -> None:
        """Raise the TLS / SASL failure the error callback saw (terminal, never retried)."""
        if self._refused is not None:
            raise self._refused

    def matches(self, topic: str) -> bool:
        """Whether a topic is selected by the include/exclude patterns."""
        return topic_matches(self._cfg, topic)

    def discover(self) -> dict[str, list[int]]:
        """Matching topics and their partitions, as the broker knows them now."""
        return {name: parts for name, parts in self._topics().items() if self.matches(name)}

    def transaction_topics(self, data_topics: Iterable[str]) -> dict[str, list[int]]:
        """Debezium transaction-metadata topics (``<prefix>.transaction``) of data topics."""
        wanted = {transaction_topic(t) for t in data_topics}
        return {name: parts for name, parts in self._topics().items() if name in wanted}

    def topics(self) -> dict[str, list[int]]:
        """Every topic and its partitions, as the broker knows them now (matching or not)."""
        return self._topics()

    def _topics(self) -> dict[str, list[int]]:
        timeout = TIMEOUT_S
        if not self._reached:
            log.info(
                "connecting to Kafka at %s (source.bootstrap_servers)",
                self._cfg.kafka.bootstrap_servers,
            )
            timeout = FIRST_CONTACT_S
        try:
            meta = self._list_topics(timeout)
        except KafkaException as exc:
            waited = "" if self._reached else f" (no answer in {timeout:.0f} s of trying)"
            why = unreachable_why(self._cfg.kafka.bootstrap_servers)
            raise SourceError(
                f"cannot reach Kafka at {self._cfg.kafka.bootstrap_servers}{waited}: "
                f"{kafka_reason(exc)}" + (f"; {why}" if why else ""),
                hint="check source.bootstrap_servers and that the broker is running",
            ) from None
        self._reached = True
        return {name: sorted(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def _list_topics(self, timeout: float) -> Any:
        """Metadata, asked in short slices so that a refused TLS handshake or SASL login
        (which librdkafka retries quietly) is reported at once, not after ``timeout``."""
        deadline = time.monotonic() + timeout
        slice_s = 0.5
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._consumer.list_topics(timeout=max(0.1, min(slice_s, remaining)))
            except KafkaException:
                # Serve the error callback (no partition is assigned before the first
                # contact; later, a consumed message is dropped with the failed batch).
                if not self._assigned:
                    self._consumer.poll(0)
                self._check_refused()
                if time.monotonic() >= deadline:
                    raise
                slice_s *= 2  # a slow broker still gets time to answer

    def assign(self, positions: dict[tuple[str, int], int | None]) -> None:
        """Add partitions, each starting at a next-offset (None: from the beginning)."""
        new = [
            TopicPartition(t, p, OFFSET_BEGINNING if off is None else off)
            for (t, p), off in positions.items()
            if (t, p) not in self._assigned
        ]
        if new:
            self._consumer.incremental_assign(new)
            self._assigned.update((tp.topic, tp.partition) for tp in new)

    def assign_transactions(self, topics: dict[str, list[int]]) -> None:
        """Read these transaction topics from the beginning, ahead of the data."""
        new = [
            TopicPartition(t, p, OFFSET_BEGINNING)
            for t, parts in topics.items()
            for p in parts
            if (t, p) not in self._tx_assigned
        ]
        if not new:
            return
        if self._tx_consumer is None:
            self._tx_consumer = Consumer(self._tx_settings)
        self._tx_consumer.incremental_assign(new)
        self._tx_assigned.update((tp.topic, tp.partition) for tp in new)

    def poll_transactions(self, max_seconds: float = 0.05) -> list[bytes | None]:
        """Every transaction-topic value available now (never blocks for long)."""
        if self._tx_consumer is None:
            return []
        out: list[bytes | None] = []
        while True:
            msgs = self._tx_consumer.consume(100_000, max_seconds)
            out.extend(m.value() for m in msgs if m.error() is None)
            if len(msgs) < 100_000:
                return out

    def seek(self, positions: dict[tuple[str, int], int]) -> None:
        """Re-read partitions from the given offsets (held-back transactions)."""
        for (topic, part), offset in positions.items():
            try:
                self._consumer.seek(TopicPartition(topic, part, offset))
            except KafkaException as exc:
                raise SourceError(
                    f"cannot rewind {topic}[{part}] to {offset}: {kafka_reason(exc)}"
                ) from None

    def unassign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Stop consuming partitions (a table that failed)."""
        gone = [TopicPartition(t, p) for t, p in partitions if (t, p) in self._assigned]
        if gone:
            self._consumer.incremental_unassign(gone)
            self._assigned.difference_update((tp.topic, tp.partition) for tp in gone)

    @property
    def assigned(self) -> set[tuple[str, int]]:
        """Partitions being consumed."""
        return set(self._assigned)

    def exact_end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict:
        """Next offset after the last readable message, per partition.

        The high watermark alone is not trusted: the Tansu broker reports the base offset
        of the last record batch plus one. Reading from ``high - 1`` returns that whole
        batch (one message on Kafka), whose last offset settles it.
        """
        # A consumer of its own: this may run in a thread while the main one consumes.
        probe = Consumer({**self._tx_settings, "group.id": self._cfg.kafka.group_id + "-probe"})
        try:
            marks = _watermarks(probe, partitions)
            return _exact_ends(probe, marks, list(marks), TIMEOUT_S)
        finally:
            probe.close()

    def end_offsets(self, partitions: Iterable[tuple[str, int]], cached: bool = False) -> dict:
        """High watermark (next offset to be written) per partition, as the broker says."""
        return _watermarks(self._consumer, partitions, cached)

    def poll(
        self,
        max_events: int,
        max_seconds: float,
        until: Callable[[int], bool] | None = None,
    ) -> list[Message]:
        """Up to ``max_events`` messages, waiting at most ``max_seconds`` in total.

        ``until`` (adaptive batching): the wait is cut into :data:`POLL_SLICE_SECONDS`
        slices and the poll ends after the first slice at whose end ``until(read so
        far)`` is true, however few messages it read.
        """
        out: list[Message] = []
        deadline = time.monotonic() + max_seconds
        while len(out) < max_events:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            wait = remaining if until is None else min(remaining, POLL_SLICE_SECONDS)
            msgs = self._consumer.consume(min(max_events - len(out), 500_000), wait)
            errors = list(map(Message.error, msgs))  # C-level: errors are rare
            if not any(errors):
                out.extend(msgs)
            else:
                for m, err in zip(msgs, errors, strict=True):
                    if err is None:
                        out.append(m)
                    elif err.fatal():
                        raise SourceError(f"fatal Kafka error: {err}")
                    else:
                        self._consumer_error(m, err)
            self._check_refused()
            if self._down is not None:
                # librdkafka would reconnect quietly forever; the caller retries from
                # its checkpoints instead (what was read of this batch is dropped).
                reason, self._down = self._down, None
                raise SourceError(
                    f"lost the connection to Kafka at {self._cfg.kafka.bootstrap_servers}: "
                    f"{reason}",
                    hint="check that the broker is running and reachable",
                )
            if until is not None and until(len(out)):
                break
            if until is None and not msgs and out:
                break
        return out

    def _consumer_error(self, message: Message, err: KafkaError) -> None:
        """Count and log a non-fatal consumer error (the first few of each kind)."""
        name = err.name()
        self.errors[name] += 1
        topic, part = message.topic(), message.partition()
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            if topic and part is not None:
                self.out_of_range.add((topic, part))
        count = self.errors[name]
        if count <= 3 or count % 1000 == 0:
            where = f" on {topic}[{part}]" if topic else ""
            log.warning("Kafka consumer error%s: %s (%d so far)", where, err.str(), count)

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's id (:func:`topic_ids`)."""
        return topic_ids(self._cfg, topics)

    def log_start_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict:
        """The first offset still in each partition's log (low watermark)."""
        partitions = list(partitions)
        if len(partitions) > 1:
            listed = _listed_offsets(self._consumer, partitions, _EARLIEST)
            if listed is not None:
                return listed
        out = {}
        for topic, part in partitions:
            try:
                low, _ = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, part), timeout=TIMEOUT_S
                )
            except KafkaException as exc:
                raise SourceError(
                    f"cannot read the log start of {topic}[{part}]: {kafka_reason(exc)}"
                ) from None
            out[(topic, part)] = low
        return out

    def commit_group_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Publish progress to the consumer group (for lag tools only)."""
        if not offsets:
            return
        tps = [TopicPartition(t, p, off) for (t, p), off in offsets.items()]
        try:
            self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException:
            pass  # lag display only; recovery never depends on it

    def close(self) -> None:
        """Leave the broker cleanly, waiting at most :data:`CLOSE_WAIT_S` for it."""
        for consumer in (self._consumer, self._tx_consumer):
            if consumer is None:
                continue
            closing = threading.Thread(
                target=close_quietly, args=(consumer,), name="kafka-close", daemon=True
            )
            closing.start()
            closing.join(CLOSE_WAIT_S)
            if closing.is_alive():
                log.info(
                    "the Kafka consumer still waits for the broker to close; going on without it"
                )
