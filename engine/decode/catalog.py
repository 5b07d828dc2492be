"""Column types of schemaless tables read from the source database's catalog.

With ``source.catalog_types = true`` the decoder types the columns of schemaless JSON
messages (``schemas.enable=false``) by what ``information_schema.columns`` of
``source.database_dsn`` (PostgreSQL, MySQL or MariaDB) says they are: a ``numeric(12,2)``
column becomes ``decimal(12,2)`` instead of the base64 text on the wire, a ``timestamp``
a timestamp instead of an integer. Only types JSON cannot carry are taken from the
catalog (decimals, dates, times, timestamps, binary, uuid, json); the others keep the
JSON type. The wire forms assumed are those of the connectors' default settings
(``decimal.handling.mode=precise``, ``time.precision.mode=adaptive`` for PostgreSQL and
``adaptive_time_microseconds`` for MySQL, ``binary.handling.mode=bytes``); with other
settings give ``[tables.<name>.columns]`` hints, which always win.

When it is read: once when the decoder is built (the replicator's start; a catalog that
cannot be read then stops the start with the reason), and again when a batch holds a
column or table that the last read did not list (a column added at the source). If that
re-read fails, the messages with a value in such a column are bad (quarantined with their
coordinates and the reason), never applied with a guessed type; the others apply
without the column.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from engine.column_types import ColumnType, catalog_column_type
from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.config import Config

log = logging.getLogger(__name__)

#: Seconds to wait for a connection and for the query.
TIMEOUT_S = 10

_PG_QUERY = """
SELECT table_schema, table_name, column_name, data_type, numeric_precision, numeric_scale,
       datetime_precision, udt_name
FROM information_schema.columns
WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
"""
_MYSQL_QUERY = """
SELECT table_schema, table_name, column_name, data_type, numeric_precision, numeric_scale,
       datetime_precision, column_type
FROM information_schema.columns
WHERE table_schema NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
"""

Tables = dict[tuple[str, str], dict[str, ColumnType]]


class SourceCatalog:
    """The column types of every table of the source database (cached, re-read on need)."""

    def __init__(self, cfg: Config) -> None:
        from engine.checks.database import parse_dsn

        url = cfg.source.database.database_dsn
        if not url:
            raise ConfigError(
                "source.catalog_types needs source.database_dsn", hint="set source.database_dsn"
            )
        self._cfg = cfg
        self._dsn = parse_dsn(url)
        self._tables: Tables = {}
        #: Columns a re-read already looked for and did not find (not looked for again).
        self._absent: set[tuple[str, str, str]] = set()
        self.reads = 0
        try:
            self._tables = self._read()
        except Exception as exc:  # noqa: BLE001 - any driver error: one clear message
            raise ConfigError(
                f"cannot read the column types of {self._dsn.redacted()} "
                f"(source.catalog_types): {self._reason(exc)}",
                hint="check source.database_dsn and the database password "
                "(source.database_password, PGPASSWORD / MYSQL_PWD), or turn "
                "source.catalog_types off and give [tables.<name>.columns] hints",
            ) from None

    @property
    def tables(self) -> Tables:
        """The column types read last, by (schema or database, table)."""
        return self._tables

    def _password(self) -> str | None:
        from engine.checks.database import database_password

        return database_password(self._cfg, self._dsn)

    def _reason(self, exc: BaseException) -> str:
        from engine.checks.dsn import error_text

        return error_text(exc, self._password())

    def _read(self) -> Tables:
        """One query over ``information_schema.columns``."""
        self.reads += 1
        password = self._password()
        if self._dsn.kind == "postgresql":
            import psycopg

            kwargs: dict[str, Any] = {"connect_timeout": TIMEOUT_S, "autocommit": True}
            if password is not None:
                kwargs["password"] = password
            with psycopg.connect(self._dsn.url, **kwargs) as conn:
                rows = list(conn.execute(_PG_QUERY).fetchall())
        else:
            import pymysql

            conn = pymysql.connect(
                host=self._dsn.host or "127.0.0.1",
                port=self._dsn.port or 3306,
                user=self._dsn.user or "root",
                password=password or "",
                database=self._dsn.database,
                connect_timeout=TIMEOUT_S,
                read_timeout=TIMEOUT_S,
            )
            with conn, conn.cursor() as cur:
                cur.execute(_MYSQL_QUERY)
                rows = list(cur.fetchall())
        tables: Tables = {}
        for schema, table, column, data_type, precision, scale, dt_precision, native in rows:
            ct = catalog_column_type(
                self._dsn.kind, _text(data_type), precision, scale, dt_precision, _text(native)
            )
            columns = tables.setdefault((_text(schema), _text(table)), {})
            if ct is not None:
                columns[_text(column)] = ct
            else:
                columns.setdefault(_text(column), ColumnType("__json__"))
        return tables

    def _locate(self, source: dict[str, str] | None, topic: str) -> tuple[str, str] | None:
        """``(schema or database, table)`` of a topic's source table."""
        if source and source.get("table"):
            ns = source.get("schema") or source.get("db")
            if ns:
                return ns, source["table"]
        parts = topic.split(".")
        return (parts[-2], parts[-1]) if len(parts) >= 3 else None

    def types_for(
        self, source: dict[str, str] | None, topic: str, columns: list[str]
    ) -> tuple[dict[str, ColumnType], str | None, list[str]]:
        """Catalog types of the named columns, and what could not be typed.

        A column the last read did not list triggers one re-read (a column added at the
        source); a column still absent after it keeps its JSON type.

        Returns:
            The types found; when a needed re-read failed, the reason and the columns it
            left untyped (messages with a value in them must not be applied).
        """
        where = self._locate(source, topic)
        if where is None:
            return {}, None, []
        known = self._tables.get(where, {})
        missing = [c for c in columns if c not in known and (*where, c) not in self._absent]
        if missing:
            try:
                self._tables = self._read()
            except Exception as exc:  # noqa: BLE001 - any driver error: one clear message
                reason = (
                    f"column(s) {', '.join(missing)} of {where[0]}.{where[1]} are not in the "
                    f"column types read from {self._dsn.redacted()} and reading them again "
                    f"failed: {self._reason(exc)}; fix the database connection (or give "
                    "[tables.<name>.columns] hints) and replay the dead letters"
                )
                found = {c: known[c] for c in columns if c in known and known[c].kind != "__json__"}
                return found, reason, missing
            known = self._tables.get(where, {})
            for c in columns:
                if c not in known:
                    self._absent.add((*where, c))
                    log.warning(
                        "%s: column %s of %s.%s is not in the source catalog; its JSON type is "
                        "kept",
                        topic,
                        c,
                        *where,
                    )
        found = {c: known[c] for c in columns if c in known and known[c].kind != "__json__"}
        return found, None, []


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return value.decode()
    return "" if value is None else str(value)


def check_catalog(cfg: Config) -> int:
    """Read the catalog of ``source.database_dsn`` once; the number of tables it lists.

    Raises:
        ConfigError: It cannot be read (the message names the database and the reason).
    """
    return len(SourceCatalog(cfg).tables)
