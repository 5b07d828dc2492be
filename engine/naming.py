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

import difflib
import re
import string
import unicodedata
from pathlib import Path

from engine.errors import TableNameError, UnknownTableError
from engine.storage import LocalStorage, Storage

#: Known table names listed in an unknown-table message before "and N more".
LISTED_NAMES = 20


def close_match(word: str, choices: list[str]) -> str | None:
    """The choice one typo away from ``word`` (the "did you mean" rule), if any."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.75)
    return close[0] if close else None


def unknown_table(name: str, known: list[str]) -> UnknownTableError:
    """The one error of every command given a table name it does not know: it names the
    known tables (and the one ``name`` is a typo of, when one is close)."""
    if not known:
        return UnknownTableError(
            f"no table `{name}`; no table is known yet",
            hint="`cdcctl start` makes the tables; `cdcctl status` lists them",
        )
    shown = ", ".join(known[:LISTED_NAMES])
    if len(known) > LISTED_NAMES:
        shown += f" and {len(known) - LISTED_NAMES} more"
    close = close_match(name, known)
    return UnknownTableError(
        f"no table `{name}`; known tables: {shown}",
        hint=f"did you mean `{close}`?" if close else "`cdcctl status` lists the tables",
    )


_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
MAX_NAME = 120


#: ``target.table_naming`` presets and the placeholders a template may use.
NAMING_PRESETS = {
    "schema_table": "{schema}_{table}",
    "prefix_schema_table": "{prefix}_{schema}_{table}",
}
DEFAULT_NAMING = "schema_table"
PLACEHOLDERS = ("prefix", "database", "schema", "table")


def check_naming(naming: str) -> str:
    """``naming`` if it is a preset or a usable template, else ValueError saying why.

    A template is plain text with ``{prefix}``, ``{database}``, ``{schema}`` and
    ``{table}`` placeholders; no attribute or index access, conversion or format spec
    (the template never reaches Python's formatting with anything but these four
    strings), and ``{table}`` must be in it, else every topic would map to one name.
    """
    if naming in NAMING_PRESETS:
        return naming
    try:
        parts = list(string.Formatter().parse(naming))
    except ValueError as exc:
        raise ValueError(f"{naming!r} is not a template ({exc})") from None
    names = set()
    for _text, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in PLACEHOLDERS or spec or conversion:
            raise ValueError(
                f"{naming!r}: {{{field}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}} is not a placeholder; use "
                + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                + ' or a preset ("schema_table", "prefix_schema_table")'
            )
        names.add(field)
    if "table" not in names:
        raise ValueError(
            f"{naming!r} has no {{table}}: every table would get one name; add {{table}}"
        )
    return naming


def topic_parts(topic: str) -> dict[str, str]:
    """``prefix``, ``database`` / ``schema`` (one value: MySQL's database, PostgreSQL's
    schema) and ``table`` of a Debezium topic ``<prefix>.<schema-or-db>.<table>``, in
    NFKC form. A topic prefix may itself hold dots: the last two segments are the
    schema and the table, the rest is the prefix. With fewer segments the missing parts
    are empty (``a.b``: schema ``a``, table ``b``)."""
    segments = [s for s in unicodedata.normalize("NFKC", topic).split(".") if s]
    table = segments[-1] if segments else ""
    schema = segments[-2] if len(segments) >= 2 else ""
    prefix = ".".join(segments[:-2])
    return {"prefix": prefix, "database": schema, "schema": schema, "table": table}


def table_name_for_topic(topic: str, naming: str = DEFAULT_NAMING) -> str:
    """The replica's table name for a topic, per ``target.table_naming``.

    Every place that maps a topic to a table calls this function with the config's
    naming (``cfg.target.table_naming``). The template's output goes through the same
    sanitising as the default names: NFKC, ASCII letters, digits and ``_`` only, runs of
    ``_`` collapsed, at most :data:`MAX_NAME` characters, never a leading digit.

    Raises:
        TableNameError: nothing recognisable is left of the topic name.
        ValueError: ``naming`` is not a preset or a valid template.
    """
    template = NAMING_PRESETS.get(check_naming(naming), naming)
    parts = {k: _UNSAFE.sub("_", v) for k, v in topic_parts(topic).items()}
    # str.format with exactly these four plain strings (check_naming refused the rest).
    name = template.format(**parts)
    name = _UNSAFE.sub("_", unicodedata.normalize("NFKC", name)).strip("_")
    name = re.sub(r"_+", "_", name)[:MAX_NAME].strip("_")
    if not name or not re.search(r"[A-Za-z0-9]", name):
        raise TableNameError(
            f"topic {topic!r} does not map to a usable table name",
            hint="exclude it with source.exclude_topics, rename the topic, or change "
            "target.table_naming",
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


def table_store(target: Storage, table_name: str) -> Storage:
    """The store of a table: :func:`table_path` in a folder; in a bucket, the prefix
    ``<target prefix>/<table name>`` (the same names are refused).

    Raises:
        TableNameError: the name would leave the target (or, in a folder, differs only
            in case from another folder's).
    """
    local = target.local_path("")
    if local is not None:
        return LocalStorage(table_path(local, table_name))
    if not table_name or _UNSAFE.search(table_name):
        raise TableNameError(
            f"table name {table_name!r} would leave the target {target.url}",
            hint="this is refused; rename the topic or exclude it",
        )
    return target.under(table_name)


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
