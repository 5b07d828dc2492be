"""The Apache Hudi table format, written without a JVM (table version 6, layout 1).

Everything the rest of the engine does to a table goes through
:class:`~engine.hudi.writer.HudiWriter` (open, recover, plan file-slice writes, commit
with a checkpoint, clean) and the :class:`~engine.hudi.file_slice.SliceWrite` plans it
hands to merge tasks. Inside: ``options`` (config key strings), ``bucket_index`` (Hudi's
bucket hashing), ``schema`` (Arrow <-> the Avro schema commits carry, meta columns),
``timeline`` (instants), ``commit`` (write stats, checkpoint), ``table`` (properties,
commit protocol, file-group view, rollback, clean), ``file_slice`` (naming, reading and
writing one group's files), ``log_file`` (Merge-on-Read log blocks), ``parquet`` and
``tombstones`` (cdcctl's delete tombstones, kept with the table). The on-disk format
follows the shared ``docs/hudi-format.md``.
"""

from __future__ import annotations

from engine.hudi.file_slice import FileSlice, RowCounts, SliceResult, SliceWrite, read_slice
from engine.hudi.schema import HOODIE_META_COLUMNS, HOODIE_RECORD_KEY, conform
from engine.hudi.table import HudiTable
from engine.hudi.writer import HudiWriter

__all__ = [
    "HOODIE_META_COLUMNS",
    "HOODIE_RECORD_KEY",
    "FileSlice",
    "HudiTable",
    "HudiWriter",
    "RowCounts",
    "SliceResult",
    "SliceWrite",
    "conform",
    "read_slice",
]
