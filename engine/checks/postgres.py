"""PostgreSQL checks: what Debezium's PostgreSQL connector needs from the database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.checks.common import listing, plural
from engine.checks.dsn import Dsn, postgres_options
from engine.checks.result import FAIL, WARN, Check, Status, passed, verdict, warned
from engine.checks.source_tables import Problems, connected, select_tables, tables_checks
from engine.config import Config
from engine.naming import quote_pg

#: The publication Debezium's PostgreSQL connector uses by default.
PUBLICATION = "dbz_publication"
_PG_SYSTEM = ("pg_catalog", "information_schema", "pg_toast")


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

    kwargs = postgres_options(password)
    return connected(
        "postgres",
        dsn,
        password,
        lambda: psycopg.connect(dsn.url, **kwargs),
        psycopg.Error,
        lambda conn: _postgres(cfg, dsn, conn, topics),
        access=" (pg_hba.conf)",
    )


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
    checks.append(
        verdict(
            "postgres.wal_level",
            wal_level == "logical",
            "logical",
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
    checks.append(
        verdict(
            "postgres.replication_slots",
            free > 0,
            detail,
            detail + "; the connector needs one for itself",
            f"ALTER SYSTEM SET max_replication_slots = {max_slots + 1}; then restart "
            "PostgreSQL (or drop an unused slot: SELECT pg_drop_replication_slot('<name>');)",
        )
    )

    max_senders = int(settings.get("max_wal_senders") or 0)
    senders = int(one("SELECT count(*) FROM pg_stat_replication") or 0)
    detail = f"{senders} of {max_senders} in use, {max_senders - senders} free"
    checks.append(
        verdict(
            "postgres.wal_senders",
            max_senders - senders > 0,
            detail,
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
    checks.append(
        verdict(
            "postgres.role",
            superuser or replication,
            f"{user} is {'a superuser' if superuser else 'REPLICATION'}",
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

    wanted, source = select_tables(cfg, topics(), all_tables_in_db)
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

    checks += tables_checks(
        "postgres",
        wanted,
        source,
        problems_of,
        where=f"in database {database}",
        captures="the database the connector captures (its database.dbname)",
        having="with a primary key, a usable replica identity and SELECT",
    )
    return checks
