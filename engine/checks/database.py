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
from collections.abc import Callable

from engine.checks.dsn import Dsn, parse_dsn
from engine.checks.mysql import mysql_checks
from engine.checks.postgres import postgres_checks
from engine.checks.result import Check, failed
from engine.config import Config
from engine.redaction import register as register_secret


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
