"""The merge workers' key index and column cache: a base file's record keys hashed and
sorted, so the stored rows of a batch's keys are found by binary search, and the columns
already read of immutable data files kept in a reused Spark worker's memory.

:func:`engine.hudi.file_slice.read_slice` reads a slice through them; a new base file's
index is built at write time and kept as a file the other workers map
(``staging/<table>/key-index/``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from engine.files import private_file
from engine.hudi import parquet
from engine.hudi.data_file import DataFile
from engine.hudi.log_file import LogBlock, read_log_file
from engine.hudi.schema import HOODIE_RECORD_KEY


def only_keys(table: pa.Table, keys: pa.Array | pa.ChunkedArray | None) -> pa.Table:
    """The rows of a stored table whose record key is one of ``keys`` (all for None)."""
    if keys is None:
        return table
    column = table.column(HOODIE_RECORD_KEY)
    if keys.type != column.type:
        keys = keys.cast(column.type)
    return table.filter(pc.is_in(column, value_set=keys))


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The 64-bit hashes of record keys (Polars' string hash: stable within a process,
    which is all an in-memory :class:`KeyIndex` needs)."""
    return pl.Series(keys).cast(pl.String).hash(seed=0).to_numpy()


#: The key index file's columns beside the cached ones: the key hashes, sorted, and the
#: row number of each.
HASH_COLUMN = "_cdc_key_hash"
ORDER_COLUMN = "_cdc_key_row"


class KeyIndex:
    """A base file's cached columns with their record keys' 64-bit hashes, sorted, and the
    row number of each: the stored rows of a batch's keys are found by binary
    search, O(k log n) for k keys in a group of n rows, instead of a scan of the group.

    A hash only finds candidates; each is kept only if its key equals one of the keys
    asked for. A base file whose keys do not all have distinct hashes (a collision, or a
    repeated key) is searched by scanning its key column instead: never a wrong answer.

    An index can be kept as a file (:meth:`save`, :meth:`open`) that the merge workers
    share: mapped into memory, it costs a worker no copy and no build.
    """

    def __init__(
        self, rows: pa.Table, hashes: np.ndarray, order: np.ndarray, distinct: bool
    ) -> None:
        #: The rows, in their own order, in one chunk; ``hashes`` sorted, ``order`` their
        #: row numbers. One chunk because Arrow's ``take`` over a table of several chunks
        #: (a base file's row groups, an index file's record batches) first joins them
        #: all: finding a batch's 1,250 keys in a 1.25M-row group took ~4.6 ms instead of
        #: ~0.05 ms, the largest cost of an append at 10M rows (``bench/growth.py``).
        self.rows = rows if _one_chunk(rows) else rows.combine_chunks()
        self.hashes = hashes
        self.order = order
        self.distinct = distinct

    @classmethod
    def build(cls, rows: pa.Table) -> KeyIndex:
        """Index ``rows`` (they must hold ``_hoodie_record_key``)."""
        hashes = key_hashes(rows.column(HOODIE_RECORD_KEY))
        order = np.argsort(hashes).astype(np.int64 if len(hashes) >> 31 else np.int32)
        hashes = hashes[order]
        distinct = not bool((hashes[1:] == hashes[:-1]).any())
        return cls(rows, hashes, order, distinct)

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.hashes.nbytes + self.order.nbytes

    def find(self, keys: pa.Array | pa.ChunkedArray) -> pa.Table:
        """The rows whose record key is one of ``keys``, in row order."""
        if not self.distinct or not len(self.hashes):
            return only_keys(self.rows, keys)
        wanted = np.sort(key_hashes(keys))  # sorted needles: several times faster search
        at = np.minimum(np.searchsorted(self.hashes, wanted), len(self.hashes) - 1)
        candidates = np.unique(self.order[at[self.hashes[at] == wanted]])
        return only_keys(self.rows.take(pa.array(candidates)), keys)

    def save(self, path: Path, base: str | Path) -> None:
        """Write the index of ``base`` to ``path`` (replaced whole; a cache, not synced:
        a write that fails is skipped).

        Index files of the same file group's earlier base files in that folder are
        removed: a group's later batches read only its newest slice.
        """
        table = self.rows.append_column(HASH_COLUMN, pa.array(self.hashes, pa.uint64()))
        table = table.append_column(ORDER_COLUMN, pa.array(self.order))
        table = table.replace_schema_metadata(
            {**_stat_tag(base), "distinct": str(int(self.distinct))}
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            # In the work folder: owner-only, like everything there (message contents).
            private_file(tmp)
            with pa.OSFile(str(tmp), "wb") as sink:
                with pa.ipc.new_file(sink, table.schema) as ipc:
                    ipc.write_table(table)
            os.replace(tmp, path)
        except (OSError, pa.ArrowException):
            # A cache: a full or read-only work folder leaves the index in memory only.
            tmp.unlink(missing_ok=True)
            return
        group = Path(base).name.split("_", 1)[0] + "_"
        for entry in os.scandir(path.parent):
            name = entry.name
            if name.startswith(group) and name.endswith(".keys") and name != path.name:
                Path(entry.path).unlink(missing_ok=True)

    @classmethod
    def open(cls, path: Path, base: str | Path) -> KeyIndex | None:
        """The index kept in ``path`` for ``base`` as it is now (None: missing, unreadable
        or of another version of the file)."""
        try:
            tag = {k.encode(): v.encode() for k, v in _stat_tag(base).items()}
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowException):
            return None
        meta = table.schema.metadata or {}
        extra = (HASH_COLUMN, ORDER_COLUMN)
        if any(meta.get(k) != v for k, v in tag.items()) or not all(
            c in table.column_names for c in extra
        ):
            return None
        hashes = table.column(HASH_COLUMN).combine_chunks().to_numpy()
        order = table.column(ORDER_COLUMN).combine_chunks().to_numpy()
        rows = table.drop_columns(list(extra)).replace_schema_metadata(None)
        return cls(rows, hashes, order, meta.get(b"distinct") == b"1")


def _one_chunk(table: pa.Table) -> bool:
    return all(column.num_chunks <= 1 for column in table.columns)


def _stat_tag(base: str | Path) -> dict[str, str]:
    st = os.stat(base)
    return {"base_size": str(st.st_size), "base_mtime_ns": str(st.st_mtime_ns)}


def index_path(index_dir: str | Path, base: str | Path, columns: Sequence[str]) -> Path:
    """Where the key index of these columns of ``base`` is kept in ``index_dir``."""
    digest = hashlib.sha1("\0".join(columns).encode()).hexdigest()[:12]
    return Path(index_dir) / f"{Path(base).name}.{digest}.keys"


def load_index(base: str | Path, columns: list[str], index_dir: str | Path | None) -> KeyIndex:
    """The key index of ``columns`` of ``base``: from ``index_dir`` when kept there, else
    built from the file (and kept there for the other workers)."""
    path = None if index_dir is None else index_path(index_dir, base, columns)
    if path is not None:
        kept = KeyIndex.open(path, base)
        if kept is not None:
            return kept
    index = KeyIndex.build(parquet.read_table(base, columns))
    if path is not None:
        index.save(path, base)
    return index


class ColumnCache:
    """Columns of data files already read by this (reused Spark worker) process.

    Base and log files are immutable: a name is never written twice, since it carries
    the instant that wrote it and instants only grow. So an append's reads of a slice's
    key and position columns can be served from memory in later batches. Entries are
    keyed by path, size and mtime and evicted oldest first beyond ``limit`` bytes; only
    column subsets are cached (full reads are compactions, which replace the slice).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.entries: dict[tuple[Any, ...], tuple[Any, int]] = {}

    def get(
        self, path: str | Path | DataFile, columns: list[str] | None, load: Callable[[], Any]
    ) -> Any:
        """The cached value for these columns of ``path``, else ``load()`` (then cached)."""
        if columns is None or self.limit <= 0:
            return load()
        key = self._key(path, columns)
        if key is None:
            return load()
        hit = self.entries.pop(key, None)
        if hit is not None:
            self.entries[key] = hit  # most recently used last
            return hit[0]
        value = load()
        self._insert(key, value)
        return value

    def put(self, path: str | Path | DataFile, columns: list[str], value: Any) -> None:
        """Remember what reading ``columns`` of the just-written ``path`` would return."""
        key = self._key(path, columns) if self.limit > 0 else None
        if key is not None:
            self._insert(key, value)

    @staticmethod
    def _key(path: str | Path | DataFile, columns: list[str]) -> tuple[Any, ...] | None:
        found = DataFile.at(path).cache_key()
        return None if found is None else (*found, tuple(columns))

    def _insert(self, key: tuple[Any, ...], value: Any) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.used -= old[1]
        size = _nbytes(value)
        self.entries[key] = (value, size)
        self.used += size
        while self.used > self.limit and len(self.entries) > 1:
            oldest = next(iter(self.entries))
            self.used -= self.entries.pop(oldest)[1]


def _nbytes(value: Any) -> int:
    nbytes = getattr(value, "nbytes", None)  # tables, key indexes, tombstone sidecars
    if nbytes is not None:
        return nbytes
    return sum(
        (b.rows.nbytes if b.rows is not None else 0)
        + _index_extra(b)
        + sum(len(k) + 49 for k in (b.deleted_keys or ()))
        for b in value
    )


def _index_extra(block: LogBlock) -> int:
    index = block.index if isinstance(block, IndexedBlock) else None
    return 0 if index is None else index.hashes.nbytes + index.order.nbytes


#: Where Linux states a container's memory limit (cgroup v2, then v1).
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def available_memory() -> int:
    """The machine's memory, or its container's limit when that is lower (0: unknown)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = 0
    for path in CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        limit = int(text) if text.isdigit() else 0  # cgroup v2 says "max" for none
        if 0 < limit and (memory <= 0 or limit < memory):
            memory = limit
        break
    return memory


def default_cache_bytes(memory: int | None = None) -> int:
    """The file cache's bound per worker process: 1 GiB, or a sixteenth of ``memory``
    (:func:`available_memory`: the machine's, or its container's limit) when that is less
    (256 MiB when it cannot be told).

    Spark does not pin a batch's tasks to workers, so each worker ends up caching every
    group of a table (its key index and positions: ~45 bytes a row, 1 GiB for ~20M rows);
    a cache smaller than that is read in a cycle larger than itself, where least recently
    used eviction misses every time (at 10M rows and 256 MiB every batch re-read every
    group's index: 10k updates took 1.86 times as long as at 1M rows, 1.17 times with the
    whole table cached; docs/performance.md).
    """
    if memory is None:
        memory = available_memory()
    return min(1 << 30, memory // 16) if memory > 0 else 256 << 20


#: Per worker process (``CDCCTL_MERGE_CACHE_BYTES``, else :func:`default_cache_bytes`).
FILE_CACHE = ColumnCache(int(os.environ.get("CDCCTL_MERGE_CACHE_BYTES") or default_cache_bytes()))


#: Log data blocks of at least this many rows are kept with a key index (smaller ones
#: are scanned: a bulk insert's log block may hold a large share of a group).
INDEX_MIN_ROWS = 4096


@dataclass
class IndexedBlock(LogBlock):
    """A cached log data block with the key index of its rows."""

    index: KeyIndex | None = None


def index_blocks(blocks: list[LogBlock]) -> list[LogBlock]:
    """``blocks`` with each large data block indexed (its rows keep their order)."""
    out: list[LogBlock] = []
    for block in blocks:
        if block.rows is not None and block.rows.num_rows >= INDEX_MIN_ROWS:
            index = KeyIndex.build(block.rows)
            out.append(IndexedBlock(block.instant, rows=block.rows, index=index))
        else:
            out.append(block)
    return out


def read_blocks(path: str | DataFile, columns: list[str] | None) -> list[LogBlock]:
    file = DataFile.at(path)
    blocks = list(read_log_file(str(file), columns=columns, data=file.read_bytes()))
    return index_blocks(blocks) if columns is not None else blocks
