"""The source database side of a validation: PostgreSQL (psycopg 3) or MySQL/MariaDB (pymysql).

Every query quotes its identifiers and binds its values; queries always run with a
parameter tuple (maybe empty), so a literal ``%`` in SQL is written ``%%``. All reads of
one pass run in one read-only snapshot (``REPEATABLE READ``; InnoDB's consistent
snapshot), so the ranges of a table are compared against one state of the source; rows
are streamed in key order through a server-side cursor, never held whole. DSN passwords
never appear in messages (:func:`redact`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from engine.errors import ConfigError, SourceDatabaseError
from engine.naming import quote_mysql, quote_pg
from engine.validate import canonical as cn
from engine.validate.canonical import ColumnPlan, SourceColumn

POSTGRES_SCHEMES = ("postgresql", "postgres")
MYSQL_SCHEMES = ("mysql", "mariadb")

_URL_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*(@)")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)

#: Rows fetched per round trip from a server-side cursor.
FETCH_ROWS = 20_000


def redact(dsn: str) -> str:
    """The DSN with any password replaced by ``***``."""
    return _KV_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***\2", dsn))


def dialect_of(dsn: str) -> str:
    """``postgresql`` or ``mysql`` from the DSN's scheme (key=value DSNs are PostgreSQL's).

    Raises:
        ConfigError: an unknown scheme.
    """
    if "://" not in dsn:
        return "postgresql"
    scheme = dsn.split("://", 1)[0].lower()
    if scheme in POSTGRES_SCHEMES:
        return "postgresql"
    if scheme in MYSQL_SCHEMES:
        return "mysql"
    raise ConfigError(
        f"--source {redact(dsn)}: {scheme!r} is not a database URL scheme",
        hint="use postgresql://user@host:port/db or mysql://user@host:port[/db]",
    )


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


@dataclass(frozen=True)
class TableRef:
    """A source table: ``schema`` is PostgreSQL's schema; ``db`` is the database
    (PostgreSQL: the DSN's database must be it; MySQL: the schema queried)."""

    db: str | None
    schema: str | None
    table: str

    def __str__(self) -> str:
        return ".".join(p for p in (self.db, self.schema, self.table) if p)


class SourceDB:
    """A connection to the source database, in one dialect."""

    dialect: str

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.shown = redact(dsn)

    # -- what subclasses provide
    def database(self) -> str | None:
        raise NotImplementedError

    def quote(self, name: str) -> str:
        raise NotImplementedError

    def text_expr(self, col: ColumnPlan) -> str:
        raise NotImplementedError

    def raw_expr(self, col: ColumnPlan) -> str:
        """The expression reading a row-only column's value (compared value by value)."""
        return self.quote(col.name)

    def row_text(self, texts: list[str]) -> str:
        raise NotImplementedError

    def hash_expr(self, row_text: str) -> str:
        raise NotImplementedError

    def qualified(self, ref: TableRef) -> str:
        raise NotImplementedError

    def columns(self, ref: TableRef) -> list[SourceColumn]:
        raise NotImplementedError

    def begin_snapshot(self) -> int | None:
        """Start a read-only snapshot; the source's current position (None: unknown)."""
        raise NotImplementedError

    def end_snapshot(self) -> None:
        raise NotImplementedError

    def current_position(self) -> int | None:
        raise NotImplementedError

    def position_text(self, pos: int | None) -> str | None:
        raise NotImplementedError

    def key_order(self, name: str, source_type: str) -> str:
        """The ORDER BY / comparison expression of a key column (byte order for text)."""
        raise NotImplementedError

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        raise NotImplementedError

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple]:
        raise NotImplementedError

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement that returns no rows (committed at once)."""
        raise NotImplementedError

    def literal(self, value: Any) -> str:
        """``value`` as an SQL literal of this dialect (in SQL run without parameters)."""
        raise NotImplementedError

    def name(self, identifier: str) -> str:
        """An identifier quoted for SQL run without parameters (``%`` as it is)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _fail(self, exc: Exception, doing: str) -> SourceDatabaseError:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        password = _password_of(self.dsn)
        if password:
            message = message.replace(password, "***")
        return SourceDatabaseError(
            f"source database {self.shown}: {doing} failed: {message}",
            hint="check --source (host, port, user, database) and that the user may read "
            "the replicated tables",
        )


def _password_of(dsn: str) -> str | None:
    if "://" in dsn:
        pw = urlsplit(dsn).password
        return unquote(pw) if pw else None
    m = _KV_PASSWORD.search(dsn)
    return m.group(2).strip("'") if m else None


class PostgresDB(SourceDB):
    dialect = "postgresql"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        import psycopg

        self._psycopg = psycopg
        try:
            self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except (psycopg.Error, ValueError) as exc:  # ValueError: an unparsable DSN
            raise self._fail(exc, "connecting") from None
        self.conn.execute("SET TIME ZONE 'UTC'")
        self._cursors = 0

    def database(self) -> str | None:
        return str(self.conn.info.dbname)

    def quote(self, name: str) -> str:
        return quote_pg(name, bound=True)  # every query runs with parameters (maybe none)

    def name(self, identifier: str) -> str:
        return quote_pg(identifier)

    def text_expr(self, col: ColumnPlan) -> str:
        return cn.pg_text(self.quote(col.name), col.kind, col.source_type)

    def raw_expr(self, col: ColumnPlan) -> str:
        return cn.pg_raw(self.quote(col.name), col.source_type)

    def row_text(self, texts: list[str]) -> str:
        return cn.pg_row_text(texts)

    def hash_expr(self, row_text: str) -> str:
        return cn.pg_hash(row_text)

    def qualified(self, ref: TableRef) -> str:
        return f"{self.quote(ref.schema or 'public')}.{self.quote(ref.table)}"

    def columns(self, ref: TableRef) -> list[SourceColumn]:
        rows = self.query(
            """
            SELECT a.attname, t.typname, t.typtype, et.typname
            FROM pg_attribute a
            JOIN pg_type t ON t.oid = a.atttypid
            LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
            WHERE a.attrelid = to_regclass(quote_ident(%s) || '.' || quote_ident(%s))
              AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
            """,
            (ref.schema or "public", ref.table),
        )
        return [
            SourceColumn(name, "enum" if typtype == "e" else typname, element)
            for name, typname, typtype, element in rows
        ]

    def begin_snapshot(self) -> int | None:
        # The position is read before the snapshot is taken (at its first statement):
        # every change the snapshot misses commits after it.
        try:
            row = self.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self.conn.execute("SELECT 1").fetchone()
        except self._psycopg.Error as exc:
            raise self._fail(exc, "starting a snapshot") from None
        return parse_lsn(row[0]) if row and row[0] else None

    def end_snapshot(self) -> None:
        self.conn.execute("ROLLBACK")

    def current_position(self) -> int | None:
        row = self.query("SELECT pg_current_wal_lsn()::text")
        return parse_lsn(row[0][0]) if row and row[0][0] else None

    def position_text(self, pos: int | None) -> str | None:
        return None if pos is None else f"LSN {format_lsn(pos)}"

    def key_order(self, name: str, source_type: str) -> str:
        q = self.quote(name)
        if source_type in ("text", "varchar", "bpchar", "name", "citext"):
            return f'{q} COLLATE "C"'
        return q

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except self._psycopg.Error as exc:
            raise self._fail(exc, "a query") from None

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple]:
        self._cursors += 1
        try:
            with self.conn.cursor(name=f"cdcctl_validate_{self._cursors}") as cur:
                cur.itersize = FETCH_ROWS
                cur.execute(sql, params)
                yield from cur
        except self._psycopg.Error as exc:
            raise self._fail(exc, "reading rows") from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        try:
            self.conn.execute(sql, params)
        except self._psycopg.Error as exc:
            raise self._fail(exc, "a statement") from None

    def literal(self, value: Any) -> str:
        from psycopg import sql

        return sql.Literal(value).as_string(self.conn)

    def close(self) -> None:
        self.conn.close()


class MySQLDB(SourceDB):
    dialect = "mysql"

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        import pymysql
        import pymysql.cursors

        self._pymysql = pymysql
        parts = urlsplit(dsn)
        password = unquote(parts.password) if parts.password else os.environ.get("MYSQL_PWD", "")
        self._db = unquote(parts.path.lstrip("/")) or None
        try:
            self.conn = pymysql.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                user=unquote(parts.username or "root"),
                password=password,
                database=self._db,
                charset="utf8mb4",
                autocommit=True,
                connect_timeout=10,
            )
        except (pymysql.Error, ValueError) as exc:
            raise self._fail(exc, "connecting") from None
        self.query("SET time_zone = '+00:00'")
        self._ss = pymysql.cursors.SSCursor

    def database(self) -> str | None:
        return self._db

    def quote(self, name: str) -> str:
        return quote_mysql(name, bound=True)  # every query runs with parameters (maybe none)

    def name(self, identifier: str) -> str:
        return quote_mysql(identifier)

    def text_expr(self, col: ColumnPlan) -> str:
        return cn.mysql_text(self.quote(col.name), col.kind, col.nullable)

    def row_text(self, texts: list[str]) -> str:
        return cn.mysql_row_text(texts)

    def hash_expr(self, row_text: str) -> str:
        return cn.mysql_hash(row_text)

    def qualified(self, ref: TableRef) -> str:
        db = ref.db or self._db
        return f"{self.quote(db)}.{self.quote(ref.table)}" if db else self.quote(ref.table)

    def columns(self, ref: TableRef) -> list[SourceColumn]:
        rows = self.query(
            "SELECT COLUMN_NAME, DATA_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (ref.db or self._db, ref.table),
        )
        return [
            SourceColumn(str(name), str(typ).lower(), nullable=str(nullable).upper() != "NO")
            for name, typ, nullable in rows
        ]

    def begin_snapshot(self) -> int | None:
        pos = self.current_position()
        self.query("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        return pos

    def end_snapshot(self) -> None:
        self.query("ROLLBACK")

    def current_position(self) -> int | None:
        try:
            rows = self.query("SHOW MASTER STATUS")
        except SourceDatabaseError:
            return None
        if not rows:
            return None  # binary log off
        file, pos = str(rows[0][0]), int(rows[0][1])
        m = re.search(r"([0-9]+)$", file)
        return (int(m.group(1)) << 32 | pos) if m else None

    def position_text(self, pos: int | None) -> str | None:
        return None if pos is None else f"binlog {pos >> 32:06d}:{pos & 0xFFFFFFFF}"

    def key_order(self, name: str, source_type: str) -> str:
        q = self.quote(name)
        if cn._MYSQL_KINDS.get(source_type) == cn.TEXT:
            return f"CAST({q} AS BINARY)"
        return q

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, tuple(params))
                return list(cur.fetchall())
        except self._pymysql.Error as exc:
            raise self._fail(exc, "a query") from None

    def stream(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple]:
        try:
            with self.conn.cursor(self._ss) as cur:
                cur.execute(sql, tuple(params))
                while True:
                    rows = cur.fetchmany(FETCH_ROWS)
                    if not rows:
                        return
                    yield from rows
        except self._pymysql.Error as exc:
            raise self._fail(exc, "reading rows") from None

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.query(sql, params)

    def literal(self, value: Any) -> str:
        if isinstance(value, str):  # hex: the same under every sql_mode (backslashes)
            return "_utf8mb4 X'" + value.encode().hex() + "'"
        if isinstance(value, bytes | bytearray):
            return "X'" + bytes(value).hex() + "'"
        return str(self.conn.escape(value))

    def close(self) -> None:
        self.conn.close()


def connect(dsn: str) -> SourceDB:
    """A connection to the source database named by ``dsn``.

    Raises:
        ConfigError: the DSN's scheme is not a database's.
        SourceDatabaseError: the database cannot be reached.
    """
    if dialect_of(dsn) == "postgresql":
        return PostgresDB(dsn)
    return MySQLDB(dsn)
