"""A source database's URL: parsed, shown without its password, and the driver errors
scrubbed of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from engine.config import DATABASE_SCHEMES
from engine.errors import ConfigError

#: Seconds to wait for a connection, and for one statement.
CONNECT_TIMEOUT_S = 5
STATEMENT_TIMEOUT_S = 10


def postgres_options(password: str | None) -> dict[str, Any]:
    """``psycopg.connect``'s keyword arguments besides the URL: autocommit, the
    timeouts above, the password (when not in the URL)."""
    options: dict[str, Any] = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "autocommit": True,
        "options": f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}",
    }
    if password is not None:
        options["password"] = password
    return options


def mysql_options(dsn: Dsn, password: str | None) -> dict[str, Any]:
    """``pymysql.connect``'s keyword arguments for ``dsn``, with the timeouts above."""
    return {
        "host": dsn.host or "127.0.0.1",
        "port": dsn.port or 3306,
        "user": dsn.user or "root",
        "password": password or "",
        "database": dsn.database,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": STATEMENT_TIMEOUT_S,
        "write_timeout": STATEMENT_TIMEOUT_S,
    }


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


def error_text(exc: BaseException, password: str | None) -> str:
    """A driver error on one line, without the password."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text or type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return text
