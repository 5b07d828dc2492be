"""Deletes filed by ``cdcctl repair``: replica rows the source table no longer has.

``cdcctl repair`` (:mod:`engine.repair`) finds them by comparing the replica with its
source (:func:`engine.validate.find_differences`) and files them here, one Arrow IPC file
per repair under ``<work>/repair/<table>/``: the replica rows as they are (their record
keys and key columns included) and, in the file's metadata, the source position at which
the source was read without them. The replicator applies a file between two batches (a
``repair`` control request wakes a running one; a replicator starting applies what is
pending) as one instant of deletes **at that position**, through the fold like any batch:

- a change of the key made after the source was read has a newer position and wins (a
  row inserted again stays);
- an event older than that position, read late or replayed, stays late;
- applying a file twice changes nothing (a delete at a position already applied is a
  replay), so a crash between the commit and the file's removal is harmless.

Its position is ``(P, -1)``: below every real event at P (their sub-positions are LSNs
or row numbers), so a change committed exactly at P is newer. Its source time is the
row's own last one, so the delete moves no clock (epochs, tombstone retention, latency).

The instant moves no checkpoint (the deletes come from no topic). The file is removed
once its instant is committed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from engine.errors import CdcError
from engine.files import atomic_write
from engine.hudi import HOODIE_META_COLUMNS, HOODIE_RECORD_KEY
from engine.model import (
    CONTROL_SCHEMA,
    GTID,
    KEY,
    OFFSET,
    OP,
    OP_DELETE,
    PARTITION,
    POS,
    POS_SUB,
    REPLICA_CDC_COLUMNS,
    SOURCE_TS,
    STREAMED_BIT,
    TX_ID,
)

#: Where a work folder keeps the deletes waiting to be applied.
REPAIR_FOLDER = "repair"
_META = b"cdcctl.repair"
#: Partition and offset of a repair's deletes (they come from no topic): before every
#: real record, so that a real event at the same position wins the tie.
NO_PARTITION = -1


@dataclass(frozen=True)
class PendingDeletes:
    """One repair's deletes, waiting in the work folder."""

    path: Path
    #: The source position (without the streamed bit) the rows were absent at.
    position: int
    #: How the source was read, for the event log: ``LSN 0/1A2B3C`` or ``binlog ...``.
    position_text: str
    rows: pa.Table

    def batch(self) -> pa.Table:
        """The change batch that deletes the rows at the position (the control columns,
        then the row columns as the replica holds them)."""
        n = self.rows.num_rows
        pos = STREAMED_BIT | self.position
        control = {
            KEY: self.rows.column(HOODIE_RECORD_KEY).cast(pa.string()),
            OP: pa.array([OP_DELETE] * n, pa.string()),
            POS: pa.array([pos] * n, pa.int64()),
            # Below every real event's at the same position: a change there is newer.
            POS_SUB: pa.array([-1] * n, pa.int64()),
            # The row's own last source time: the delete is no news of the source's
            # clock (epoch detection, tombstone retention and latency read it).
            SOURCE_TS: self._source_ts(n),
            PARTITION: pa.array([NO_PARTITION] * n, pa.int32()),
            OFFSET: pa.array(range(-n, 0), pa.int64()),
            TX_ID: pa.nulls(n, pa.string()),
            GTID: pa.nulls(n, pa.string()),
        }
        columns = [control[f.name].cast(f.type) for f in CONTROL_SCHEMA]
        fields = list(CONTROL_SCHEMA)
        skip = {*HOODIE_META_COLUMNS, *REPLICA_CDC_COLUMNS}
        for f in self.rows.schema:
            if f.name not in skip:
                fields.append(f)
                columns.append(self.rows.column(f.name))
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))

    def _source_ts(self, n: int) -> pa.Array:
        if SOURCE_TS in self.rows.column_names:
            return self.rows.column(SOURCE_TS).combine_chunks().cast(pa.int64())
        return pa.nulls(n, pa.int64())


def folder(work_dir: Path, table: str) -> Path:
    """Where a table's repair files wait."""
    return work_dir / REPAIR_FOLDER / table


def file_deletes(
    work_dir: Path, table: str, rows: pa.Table, position: int, position_text: str
) -> Path:
    """Keep ``rows`` (replica rows, with their record keys) to be deleted at ``position``;
    the file's path."""
    meta = {"table": table, "position": position, "position_text": position_text}
    schema = rows.schema.with_metadata({_META: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_table(rows.replace_schema_metadata(schema.metadata))
    where = folder(work_dir, table)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.arrow"
    atomic_write(path, sink.getvalue().to_pybytes())
    return path


def pending(work_dir: Path, table: str) -> list[PendingDeletes]:
    """A table's deletes waiting to be applied, oldest first.

    Raises:
        CdcError: a file cannot be read (it is left where it is).
    """
    where = folder(work_dir, table)
    if not where.is_dir():
        return []
    out = []
    for path in sorted(where.glob("*.arrow")):
        try:
            with ipc.open_file(pa.memory_map(str(path))) as reader:
                rows = reader.read_all()
            meta = json.loads((rows.schema.metadata or {})[_META])
        except (OSError, pa.ArrowInvalid, KeyError, ValueError) as exc:
            raise CdcError(
                f"the repair file {path} cannot be read: {exc}",
                hint="run `cdcctl repair` again; remove the file if it is damaged",
            ) from None
        out.append(PendingDeletes(path, int(meta["position"]), meta["position_text"], rows))
    return out


def tables_with_pending(work_dir: Path) -> list[str]:
    """The tables with deletes waiting."""
    root = work_dir / REPAIR_FOLDER
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.arrow")))


def done(item: PendingDeletes) -> None:
    """A file's deletes are committed: it goes."""
    try:
        os.unlink(item.path)
    except FileNotFoundError:
        pass
