"""Read replicas back (through hudi-rs, an independent Hudi reader) and query them with DuckDB.

:func:`connect` opens a DuckDB connection where every replica under a target is a view
named after its table. Each replica is pinned when the connection opens: to its newest
completed commit, or with ``as_of`` to the newest commit at or before that instant. A
view's columns come from the commit metadata of that instant (the exact Arrow types the
writer recorded: decimals, naive and zoned timestamps, dates), so registering costs one
listing of ``.hoodie`` and one commit file per replica; the rows are read by hudi-rs
(Merge-on-Read slices merged, base file plus logs, so deleted rows never show) only when
a query first scans the view, then kept for the connection's life.

An ``as_of`` older than what a replica still holds is refused rather than read: hudi-rs
reads an instant whose files the cleaner deleted as an empty (or partial) table without
complaint. The oldest readable instant of a replica is the later of its first instant on
the active timeline (older ones are archived) and the earliest commit its newest clean
retained (planned or done); see :meth:`~engine.hudi.HudiView.oldest_readable`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa

from engine.errors import CdcError, ConfigError, HudiError, QueryError
from engine.hudi import HOODIE_META_COLUMNS, HudiView, as_instant, conform, instant_at, instant_iso
from engine.hudi.retention import KEEP_LATEST_BY_HOURS, KEEP_LATEST_COMMITS
from engine.naming import table_key, unknown_table
from engine.storage import Storage, folder_store

if TYPE_CHECKING:
    from engine.config import Config

# ----------------------------------------------------------------------------- as of


def parse_as_of(text: str) -> str:
    """The 17-digit UTC instant meant by ``text``.

    ``text`` is an instant (``yyyyMMddHHmmssSSS``, or 14 digits: ``.000``) or an ISO 8601
    date or time; a time without a zone is UTC, as Hudi instants are (the replicas'
    ``hoodie.table.timeline.timezone``).

    Raises:
        ConfigError: ``text`` is neither.
    """
    text = text.strip()
    instant = as_instant(text)
    if instant is not None:
        return instant
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--as-of {text!r} is neither an instant nor an ISO time",
            "give a 17-digit instant (20240501120000000) or an ISO time "
            "(2024-05-01T12:00:00Z; no zone means UTC)",
        ) from None
    return instant_at(when)  # no zone means UTC


#: The config key behind each cleaning policy, for messages.
_POLICY_KEYS = {
    KEEP_LATEST_BY_HOURS: "instants older than its time window (hudi.clean_retain_hours)",
    KEEP_LATEST_COMMITS: "instants before its newest commits (hudi.clean_retain_commits)",
}


def resolve_instant(table: HudiView, name: str, as_of: str | None) -> str | None:
    """The completed instant a read of ``table`` pins: the newest (``as_of`` None) or the
    newest at or before ``as_of`` (a 17-digit instant). None: the table has no commit.

    Raises:
        QueryError: ``as_of`` is older than the table's oldest readable instant.
    """
    completed = table.completed_instants()
    if as_of is None:
        return completed[-1] if completed else None
    oldest, policy = table.readable_from()
    chosen = [t for t in completed if t <= as_of]
    if oldest is None or not chosen or chosen[-1] < oldest:
        readable = (
            f"the oldest readable instant is {oldest} ({instant_iso(oldest)})"
            if oldest is not None
            else "it has no commit yet"
        )
        if oldest is not None and oldest > completed[0]:
            older = _POLICY_KEYS.get(policy or "")
            why = (
                f"the cleaner deleted the files of {older}; raise it to keep more history"
                if older
                else "the cleaner deleted the files of older instants"
            )
        elif table.has_archive():
            why = "older instants are archived (hudi.keep_min_commits)"
        else:
            why = "there was no commit before it"
        raise QueryError(
            f"{name} cannot be read as of {as_of} ({instant_iso(as_of)}): {readable}",
            f"{why}; ask for that instant or a later one",
        )
    return chosen[-1]


# ----------------------------------------------------------------------------- reading


def _schema_of(table: HudiView, instant: str | None, meta: bool) -> pa.Schema:
    """The columns of ``table`` at ``instant`` (from the commit metadata, no data read)."""
    schema = table.schema_at(instant) if instant is not None else None
    if schema is None:
        schema = table.arrow_schema()
    if schema is None:  # not written by cdcctl: ask hudi-rs
        schema = table.reader().get_schema()
    data = [f for f in schema if f.name not in HOODIE_META_COLUMNS]
    front = [pa.field(name, pa.string()) for name in HOODIE_META_COLUMNS] if meta else []
    return pa.schema(front + data)


def _read(table: HudiView, instant: str | None, schema: pa.Schema) -> pa.Table:
    """The rows of ``table`` as of ``instant`` (merged), typed exactly as ``schema``."""
    import hudi

    if instant is None:
        return schema.empty_table()
    reader = table.reader()
    options = hudi.HudiReadOptions().with_as_of_timestamp(instant)
    batches = reader.read(options)
    if not batches:
        return schema.empty_table()
    rows = conform(pa.Table.from_batches(batches), schema)
    return rows.select(schema.names).cast(schema)


@dataclass
class Replica:
    """One replica of a connection: registered by schema, read on its first scan.

    DuckDB takes it through the Arrow PyCapsule interface: ``__arrow_c_schema__`` when
    the view is registered (the commit's schema, no data read), ``__arrow_c_stream__``
    whenever a query scans it (hudi-rs reads the pinned instant once; later scans reuse
    the rows).
    """

    name: str
    table: HudiView
    instant: str | None
    schema: pa.Schema
    #: Why the replica cannot be read (e.g. ``as_of`` too old): raised on scan.
    refused: CdcError | None = None
    #: The error of a scan that failed, for :func:`query` to report as it is.
    failure: CdcError | None = field(default=None, repr=False)
    _rows: pa.Table | None = field(default=None, repr=False)

    def rows(self) -> pa.Table:
        """The replica's rows at its pinned instant (read on first use).

        Raises:
            QueryError: the instant was refused, or a clean removed its files since the
                connection opened (the read may have missed rows).
            HudiError: hudi-rs could not read the table.
        """
        if self._rows is not None:
            return self._rows
        try:
            if self.refused is not None:
                raise self.refused
            rows = _read(self.table, self.instant, self.schema)
            # A clean planned before the read finished may have deleted files the read
            # needed: hudi-rs then leaves rows out silently. Cleans plan (and record the
            # earliest commit they keep) before deleting, so this check after the read
            # sees every clean that can have touched it.
            oldest = HudiView.open(self.table.store).oldest_readable()
            if self.instant is not None and oldest is not None and self.instant < oldest:
                raise QueryError(
                    f"{self.name}: instant {self.instant} was cleaned while the connection "
                    f"was open; the oldest readable instant is now {oldest}",
                    "open a new connection (cdcctl query does for each run)",
                )
        except CdcError as exc:
            self.failure = exc
            raise
        except Exception as exc:  # hudi-rs errors are plain exceptions
            self.failure = HudiError(f"{self.name}: hudi-rs cannot read it: {exc}")
            raise self.failure from exc
        self._rows = rows
        return rows

    def __arrow_c_schema__(self) -> Any:
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.rows().__arrow_c_stream__(requested_schema)


def read_table(path: str | Path, *, meta: bool = False, as_of: str | None = None) -> pa.Table:
    """The rows of a replica, read with hudi-rs: its newest commit, or as of ``as_of``
    (an instant or ISO time, see :func:`parse_as_of`).

    Args:
        path: the table folder (relative paths are relative to the current directory).
        meta: keep the ``_hoodie_*`` meta columns.
        as_of: read the state at this instant.
    """
    replica = _replica(folder_store(path), meta, parse_as_of(as_of) if as_of else None)
    return replica.rows()


def _replica(store: Storage, meta: bool, as_of: str | None) -> Replica:
    if not HudiView.exists(store):
        raise HudiError(f"{store.url} is not a Hudi table", hint="check the target folder")
    table = HudiView.open(store)
    name = store.name
    try:
        instant = resolve_instant(table, name, as_of)
    except QueryError as exc:
        # Registered anyway (with today's columns): refused only if a query reads it.
        return Replica(name, table, None, _schema_of(table, None, meta), refused=exc)
    return Replica(name, table, instant, _schema_of(table, instant, meta))


def list_tables(target: str | Path | Storage) -> list[str]:
    """Names of the Hudi tables under a target folder or store."""
    return HudiView.tables_under(target if isinstance(target, Storage) else folder_store(target))


@dataclass
class _Session:
    root: str
    connection: duckdb.DuckDBPyConnection
    replicas: dict[str, Replica]


def _open(
    target_or_config: str | Path | Storage | Config, as_of: str | None, meta: bool
) -> _Session:
    if isinstance(target_or_config, Storage):
        root: Storage = target_or_config
    elif isinstance(target_or_config, str | Path):
        root = folder_store(target_or_config)
    else:
        root = target_or_config.target_store()
    instant = parse_as_of(as_of) if as_of else None
    con = duckdb.connect()
    # TIMESTAMP WITH TIME ZONE columns print and export in UTC, as they are stored.
    con.execute("SET TimeZone = 'UTC'")
    replicas: dict[str, Replica] = {}
    by_key: dict[str, str] = {}
    for name in list_tables(root):
        replica = _replica(root.under(name), meta, instant)
        other = by_key.setdefault(table_key(name), name)
        if other != name:
            # DuckDB view names ignore case: one view for both, refused when read.
            replica.refused = QueryError(
                f"the folders {other!r} and {name!r} in {root.url} differ only in case, and "
                "view names do not",
                "move one of them out of the target folder",
            )
            replicas.pop(other, None)
        con.register(name, replica)  # a name, never SQL text: any folder name is safe
        replicas[name] = replica
    return _Session(root.url, con, replicas)


def connect(
    target_or_config: str | Path | Storage | Config, as_of: str | None = None, meta: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection where every replica is a view named after its table.

    Each view reads its replica as of the newest commit when the connection opened (or
    as of ``as_of``), with the exact column types and without the ``_hoodie_*`` columns
    unless ``meta``. Rows are read on a view's first scan, so a query reads only the
    replicas it names. A replica ``as_of`` cannot reach fails the queries that read it
    (naming its oldest readable instant). Open a new connection to see newer commits.

    Args:
        target_or_config: the target folder, its store, or a
            :class:`~engine.config.Config` (a bucket target needs one of the last two).
        as_of: a 17-digit instant or an ISO time (UTC unless it says otherwise).
        meta: include Hudi's ``_hoodie_*`` meta columns.

    Example::

        con = engine.connect("lake")
        con.sql("SELECT status, count(*) FROM inventory_orders GROUP BY ALL").show()
    """
    return _open(target_or_config, as_of, meta).connection


#: DuckDB's error for a missing table: the name as written, unquoted (spaces and all).
_MISSING_TABLE = re.compile(r"Table with name (.+) does not exist!")


def query(
    target_or_config: str | Path | Storage | Config,
    sql: str,
    *,
    as_of: str | None = None,
    meta: bool = False,
) -> pa.Table:
    """Run SQL over the replicas (:func:`connect`) and return the result.

    Raises:
        QueryError: the SQL is invalid or reads a replica ``as_of`` cannot reach.
        UnknownTableError: the SQL names a table that does not exist.
        ConfigError: ``as_of`` is not an instant or ISO time.
    """
    session = _open(target_or_config, as_of, meta)
    try:
        relation = session.connection.sql(sql)
        return relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as exc:
        for replica in session.replicas.values():
            if replica.failure is not None:
                raise replica.failure from None
        reason = str(exc).strip().splitlines()[0]
        names = list(session.replicas)
        missing = _MISSING_TABLE.search(reason)
        if isinstance(exc, duckdb.CatalogException) and missing:
            raise unknown_table(missing.group(1), names) from None
        tables = ", ".join(names) if names else f"none: {session.root} holds no replica yet"
        raise QueryError(f"query failed: {reason}", hint=f"replicas: {tables}") from None
    finally:
        session.connection.close()
