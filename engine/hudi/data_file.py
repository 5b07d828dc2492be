"""One immutable file of a table, wherever the table is: its store and its name.

Base files, log files and tombstone sidecars are never rewritten (each name carries the
instant that wrote it), which is what lets a merge worker keep what it read in its file
cache (:data:`engine.hudi.key_index.FILE_CACHE`). :class:`DataFile` is how the merge
tasks name such a file: on a local disk they read it by its path (memory-mapped, and its
size and time tell a cache entry is current); on object storage they fetch it whole, and
its URL alone keys the cache.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from engine.storage import LocalStorage, Storage


@dataclass(frozen=True, slots=True)
class DataFile:
    """A file of a table: ``name`` relative to the table's ``store``; on object storage
    its ``version`` (ETag) as listed or written, if known."""

    store: Storage
    name: str
    version: str = ""
    #: Its name carries the instant that wrote it (a base file, a tombstone sidecar): it
    #: is never written twice, so its URL alone identifies its content.
    unique: bool = False

    @classmethod
    def at(cls, file: DataFile | str | Path) -> DataFile:
        """``file`` as a :class:`DataFile` (a path names a file in a local folder)."""
        if isinstance(file, DataFile):
            return file
        path = Path(file)
        return cls(LocalStorage(path.parent), path.name)

    @property
    def local(self) -> Path | None:
        """Its path on a local disk, or None on object storage."""
        return self.store.local_path(self.name)

    def __str__(self) -> str:
        local = self.local
        return str(local) if local is not None else f"{self.store.url}/{self.name}"

    @property
    def file_name(self) -> str:
        """Its name without its folder."""
        return self.name.rpartition("/")[2]

    def sibling(self, name: str) -> DataFile:
        """Another file of the same kind (``name``: without a folder) in its folder."""
        folder = self.name.rpartition("/")[0]
        return DataFile(self.store, f"{folder}/{name}" if folder else name, unique=self.unique)

    def cache_key(self) -> tuple[Any, ...] | None:
        """What identifies its content: on a disk its path, size and modification time
        (a file replaced under the same name is a new entry); on object storage its URL
        and version (names carrying their instant are never written twice; a log file's
        name is, by the redo of a rolled-back batch); None if there is no telling.

        Raises:
            FileNotFoundError: It is not there (a local file).
        """
        local = self.local
        if local is None:
            # Without a version (a store that gives no ETag) its content is not known:
            # None, never cached.
            if self.unique:
                return (str(self),)
            return (str(self), self.version) if self.version else None
        st = os.stat(local)
        return (str(local), st.st_size, st.st_mtime_ns)

    def source(self) -> str | pa.Buffer:
        """What a Parquet reader opens: its path, or its bytes fetched from the store.

        Raises:
            FileNotFoundError: It is not there.
        """
        local = self.local
        return str(local) if local is not None else pa.py_buffer(self.store.read(self.name))

    def read_bytes(self) -> bytes:
        """Its whole content."""
        return self.store.read(self.name)
