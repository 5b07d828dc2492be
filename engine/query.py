"""Read replicas back (through hudi-rs, an independent Hudi reader) and query them with DuckDB."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from engine.errors import HudiError
from engine.hudi.schema import conform
from engine.hudi.table import HudiTable
from engine.model import HOODIE_META_COLUMNS


def read_table(path: str | Path, *, meta: bool = False) -> pa.Table:
    """The current snapshot of a replica, read with hudi-rs.

    Args:
        path: the table folder.
        meta: keep the ``_hoodie_*`` meta columns.
    """
    import hudi

    if not (Path(path) / ".hoodie" / "hoodie.properties").is_file():
        raise HudiError(f"{path} is not a Hudi table", hint="check the target folder")
    reader = hudi.HudiTable(str(path))
    batches = reader.read()
    table = pa.Table.from_batches(batches) if batches else reader.get_schema_with_meta_fields().empty_table()
    # hudi-rs labels naive timestamps UTC and widens small ints; restore the stored types.
    table = conform(table, HudiTable.open(path).arrow_schema())
    if not meta:
        table = table.drop_columns([c for c in HOODIE_META_COLUMNS if c in table.column_names])
    return table


def list_tables(target: str | Path) -> list[str]:
    """Names of the Hudi tables under a target folder."""
    root = Path(target)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / ".hoodie" / "hoodie.properties").is_file())


def query(target: str | Path, sql: str) -> pa.Table:
    """Run SQL over every replica under ``target`` (each visible under its table name)."""
    con = duckdb.connect()
    for name in list_tables(target):
        con.register(name, read_table(Path(target) / name))
    return con.sql(sql).to_arrow_table()
