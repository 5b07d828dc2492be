"""Map Kafka topic names to table names and folders that can never escape the target.

Debezium names topics ``<prefix>.<schema-or-db>.<table>``; the replica is named
``<schema-or-db>_<table>`` (``dbserver1.inventory.customers`` -> ``inventory_customers``).
Topics with fewer segments keep all of them. Every character outside ``[A-Za-z0-9_]``
becomes ``_``, so the name is a valid Avro name (Hudi derives its record name from it)
and a single path segment: ``..``, ``/`` and ``\\`` cannot survive. The resolved folder is
checked to be a direct child of the target folder anyway, as a second line of defence.

Topics are put in NFKC form first (NFC and NFD spellings, fullwidth letters: one name),
and names are ASCII, so a Unicode look-alike cannot pass for another name: its letters
become ``_`` and two topics that end up with one name meet the collision rule. Two
names that differ only in case are one table (DuckDB view names, Spark and
case-insensitive file systems do not tell them apart): :func:`table_key` is what a
collision compares, and :func:`table_path` refuses a folder whose name equals another
folder's in the target but for case. Which topic a folder belongs to is checked by the
replicator when it opens the table (``engine/replicator/tables.py``).

Source database names (schemas, tables, columns, users) are never changed: every SQL
text that names one quotes it with :func:`quote_pg` or :func:`quote_mysql`, and every
value is bound as a parameter.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from engine.errors import TableNameError

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
MAX_NAME = 120


def table_name_for_topic(topic: str) -> str:
    """The replica's table name for a topic.

    Raises:
        TableNameError: nothing recognisable is left of the topic name.
    """
    # One normal form first (NFKC): a name typed in NFC and in NFD, or in fullwidth
    # letters, maps to one table name; what is left outside ASCII becomes "_".
    segments = [s for s in unicodedata.normalize("NFKC", topic).split(".") if s]
    if len(segments) >= 3:
        segments = segments[-2:]
    name = "_".join(_UNSAFE.sub("_", s) for s in segments).strip("_")
    name = re.sub(r"_+", "_", name)[:MAX_NAME]
    if not name or not re.search(r"[A-Za-z0-9]", name):
        raise TableNameError(
            f"topic {topic!r} does not map to a usable table name",
            hint="exclude it with source.exclude_topics or rename the topic",
        )
    if name[0].isdigit():
        name = "t_" + name
    return name


def table_key(table_name: str) -> str:
    """What two table names are compared by: names equal but for case are one table."""
    return table_name.casefold()


def table_path(target: Path, table_name: str) -> Path:
    """The folder of a table, guaranteed to be a direct child of ``target``.

    Raises:
        TableNameError: the name would leave the target, or another folder there has
            the same name but for case.
    """
    base = target.resolve()
    unsafe = not table_name or bool(_UNSAFE.search(table_name))
    path = base / "_" if unsafe else (base / table_name).resolve()
    if unsafe or path.parent != base:
        raise TableNameError(
            f"table name {table_name!r} would leave the target folder {base}",
            hint="this is refused; rename the topic or exclude it",
        )
    if base.is_dir():
        for other in base.iterdir():
            if other.name != table_name and table_key(other.name) == table_key(table_name):
                raise TableNameError(
                    f"table name {table_name!r} differs only in case from the folder "
                    f"{other} (one table to queries and to Spark)",
                    hint="exclude one of the two topics (source.exclude_topics), or move "
                    "the other folder out of target.path",
                )
    return path


def quote_pg(name: str, *, bound: bool = False) -> str:
    """A PostgreSQL identifier (double quotes, embedded ones doubled): any name is safe.

    ``bound``: the SQL runs with bound parameters, so the driver reads every ``%`` as
    a placeholder (psycopg would even put a parameter into ``"a%b"``): ``%`` is doubled.
    """
    quoted = '"' + name.replace('"', '""') + '"'
    return quoted.replace("%", "%%") if bound else quoted


def quote_mysql(name: str, *, bound: bool = False) -> str:
    """A MySQL/MariaDB identifier (backticks, embedded ones doubled): any name is safe.

    ``bound``: as for :func:`quote_pg` (PyMySQL formats the SQL with ``%``).
    """
    quoted = "`" + name.replace("`", "``") + "`"
    return quoted.replace("%", "%%") if bound else quoted


def quote_sql_string(text: str) -> str:
    """A SQL string literal (single quotes doubled), for SQL shown in hints only: SQL
    that runs binds its values."""
    return "'" + text.replace("'", "''") + "'"
