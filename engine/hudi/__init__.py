"""The Apache Hudi table format, written without a JVM (table version 6, layout 1).

The package's public names are the only way in (an import contract in pyproject.toml
keeps the rest of cdcctl out of the modules behind them; besides this package only
``options`` (config and metadata keys), ``retention`` (cleaning policies) and
``ownership`` (tables another writer touched) are imported from outside):

* :class:`HudiWriter`: everything the replicator does to a table (open, recover, plan
  file-slice writes, commit with a checkpoint, clean, archive); the :class:`SliceWrite`
  plans it hands to merge tasks and the :class:`SliceResult` they return.
* :class:`HudiView`: what readers (query, validate, the dashboard's detail, checks) see
  of a table: properties, instants, commit extra metadata, file groups, timeline
  entries, the oldest readable instant. It writes nothing.
* The instant-time format (:func:`instant_at`, :func:`instant_datetime`,
  :func:`instant_iso`, :func:`as_instant`) and the folder layout (:func:`own_dir`,
  :func:`has_meta_dir`, :func:`check_no_stray_timeline`): nothing outside this package
  names ``.hoodie`` (``tests/test_hudi_boundary.py``).

Inside: ``layout`` (where files live), ``timeline`` (instants), ``view`` (the read-only
table), ``services`` (new instants, rollback, clean, archive), ``table`` (create, the
commit protocol), ``writer``, ``commit`` (write stats, checkpoint), ``file_slice``
(naming, reading and writing one group's files), ``log_file`` (Merge-on-Read log
blocks), ``schema`` (Arrow <-> the Avro schema commits carry, meta columns),
``bucket_index``, ``archive``, ``avro_models``, ``bloom``, ``parquet``, ``consistency``,
``upgrade``, ``history`` (one key's versions, for ``cdcctl explain``) and ``tombstones``
(cdcctl's delete tombstones, kept with the table). The on-disk format follows the shared
``docs/hudi-format.md``.
"""

from __future__ import annotations

from engine.hudi.commit import parse_checkpoint
from engine.hudi.consistency import check_no_stray_timeline
from engine.hudi.file_slice import (
    FileSlice,
    RowCounts,
    SliceResult,
    SliceWrite,
    read_slice,
)
from engine.hudi.history import KeyHistory, KeyVersion, key_history
from engine.hudi.key_index import only_keys
from engine.hudi.layout import LEASE_FILE, drop_objects, has_meta_dir, has_own_dir, own_dir
from engine.hudi.schema import (
    HOODIE_META_COLUMNS,
    HOODIE_RECORD_KEY,
    conform,
    file_schema,
    storage_type,
)
from engine.hudi.timeline import as_instant, instant_at, instant_datetime, instant_iso
from engine.hudi.tombstones import INSTANT as TOMBSTONE_INSTANT
from engine.hudi.tombstones import SCHEMA as TOMBSTONE_SCHEMA
from engine.hudi.tombstones import Tombstones
from engine.hudi.view import HudiView
from engine.hudi.writer import HudiWriter

__all__ = [
    "Tombstones",
    "HOODIE_META_COLUMNS",
    "HOODIE_RECORD_KEY",
    "TOMBSTONE_INSTANT",
    "TOMBSTONE_SCHEMA",
    "FileSlice",
    "KeyHistory",
    "KeyVersion",
    "key_history",
    "HudiView",
    "HudiWriter",
    "RowCounts",
    "SliceResult",
    "SliceWrite",
    "as_instant",
    "check_no_stray_timeline",
    "conform",
    "file_schema",
    "has_meta_dir",
    "instant_at",
    "instant_datetime",
    "instant_iso",
    "only_keys",
    "own_dir",
    "drop_objects",
    "has_own_dir",
    "parse_checkpoint",
    "read_slice",
    "LEASE_FILE",
    "storage_type",
]
