"""What the source side looked like at one check: Kafka Connect's connectors, the
database's replication slots, Debezium's heartbeats, and what could not be reached.

A :class:`SourceView` is made by :func:`engine.upstream.check_source` (the running
replicator's watcher calls it every ``replicator.source_check_seconds``), kept in the
state store as JSON, and read back by ``cdcctl status``, the dashboard and the metrics.
Which tables a connector, slot or heartbeat stands for is decided by topic prefix: a
connector's ``topic.prefix`` ``P`` writes the topics ``P.<schema>.<table>`` and the
heartbeat topic ``__debezium-heartbeat.P``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Connector and task states of Kafka Connect that mean no change reaches the topics.
STOPPED_STATES = ("FAILED", "PAUSED", "STOPPED", "UNASSIGNED")


@dataclass(frozen=True)
class ConnectorTask:
    id: int
    state: str
    #: The first line of the task's stack trace (FAILED tasks).
    trace: str | None = None


@dataclass(frozen=True)
class Connector:
    """A Kafka Connect connector as its REST API reported it."""

    name: str
    state: str
    #: Its ``topic.prefix`` (``database.server.name`` before Debezium 2.0).
    prefix: str | None
    tasks: tuple[ConnectorTask, ...] = ()
    #: Its PostgreSQL replication slot (``slot.name``; Debezium's default ``debezium``).
    slot: str | None = None
    trace: str | None = None
    #: ``postgres``, ``mysql`` (MySQL's and MariaDB's connectors) or ``other``.
    kind: str = "other"
    #: Its signal table (``signal.data.collection``), if it has one.
    signal_table: str | None = None

    def problems(self) -> list[str]:
        """Why no change of this connector reaches Kafka, if none does."""
        out = []
        if self.state in STOPPED_STATES:
            why = f": {self.trace}" if self.trace else ""
            out.append(f"connector {self.name} is {self.state}{why}")
        for task in self.tasks:
            if task.state in STOPPED_STATES and self.state not in STOPPED_STATES:
                why = f": {task.trace}" if task.trace else ""
                out.append(f"connector {self.name} task {task.id} is {task.state}{why}")
        if self.state == "RUNNING" and not self.tasks:
            out.append(f"connector {self.name} has no task running")
        return out


@dataclass(frozen=True)
class Slot:
    """A logical replication slot of the source database (PostgreSQL)."""

    name: str
    database: str | None
    plugin: str | None
    active: bool
    #: ``reserved``, ``extended``, ``unreserved`` or ``lost`` (PostgreSQL 13+).
    wal_status: str | None
    #: WAL the slot keeps the server from recycling (bytes from its restart LSN).
    retained_bytes: int | None
    confirmed_flush_lsn: str | None

    @property
    def kept_text(self) -> str:
        """``, 1.2 MiB of WAL kept`` (empty when unknown)."""
        if self.retained_bytes is None:
            return ""
        return f", {self.retained_bytes / 2**20:.1f} MiB of WAL kept"

    def problems(self) -> list[str]:
        if self.wal_status == "lost":
            return [
                f"replication slot {self.name} lost WAL it still needed "
                "(max_slot_wal_keep_size): its connector cannot resume without a new "
                "snapshot (then `cdcctl resync` the tables)"
            ]
        if not self.active:  # the WAL it keeps is a figure of its own (it grows)
            return [f"replication slot {self.name} has no reader: its connector is not running"]
        return []


@dataclass(frozen=True)
class Binlog:
    """Where a MySQL or MariaDB server's binlog ends, and where a connector reading it
    last recorded its position (Kafka Connect's offsets)."""

    connector: str
    server_file: str
    server_pos: int
    #: None: the connector has recorded no position yet.
    connector_file: str | None
    connector_pos: int | None
    #: Binlog bytes between the two (None: unknown, e.g. the connector's file is gone).
    behind_bytes: int | None


@dataclass(frozen=True)
class SourceView:
    """One look at the source side (times in seconds since the epoch)."""

    checked_at: float
    #: None: ``source.connect_url`` is not set.
    connectors: tuple[Connector, ...] | None = None
    #: None: no PostgreSQL ``source.database_dsn``.
    slots: tuple[Slot, ...] | None = None
    #: topic prefix -> when its newest heartbeat was written (Kafka's record time).
    heartbeats: dict[str, float] = field(default_factory=dict)
    #: MySQL/MariaDB connectors' positions against the server's binlog (a MySQL
    #: ``source.database_dsn`` and ``source.connect_url``).
    binlogs: tuple[Binlog, ...] = ()
    #: What could not be reached or read, one line each.
    errors: tuple[str, ...] = ()
    #: Why Kafka Connect could not be asked this time (:attr:`connectors` are then as
    #: last seen): a problem of every table whose connector is known.
    connect_error: str | None = None

    def connector_for(self, topic: str) -> Connector | None:
        """The connector writing ``topic`` (the longest matching prefix)."""
        found = [c for c in self.connectors or () if c.prefix and topic.startswith(c.prefix + ".")]
        return max(found, key=lambda c: len(c.prefix or ""), default=None)

    def heartbeat_for(self, topic: str) -> float | None:
        """When the connector writing ``topic`` last sent a heartbeat, if it sends them."""
        found = [p for p in self.heartbeats if topic.startswith(p + ".")]
        return self.heartbeats[max(found, key=len)] if found else None

    def problems_for(self, topic: str) -> list[str]:
        """Why changes of ``topic``'s source table may not be reaching Kafka: its
        connector or a task stopped, or its replication slot lost WAL or has no reader.
        Unreachable watch targets are :attr:`errors`, not a table's problems."""
        connector = self.connector_for(topic)
        if connector is None:
            return []
        out = connector.problems()
        if self.connect_error:
            out.append(self.connect_error)
        slot_name = connector.slot
        for slot in self.slots or ():
            if slot_name is not None and slot.name == slot_name:
                out.extend(slot.problems())
        return out

    def connectors_of(self, topics: Iterable[str] | None) -> list[Connector]:
        """The connectors writing ``topics`` (None: every connector)."""
        wanted = None if topics is None else list(topics)
        return [
            c
            for c in self.connectors or ()
            if wanted is None or any(self.connector_for(t) is c for t in wanted)
        ]

    def slots_of(self, topics: Iterable[str] | None) -> list[Slot]:
        """The slots of the connectors writing ``topics``; every slot when no Kafka
        Connect is watched (no connector names its slot)."""
        if self.connectors is None:
            return list(self.slots or ())
        named = {c.slot for c in self.connectors_of(topics)}
        return [s for s in self.slots or () if s.name in named]

    def heartbeats_of(self, topics: Iterable[str]) -> dict[str, float]:
        """The heartbeats of the connectors writing ``topics``, by topic prefix."""
        return {
            p: at for p, at in self.heartbeats.items() if any(t.startswith(p + ".") for t in topics)
        }

    def problems(self, topics: Iterable[str] | None = None) -> list[str]:
        """The problems of the connectors writing ``topics`` (None: of every connector)
        and of their slots (:meth:`slots_of`), then every unreachable target."""
        wanted = None if topics is None else list(topics)
        out: list[str] = []
        for c in self.connectors_of(wanted):
            out.extend(c.problems())
        for slot in self.slots_of(wanted):
            out.extend(slot.problems())
        return list(dict.fromkeys(out)) + list(self.errors)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceView:
        """The view :meth:`to_json` wrote (keys a newer version added are left out)."""
        connectors = data.get("connectors")
        slots = data.get("slots")
        return cls(
            checked_at=float(data["checked_at"]),
            connectors=None
            if connectors is None
            else tuple(
                _made(
                    Connector,
                    {**c, "tasks": tuple(_made(ConnectorTask, t) for t in c.get("tasks", ()))},
                )
                for c in connectors
            ),
            slots=None if slots is None else tuple(_made(Slot, s) for s in slots),
            heartbeats={str(k): float(v) for k, v in data.get("heartbeats", {}).items()},
            binlogs=tuple(_made(Binlog, b) for b in data.get("binlogs", ())),
            errors=tuple(data.get("errors", ())),
            connect_error=data.get("connect_error"),
        )


def _made(kind: Any, values: dict[str, Any]) -> Any:
    known = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in values.items() if k in known})
