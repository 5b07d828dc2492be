"""Read replicas back (through hudi-rs, an independent Hudi reader) and query them with DuckDB.

A replica is read as of its newest completed commit, Merge-on-Read slices merged (base
file plus logs), so deleted rows never show; columns get the exact types recorded in
the commit (hudi-rs reports naive timestamps as UTC and small integers widened).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from engine.errors import HudiError, QueryError
from engine.hudi import HOODIE_META_COLUMNS, HudiTable, conform


def read_table(path: str | Path, *, meta: bool = False) -> pa.Table:
    """The current snapshot of a replica, read with hudi-rs.

    Args:
        path: the table folder (relative paths are relative to the current directory).
        meta: keep the ``_hoodie_*`` meta columns.
    """
    import hudi

    path = Path(path).resolve()  # hudi-rs takes URLs: a relative path has no base
    if not HudiTable.exists(path):
        raise HudiError(f"{path} is not a Hudi table", hint="check the target folder")
    reader = hudi.HudiTable(str(path))
    batches = reader.read()
    table = (
        pa.Table.from_batches(batches)
        if batches
        else reader.get_schema_with_meta_fields().empty_table()
    )
    schema = HudiTable.open(path).arrow_schema()
    if schema is not None:
        table = conform(table, schema)
    if not meta:
        table = table.drop_columns([c for c in HOODIE_META_COLUMNS if c in table.column_names])
    return table


def list_tables(target: str | Path) -> list[str]:
    """Names of the Hudi tables under a target folder."""
    root = Path(target)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if HudiTable.exists(p))


def query(target: str | Path, sql: str) -> pa.Table:
    """Run SQL over every replica under ``target`` (each visible under its table name).

    Raises:
        QueryError: the SQL is invalid or names a table that does not exist.
    """
    root = Path(target).resolve()
    names = list_tables(root)
    con = duckdb.connect()
    for name in names:
        con.register(name, read_table(root / name))
    try:
        relation = con.sql(sql)
        return relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as exc:
        reason = str(exc).strip().splitlines()[0]
        tables = ", ".join(names) if names else f"none: {root} holds no replica yet"
        raise QueryError(f"query failed: {reason}", hint=f"replicas: {tables}") from None
