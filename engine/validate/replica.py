"""The replica side of a validation: what a replica knows of its source, read slice by slice.

A replica is read with hudi-rs as of one completed instant (the newest when validation
starts), file slice by file slice (a base file merged with its logs; the comparison reads
two at once and may keep their rows up to a budget), never as one table. The instant's
extra metadata says which source table the replica copies (``cdcctl.source_table``; older
tables: parsed from the topic name) and, with the rows' ``_cdc_pos``, which source
position it reflects.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import HudiError
from engine.hudi import HOODIE_META_COLUMNS, LEASE_FILE, HudiView, conform
from engine.hudi.options import SCHEMA_STATE_KEY, SOURCE_TABLE_KEY
from engine.lock import table_lock_path
from engine.model import NO_POS, REPLICA_CDC_COLUMNS, ROW_POS, STREAMED_BIT
from engine.storage import LocalStorage, Storage
from engine.storage.lease import lease_holder

TOPIC_KEY = "cdcctl.source.topic"  # engine.replicator.progress writes it
EPOCH_KEY = "cdcctl.epoch"  # engine.replicator.epochs writes it
TAIL_KEY = "cdcctl.partition.tail"


@dataclass
class Replica:
    """One replica as of one instant."""

    name: str
    #: The replica's files (a folder, or a bucket's prefix).
    store: Storage
    instant: str | None
    key_fields: list[str]
    schema: pa.Schema  # data columns only (no _hoodie_*, no _cdc_*)
    source_table: dict[str, str]  # connector?, db?, schema?, table
    source_table_recorded: bool  # False: parsed from the topic name
    #: Newest source position the newest commit records applying (partition tails).
    tail_position: int | None
    #: Columns the source no longer sends that the replica keeps (``cdcctl.schema.state``).
    kept_columns: tuple[str, ...] = ()
    #: The topic its newest commit read (None: not recorded).
    topic: str | None = None
    #: Position epochs its table accepted (``cdcctl.epoch``): its stored positions are
    #: mapped, not the source's own.
    epochs_accepted: int = 0

    @classmethod
    def open(cls, path: Path | Storage) -> Replica:
        store = path if isinstance(path, Storage) else LocalStorage(Path(path))
        if not HudiView.exists(store):
            raise HudiError(f"{store.url} is not a Hudi table", hint="check target.path")
        table = HudiView.open(store)
        name = store.name
        completed = table.completed_instants()
        instant = completed[-1] if completed else None
        extra: dict[str, str] = {}
        if instant is not None:
            extra = table.extra_metadata(instant)
        schema = table.arrow_schema() or pa.schema([])
        data = pa.schema(
            [
                f
                for f in schema
                if f.name not in HOODIE_META_COLUMNS and f.name not in REPLICA_CDC_COLUMNS
            ]
        )
        recorded = True
        source: dict[str, str] = {}
        if extra.get(SOURCE_TABLE_KEY):
            try:
                loaded = json.loads(extra[SOURCE_TABLE_KEY])
                source = {k: str(v) for k, v in loaded.items() if isinstance(v, str)}
            except ValueError:
                source = {}
        if "table" not in source:
            recorded = False
            source = source_from_topic(extra.get(TOPIC_KEY) or "", name)
        tail = None
        try:
            tails = json.loads(extra.get(TAIL_KEY) or "{}")
            positions = [int(v[2]) for v in tails.values() if v and v[2] is not None]
            tail = max(positions) if positions else None
        except (ValueError, TypeError, IndexError):
            tail = None
        try:
            state = json.loads(extra.get(SCHEMA_STATE_KEY) or "{}")
            kept = tuple(str(c) for c in state.get("kept") or [])
        except (ValueError, TypeError, AttributeError):
            kept = ()
        try:
            accepted = len(json.loads(extra.get(EPOCH_KEY) or "{}").get("accepted") or [])
        except (ValueError, TypeError, AttributeError):
            accepted = 0
        return cls(
            name, store, instant, table.record_key_fields, data, source, recorded, tail, kept,
            extra.get(TOPIC_KEY) or None, accepted,
        )  # fmt: skip

    def slices(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The rows of every file slice as of :attr:`instant`, one slice at a time, with
        the replica's exact types (and ``_cdc_pos`` when asked for)."""
        for read in self.slice_readers(columns):
            yield read()

    def slice_readers(self, columns: list[str] | None = None) -> list[Callable[[], pa.Table]]:
        """One function per file slice reading what :meth:`slices` yields for it; they
        may run in threads at once (hudi-rs reads without Python's lock)."""
        if self.instant is None:
            return []
        import hudi

        options = hudi.HudiReadOptions().with_as_of_timestamp(self.instant)
        stored = HudiView.open(self.store)
        reader_table = stored.reader()
        slices = reader_table.get_file_slices(options)
        reader = reader_table.create_file_group_reader_with_options(options)
        full = stored.schema_at(self.instant) or stored.arrow_schema()

        def read(fs: Any) -> pa.Table:
            table = pa.Table.from_batches([reader.read_file_slice(fs, options)])
            if full is not None:
                table = conform(table, full)
            keep = [c for c in (columns or table.column_names) if c in table.column_names]
            return table.select(keep)

        return [functools.partial(read, fs) for fs in slices]

    def holder(self) -> str | None:
        """Who holds the table's writer lock or lease (a running replicator), or None."""
        return holder_of(self.store)


def holder_of(store: Storage) -> str | None:
    """Who holds the writer lock or lease of the table in ``store``, or None."""
    local = store.local_path("")
    if local is None:
        return lease_holder(store, LEASE_FILE)
    return lock_holder(table_lock_path(local))


def source_from_topic(topic: str, fallback: str) -> dict[str, str]:
    """``<prefix>.<schema-or-db>.<table>`` -> its schema/db and table (Debezium's naming).

    The middle segment is PostgreSQL's schema or MySQL's database: both are filled, the
    dialect picks the one it needs.
    """
    parts = [p for p in topic.split(".") if p]
    if len(parts) >= 3:
        return {"schema": parts[-2], "db": parts[-2], "table": parts[-1], "from_topic": "1"}
    if len(parts) == 2:
        return {"schema": parts[0], "db": parts[0], "table": parts[1], "from_topic": "1"}
    return {"table": parts[-1] if parts else fallback, "from_topic": "1"}


def lock_holder(path: Path) -> str | None:
    """The holder of an exclusive writer lock, or None when nobody holds it.

    Probes with a shared, non-blocking ``flock`` released at once; a replicator starting
    in that instant could find the lock busy and would say so.
    """
    import fcntl
    import os

    if not path.exists():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            if isinstance(holder, dict) and holder:
                return f"cdcctl pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
            return "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def max_position(table: pa.Table) -> int | None:
    """The newest ``_cdc_pos`` of a slice's rows."""
    if ROW_POS not in table.column_names or table.num_rows == 0:
        return None
    value = pc.max(table.column(ROW_POS)).as_py()
    return None if value is None or value == NO_POS else int(value)


def strip_streamed(pos: int | None) -> tuple[int | None, bool]:
    """A stored position without its streamed bit, and whether the bit was set."""
    if pos is None:
        return None, False
    return pos & ~STREAMED_BIT, bool(pos & STREAMED_BIT)
