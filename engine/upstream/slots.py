"""PostgreSQL's logical replication slots: whether a connector reads each, whether it
still has the WAL it needs, and how much WAL it holds back (``pg_replication_slots``,
readable without REPLICATION)."""

from __future__ import annotations

from engine.upstream.model import Slot

_SLOTS_SQL = """
SELECT slot_name::text, database::text, plugin::text, active,
       {wal_status},
       CASE WHEN restart_lsn IS NULL THEN NULL
            ELSE pg_wal_lsn_diff({current}, restart_lsn)::bigint END,
       confirmed_flush_lsn::text
FROM pg_replication_slots
WHERE slot_type = 'logical' AND database = current_database()
ORDER BY slot_name
"""


class SlotsUnreadable(Exception):
    """The database could not be reached or its slots not read."""


def postgres_slots(url: str, password: str | None) -> tuple[Slot, ...]:
    """The logical replication slots of the database at ``url`` (a server's slots of
    other databases are not its connectors').

    Raises:
        SlotsUnreadable: it could not be reached, or refused the query.
    """
    import psycopg

    from engine.checks.dsn import postgres_options

    try:
        with psycopg.connect(url, **postgres_options(password)) as conn:
            version = conn.info.server_version
            standby = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            current = (
                "pg_last_wal_replay_lsn()" if standby and standby[0] else "pg_current_wal_lsn()"
            )
            wal_status = "wal_status::text" if version >= 130000 else "NULL::text"
            rows = conn.execute(
                _SLOTS_SQL.format(wal_status=wal_status, current=current)
            ).fetchall()
    except (psycopg.Error, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SlotsUnreadable(first) from None
    return tuple(
        Slot(
            name=r[0],
            database=r[1],
            plugin=r[2],
            active=bool(r[3]),
            wal_status=r[4],
            retained_bytes=None if r[5] is None else int(r[5]),
            confirmed_flush_lsn=r[6],
        )
        for r in rows
    )
