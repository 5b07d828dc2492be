"""Looking at the source side: one look (:class:`SourceWatch`), and the running
replicator's thread that looks every ``replicator.source_check_seconds``
(:class:`SourceWatcher`). Nothing here writes: the replicator's own thread takes the
newest view (:attr:`SourceWatcher.latest`) into the state store."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from engine.config import Config
from engine.errors import ConfigError
from engine.redaction import redact
from engine.source.kafka import consumer_settings, kafka_reason
from engine.upstream.binlog import BinlogUnreadable, binlog_files, position
from engine.upstream.connect import ConnectUnreachable, ConnectUnsupported, connectors, offsets
from engine.upstream.heartbeats import HeartbeatReader
from engine.upstream.model import Binlog, Connector, Slot, SourceView
from engine.upstream.slots import SlotsUnreadable, postgres_slots

if TYPE_CHECKING:
    from engine.checks.dsn import Dsn

log = logging.getLogger("cdcctl.source")


class SourceWatch:
    """One config's source side: :meth:`check` looks at all of it once (``dsn``: the
    database instead of ``source.database_dsn``)."""

    def __init__(self, cfg: Config, dsn: str | None = None) -> None:
        self.cfg = cfg
        upstream = cfg.source.upstream
        self.connect_url = upstream.connect_url
        self._heartbeats = HeartbeatReader(
            consumer_settings(cfg.source, 1), upstream.heartbeat_topic_prefix
        )
        self._last_heartbeats: dict[str, float] = {}
        self._last_connectors: tuple[Connector, ...] | None = None
        self._last_slots: tuple[Slot, ...] | None = None
        self._db: Dsn | None = None
        self._password: str | None = None
        url = dsn or cfg.source.database.database_dsn
        if url:
            # Here, not at the top: engine.checks imports this module for its own checks.
            from engine.checks.database import database_password
            from engine.checks.dsn import parse_dsn

            try:
                self._db = parse_dsn(url)
            except ConfigError:
                self._db = None
            if self._db is not None:
                self._password = database_password(cfg, self._db)

    def check(self) -> SourceView:
        """Connectors, slots and heartbeats as they are now; what could not be read is
        in :attr:`SourceView.errors` (never raised)."""
        errors: list[str] = []
        # What cannot be read now stays as it was last read (a Connect worker that died
        # takes its REST API with it: its connectors' problems must not vanish with it).
        found_connectors = self._last_connectors
        connect_error = None
        if self.connect_url is not None:
            try:
                found_connectors = connectors(self.connect_url)
            except ConnectUnreachable as exc:
                connect_error = str(exc)
                errors.append(connect_error)
        slots = self._last_slots
        if self._db is not None and self._db.kind == "postgresql":
            try:
                slots = postgres_slots(self._db.url, self._password)
            except SlotsUnreadable as exc:
                errors.append(redact(f"the source database's replication slots: {exc}"))
        self._last_connectors, self._last_slots = found_connectors, slots
        try:
            binlogs = self._binlogs(found_connectors or (), errors)
        except Exception as exc:  # noqa: BLE001 - one part's failure is a line, not the look
            errors.append(redact(f"the source database's binlog: {type(exc).__name__}: {exc}"))
            binlogs = ()
        try:
            heartbeats = self._heartbeats.read()
        except KafkaException as exc:  # Kafka's own failures are the loop's to report;
            heartbeats = self._last_heartbeats  # the heartbeats seen stay as old as they are
            log.debug("Debezium's heartbeat topics: %s", kafka_reason(exc))
        self._last_heartbeats = heartbeats
        return SourceView(
            checked_at=time.time(),
            connectors=found_connectors,
            slots=slots,
            heartbeats=heartbeats,
            binlogs=binlogs,
            errors=tuple(errors),
            connect_error=connect_error,
        )

    def _binlogs(self, found: tuple[Connector, ...], errors: list[str]) -> tuple[Binlog, ...]:
        """Each MySQL/MariaDB connector's recorded position against the server's binlog
        (a MySQL ``source.database_dsn`` and Kafka Connect's offsets)."""
        readers = [c for c in found if c.kind == "mysql"]
        db = self._db
        if not readers or db is None or db.kind != "mysql" or not self.connect_url:
            return ()
        try:
            files = binlog_files(db, self._password)
        except BinlogUnreadable as exc:
            errors.append(redact(f"the source database's binlog: {exc}"))
            return ()
        out = []
        for c in readers:
            try:
                recorded = offsets(self.connect_url, c.name)
            except ConnectUnsupported:
                return ()  # Kafka Connect before 3.6: no offsets API, no positions
            except ConnectUnreachable as exc:
                errors.append(str(exc))
                continue
            offset = next((o for o in recorded if "file" in o), None)
            place = position(c.name, files, offset)
            if place is not None:
                out.append(place)
        return tuple(out)

    def close(self) -> None:
        self._heartbeats.close()


class SourceWatcher:
    """A daemon thread looking at the source side every ``interval`` seconds; the newest
    look is :attr:`latest` (None until the first ends)."""

    def __init__(self, cfg: Config) -> None:
        self.interval = cfg.replicator.source_check_seconds
        self._watch = SourceWatch(cfg)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cdcctl-source-watch", daemon=True)
        self.latest: SourceView | None = None

    def start(self) -> SourceWatcher:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.latest = self._watch.check()
                except Exception:  # noqa: BLE001 - a watcher never takes the replicator down
                    log.exception("looking at the source side failed")
                self._stop.wait(self.interval)
        finally:
            self._watch.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # a look under way ends within its timeouts; the
            self._thread.join(timeout=2)  # run does not wait for it (a daemon thread)
