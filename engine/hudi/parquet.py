"""How the engine writes Parquet: base files, log data blocks and tombstone sidecars.

Arrow's writer dictionary-encodes every column by default and falls back to plain
encoding once a column's dictionary grows too large. For columns that are unique per
row (record keys, sequence numbers, positions, ids) that attempt hashes every value for
nothing: writing a 12k-row change set took 7.7 ms with dictionaries everywhere and
2.7 ms with dictionaries only where a sample shows few distinct values, and the file was
smaller. Dictionary encoding only changes the encoding, never the values.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Rows sampled (from the start) to estimate a column's number of distinct values.
SAMPLE_ROWS = 512
#: A column is dictionary-encoded when its sample has at most this share of distinct values.
DICTIONARY_MAX_DISTINCT = 0.25


def dictionary_columns(table: pa.Table) -> list[str]:
    """Top-level columns whose sampled values repeat enough for a dictionary to pay."""
    rows = min(table.num_rows, SAMPLE_ROWS)
    if rows == 0:
        return []
    sample = table.slice(0, rows)
    chosen = []
    for name, column in zip(sample.column_names, sample.columns, strict=True):
        if pa.types.is_nested(column.type):
            continue  # nested columns are named by path in Parquet: leave them plain
        distinct = pc.count_distinct(column, mode="all").as_py()
        if distinct <= DICTIONARY_MAX_DISTINCT * rows:
            chosen.append(name)
    return chosen


def write_table(
    table: pa.Table, where: str | Path | IO[bytes], *, statistics: bool | list[str] = False
) -> None:
    """Write ``table`` as one Snappy-compressed Parquet file."""
    pq.write_table(
        table,
        where,
        compression="snappy",
        use_dictionary=dictionary_columns(table),
        write_statistics=statistics,
    )


def read_table(source: str | Path | pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    """Read one whole Parquet file or buffer.

    Lighter than ``pq.read_table``, which builds a dataset first (~1 ms per call): the
    merge reads several small files per file group and batch.
    """
    where = pa.BufferReader(source) if isinstance(source, pa.Buffer) else str(source)
    with pq.ParquetFile(where) as file:
        return file.read(columns=columns)
