"""The source tables a check looks at, and one check per table with problems.

The tables are those the matching Kafka topics map to (Debezium names them
``<prefix>.<schema-or-database>.<table>``). Before any topic exists, the tables whose
would-be topic ``<prefix>.<schema>.<table>`` matches the config are checked, the prefix
read from the start of ``source.topics``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from engine.checks.common import listing, plural, topic_selected
from engine.checks.dsn import Dsn, error_text
from engine.checks.result import FAIL, PASS, WARN, Check, Status, failed, passed
from engine.config import Config


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


def select_tables(
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


def connected(
    area: str,
    dsn: Dsn,
    password: str | None,
    connect: Callable[[], Any],
    error: type[Exception],
    run: Callable[[Any], list[Check]],
    *,
    access: str,
) -> list[Check]:
    """``run``'s checks over a connection ``connect`` opens (and closes after), or the
    failed check saying why there is none; ``access`` names where the server says which
    users may connect from where, ``error`` is the driver's error class."""
    variable = "PGPASSWORD" if dsn.kind == "postgresql" else "MYSQL_PWD"
    try:
        conn = connect()
    except error as exc:
        return [
            failed(
                f"{area}.connect",
                f"cannot connect to {dsn.redacted()}: {error_text(exc, password)}",
                "check the URL (--source or source.database_dsn) and that the server accepts "
                f"this user from here{access}; the password comes from "
                f"source.database_password, source.database_password_env or {variable}",
            )
        ]
    try:
        with conn:
            return run(conn)
    except error as exc:
        return [failed(f"{area}.query", error_text(exc, password), "see the message")]


def tables_checks(
    kind: str,
    wanted: list[tuple[str, str]],
    source: str,
    problems_of: Callable[[str, str], Problems | None],
    *,
    where: str,
    captures: str,
    having: str,
) -> list[Check]:
    """A check for each table that is missing or has problems, one for all the others.

    ``problems_of`` returns None for a table the database does not have; ``source`` says
    where the list of tables came from, ``where`` where they were looked for (``on this
    server``), ``captures`` what the connector captures, ``having`` what a good table has.
    """
    checks, good = [], []
    for schema, table in wanted:
        name = f"{kind}.table {schema}.{table}"
        problems = problems_of(schema, table)
        if problems is None:
            checks.append(
                failed(
                    name,
                    f"no table {schema}.{table} {where} (from {source})",
                    f"point --source / source.database_dsn at {captures}, or exclude the topic",
                )
            )
        elif problems:
            checks.append(_table_check(name, problems))
        else:
            good.append(f"{schema}.{table}")
    if good:
        summary = f"{plural(len(good), 'table')} (from {source}) {having}: {listing(good)}"
        checks.append(passed(f"{kind}.tables", summary))
    return checks
