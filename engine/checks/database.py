"""Source database checks: what Debezium needs from PostgreSQL or MySQL/MariaDB.

The database is named by a URL (``--source`` or ``source.database_dsn``); its password
comes from the URL given on the command line, the environment variable named by
``source.database_password_env``, or the clients' standard ``PGPASSWORD`` / ``MYSQL_PWD``.
A password is never printed: URLs are shown redacted and error messages scrubbed.

The tables checked are those the matching Kafka topics map to (Debezium names them
``<prefix>.<schema-or-database>.<table>``). Before any topic exists, the tables whose
would-be topic ``<prefix>.<schema>.<table>`` matches the config are checked, the prefix
read from the start of ``source.topics``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from engine.checks.common import listing, plural, topic_selected
from engine.checks.result import FAIL, PASS, WARN, Check, Status, failed, passed, warned
from engine.config import DATABASE_SCHEMES, Config
from engine.errors import ConfigError
from engine.naming import quote_mysql, quote_pg, quote_sql_string
from engine.redaction import register as register_secret

#: Seconds to wait for a connection, and for one statement.
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_S = 10
#: The publication Debezium's PostgreSQL connector uses by default.
PUBLICATION = "dbz_publication"
#: Binlogs kept for less than this are a warning (a longer outage needs a new snapshot).
MIN_BINLOG_RETENTION_S = 86_400
_PG_SYSTEM = ("pg_catalog", "information_schema", "pg_toast")
_MYSQL_SYSTEM = ("mysql", "information_schema", "performance_schema", "sys")


@dataclass(frozen=True)
class Dsn:
    """A parsed database URL (the password, when the URL has one, is kept only here)."""

    url: str
    kind: str  # "postgresql" or "mysql"
    host: str
    port: int | None
    user: str | None
    database: str | None
    password: str | None

    def redacted(self) -> str:
        """The URL with its password replaced by ``***``."""
        return redact(self.url)


def redact(url: str) -> str:
    """``url`` without its password (``postgresql://u:***@h/db``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{parts.username}:***@{netloc}").geturl()


def parse_dsn(url: str) -> Dsn:
    """Parse a ``postgresql://`` or ``mysql://`` URL.

    Raises:
        ConfigError: another scheme, or not a URL.
    """
    parts = urlsplit(url)
    if parts.scheme not in DATABASE_SCHEMES:
        raise ConfigError(
            f"{redact(url)!r} is not a database URL",
            hint="use postgresql://user@host:5432/dbname or mysql://user@host:3306",
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{redact(url)!r} has a bad port", hint="host:port") from None
    kind = "postgresql" if parts.scheme in ("postgresql", "postgres") else "mysql"
    database = unquote(parts.path.lstrip("/")) or None
    return Dsn(
        url=url,
        kind=kind,
        host=parts.hostname or "",
        port=port,
        user=unquote(parts.username) if parts.username else None,
        database=database,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def _password(cfg: Config, dsn: Dsn) -> tuple[str | None, str | None]:
    """The password to use, and a problem when the configured variable is not set."""
    if dsn.password is not None:
        return dsn.password, None
    env = cfg.source.database.database_password_env
    if env and cfg.source.database.database_password is None and env not in os.environ:
        return None, env
    secret = cfg.source.database.database_password_value()
    if secret is not None:
        return secret.get_secret_value(), None
    standard = "PGPASSWORD" if dsn.kind == "postgresql" else "MYSQL_PWD"
    value = os.environ.get(standard)
    if value is not None:
        register_secret(value)
    return value, None


def _reason(exc: BaseException, password: str | None) -> str:
    """An error message on one line, without the password."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text or type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return text


def _topic_prefix(cfg: Config) -> str | None:
    """The literal topic prefix at the start of ``source.topics`` (``^dbserver1\\.``)."""
    head = re.split(r"\\\.|\.", cfg.source.kafka.topics.removeprefix("^"), maxsplit=1)[0]
    return head if re.fullmatch(r"[A-Za-z0-9_\-]+", head) else None


def tables_of_topics(topics: Iterable[str]) -> list[tuple[str, str]]:
    """``(schema, table)`` of Debezium table topics ``<prefix>.<schema>.<table>``."""
    out = []
    for topic in topics:
        segments = topic.split(".")
        if len(segments) >= 3:
            out.append((segments[-2], segments[-1]))
    return sorted(set(out))


def _select_tables(
    cfg: Config, topics: list[str] | None, all_tables: Callable[[], list[tuple[str, str]]]
) -> tuple[list[tuple[str, str]], str]:
    """The tables to check, and where the list came from (when there are none: why)."""
    if topics:
        return tables_of_topics(topics), f"the {plural(len(topics), 'matching topic')}"
    why = "Kafka was not reachable" if topics is None else "no topic matches source.topics"
    prefix = _topic_prefix(cfg)
    if prefix is None:
        return [], (
            f"{why}, and source.topics ({cfg.source.kafka.topics!r}) does not start with a topic "
            "prefix to map tables to topics with"
        )
    chosen = [(s, t) for s, t in all_tables() if topic_selected(cfg, f"{prefix}.{s}.{t}")]
    if not chosen:
        return [], f"{why}, and no table here matches source.topics as {prefix}.<schema>.<table>"
    return chosen, f"source.topics as {prefix}.<schema>.<table>: {why}"


def _worst(statuses: Iterable[Status]) -> Status:
    found = set(statuses)
    return FAIL if FAIL in found else WARN if WARN in found else PASS


def _table_check(name: str, problems: list[tuple[Status, str, str]]) -> Check:
    status = _worst(s for s, _, _ in problems)
    detail = "; ".join(d for _, d, _ in problems)
    fix = " ".join(dict.fromkeys(f for _, _, f in problems if f))
    return Check(name, status, detail, fix)


Problems = list[tuple[Status, str, str]]


def _tables_checks(
    kind: str,
    wanted: list[tuple[str, str]],
    problems_of: Callable[[str, str], Problems | None],
    absent: Callable[[str, str], tuple[str, str]],
    summary: Callable[[list[str]], str],
) -> list[Check]:
    """A check for each table that is missing or has problems, one for all the others.

    ``problems_of`` returns None for a table the database does not have.
    """
    checks, good = [], []
    for schema, table in wanted:
        name = f"{kind}.table {schema}.{table}"
        problems = problems_of(schema, table)
        if problems is None:
            checks.append(failed(name, *absent(schema, table)))
        elif problems:
            checks.append(_table_check(name, problems))
        else:
            good.append(f"{schema}.{table}")
    if good:
        checks.append(passed(f"{kind}.tables", summary(good)))
    return checks


# ------------------------------------------------------------------------- PostgreSQL


def _pg_table(schema: str, table: str) -> str:
    return f"{quote_pg(schema)}.{quote_pg(table)}"


_PG_TABLES_SQL = """
SELECT n.nspname, c.relname, c.relreplident,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
       has_table_privilege(c.oid, 'SELECT'),
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
               AND a.attstorage IN ('x', 'e')
             ORDER BY a.attnum)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p')
  AND (n.nspname, c.relname) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
"""


def postgres_checks(
    cfg: Config, dsn: Dsn, password: str | None, topics: Callable[[], list[str] | None]
) -> list[Check]:
    """Every PostgreSQL check, in order."""
    import psycopg

    kwargs: dict[str, Any] = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "autocommit": True,
        "options": f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}",
    }
    if password is not None:
        kwargs["password"] = password
    try:
        conn = psycopg.connect(dsn.url, **kwargs)
    except psycopg.Error as exc:
        return [
            failed(
                "postgres.connect",
                f"cannot connect to {dsn.redacted()}: {_reason(exc, password)}",
                "check the URL (--source or source.database_dsn) and that the server accepts "
                "this user from here (pg_hba.conf); the password comes from "
                "source.database_password, source.database_password_env or PGPASSWORD",
            )
        ]
    try:
        with conn:
            return _postgres(cfg, dsn, conn, topics)
    except psycopg.Error as exc:
        return [failed("postgres.query", _reason(exc, password), "see the message")]


def _postgres(
    cfg: Config, dsn: Dsn, conn: Any, topics: Callable[[], list[str] | None]
) -> list[Check]:
    def one(sql: str, *params: Any) -> Any:
        row = conn.execute(sql, params or None).fetchone()
        return row[0] if row else None

    def rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return list(conn.execute(sql, params or None).fetchall())

    version = one("SHOW server_version")
    user, database = conn.execute("SELECT current_user, current_database()").fetchone()
    settings = dict(
        rows(
            "SELECT name, setting FROM pg_settings WHERE name IN ('wal_level', "
            "'max_replication_slots', 'max_wal_senders', 'max_slot_wal_keep_size')"
        )
    )
    checks = [
        passed(
            "postgres.connect",
            f"PostgreSQL {version}, database {database} as {user} ({dsn.redacted()})",
        )
    ]

    wal_level = settings.get("wal_level")
    if wal_level == "logical":
        checks.append(passed("postgres.wal_level", "logical"))
    else:
        checks.append(
            failed(
                "postgres.wal_level",
                f"{wal_level}: logical decoding (Debezium's pgoutput) needs logical",
                "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
            )
        )

    in_recovery = bool(one("SELECT pg_is_in_recovery()"))
    retained = (
        "NULL"
        if in_recovery
        else "pg_size_pretty(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn))"
    )
    slots = rows(
        f"SELECT slot_name, slot_type, coalesce(plugin, ''), coalesce(database, ''), active, "
        f"{retained} FROM pg_replication_slots ORDER BY slot_name"
    )
    max_slots = int(settings.get("max_replication_slots") or 0)
    free = max_slots - len(slots)
    described = [
        f"{name} ({plugin or kind}{', ' + db if db else ''}, "
        f"{'active' if active else 'inactive'}{', ' + size + ' WAL retained' if size else ''})"
        for name, kind, plugin, db, active, size in slots
    ]
    detail = f"{len(slots)} of {max_slots} used, {free} free"
    if described:
        detail += ": " + listing(described)
    if free > 0:
        checks.append(passed("postgres.replication_slots", detail))
    else:
        checks.append(
            failed(
                "postgres.replication_slots",
                detail + "; the connector needs one for itself",
                f"ALTER SYSTEM SET max_replication_slots = {max_slots + 1}; then restart "
                "PostgreSQL (or drop an unused slot: SELECT pg_drop_replication_slot('<name>');)",
            )
        )

    max_senders = int(settings.get("max_wal_senders") or 0)
    senders = int(one("SELECT count(*) FROM pg_stat_replication") or 0)
    detail = f"{senders} of {max_senders} in use, {max_senders - senders} free"
    if max_senders - senders > 0:
        checks.append(passed("postgres.wal_senders", detail))
    else:
        checks.append(
            failed(
                "postgres.wal_senders",
                detail + "; the connector needs one",
                f"ALTER SYSTEM SET max_wal_senders = {max_senders + 1}; then restart PostgreSQL",
            )
        )

    keep = settings.get("max_slot_wal_keep_size")
    if keep is None:
        checks.append(
            warned(
                "postgres.max_slot_wal_keep_size",
                f"not available in PostgreSQL {version}: a slot whose connector stops keeps "
                "WAL without limit",
                "watch the disk while the connector is down, or drop its slot "
                "(SELECT pg_drop_replication_slot('<name>');)",
            )
        )
    elif keep == "-1":
        checks.append(
            warned(
                "postgres.max_slot_wal_keep_size",
                "-1 (unbounded): if the connector stops, its slot keeps WAL until the disk fills",
                "ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf(); "
                "(size it to the WAL the disk can hold; a slot past it needs a new snapshot)",
            )
        )
    else:
        checks.append(
            passed(
                "postgres.max_slot_wal_keep_size",
                f"{keep} MB: a slot further behind loses its WAL (then a new snapshot is needed)",
            )
        )

    superuser, replication = conn.execute(
        "SELECT rolsuper, rolreplication FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    if superuser or replication:
        checks.append(
            passed("postgres.role", f"{user} is {'a superuser' if superuser else 'REPLICATION'}")
        )
    else:
        checks.append(
            failed(
                "postgres.role",
                f"{user} has neither REPLICATION nor superuser: it cannot stream changes",
                f"ALTER ROLE {quote_pg(user)} WITH REPLICATION;",
            )
        )

    pub = conn.execute(
        "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication "
        "WHERE pubname = %s",
        (PUBLICATION,),
    ).fetchone()
    published: set[tuple[str, str]] | None = None
    if pub is None:
        others = [r[0] for r in rows("SELECT pubname FROM pg_publication ORDER BY pubname")]
        seen = f" (publications: {listing(others)}; the connector's publication.name picks one)"
        detail = f"{PUBLICATION} does not exist yet" + (seen if others else "")
        if superuser:
            checks.append(
                passed(
                    "postgres.publication",
                    detail + "; the connector creates it on its first start",
                )
            )
        else:
            checks.append(
                warned(
                    "postgres.publication",
                    detail + f"; {user} is not a superuser, so the connector may not be able "
                    "to create it",
                    f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES; (as a superuser)",
                )
            )
    else:
        all_tables, ins, upd, dele, trunc = pub
        ops = [
            n
            for n, on in zip(("insert", "update", "delete", "truncate"), pub[1:], strict=True)
            if on
        ]
        if not all_tables:
            published = {
                (s, t)
                for s, t in rows(
                    "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                    PUBLICATION,
                )
            }
        scope = "all tables" if all_tables else plural(len(published or ()), "table")
        detail = f"{PUBLICATION}: {scope}, publishes {', '.join(ops) or 'nothing'}"
        if not (ins and upd and dele and trunc):
            checks.append(
                warned(
                    "postgres.publication",
                    detail + " (changes it does not publish never reach the replica)",
                    f"ALTER PUBLICATION {PUBLICATION} SET (publish = 'insert, update, delete, "
                    "truncate');",
                )
            )
        else:
            checks.append(passed("postgres.publication", detail))

    def all_tables_in_db() -> list[tuple[str, str]]:
        return [
            (s, t)
            for s, t in rows(
                "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
                "AND n.nspname <> ALL(%s) AND n.nspname NOT LIKE 'pg_temp%%'",
                list(_PG_SYSTEM),
            )
        ]

    wanted, source = _select_tables(cfg, topics(), all_tables_in_db)
    if not wanted:
        checks.append(passed("postgres.tables", f"no table to check: {source}"))
        return checks
    found = {
        (r[0], r[1]): r[2:]
        for r in rows(_PG_TABLES_SQL, [s for s, _ in wanted], [t for _, t in wanted])
    }

    def problems_of(schema: str, table: str) -> Problems | None:
        if (schema, table) not in found:
            return None
        qualified = _pg_table(schema, table)
        ident, has_pk, can_select, toastable = found[(schema, table)]
        problems: list[tuple[Status, str, str]] = []
        if not has_pk:
            if ident == "f":
                problems.append(
                    (
                        WARN,
                        "no primary key (REPLICA IDENTITY FULL): its messages have no key "
                        "unless the connector's message.key.columns names one",
                        f"ALTER TABLE {qualified} ADD PRIMARY KEY (<key columns>);",
                    )
                )
            else:
                problems.append(
                    (
                        FAIL,
                        "no primary key: updates and deletes carry no key to apply them by",
                        f"ALTER TABLE {qualified} ADD PRIMARY KEY (<key columns>);",
                    )
                )
        if ident == "n":
            fix_ident = "DEFAULT" if has_pk else "FULL"
            problems.append(
                (
                    FAIL,
                    "REPLICA IDENTITY NOTHING: updates and deletes are not streamed",
                    f"ALTER TABLE {qualified} REPLICA IDENTITY {fix_ident};",
                )
            )
        elif ident in ("d", "i") and has_pk and toastable:
            kind = "DEFAULT" if ident == "d" else "USING INDEX"
            problems.append(
                (
                    WARN,
                    f"REPLICA IDENTITY {kind} with TOAST-able columns "
                    f"({listing(list(toastable))}): an update leaving a large value "
                    "unchanged sends a placeholder, filled from the replica's stored row",
                    f"ALTER TABLE {qualified} REPLICA IDENTITY FULL;",
                )
            )
        if not can_select:
            problems.append(
                (
                    FAIL,
                    "no SELECT privilege: the snapshot cannot read it",
                    f"GRANT SELECT ON {qualified} TO {quote_pg(user)};",
                )
            )
        if published is not None and (schema, table) not in published:
            problems.append(
                (
                    WARN,
                    f"not in {PUBLICATION}: its changes are not published",
                    f"ALTER PUBLICATION {PUBLICATION} ADD TABLE {qualified};",
                )
            )
        return problems

    def absent(schema: str, table: str) -> tuple[str, str]:
        return (
            f"no table {schema}.{table} in database {database} (from {source})",
            "point --source / source.database_dsn at the database the connector "
            "captures (its database.dbname), or exclude the topic",
        )

    checks += _tables_checks(
        "postgres",
        wanted,
        problems_of,
        absent,
        lambda good: (
            f"{plural(len(good), 'table')} (from {source}) with a primary key, a "
            f"usable replica identity and SELECT: {listing(good)}"
        ),
    )
    return checks


# ------------------------------------------------------------------------- MySQL / MariaDB


def _my_table(schema: str, table: str) -> str:
    return f"{quote_mysql(schema)}.{quote_mysql(table)}"


def _granted(grants: list[str], privilege: str) -> bool:
    """Whether a global grant (``ON *.*``) includes ``privilege``."""
    for grant in grants:
        text = grant.upper()
        if " ON *.* " not in text:
            continue
        head = text.split(" ON ", 1)[0]
        if "ALL PRIVILEGES" in head or privilege in head:
            return True
    return False


def mysql_checks(
    cfg: Config, dsn: Dsn, password: str | None, topics: Callable[[], list[str] | None]
) -> list[Check]:
    """Every MySQL / MariaDB check, in order."""
    import pymysql

    try:
        conn = pymysql.connect(
            host=dsn.host or "127.0.0.1",
            port=dsn.port or 3306,
            user=dsn.user or "root",
            password=password or "",
            database=dsn.database,
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=STATEMENT_TIMEOUT_S,
            write_timeout=STATEMENT_TIMEOUT_S,
        )
    except pymysql.Error as exc:
        return [
            failed(
                "mysql.connect",
                f"cannot connect to {dsn.redacted()}: {_reason(exc, password)}",
                "check the URL (--source or source.database_dsn) and that the server accepts "
                "this user from here; the password comes from source.database_password, "
                "source.database_password_env or MYSQL_PWD",
            )
        ]
    try:
        with conn:
            return _mysql(cfg, dsn, conn, topics)
    except pymysql.Error as exc:
        return [failed("mysql.query", _reason(exc, password), "see the message")]


def _mysql(cfg: Config, dsn: Dsn, conn: Any, topics: Callable[[], list[str] | None]) -> list[Check]:
    def rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    version, account = rows("SELECT VERSION(), CURRENT_USER()")[0]
    mariadb = "mariadb" in str(version).lower()
    product = "MariaDB" if mariadb else "MySQL"
    names = (
        "log_bin", "binlog_format", "binlog_row_image", "binlog_expire_logs_seconds",
        "expire_logs_days", "server_id", "gtid_mode", "enforce_gtid_consistency",
        "gtid_strict_mode", "gtid_domain_id",
    )  # fmt: skip
    variables = {
        str(k).lower(): str(v)
        for k, v in rows(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + ", ".join(["%s"] * len(names)) + ")",
            *names,
        )
    }
    checks = [passed("mysql.connect", f"{product} {version} as {account} ({dsn.redacted()})")]
    cnf = "in my.cnf under [mysqld]:"

    log_bin = variables.get("log_bin", "OFF").upper()
    if log_bin in ("ON", "1"):
        checks.append(passed("mysql.log_bin", "ON"))
    else:
        checks.append(
            failed(
                "mysql.log_bin",
                f"{log_bin}: there is no binlog for the connector to read",
                f"{cnf} log_bin = mysql-bin (then restart the server)",
            )
        )

    fmt = variables.get("binlog_format", "").upper()
    if fmt == "ROW":
        checks.append(passed("mysql.binlog_format", "ROW"))
    else:
        checks.append(
            failed(
                "mysql.binlog_format",
                f"{fmt or 'unknown'}: the connector needs row events",
                f"{cnf} binlog_format = ROW (and on the running server: "
                "SET GLOBAL binlog_format = 'ROW';)",
            )
        )

    image = variables.get("binlog_row_image", "").upper()
    if image == "FULL":
        checks.append(passed("mysql.binlog_row_image", "FULL"))
    else:
        checks.append(
            failed(
                "mysql.binlog_row_image",
                f"{image or 'unknown'}: updates and deletes would lack columns",
                f"{cnf} binlog_row_image = FULL (and on the running server: "
                "SET GLOBAL binlog_row_image = 'FULL';)",
            )
        )

    seconds = int(float(variables.get("binlog_expire_logs_seconds") or 0))
    days = float(variables.get("expire_logs_days") or 0)
    retention = seconds or int(days * 86_400)
    if retention == 0:
        checks.append(passed("mysql.binlog_retention", "binlogs are never purged automatically"))
    elif retention < MIN_BINLOG_RETENTION_S:
        checks.append(
            warned(
                "mysql.binlog_retention",
                f"binlogs are kept {retention / 3600:.1f} h: a connector stopped longer "
                "needs a new snapshot",
                f"{cnf} binlog_expire_logs_seconds = 604800 (and on the running server: "
                "SET GLOBAL binlog_expire_logs_seconds = 604800;)",
            )
        )
    else:
        checks.append(
            passed("mysql.binlog_retention", f"binlogs are kept {retention / 86_400:.1f} days")
        )

    server_id = variables.get("server_id", "0")
    if server_id not in ("", "0"):
        checks.append(passed("mysql.server_id", server_id))
    else:
        checks.append(
            failed(
                "mysql.server_id",
                "0: a server without an id cannot serve a binlog reader",
                f"{cnf} server_id = 1 (unique among the servers; then restart)",
            )
        )

    if mariadb:
        detail = (
            f"MariaDB GTIDs: gtid_domain_id={variables.get('gtid_domain_id', '?')}, "
            f"gtid_strict_mode={variables.get('gtid_strict_mode', '?')}"
        )
        checks.append(passed("mysql.gtid", detail))
    else:
        mode = variables.get("gtid_mode", "OFF").upper()
        detail = (
            f"gtid_mode={mode}, enforce_gtid_consistency="
            f"{variables.get('enforce_gtid_consistency', '?')}"
        )
        if mode != "ON" and cfg.source.mysql_gtid_ordering:
            checks.append(
                warned(
                    "mysql.gtid",
                    detail + ", but source.mysql_gtid_ordering is true",
                    f"{cnf} gtid_mode = ON and enforce_gtid_consistency = ON, or set "
                    "source.mysql_gtid_ordering = false",
                )
            )
        else:
            checks.append(passed("mysql.gtid", detail))

    grants = [str(r[0]) for r in rows("SHOW GRANTS")]
    client = ("REPLICATION CLIENT", "BINLOG MONITOR") if mariadb else ("REPLICATION CLIENT",)
    needed = {
        "SELECT": ("SELECT",),
        "RELOAD": ("RELOAD",),
        "SHOW DATABASES": ("SHOW DATABASES",),
        "REPLICATION SLAVE": ("REPLICATION SLAVE",),
        "REPLICATION CLIENT": client,
    }
    missing = [p for p, names_ in needed.items() if not any(_granted(grants, n) for n in names_)]
    if missing:
        checks.append(
            failed(
                "mysql.privileges",
                f"{account} lacks {', '.join(missing)} (global)",
                "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT "
                f"ON *.* TO {_account(account)};",
            )
        )
    else:
        checks.append(passed("mysql.privileges", f"{account} has {', '.join(needed)} on *.*"))

    def all_tables_in_db() -> list[tuple[str, str]]:
        return [
            (str(s), str(t))
            for s, t in rows(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN (%s, %s, %s, %s)",
                *_MYSQL_SYSTEM,
            )
        ]

    wanted, source = _select_tables(cfg, topics(), all_tables_in_db)
    if not wanted:
        checks.append(passed("mysql.tables", f"no table to check: {source}"))
        return checks
    schemas = sorted({s for s, _ in wanted})
    marks = ", ".join(["%s"] * len(schemas))
    info = {
        (str(s), str(t)): (str(engine or ""), bool(pk))
        for s, t, engine, pk in rows(
            "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, t.ENGINE, EXISTS (SELECT 1 FROM "
            "information_schema.TABLE_CONSTRAINTS c WHERE c.TABLE_SCHEMA = t.TABLE_SCHEMA "
            "AND c.TABLE_NAME = t.TABLE_NAME AND c.CONSTRAINT_TYPE = 'PRIMARY KEY') "
            f"FROM information_schema.TABLES t WHERE t.TABLE_SCHEMA IN ({marks}) "
            "AND t.TABLE_TYPE = 'BASE TABLE'",
            *schemas,
        )
    }

    def problems_of(schema: str, table: str) -> Problems | None:
        if (schema, table) not in info:
            return None
        qualified = _my_table(schema, table)
        engine, has_pk = info[(schema, table)]
        problems: list[tuple[Status, str, str]] = []
        if not has_pk:
            problems.append(
                (
                    FAIL,
                    "no primary key: updates and deletes carry no key to apply them by",
                    f"ALTER TABLE {qualified} ADD PRIMARY KEY (<key columns>);",
                )
            )
        if engine.lower() != "innodb":
            problems.append(
                (
                    WARN,
                    f"ENGINE={engine or 'unknown'}: not transactional, so the snapshot is not "
                    "consistent with the binlog without locking the table",
                    f"ALTER TABLE {qualified} ENGINE=InnoDB;",
                )
            )
        return problems

    def absent(schema: str, table: str) -> tuple[str, str]:
        return (
            f"no table {schema}.{table} on this server (from {source})",
            "point --source / source.database_dsn at the server the connector "
            "captures, or exclude the topic",
        )

    checks += _tables_checks(
        "mysql",
        wanted,
        problems_of,
        absent,
        lambda good: (
            f"{plural(len(good), 'table')} (from {source}) with a primary key, "
            f"InnoDB: {listing(good)}"
        ),
    )
    return checks


def _account(account: str) -> str:
    """``user@host`` as a quoted account name: ``'user'@'host'``."""
    user, _, host = str(account).rpartition("@")
    if not user:
        return quote_sql_string(str(account))
    return f"{quote_sql_string(user)}@{quote_sql_string(host)}"


def database_checks(cfg: Config, url: str, topics: Callable[[], list[str] | None]) -> list[Check]:
    """Every check of the source database at ``url``.

    Args:
        cfg: the config (password variable, topic pattern).
        url: ``postgresql://...`` or ``mysql://...``.
        topics: returns the matching topics once known (None: Kafka was not reachable).
    """
    dsn = parse_dsn(url)
    password, unset = _password(cfg, dsn)
    area = "postgres" if dsn.kind == "postgresql" else "mysql"
    if unset:
        return [
            failed(
                f"{area}.connect",
                f"environment variable {unset} (source.database_password_env) is not set",
                f"export {unset}=... before running this",
            )
        ]
    if dsn.kind == "postgresql":
        return postgres_checks(cfg, dsn, password, topics)
    return mysql_checks(cfg, dsn, password, topics)


def database_password(cfg: Config, dsn: Dsn) -> str | None:
    """The password for ``dsn`` (URL, configured reference, PGPASSWORD / MYSQL_PWD)."""
    return _password(cfg, dsn)[0]


def error_text(exc: BaseException, password: str | None) -> str:
    """A driver error on one line, without the password."""
    return _reason(exc, password)
