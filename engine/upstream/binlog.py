"""A MySQL or MariaDB server's binlog files (``SHOW BINARY LOGS``: each file and its size;
the newest file's size is where the next event goes), and how far a connector's recorded
position is from its end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.upstream.model import Binlog

if TYPE_CHECKING:
    from engine.checks.dsn import Dsn


class BinlogUnreadable(Exception):
    """The server could not be reached, or refused to list its binlogs."""


def binlog_files(dsn: Dsn, password: str | None) -> list[tuple[str, int]]:
    """The server's binlog files and their sizes, oldest first (needs REPLICATION
    CLIENT, or BINLOG MONITOR on MariaDB).

    Raises:
        BinlogUnreadable: unreachable, refused, or binary logging is off.
    """
    import pymysql

    from engine.checks.dsn import mysql_options

    try:
        conn = pymysql.connect(**mysql_options(dsn, password))
    except pymysql.Error as exc:
        raise BinlogUnreadable(str(exc.args[-1]) if exc.args else type(exc).__name__) from None
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            rows = cur.fetchall()
    except pymysql.Error as exc:
        raise BinlogUnreadable(str(exc.args[-1]) if exc.args else type(exc).__name__) from None
    finally:
        conn.close()
    return [(str(r[0]), int(r[1])) for r in rows]


def position(connector: str, files: list[tuple[str, int]], offset: dict | None) -> Binlog | None:
    """``connector``'s place in ``files`` from its Kafka Connect ``offset`` (``file`` and
    ``pos``); None when the server has no binlog."""
    if not files:
        return None
    server_file, server_pos = files[-1]
    file = offset.get("file") if offset else None
    pos = offset.get("pos") if offset else None
    behind = None
    names = [name for name, _ in files]
    if isinstance(file, str) and isinstance(pos, int) and file in names:
        at = names.index(file)
        behind = max(files[at][1] - pos, 0) + sum(size for _, size in files[at + 1 :])
    return Binlog(
        connector=connector,
        server_file=server_file,
        server_pos=server_pos,
        connector_file=file if isinstance(file, str) else None,
        connector_pos=pos if isinstance(pos, int) else None,
        behind_bytes=behind,
    )
