"""Map Kafka topic names to table names and folders that can never escape the target.

Debezium names topics ``<prefix>.<schema-or-db>.<table>``; the replica is named
``<schema-or-db>_<table>`` (``dbserver1.inventory.customers`` -> ``inventory_customers``).
Topics with fewer segments keep all of them. Every character outside ``[A-Za-z0-9_]``
becomes ``_``, so the name is a valid Avro name (Hudi derives its record name from it)
and a single path segment: ``..``, ``/`` and ``\\`` cannot survive. The resolved folder is
checked to be a direct child of the target folder anyway, as a second line of defence.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.errors import TableNameError

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
MAX_NAME = 120


def table_name_for_topic(topic: str) -> str:
    """The replica's table name for a topic.

    Raises:
        TableNameError: nothing recognisable is left of the topic name.
    """
    segments = [s for s in topic.split(".") if s]
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


def table_path(target: Path, table_name: str) -> Path:
    """The folder of a table, guaranteed to be a direct child of ``target``."""
    base = target.resolve()
    path = (base / table_name).resolve()
    if path.parent != base or _UNSAFE.search(table_name):
        raise TableNameError(
            f"table name {table_name!r} would leave the target folder {base}",
            hint="this is refused; rename the topic or exclude it",
        )
    return path
