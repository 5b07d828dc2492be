"""How the engine writes Parquet: base files, log data blocks and tombstone sidecars.

Arrow's writer dictionary-encodes every column by default and falls back to plain
encoding once a column's dictionary grows too large. For columns that are unique per
row (record keys, sequence numbers, positions, ids) that attempt hashes every value for
nothing: writing a 12k-row change set took 7.7 ms with dictionaries everywhere and
2.7 ms with dictionaries only where a sample shows few distinct values, and the file was
smaller. Dictionary encoding only changes the encoding, never the values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.hudi.bloom import FOOTER_KEYS
from engine.hudi.schema import arrow_schema_from_b64, arrow_schema_to_b64, parquet_schema

#: Rows sampled (from the start) to estimate a column's number of distinct values.
SAMPLE_ROWS = 512
#: A column is dictionary-encoded when its sample has at most this share of distinct values.
DICTIONARY_MAX_DISTINCT = 0.25
#: Footer key-value metadata that describes a file, never its rows (Hudi's record-key
#: metadata): reading a file leaves it out of the table's schema metadata, writing
#: takes it only from ``footer``.
_FOOTER_ONLY_BYTES = tuple(key.encode() for key in FOOTER_KEYS)
#: Footer entry of a file whose columns are stored as other types than the engine's
#: (times of day as plain integers, ``engine.hudi.schema.parquet_type``): base64 of the
#: Arrow schema the rows had, which :func:`read_table` casts them back to.
TYPES_KEY = "cdcctl.arrow_types"
_TYPES_KEY_BYTES = TYPES_KEY.encode()


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
    table: pa.Table,
    where: str | Path | IO[bytes],
    *,
    statistics: bool | list[str] = False,
    footer: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None,
) -> None:
    """Write ``table`` as one Snappy-compressed Parquet file.

    ``footer`` (or what it returns, called once the rows are written: it may wait for
    work done meanwhile) is added to the file's key-value metadata as it is, next to
    Arrow's ``ARROW:schema``. Hudi's record-key entries (``engine.hudi.bloom``) are
    dropped from the table's schema metadata first, so they are never written twice nor
    embedded in ``ARROW:schema``.
    """
    metadata = table.schema.metadata
    if metadata and any(key in metadata for key in (*_FOOTER_ONLY_BYTES, _TYPES_KEY_BYTES)):
        drop = (*_FOOTER_ONLY_BYTES, _TYPES_KEY_BYTES)
        kept = {k: v for k, v in metadata.items() if k not in drop}
        table = table.replace_schema_metadata(kept or None)
    stored = parquet_schema(table.schema)
    types: dict[str, str] = {}
    if stored != table.schema:
        types[TYPES_KEY] = arrow_schema_to_b64(table.schema.remove_metadata())
        table = table.cast(stored)
    with pq.ParquetWriter(
        where,
        table.schema,
        compression="snappy",
        use_dictionary=dictionary_columns(table),
        write_statistics=statistics,
    ) as writer:
        writer.write_table(table)
        entries = {**(footer() if callable(footer) else footer or {}), **types}
        if entries:
            writer.add_key_value_metadata(entries)


def read_table(source: str | Path | pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    """Read one whole Parquet file or buffer.

    Lighter than ``pq.read_table``, which builds a dataset first (~1 ms per call): the
    merge reads several small files per file group and batch.
    """
    where = pa.BufferReader(source) if isinstance(source, pa.Buffer) else str(source)
    with pq.ParquetFile(where) as file:
        table = file.read(columns=columns)
    metadata = table.schema.metadata
    if metadata and any(key in metadata for key in (*_FOOTER_ONLY_BYTES, _TYPES_KEY_BYTES)):
        # The footer's bloom filter (up to ~430 kB) is not part of the rows: drop it rather
        # than carry it in every table (and cache entry) read from a base file.
        drop = (*_FOOTER_ONLY_BYTES, _TYPES_KEY_BYTES)
        kept = {k: v for k, v in metadata.items() if k not in drop}
        types = metadata.get(_TYPES_KEY_BYTES)
        table = table.replace_schema_metadata(kept or None)
        if types is not None:
            # Times of day stored as integers: back to the types the rows had.
            original = arrow_schema_from_b64(types.decode("ascii"))
            wanted = pa.schema(
                [original.field(f.name) if f.name in original.names else f for f in table.schema],
                metadata=table.schema.metadata,
            )
            table = table.cast(wanted)
    return table
