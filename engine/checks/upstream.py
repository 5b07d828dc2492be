"""The source side's checks: Kafka Connect's connectors writing the topics
(``source.connect_url``), Debezium's heartbeats, and the database's replication slots
(a PostgreSQL ``source.database_dsn``) — what the running replicator watches, once."""

from __future__ import annotations

import time
from collections.abc import Callable

from engine.checks.common import listing, plural
from engine.checks.result import Check, failed, passed, warned
from engine.config import Config
from engine.upstream import SourceView, SourceWatch


def source_checks(
    cfg: Config, dsn: str | None, topics: Callable[[], list[str] | None]
) -> list[Check]:
    """``source.connect``/``source.connector <name>``, ``source.heartbeats`` and
    ``postgres.slot <name>`` checks (``dsn``: the database given to test-connection)."""
    watch = SourceWatch(cfg, dsn=dsn)
    try:
        view = watch.check()
    finally:
        watch.close()
    found = topics() or []
    checks = _connect_checks(cfg, view, found)
    checks += _heartbeat_checks(view, found)
    checks += _slot_checks(view, found)
    return checks


def _connect_checks(cfg: Config, view: SourceView, topics: list[str]) -> list[Check]:
    url = cfg.source.upstream.connect_url
    if url is None:
        return []
    if view.connectors is None:
        why = next((e for e in view.errors if "Kafka Connect" in e), "no answer")
        return [
            failed(
                "source.connect",
                why,
                f"check source.connect_url (curl {url}/connectors should list the connectors)",
            )
        ]
    ours = view.connectors_of(topics)
    if not ours:
        prefixes = listing([c.prefix or "?" for c in view.connectors]) or "none"
        return [
            warned(
                "source.connect",
                f"none of the {plural(len(view.connectors), 'connector')} at {url} writes "
                f"the topics (their topic.prefix: {prefixes})",
                "set source.connect_url to the Kafka Connect cluster that runs the "
                "connectors behind the topics",
            )
        ]
    checks = []
    for c in ours:
        name = f"source.connector {c.name}"
        problems = c.problems()
        if problems:
            checks.append(
                failed(
                    name,
                    "; ".join(problems),
                    "fix the cause in its trace (GET "
                    f"{url}/connectors/{c.name}/status), then POST "
                    f"{url}/connectors/{c.name}/restart?includeTasks=true&onlyFailed=true "
                    f"(a paused connector: PUT {url}/connectors/{c.name}/resume)",
                )
            )
        else:
            checks.append(
                passed(
                    name,
                    f"RUNNING, {plural(len(c.tasks), 'task')} RUNNING, writes {c.prefix}.*",
                )
            )
    return checks


def _heartbeat_checks(view: SourceView, topics: list[str]) -> list[Check]:
    if not topics:
        return []
    beats = view.heartbeats_of(topics)
    if not beats:
        return [
            warned(
                "source.heartbeats",
                "no Debezium heartbeats for these topics: an idle table cannot tell a "
                "stopped connector from a quiet database (its lag stays 0)",
                "set heartbeat.interval.ms=10000 on the connectors (and "
                "source.heartbeat_topic_prefix if topic.heartbeat.prefix is changed)",
            )
        ]
    now = time.time()
    ages = listing([f"{p} {max(now - at, 0):.0f} s ago" for p, at in sorted(beats.items())])
    return [passed("source.heartbeats", f"newest heartbeat: {ages}")]


def _slot_checks(view: SourceView, topics: list[str]) -> list[Check]:
    if view.slots is None:
        slot_errors = [e for e in view.errors if "replication slots" in e]
        return [warned("postgres.slots", e, "check source.database_dsn") for e in slot_errors]
    checks = []
    for slot in view.slots_of(topics):
        name = f"postgres.slot {slot.name}"
        kept = slot.kept_text
        if slot.wal_status == "lost":
            checks.append(
                failed(
                    name,
                    slot.problems()[0],
                    f"SELECT pg_drop_replication_slot('{slot.name}'); restart the connector "
                    "(a new slot and snapshot), then `cdcctl resync` its tables",
                )
            )
        elif not slot.active:
            checks.append(
                warned(
                    name,
                    f"no connector reads it{kept}",
                    "start its connector; drop the slot if none will read it again (it keeps "
                    "WAL until the disk fills)",
                )
            )
        else:
            wal = f", WAL {slot.wal_status}" if slot.wal_status else ""
            checks.append(passed(name, f"read by a connector{wal}{kept}"))
    return checks
