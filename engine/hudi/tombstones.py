"""Delete tombstones: where deleted keys remember their last source position.

A deleted row leaves a tombstone ``(key, position, source ts, instant)`` so that a late,
older event for that key cannot resurrect it. Tombstones are kept per file group, in a
sidecar parquet file named after the base file slice it belongs to::

    <table>/.hoodie/.cdcctl/tombstones/<fileId>_<instant>.parquet

The merge task writes the sidecar together with the new base file of the same instant,
and a sidecar counts only while a slice with that (fileId, instant) is the group's latest
committed slice: the Hudi commit that makes the slice visible makes its tombstones valid
in the same step, and a rolled-back instant's sidecar is ignored (and swept). Readers of
the table never see them: hudi-rs and Hudi skip ``.hoodie``.

Retention: a tombstone expires once its source time is older than the configured
retention (default 7 days before the newest source time seen by the table) *and* the
earliest commit the cleaning policy retains has reached the commit that created it
(``engine.hudi.retention``).

Deltas: with deletes flowing, a group keeps every tombstone of the retention window
(a week of deletes), so a sidecar rewritten whole by every append would cost each batch
time in proportion to all deletes since then, not to its own. A Merge-on-Read append
therefore writes a *delta* sidecar: the tombstones this instant added or changed, and a
row with a null position for each key whose tombstone it dropped (re-inserted, expired),
with the sidecar it applies to (the group's previous state instant, always an earlier
committed one of the same group) and the chain's length in its footer. The group's set
is the chain resolved oldest first, each key's last row winning; at most
:data:`MAX_CHAIN` deltas follow a full sidecar, and every rewrite of the group (a
compaction, Copy-on-Write) writes a full one. Sidecars are immutable, so a worker keeps
those it has read or written in its file cache. A chain's members are kept by the sweep
as long as a live slice's sidecar reaches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import HudiError
from engine.hudi import key_index, parquet
from engine.hudi.data_file import DataFile
from engine.hudi.layout import OWN_PATH, TEMP_DIR, own_dir
from engine.model import KEY, POS, POS_SUB, SOURCE_TS
from engine.storage import LocalStorage, Storage, StoreUnavailable

INSTANT = "_cdc_instant"
SCHEMA = pa.schema(
    [
        pa.field(KEY, pa.string()),
        pa.field(POS, pa.int64()),
        pa.field(POS_SUB, pa.int64()),
        pa.field(SOURCE_TS, pa.int64()),
        pa.field(INSTANT, pa.string()),
    ]
)


#: The sidecar folder, relative to the table.
FOLDER = f"{OWN_PATH}/tombstones"


def folder(table_path: Path) -> Path:
    """The sidecar folder of a table in a local folder."""
    return own_dir(table_path) / "tombstones"


def sidecar_path(table_path: Path, file_id: str, instant: str) -> Path:
    """The tombstone file belonging to one base file slice of a table in a local folder."""
    return folder(table_path) / f"{file_id}_{instant}.parquet"


def sidecar(store: Storage, file_id: str, instant: str) -> DataFile:
    """The tombstone file belonging to one base file slice (``store``: the table's)."""
    return DataFile(store, f"{FOLDER}/{file_id}_{instant}.parquet", unique=True)


#: Footer keys of a delta sidecar: the instant of the sidecar it applies to, and how
#: many deltas (itself included) follow the chain's full sidecar.
PARENT_KEY = "cdcctl.tombstones.parent"
DEPTH_KEY = "cdcctl.tombstones.depth"
#: Deltas after a full sidecar before an append writes the whole set again.
MAX_CHAIN = 16
#: The file cache's entry names: a sidecar as written, and the set its chain resolves to.
_CACHED = ["tombstones"]
_RESOLVED = ["tombstones resolved"]


@dataclass(frozen=True)
class Sidecar:
    """One sidecar file as written: its rows, and for a delta its parent and depth."""

    rows: pa.Table
    parent: str | None = None
    depth: int = 0

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes


@dataclass(frozen=True)
class Tombstones:
    """A group's resolved tombstones and the length of the chain they were read from."""

    rows: pa.Table
    depth: int = 0

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes


def read(path: Path | DataFile) -> pa.Table | None:
    """The tombstones of a slice (None when it has no sidecar)."""
    found = read_chain(path)
    return None if found is None else found.rows


def read_chain(path: Path | DataFile) -> Tombstones | None:
    """The tombstones of a slice, with its sidecar's chain resolved (None: no sidecar).

    Raises:
        HudiError: A sidecar its chain applies to is missing, or one cannot be read.
    """
    file = DataFile.at(path)
    try:
        return key_index.FILE_CACHE.get(file, _RESOLVED, lambda: _read_chain(file))
    except FileNotFoundError:
        return None


def _read_chain(path: DataFile) -> Tombstones:
    first = _sidecar(path)
    if first is None:
        raise FileNotFoundError(path)
    chain = [first]
    while chain[-1].parent is not None:
        if len(chain) > MAX_CHAIN + 1:  # a footer naming a sidecar of its own chain again
            raise _unreadable(path, f"its chain is longer than {MAX_CHAIN} deltas")
        parent = path.sibling(_name_with_instant(path.file_name, chain[-1].parent))
        found = _sidecar(parent)
        if found is None:
            raise missing(parent, chain[-1].parent)
        chain.append(found)
    if len(chain) == 1:
        return Tombstones(first.rows, 0)
    return Tombstones(_resolve([c.rows for c in reversed(chain)]), first.depth)


def parent_of(path: Path | DataFile) -> str | None:
    """The instant of the sidecar a delta applies to (None: a full sidecar, or none).

    Raises:
        HudiError: The sidecar exists but its footer cannot be read.
    """
    file = DataFile.at(path)
    try:
        source = file.source()
        where = pa.BufferReader(source) if isinstance(source, pa.Buffer) else source
        meta = pq.read_metadata(where).metadata or {}
    except FileNotFoundError:
        return None
    except StoreUnavailable:
        raise  # the store, not the sidecar: retried
    except (OSError, pa.ArrowException) as exc:
        raise _unreadable(file, exc) from None
    parent = meta.get(PARENT_KEY.encode())
    return None if parent is None else parent.decode()


def _sidecar(path: DataFile) -> Sidecar | None:
    try:
        return key_index.FILE_CACHE.get(path, _CACHED, lambda: _load(path))
    except FileNotFoundError:
        return None
    except StoreUnavailable:
        raise  # the store, not the sidecar: retried
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: object, why: object) -> HudiError:
    return HudiError(
        f"the tombstone sidecar {path} is unreadable ({why})",
        "the table's delete history is damaged: rebuild the table from its topic",
    )


def _load(path: DataFile) -> Sidecar:
    table = parquet.read_table(path.source())
    meta = table.schema.metadata or {}
    parent = meta.get(PARENT_KEY.encode())
    rows = table.replace_schema_metadata(None).cast(SCHEMA)
    if parent is None:
        return Sidecar(rows)
    return Sidecar(rows, parent.decode(), int(meta.get(DEPTH_KEY.encode(), b"1")))


def _name_with_instant(name: str, instant: str) -> str:
    file_id = name.rpartition("_")[0]
    return f"{file_id}_{instant}.parquet"


def _resolve(parts: list[pa.Table]) -> pa.Table:
    """A chain's sidecars (full first) as one set: each key's last row, null positions
    (dropped tombstones) left out."""
    every = pa.concat_tables(parts)
    index = np.arange(every.num_rows, dtype=np.int64)
    last = (
        pl.DataFrame({"_key": every.column(KEY), "_i": pa.array(index)})
        .unique(subset=["_key"], keep="last", maintain_order=True)["_i"]
        .to_numpy()
    )
    kept = every.take(pa.array(np.sort(last)))
    return kept.filter(pc.is_valid(kept.column(POS)))


def apply(base: pa.Table, change: pa.Table) -> pa.Table:
    """The set ``base`` with a :func:`delta` applied: its keys' rows replaced, dropped
    tombstones (null positions) left out."""
    base = base.cast(SCHEMA)
    if not change.num_rows:
        return base
    change = change.cast(SCHEMA)
    kept = base.filter(pc.invert(pc.is_in(base.column(KEY), value_set=change.column(KEY))))
    return pa.concat_tables([kept, change.filter(pc.is_valid(change.column(POS)))])


def delta(before: pa.Table, after: pa.Table | None, instant: str) -> pa.Table:
    """What turns the set ``before`` into ``after`` (None: empty): the rows ``instant``
    wrote or changed, and a null-position row for each key of ``before`` gone after."""
    after = SCHEMA.empty_table() if after is None else after.cast(SCHEMA)
    before = before.cast(SCHEMA)
    new = after.filter(pc.equal(after.column(INSTANT), instant))
    gone = before.filter(pc.invert(pc.is_in(before.column(KEY), value_set=after.column(KEY))))
    if not gone.num_rows:
        return new
    n = gone.num_rows
    dropped = pa.table(
        {
            KEY: gone.column(KEY),
            POS: pa.nulls(n, pa.int64()),
            POS_SUB: pa.nulls(n, pa.int64()),
            SOURCE_TS: pa.nulls(n, pa.int64()),
            INSTANT: pa.array([instant] * n, pa.string()),
        },
        schema=SCHEMA,
    )
    return pa.concat_tables([new, dropped])


def missing(path: object, instant: str) -> HudiError:
    """The error for a sidecar its commit recorded but that is not there."""
    return HudiError(
        f"the tombstone sidecar {path} that commit {instant} recorded is missing",
        "the table's delete history is incomplete (late events could resurrect deleted "
        "rows): rebuild the table from its topic",
    )


def write(
    table: pa.Table,
    path: Path | DataFile,
    parent: str | None = None,
    depth: int = 0,
    resolved: pa.Table | None = None,
) -> None:
    """Write a sidecar atomically, its content durably (staged under a name readers never
    pick up); the commit that makes it count syncs the folder (:func:`sync_folder`).
    With ``parent``, ``table`` is a delta (:func:`delta`) on the sidecar of that instant,
    the ``depth``-th of its chain, and ``resolved`` the set it makes (kept in this
    worker's cache for the group's next batch)."""
    file = DataFile.at(path)
    rows = table.cast(SCHEMA)
    footer = None if parent is None else {PARENT_KEY: parent, DEPTH_KEY: str(depth)}
    # Staged in the table's .hoodie/.temp when written through the table's store.
    staging = TEMP_DIR if file.name.startswith(f"{FOLDER}/") else None
    file.store.write(
        file.name,
        lambda tmp: parquet.write_table(rows, tmp, footer=footer),
        staging=staging,
        sync=False,
    )
    key_index.FILE_CACHE.put(file, _CACHED, Sidecar(rows, parent, depth))
    whole = rows if parent is None else None if resolved is None else resolved.cast(SCHEMA)
    if whole is not None:
        key_index.FILE_CACHE.put(file, _RESOLVED, Tombstones(whole, depth))


def sync_folder(store: Storage) -> None:
    """Make the sidecars written so far durable in the folder (before a commit names them)."""
    store.sync(FOLDER)


def sweep(table: Path | Storage, live: set[tuple[str, str]]) -> int:
    """Delete sidecars of slices that are not live (rolled back or cleaned) and that no
    live slice's sidecar chain reaches; return count."""
    store = table if isinstance(table, Storage) else LocalStorage(Path(table))
    # What a crash left staged beside the sidecars (by earlier versions).
    store.discard_staged(FOLDER)
    removed = 0
    found = store.entries(FOLDER)
    if not found:
        return 0
    live = set(live)
    unplaced: set[str] = set()  # groups whose chain cannot be read: all of theirs kept
    for file_id, instant in list(live):
        try:
            parent = parent_of(sidecar(store, file_id, instant))
            while parent is not None and (file_id, parent) not in live:
                live.add((file_id, parent))
                parent = parent_of(sidecar(store, file_id, parent))
        except HudiError:
            unplaced.add(file_id)
    for info in found:
        name = info.path.rpartition("/")[2]
        file_id, _, rest = name.rpartition("_")
        if file_id not in unplaced and (file_id, rest.removesuffix(".parquet")) not in live:
            store.delete(info.path)
            removed += 1
    return removed
