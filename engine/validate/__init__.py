"""Validation: prove each replica equals its source table (``cdcctl validate``).

In: the target folder of the replicas, a source database DSN (PostgreSQL or
MySQL/MariaDB), optionally table names. Out: one :class:`TableReport` per replica: row
counts, missing / extra / differing keys (with examples and the differing columns'
values), the source position the replica stood at, whether a replicator was writing it,
and with ``recheck`` a second look at the differing keys.

``source`` (the database: connections, dialect SQL, snapshot, positions),
``replica`` (a replica as of one instant, read one file slice at a time),
``canonical`` (the canonical text of each kind of value, on both sides),
``compare`` (segments, range hashes, rows by key), ``recheck`` (differing keys looked
at again while a replicator moves the replica on), ``report`` (the records).
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.hudi import HudiView
from engine.lock import LOCK_NAME
from engine.naming import unknown_table
from engine.storage import Storage, folder_store
from engine.validate.replica import Replica, holder_of, lock_holder
from engine.validate.report import ColumnDiff, Recheck, RowDiff, TableReport
from engine.validate.source import SourceDB, TableRef, connect, dialect_of, redact

__all__ = [
    "ColumnDiff",
    "Differences",
    "Recheck",
    "RowDiff",
    "TableReport",
    "find_differences",
    "settle",
    "parse_database_map",
    "redact_dsn",
    "validate_replicas",
]


def redact_dsn(dsn: str) -> str:
    """A DSN fit to print: any password replaced by ``***``."""
    return redact(dsn)


def _select(target: Storage, patterns: list[str] | None) -> list[Storage]:
    names = HudiView.tables_under(target)
    if not patterns:
        if not names:
            raise ConfigError(
                f"no replica under {target.url}",
                hint="check target.path, or run cdcctl start first",
            )
        return [target.under(n) for n in names]
    chosen: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise unknown_table(pattern, names)
        chosen += [h for h in hits if h not in chosen]
    return [target.under(n) for n in chosen]


def parse_database_map(entries: list[str]) -> dict[str, str]:
    """``--database-map ORIGINAL=COPY`` entries as {original: copy}.

    Raises:
        ConfigError: an entry is not two names joined by ``=``, or maps one name twice.
    """
    mapping: dict[str, str] = {}
    for entry in entries:
        original, sep, copy = (part.strip() for part in entry.partition("="))
        if not (sep and original and copy):
            raise ConfigError(
                f"--database-map {entry!r} is not ORIGINAL=COPY",
                hint="e.g. --database-map inventory=inventory_restored: the replicas of "
                "database inventory are compared with the database inventory_restored",
            )
        if mapping.get(original, copy) != copy:
            raise ConfigError(f"--database-map maps {original!r} twice")
        mapping[original] = copy
    return mapping


def _source_database(dialect: str, replica: Replica) -> str | None:
    """The database a replica's rows come from, as its source blocks name it (None:
    unknown; a PostgreSQL replica named by its topic knows its schema, not its database)."""
    if dialect == "postgresql" and not replica.source_table_recorded:
        return None
    return replica.source_table.get("db")


def _check_database_map(dialect: str, paths: list[Storage], database_map: dict[str, str]) -> None:
    """Nothing when every ``--database-map`` original is a database a selected replica
    comes from.

    Raises:
        ConfigError: one is not (a typo would otherwise read the original itself, on a
            server that holds it, and may well find it equal), naming those databases.
    """
    if not database_map:
        return
    found = {_source_database(dialect, Replica.open(p)) for p in paths}
    databases = sorted(d for d in found if d)
    for original, copy in database_map.items():
        if original not in databases:
            said = (
                f"they come from {', '.join(databases)}"
                if databases
                else "none records its source database"
            )
            raise ConfigError(
                f"--database-map {original}={copy}: no replica validated comes from "
                f"database {original!r}; {said}",
                hint="the name before = is the database in the replicas' source blocks",
            )


def _ref(
    db: SourceDB, replica: Replica, report: TableReport, database_map: dict[str, str]
) -> TableRef | None:
    src = replica.source_table
    connector = src.get("connector")
    if connector and connector.lower() not in (
        ("postgresql", "postgres") if db.dialect == "postgresql" else ("mysql", "mariadb")
    ):
        report.status = "error"
        report.error = f"the replica comes from a {connector} source, --source is {db.dialect}"
        return None
    original = _source_database(db.dialect, replica)
    mapped = database_map.get(original) if original else None
    if mapped:
        report.notes.append(
            f"the replica's source database {original!r} is read as {mapped!r} "
            f"(--database-map {original}={mapped})"
        )
    if db.dialect == "postgresql":
        dsn_db = db.database()
        wanted = mapped or original
        if wanted and dsn_db and wanted != dsn_db:
            report.status = "error"
            said = f" (read as {mapped!r} by --database-map)" if mapped else ""
            report.error = (
                f"the replica comes from database {original!r}{said}, --source names "
                f"{dsn_db!r}; if that database is a copy of it (a restore, a clone), say so: "
                f"--database-map {original}={dsn_db}"
            )
            return None
        return TableRef(dsn_db, src.get("schema") or "public", src["table"])
    return TableRef(mapped or original or db.database(), None, src["table"])


def validate_replicas(
    target: str | Path | Storage,
    source_dsn: str,
    tables: list[str] | None = None,
    *,
    recheck: bool = False,
    recheck_wait: float = 60.0,
    work_dir: str | Path | None = None,
    database_map: dict[str, str] | None = None,
) -> list[TableReport]:
    """Compare every selected replica under ``target`` with its source table.

    Args:
        target: the folder holding the replicas (``target.path``), or its store (a
            bucket's prefix: :meth:`~engine.config.Config.target_store`).
        source_dsn: ``postgresql://...`` (or a libpq key=value string) or ``mysql://...``.
        tables: replica names or glob patterns (default: every replica).
        recheck: read the differing keys again once the replica has moved past the
            source's current position (waiting at most ``recheck_wait`` seconds, and not
            at all when no replicator is running).
        work_dir: the replicator's work folder, to tell whether a replicator is running.
        database_map: {database in the replicas' source blocks: database to read instead}
            (a restored copy under another name; :func:`parse_database_map`).

    Raises:
        ConfigError: bad DSN scheme; a ``database_map`` original no selected replica
            comes from.
        UnknownTableError: a ``tables`` entry matching no replica.
        SourceDatabaseError: the source database cannot be reached.
    """
    dialect = dialect_of(source_dsn)  # a bad scheme is a usage error before anything else
    database_map = database_map or {}
    store = target if isinstance(target, Storage) else folder_store(target)
    paths = _select(store, tables)
    _check_database_map(dialect, paths, database_map)
    running = _work_holder(work_dir)
    db = connect(source_dsn)
    reports: list[TableReport] = []
    try:
        for path in paths:
            reports.append(
                _validate_one(db, path, running, recheck, recheck_wait, database_map, work_dir)
            )
    finally:
        db.close()
    return reports


def _compare_one(
    db: SourceDB, path: Storage, running: str | None, database_map: dict[str, str]
) -> tuple[TableReport, Replica, tuple[Any, Any] | None]:
    """One replica compared with its source table: the report, the replica, and the
    comparison's plan and every difference found (None: the table was not compared)."""
    from engine.validate.compare import compare_table

    replica = Replica.open(path)
    report = TableReport(table=replica.name, source_table="?", status="error")
    report.identity = "commit" if replica.source_table_recorded else "topic"
    report.replica_instant = replica.instant
    report.replicator = replica.holder() or running
    ref = _ref(db, replica, report, database_map)
    if ref is None:
        return report, replica, None
    report.source_table = str(ref)
    if not replica.source_table_recorded:
        report.notes.append(
            "the source table is taken from the topic name (commits before "
            "cdcctl.source_table was recorded)"
        )
    return report, replica, compare_table(db, replica, ref, report)


def _validate_one(
    db: SourceDB,
    path: Storage,
    running: str | None,
    recheck: bool,
    wait: float,
    database_map: dict[str, str],
    work_dir: str | Path | None = None,
) -> TableReport:
    from engine.validate.recheck import recheck_keys

    report, replica, result = _compare_one(db, path, running, database_map)
    if result is None or report.equal:
        return report
    plan, found = result
    if report.row_only_columns and report.method != "rows":
        report.notes.append(
            f"columns {', '.join(report.row_only_columns)} have no canonical text shared by "
            "both sides: they are compared value by value in differing ranges only"
        )
    if report.replicator:
        report.notes.append(
            f"a replicator is writing this replica ({report.replicator}): rows changed "
            f"after the replica's position ({report.replica_position or 'unknown'}) can "
            "differ until it applies them; --recheck looks at the differing keys again"
        )
    if recheck and (found.missing or found.extra or found.differing):
        report.recheck = recheck_keys(
            db, path, plan, found, wait, lambda: replica.holder() or running,
            _caught_up(work_dir, replica.name),
        )  # fmt: skip
        r = report.recheck
        columns_differ = report.source_only_columns or report.replica_only_columns
        if not (r.missing or r.extra or r.differing or columns_differ):
            report.status = "equal"
            report.notes.append(
                f"every differing key was equal when read again ({len(found.missing)} "
                f"missing, {len(found.extra)} extra, {len(found.differing)} differing were "
                "in flight)"
            )
    return report


@dataclass
class Differences:
    """Every key by which a replica differs from its source table (a report keeps only
    examples), with what is needed to fix them (``cdcctl repair``)."""

    report: TableReport
    store: Storage
    dialect: str
    #: The source table (None: not compared).
    ref: TableRef | None = None
    #: The topic the replica's newest commit read (None: not recorded).
    topic: str | None = None
    #: Position epochs the replica's table accepted (its positions are mapped).
    epochs_accepted: int = 0
    #: The key columns.
    key_columns: list[str] = field(default_factory=list)
    #: Key text -> raw key values: in the source only; on both sides with other values
    #: (as the source holds them); in the replica only (as the replica holds them).
    missing: dict[str, list[Any]] = field(default_factory=dict)
    differing: dict[str, list[Any]] = field(default_factory=dict)
    extra: dict[str, list[Any]] = field(default_factory=dict)
    #: The source's position when those keys were read (None: unknown).
    position: int | None = None
    #: Keys that differed at first and were in flight (equal, or moved on, when looked
    #: at again once the replica had applied the source's position).
    in_flight: int = 0
    #: How the comparison was made (engine.validate.compare's plan).
    plan: Any = None

    @property
    def keys(self) -> dict[str, list[Any]]:
        """Every differing key: key text -> raw key values."""
        return {**self.missing, **self.differing, **self.extra}


def find_differences(
    target: Storage,
    source_dsn: str,
    table: str,
    *,
    work_dir: str | Path | None = None,
    database_map: dict[str, str] | None = None,
    wait_seconds: float = 60.0,
) -> Differences:
    """Compare one replica with its source table and keep every differing key.

    While a replicator writes the replica, the differing keys are looked at again once
    it has applied the source's position (:func:`settle`, waiting at most
    ``wait_seconds``): keys that were only in flight are left out.

    Raises:
        as :func:`validate_replicas`.
    """
    [path] = _select(target, [table])
    db = connect(source_dsn)
    try:
        report, replica, result = _compare_one(db, path, _work_holder(work_dir), database_map or {})
        out = Differences(
            report, path, db.dialect, topic=replica.topic, epochs_accepted=replica.epochs_accepted
        )
        if result is None:
            return out
        plan, found = result
        out.ref, out.plan = plan.ref, plan
        out.key_columns = [k.name for k in plan.keys]
        out = _found(out, found, plan.position)
        # Stored positions of an accepted epoch are mapped: they do not compare with the
        # source's (repair refuses such a table).
        if report.replicator and not replica.epochs_accepted and out.keys:
            out = _settle(db, out, out.keys, wait_seconds, work_dir)
    finally:
        db.close()
    return out


def settle(
    diff: Differences,
    source_dsn: str,
    keys: dict[str, list[Any]],
    wait_seconds: float = 60.0,
    work_dir: str | Path | None = None,
) -> Differences:
    """Which of ``keys`` (of a replica compared by :func:`find_differences`) differ now:
    the source's rows of those keys read in a new snapshot, the replica's once it has
    applied that snapshot's position (waiting at most ``wait_seconds`` while a
    replicator runs); a replica row from a newer change has moved on and does not
    differ."""
    db = connect(source_dsn)
    try:
        return _settle(db, diff, keys, wait_seconds, work_dir)
    finally:
        db.close()


def _settle(
    db: SourceDB,
    diff: Differences,
    keys: dict[str, list[Any]],
    wait_seconds: float,
    work_dir: str | Path | None,
) -> Differences:
    """:func:`settle` on an open connection."""
    from engine.validate.recheck import settle_keys

    def holder() -> str | None:
        return holder_of(diff.store) or _work_holder(work_dir)

    caught_up = _caught_up(work_dir, diff.report.table)
    again = settle_keys(db, diff.store, diff.plan, keys, wait_seconds, holder, caught_up)
    return _found(diff, again.found, again.position, asked=keys)


def _found(
    diff: Differences, found: Any, position: int | None, asked: dict[str, Any] | None = None
) -> Differences:
    """``diff`` with the keys a look ``found`` differing at ``position``; of the keys it
    ``asked`` about, those not found were in flight."""
    out = replace(
        diff,
        missing=dict(found.missing),
        differing={k: raw for k, (raw, _) in found.differing.items()},
        extra=dict(found.extra),
        position=position,
    )
    if asked is not None:
        out.in_flight = len(asked) - len(out.keys)
    return out


def _work_holder(work_dir: str | Path | None) -> str | None:
    """Who holds the work folder's writer lock (a running replicator), or None."""
    return lock_holder(Path(work_dir) / LOCK_NAME) if work_dir is not None else None


def _caught_up(work_dir: str | Path | None, table: str) -> Callable[[float], bool] | None:
    """Whether the replicator on ``work_dir`` has applied all its topic held for
    ``table`` at a lag measurement since a time (None: no work folder known)."""
    if work_dir is None:
        return None
    from engine.state.control import caught_up_since

    return functools.partial(caught_up_since, Path(work_dir), table)
