"""Bring a table an earlier cdcctl wrote up to what Apache Hudi's own readers need.

Run by the writer at start-up (:meth:`engine.hudi.writer.HudiWriter.recover`), never by
readers. Two things older replicas lack:

* ``hoodie.properties`` keys Hudi 0.15 writes (``options.HUDI_015_DEFAULTS``): without
  the payload class Hudi's log reader fails on every Merge-on-Read table. Missing keys
  are added, the file replaced atomically with the checksum last.
* Merge-on-Read log records whose ordering field is null (keys first seen through an
  event without a position): Hudi's ``BaseAvroPayload`` throws "Ordering value is null"
  for them. And files that store times of day as Parquet TIME, or naive timestamps not
  UTC-adjusted, which Spark's Parquet reader refuses. :func:`stale_buckets` finds the
  file groups whose current slice holds either; the writer rewrites them at once (a new
  base file: ordering values ``engine.model.NO_POS``, types as
  ``engine.hudi.schema.parquet_type``), before it adds the properties, so a crash in
  between only repeats the look.

Tables that have every key of ``options.HUDI_015_DEFAULTS`` were written (or upgraded)
since, and are not looked at again.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from engine.files import atomic_write
from engine.hudi import options as o
from engine.hudi.file_slice import FileSlice
from engine.hudi.layout import HOODIE_DIR, PROPERTIES_FILE
from engine.hudi.log_file import read_log_file
from engine.hudi.options import HoodieOption as H
from engine.hudi.schema import parquet_schema
from engine.hudi.table import HudiTable


def missing_properties(properties: dict[str, str]) -> dict[str, str]:
    """The ``hoodie.properties`` entries Hudi 0.15 writes that ``properties`` lacks."""
    return {k: v for k, v in o.HUDI_015_DEFAULTS.items() if k not in properties}


def upgrade_properties(table: HudiTable) -> list[str]:
    """Add the missing keys to the table's ``hoodie.properties``; return them."""
    missing = missing_properties(table.properties)
    if not missing:
        return []
    checksum = H.TABLE_CHECKSUM.value
    props = {k: v for k, v in table.properties.items() if k != checksum}
    props.update(missing)
    if checksum in table.properties:
        props[checksum] = table.properties[checksum]  # Java writes it last
    text = "".join(f"{k}={v}\n" for k, v in props.items())
    atomic_write(table.base_path / HOODIE_DIR / PROPERTIES_FILE, text.encode("utf-8"))
    table.properties.clear()
    table.properties.update(props)
    return sorted(missing)


def stale_buckets(table: HudiTable, groups: dict[int, FileSlice]) -> list[int]:
    """Buckets whose current slice holds what Hudi's readers refuse: a log record with a
    null ordering value, or a file storing a type in a way Spark's Parquet reader
    refuses (a time of day as Parquet TIME, a naive timestamp not UTC-adjusted:
    ``engine.hudi.schema.parquet_type``)."""
    field = table.precombine_field
    found = []
    for bucket, fs in sorted(groups.items()):
        if _stale_types(pq.read_schema(fs.path)):
            found.append(bucket)
            continue
        for name in fs.log_files:
            blocks = read_log_file(table.base_path / name)
            if any(b.rows is not None and _stale_block(b.rows, field) for b in blocks):
                found.append(bucket)
                break
    return found


def _stale_types(schema: pa.Schema) -> bool:
    return parquet_schema(schema).remove_metadata() != schema.remove_metadata()


def _stale_block(rows: pa.Table, field: str) -> bool:
    if field and field in rows.column_names and rows[field].null_count:
        return True
    return _stale_types(rows.schema)
