"""The archived timeline of table version 6: ``.hoodie/archived/.commits_.archive.<N>_<token>``.

Hudi 0.14/0.15's ``HoodieTimelineArchiver`` moves old instants out of ``.hoodie/`` into
these files: Hudi log files (the block layout of :mod:`engine.hudi.log_file`) of Avro
data blocks (block type 3, ``HoodieAvroDataBlock``), each block's header holding the
writer schema (``HoodieArchivedMetaEntry``) and its content::

    int32   data block version = 3
    int32   record count
    per record: int32 length, then the record's Avro binary

One ``HoodieArchivedMetaEntry`` per instant *file* (requested, inflight, completed), with
the instant, its action and state, and the file's content as Avro: commit metadata JSON
converted to the Avro ``HoodieCommitMetadata`` (Hudi's ``MetadataConversionUtils``),
clean plans and metadata, rollback metadata as they are.

cdcctl never appends to a log file: each archiving run writes a new file, the next
version (Hudi does the same on storage without append), atomically.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import fastavro

from engine.errors import HudiError
from engine.hudi import avro_models as am
from engine.hudi import timeline as tl
from engine.hudi.layout import HOODIE_DIR
from engine.hudi.log_file import HEADER_SCHEMA, _block, iter_blocks
from engine.storage import LocalStorage, ObjectInfo, Storage

ARCHIVE_DIR = "archived"
BLOCK_AVRO = 3
AVRO_BLOCK_VERSION = 3
#: Records per data block (Hudi's ``hoodie.commits.archival.batch`` default).
BATCH = 10
#: The write token Hudi's archiver uses outside a Spark task (``1-0-1``).
WRITE_TOKEN = "1-0-1"
ARCHIVE_RE = re.compile(r"\.commits_\.archive\.(\d+)_(\d+-\d+-\d+)\Z")
#: Hudi's ``HoodieRollingStatMetadata.ROLLING_STAT_METADATA_KEY``: the converter blanks it.
ROLLING_STAT_KEY = "ROLLING_STAT"
SCHEMA_JSON = json.dumps(am.ARCHIVED_META_ENTRY, separators=(",", ":"))


def archive_version(name: str) -> int | None:
    """The version of an archive file name, None if ``name`` is not one."""
    m = ARCHIVE_RE.match(name)
    return int(m.group(1)) if m else None


def archive_file_name(version: int) -> str:
    """``.commits_.archive.<version>_1-0-1``."""
    return f".commits_.archive.{version}_{WRITE_TOKEN}"


def archives_in(store: Storage) -> list[tuple[int, str, int]]:
    """:func:`list_archives` of a table's ``store`` (``.hoodie/archived``)."""
    return _archives(store.entries(f"{HOODIE_DIR}/{ARCHIVE_DIR}"))


def list_archives(archived: Path) -> list[tuple[int, str, int]]:
    """``(version, name, size)`` of every archive file, oldest first."""
    return _archives(LocalStorage(archived).entries())


def _archives(entries: list[ObjectInfo]) -> list[tuple[int, str, int]]:
    found = []
    for info in entries:
        name = info.path.rsplit("/", 1)[-1]
        version = archive_version(name)
        if version is not None:
            found.append((version, name, info.size))
    return sorted(found)


# ----------------------------------------------------------------- instant files -> records


def _commit_to_avro(meta: dict[str, Any], replace: bool) -> dict[str, Any]:
    """Hudi's ``convertCommitMetadata``: the JSON commit metadata as Avro."""
    stats = {
        partition: [{k: s.get(k) for k in am.WRITE_STAT_FIELDS} for s in items]
        for partition, items in (meta.get("partitionToWriteStats") or {}).items()
        if partition is not None
    }
    extra = {k: str(v) for k, v in (meta.get("extraMetadata") or {}).items()}
    extra[ROLLING_STAT_KEY] = ""
    record: dict[str, Any] = {
        "partitionToWriteStats": stats,
        "extraMetadata": extra,
        "version": 1,
        "operationType": "COMPACT" if meta.get("compacted") else meta.get("operationType"),
    }
    if replace:
        record["partitionToReplaceFileIds"] = meta.get("partitionToReplaceFileIds") or {}
    return record


def commit_from_avro(record: dict[str, Any]) -> dict[str, Any]:
    """The commit metadata (JSON shape) of an archived Avro commit metadata record."""
    extra = dict(record.get("extraMetadata") or {})
    if extra.get(ROLLING_STAT_KEY) == "":
        del extra[ROLLING_STAT_KEY]
    meta: dict[str, Any] = {
        "partitionToWriteStats": record.get("partitionToWriteStats") or {},
        "compacted": record.get("operationType") == "COMPACT",
        "extraMetadata": extra,
        "operationType": record.get("operationType"),
    }
    if "partitionToReplaceFileIds" in record:
        meta["partitionToReplaceFileIds"] = record.get("partitionToReplaceFileIds") or {}
    return meta


def _state_of(name: str) -> str:
    if name.endswith(".requested"):
        return tl.REQUESTED
    if name.endswith(".inflight"):
        return tl.INFLIGHT
    return tl.COMPLETED


def _action_of(name: str) -> str:
    rest = tl.INSTANT_RE.match(name).group(2) or ""  # type: ignore[union-attr]
    if rest == "inflight":
        return "commit"
    return rest.split(".", 1)[0]


def meta_entry(name: str, data: bytes, modified: datetime) -> dict[str, Any]:
    """The ``HoodieArchivedMetaEntry`` of one instant file (``MetadataConversionUtils``):
    its name, content and when it was written (the state's transition time)."""
    instant = name.split(".", 1)[0]
    action, state = _action_of(name), _state_of(name)
    moment = modified
    record: dict[str, Any] = {
        "commitTime": instant,
        "actionType": action,
        "actionState": state,
        "version": 1,
        "stateTransitionTime": tl.instant_at(moment),
    }
    try:
        if action in ("commit", "deltacommit") and data:
            record["hoodieCommitMetadata"] = _commit_to_avro(json.loads(data), replace=False)
        elif action == "replacecommit" and data:
            if state == tl.COMPLETED:
                record["hoodieReplaceCommitMetadata"] = _commit_to_avro(json.loads(data), True)
            elif state == tl.INFLIGHT:
                record["HoodieInflightReplaceMetadata"] = _commit_to_avro(json.loads(data), False)
        elif action == "clean" and data:
            if state == tl.COMPLETED:
                record["hoodieCleanMetadata"] = am.deserialize_avro_metadata(
                    data, am.CLEAN_METADATA
                )
            else:
                record["hoodieCleanerPlan"] = am.deserialize_avro_metadata(data, am.CLEANER_PLAN)
        elif action == "rollback" and data and state == tl.COMPLETED:
            record["hoodieRollbackMetadata"] = am.deserialize_avro_metadata(
                data, am.ROLLBACK_METADATA
            )
    except (ValueError, KeyError) as exc:
        raise HudiError(f"cannot archive {name}: unreadable content ({exc})") from exc
    return record


# ----------------------------------------------------------------- archive files


def encode_archive(records: list[dict[str, Any]]) -> bytes:
    """The bytes of one archive log file: Avro data blocks of ``BATCH`` records each."""
    blocks = []
    for start in range(0, len(records), BATCH):
        chunk = records[start : start + BATCH]
        parts = [struct.pack(">ii", AVRO_BLOCK_VERSION, len(chunk))]
        for record in chunk:
            raw = am.encode_record(am.ARCHIVED_META_ENTRY, record)
            parts.append(struct.pack(">i", len(raw)))
            parts.append(raw)
        blocks.append(_block(BLOCK_AVRO, {HEADER_SCHEMA: SCHEMA_JSON}, b"".join(parts)))
    return b"".join(blocks)


@dataclass
class ArchivedEntry:
    """One archived instant file."""

    instant: str
    action: str
    state: str
    record: dict[str, Any]


def read_archive(path: Path | str, data: bytes | None = None) -> Iterator[ArchivedEntry]:
    """The records of an archive file (its ``data`` if read already), each decoded with
    its block's writer schema.

    Raises:
        HudiError: If the file is not a log file of Avro data blocks.
    """
    for block_type, header, content in iter_blocks(path, data):
        if block_type != BLOCK_AVRO:
            raise HudiError(f"{path}: an archive holds Avro data blocks, found type {block_type}")
        writer = fastavro.parse_schema(json.loads(header[HEADER_SCHEMA]))
        _version, count = struct.unpack_from(">ii", content, 0)
        k = 8
        for _ in range(count):
            (rlen,) = struct.unpack_from(">i", content, k)
            k += 4
            record = am.decode_record(content[k : k + rlen], writer)
            k += rlen
            yield ArchivedEntry(
                record["commitTime"], record["actionType"], record["actionState"], record
            )
