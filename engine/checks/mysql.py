"""MySQL / MariaDB checks: what Debezium's MySQL connector needs from the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.checks.dsn import Dsn, mysql_options
from engine.checks.result import FAIL, WARN, Check, Status, failed, passed, verdict, warned
from engine.checks.source_tables import Problems, connected, select_tables, tables_checks
from engine.config import Config
from engine.naming import quote_mysql, quote_sql_string

#: Binlogs kept for less than this are a warning (a longer outage needs a new snapshot).
MIN_BINLOG_RETENTION_S = 86_400
_MYSQL_SYSTEM = ("mysql", "information_schema", "performance_schema", "sys")


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

    return connected(
        "mysql",
        dsn,
        password,
        lambda: pymysql.connect(**mysql_options(dsn, password)),
        pymysql.Error,
        lambda conn: _mysql(cfg, dsn, conn, topics),
        access="",
    )


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
    fmt = variables.get("binlog_format", "").upper()
    image = variables.get("binlog_row_image", "").upper()
    running = "(and on the running server: SET GLOBAL {} = '{}';)"
    for name, ok, good, bad, fix in (
        ("log_bin", log_bin in ("ON", "1"), "ON",
         f"{log_bin}: there is no binlog for the connector to read",
         "log_bin = mysql-bin (then restart the server)"),
        ("binlog_format", fmt == "ROW", "ROW",
         f"{fmt or 'unknown'}: the connector needs row events",
         "binlog_format = ROW " + running.format("binlog_format", "ROW")),
        ("binlog_row_image", image == "FULL", "FULL",
         f"{image or 'unknown'}: updates and deletes would lack columns",
         "binlog_row_image = FULL " + running.format("binlog_row_image", "FULL")),
    ):  # fmt: skip
        checks.append(verdict(f"mysql.{name}", ok, good, bad, f"{cnf} {fix}"))

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
    checks.append(
        verdict(
            "mysql.server_id",
            server_id not in ("", "0"),
            server_id,
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

    wanted, source = select_tables(cfg, topics(), all_tables_in_db)
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

    checks += tables_checks(
        "mysql",
        wanted,
        source,
        problems_of,
        where="on this server",
        captures="the server the connector captures",
        having="with a primary key, InnoDB",
    )
    return checks


def _account(account: str) -> str:
    """``user@host`` as a quoted account name: ``'user'@'host'``."""
    user, _, host = str(account).rpartition("@")
    if not user:
        return quote_sql_string(str(account))
    return f"{quote_sql_string(user)}@{quote_sql_string(host)}"
