"""``cdcctl repair TABLE``: a replica fixed in place from its source, while it runs.

1. **Find**: the replica is compared with its source table
   (:func:`engine.validate.find_differences`), keeping every key that differs and the
   source's position when it was read.
2. **Snapshot again what is missing or differs**: Debezium is asked, through its signal
   table, for an *incremental snapshot* of exactly those keys (``execute-snapshot``,
   ``type: incremental``, ``additional-conditions`` with the key ranges of
   :mod:`.plan`). The connector reads them in chunks between watermarks, interleaved with
   the live changes, and writes them into the table's topic as reads (``op = r``); the
   replicator applies them like any event, and a change made meanwhile wins (Debezium
   drops a chunk's row that changed within its window; a later change is a later event).
3. **Delete what the source no longer has**: the replica rows whose keys the source
   lacks are filed for the replicator (:mod:`engine.replicator.repairs`), to be deleted at
   the source position they were found absent at: a key inserted again after that stays.
4. **Wait and prove** (while a replicator runs): the keys it set out to fix are looked
   at again (:func:`engine.validate.settle`: each look waits until the replica has
   applied the source's position) until none differs or the wait runs out; what was
   fixed, deleted, what flowed meanwhile and the time taken are reported. With no
   replicator running, nothing moves: the deletes wait for the next start, and the
   snapshot rows wait in the topic.

``whole=True`` snapshots the whole table again (no key filter): a replica rebuilt in
place from the source, without its topic's history. ``dry_run=True`` stops after the
plan. Keys in flight when the replica was read (changed but not yet applied) are read
again too; that changes nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from engine.config import Config
from engine.errors import RepairError, SourceDatabaseError
from engine.hudi import HOODIE_RECORD_KEY
from engine.repair.plan import KeyRanges, fitted_ranges, snapshot_signal
from engine.replicator import repairs
from engine.state.control import alive, read_status, send_request, written_at
from engine.validate import Differences, TableReport, find_differences, settle
from engine.validate.replica import Replica
from engine.validate.source import SourceDB, connect

__all__ = ["RepairPlan", "RepairResult", "repair_table"]

#: How often the replica is validated again while the repair is waited for.
CHECK_EVERY_SECONDS = 3.0
#: The longest wait for the running replicator to apply the deletes.
DELETES_WAIT_SECONDS = 120.0


@dataclass
class RepairPlan:
    """What a repair does to one table."""

    table: str
    source_table: str
    #: The table as Debezium names it in a signal (``schema.table`` / ``db.table``).
    data_collection: str
    #: Keys in the source only, and on both sides with other values: snapshotted again.
    missing: int
    differing: int
    #: Replica rows whose keys the source lacks: deleted.
    extra: int
    #: The ``additional-conditions`` filter (None: the whole table) and its pieces.
    filter: str | None
    ranges: int
    #: The signal table it is sent through, and its ``data`` (None: nothing to snapshot).
    signal_table: str | None
    signal: dict[str, Any] | None
    #: The source position the extra rows were absent at.
    position: str | None
    #: The comparison it was made from.
    before: TableReport
    #: Keys that differed at first but were only in flight (left out).
    in_flight: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RepairResult:
    """How a repair went."""

    plan: RepairPlan
    dry_run: bool
    #: The signal's id in the signal table (None: none sent).
    signal_id: str | None = None
    #: What became of the deletes (applied by the running replicator, or waiting).
    deletes: str | None = None
    #: Every key it set out to fix is equal now (None: not waited for).
    equal: bool | None = None
    seconds: float = 0.0
    #: Keys snapshotted again that are equal now, and rows deleted.
    fixed: int = 0
    deleted: int = 0
    #: Snapshot reads the replicator applied meanwhile, and the other changes that
    #: flowed meanwhile (inserts, updates, deletes).
    snapshot_rows: int = 0
    changes: int = 0
    #: Keys still differing when the wait ended (key texts, at most 10).
    left: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _data_collection(diff: Differences) -> str:
    ref = diff.ref
    assert ref is not None
    if diff.dialect == "postgresql":
        return f"{ref.schema or 'public'}.{ref.table}"
    return f"{ref.db}.{ref.table}" if ref.db else ref.table


def _signal_table(cfg: Config, topic: str | None, given: str | None) -> str | None:
    """The signal table: given, else the one of the connector writing ``topic`` (asked
    of Kafka Connect when ``source.connect_url`` is set); None when neither says."""
    if given:
        return given
    url = cfg.source.upstream.connect_url
    if not url or not topic:
        return None
    from engine.upstream import SourceView
    from engine.upstream.connect import ConnectUnreachable, connectors

    try:
        view = SourceView(checked_at=time.time(), connectors=connectors(url))
    except ConnectUnreachable as exc:
        raise RepairError(
            f"the signal table cannot be asked of Kafka Connect: {exc}",
            hint="start it, or name the signal table: --signal-table SCHEMA.TABLE",
        ) from None
    found = view.connector_for(topic)
    return found.signal_table if found is not None else None


def _data_room(db: SourceDB, signal_table: str) -> int | None:
    """The signal table's ``data`` column's length in characters (None: unbounded or
    unknown)."""
    parts = signal_table.split(".")
    schema = parts[-2] if len(parts) > 1 else ("public" if db.dialect == "postgresql" else None)
    rows = db.query(
        "SELECT character_maximum_length FROM information_schema.columns WHERE "
        + ("table_schema = %s AND " if schema else "table_schema = DATABASE() AND ")
        + "table_name = %s AND column_name = 'data'",
        [*([schema] if schema else []), parts[-1]],
    )
    return int(rows[0][0]) if rows and rows[0][0] is not None else None


def plan_repair(
    cfg: Config,
    db: SourceDB,
    diff: Differences,
    *,
    whole: bool = False,
    signal_table: str | None = None,
) -> RepairPlan:
    """The plan for one compared table.

    Raises:
        RepairError: it cannot be repaired as it is (no signal table known, positions
            that order by GTID).
    """
    report = diff.report
    if cfg.source.format == "cdc-json":
        raise RepairError(
            f"{report.table} comes from generic CDC JSON: repair asks a Debezium connector "
            "for the rows again and orders deletes by Debezium's source positions",
            hint=f"rebuild the replica from its topic instead: `cdcctl resync {report.table}`",
        )
    if diff.epochs_accepted:
        raise RepairError(
            f"{report.table} accepted a new position epoch (`cdcctl resync --new-epoch`): "
            "its stored positions are mapped and cannot be ordered with the source's",
            hint=f"rebuild it instead: `cdcctl resync {report.table}`",
        )
    if diff.dialect == "mysql" and cfg.source.mysql_gtid_ordering:
        raise RepairError(
            f"{report.table} orders changes by GTID (source.mysql_gtid_ordering): the "
            "source's binlog position does not compare with its stored positions",
            hint=f"rebuild it instead: `cdcctl resync {report.table}`",
        )
    keys = [*diff.missing.values(), *diff.differing.values()]
    collection = _data_collection(diff)
    ranges, found_table, signal = KeyRanges(None, 0), None, None
    if keys or whole:
        found_table = _signal_table(cfg, diff.topic, signal_table)
        if found_table is None:
            raise RepairError(
                f"no signal table is known for {report.table}'s connector",
                hint="name it with --signal-table SCHEMA.TABLE (the connector's "
                "signal.data.collection), or set source.connect_url so that cdcctl asks "
                "Kafka Connect; the connector needs signal.data.collection set (Debezium: "
                "'Sending signals to a Debezium connector')",
            )
        if whole:
            ranges = KeyRanges(None, 0, "the whole table (--whole)")
        else:
            room = _data_room(db, found_table)
            ranges = fitted_ranges(diff.key_columns, keys, db.name, db.literal, collection, room)
        signal = snapshot_signal(collection, ranges)
    if diff.extra and diff.position is None:
        raise RepairError(
            f"the source's position could not be read, so the {len(diff.extra)} "
            f"row(s) {report.table} has and the source lacks cannot be ordered with "
            "its changes",
            hint="PostgreSQL: the user needs pg_current_wal_lsn(); MySQL/MariaDB: the "
            "binary log must be on and the user needs REPLICATION CLIENT",
        )
    return RepairPlan(
        table=report.table,
        source_table=report.source_table,
        data_collection=collection,
        missing=len(diff.missing),
        differing=len(diff.differing),
        extra=len(diff.extra),
        filter=ranges.filter,
        ranges=ranges.pieces,
        signal_table=found_table,
        signal=signal,
        position=db.position_text(diff.position) if diff.extra else None,
        before=report,
        in_flight=diff.in_flight,
        notes=[f"the whole table is snapshotted again: {ranges.widened}"]
        if ranges.widened and signal is not None
        else [],
    )


def _extra_rows(diff: Differences) -> pa.Table:
    """The replica rows whose keys the source lacks, whole, with their record keys
    (matched by key text, the comparison's own rule)."""
    from engine.validate.recheck import keys_mask

    replica = Replica.open(diff.store)
    keep = keys_mask(diff.plan, set(diff.extra))
    parts: list[pa.Table] = []
    con = duckdb.connect()
    try:
        for table in replica.slices():
            if table.num_rows:
                found = table.filter(keep(con, table))
                if found.num_rows:
                    parts.append(found)
    finally:
        con.close()
    if not parts:
        return pa.table({HOODIE_RECORD_KEY: pa.array([], pa.string())})
    return pa.concat_tables(parts, promote_options="permissive")


def _counters(cfg: Config, table: str, after: float | None = None) -> dict[str, int]:
    """The table's cumulative counters as the state store last recorded them (``after``:
    as a running replicator records them next after that time, waiting at most 3 s)."""
    status = read_status(cfg.work_path())
    deadline = time.monotonic() + 3.0
    while after is not None and status is not None and time.monotonic() < deadline:
        written = written_at(status)
        if status.replicator.state in ("stopped", None) or (written and written > after):
            break
        time.sleep(0.2)
        status = read_status(cfg.work_path())
    row = status.table(table) if status is not None else None
    if row is None:
        return {}
    c = row.counters
    return {
        "snapshot_rows": c.snapshot_rows,
        "inserts": c.inserts,
        "updates": c.updates,
        "deletes": c.deletes,
    }


def repair_table(
    cfg: Config,
    table: str,
    source_dsn: str,
    *,
    dry_run: bool = False,
    whole: bool = False,
    signal_table: str | None = None,
    wait_seconds: float = 300.0,
    say: Callable[[str], None] = lambda _: None,
) -> RepairResult:
    """Repair one replica from its source table (see the module's docstring).

    Raises:
        RepairError: the table cannot be compared or repaired as it is.
        UnknownTableError: no replica is named ``table``.
        SourceDatabaseError: the source cannot be reached, or refuses the signal.
    """
    if any(c in table for c in "*?["):
        raise RepairError(
            f"repair takes one table's name, not a pattern: {table!r}",
            hint="`cdcctl validate --table PATTERN` finds the tables that differ",
        )
    started = time.monotonic()
    target = cfg.target_store()
    work = cfg.work_path()
    diff = find_differences(target, source_dsn, table, work_dir=work)
    table = diff.report.table
    report = diff.report
    if report.status == "error":
        raise RepairError(
            f"{table} cannot be compared with its source: {report.error}",
            hint="`cdcctl validate` says the same; fix that first",
        )
    db = connect(source_dsn)
    try:
        plan = plan_repair(cfg, db, diff, whole=whole, signal_table=signal_table)
        result = RepairResult(plan, dry_run)
        if dry_run or (not diff.keys and not whole):
            result.equal = None if dry_run or whole else True
            return result
        counted = _counters(cfg, table)
        if diff.extra:
            rows = _extra_rows(diff)
            if rows.num_rows != len(diff.extra):
                raise RepairError(
                    f"{len(diff.extra)} row(s) of {table} the source lacks were found, but "
                    f"{rows.num_rows} were read back from the replica (it changed meanwhile)",
                    hint="run the repair again",
                )
            assert diff.position is not None
            repairs.file_deletes(work, table, rows, diff.position, plan.position or "")
            say(f"{rows.num_rows} row(s) the source lacks filed for deletion at {plan.position}")
            answers = send_request(work, "repair", [table], DELETES_WAIT_SECONDS)
            if answers is None:
                result.deletes = "waiting: no replicator runs; the next `cdcctl start` deletes them"
            else:
                result.deletes = answers[0].outcome or "no answer"
                if answers[0].done_at is None or result.deletes.startswith(("error", "not picked")):
                    raise RepairError(
                        f"the replicator did not delete the rows: {result.deletes}",
                        hint="they stay filed and are deleted when it starts next; "
                        "`cdcctl status` shows why the table does not move",
                    )
        if plan.signal is not None:
            assert plan.signal_table is not None
            result.signal_id = f"cdcctl-repair-{uuid.uuid4().hex[:12]}"
            _send_signal(db, plan.signal_table, result.signal_id, plan.signal)
            what = plan.filter or "the whole table"
            say(f"asked for an incremental snapshot through {plan.signal_table}: {what}")
    finally:
        db.close()
    if wait_seconds > 0 and alive(work):
        left = _wait_fixed(cfg, diff, source_dsn, started + wait_seconds, say)
        result.equal = not left.keys
        result.left = sorted(left.keys)[:10]
        result.fixed = (
            len(diff.missing) + len(diff.differing) - len(left.missing) - len(left.differing)
        )
    result.seconds = round(time.monotonic() - started, 3)
    now = _counters(cfg, table, after=time.time())
    delta = {k: now.get(k, 0) - counted.get(k, 0) for k in now} if counted else {}
    result.snapshot_rows = delta.get("snapshot_rows", 0)
    result.deleted = _deleted(result.deletes)
    changes = sum(delta.get(k, 0) for k in ("inserts", "updates", "deletes"))
    result.changes = max(0, changes - result.deleted)
    return result


def _deleted(outcome: str | None) -> int:
    """The rows a ``repair`` request's answer says were deleted."""
    if not outcome or not outcome.startswith("repair: "):
        return 0
    return int(outcome.split()[1])


def _send_signal(db: SourceDB, signal_table: str, signal_id: str, data: dict[str, Any]) -> None:
    name = ".".join(db.quote(p) for p in signal_table.split("."))
    try:
        db.execute(
            f"INSERT INTO {name} (id, type, data) VALUES (%s, %s, %s)",
            (signal_id, "execute-snapshot", json.dumps(data)),
        )
    except SourceDatabaseError as exc:
        raise SourceDatabaseError(
            f"the snapshot signal could not be written into {signal_table}: {exc.message}",
            hint="the signal table has the columns (id, type, data) and the user may "
            "insert into it (Debezium: 'Sending signals to a Debezium connector')",
        ) from None


def _wait_fixed(
    cfg: Config, diff: Differences, dsn: str, deadline: float, say: Callable[[str], None]
) -> Differences:
    """Look at the keys the repair set out to fix until none differs or the deadline
    passes (:func:`engine.validate.settle`: each look waits for the replica to apply the
    source's position); what still differs at the last look."""
    keys = diff.keys
    while True:
        left = max(1.0, min(30.0, deadline - time.monotonic()))
        now = settle(diff, dsn, keys, left, cfg.work_path())
        if not now.keys or time.monotonic() >= deadline:
            return now
        say(
            f"waiting: {len(now.missing)} missing, {len(now.differing)} differing, "
            f"{len(now.extra)} extra of the {len(keys)} key(s)"
        )
        time.sleep(min(CHECK_EVERY_SECONDS, max(0.0, deadline - time.monotonic())))
