"""What every target store offers: whole-object reads and writes, create-if-absent and
compare-and-swap, listing and deletion, by ``/``-separated paths relative to the store's
root.

The two writes a table's protocol needs beyond a plain put:

- :meth:`Storage.create` makes an object only if none exists at that path (S3's
  ``If-None-Match: *``; a hard link of a fully written temporary file on a local disk).
  Of any number of concurrent creators exactly one succeeds; the others get None. A
  completed Hudi instant is written this way on object storage, where there is no
  atomic rename.
- :meth:`Storage.replace` overwrites an object only if it is still the version the
  caller read (S3's ``If-Match: <etag>``). A lease object is renewed and taken over this
  way: a writer whose lease was taken over finds its next replace refused.

Every write is whole or nothing for readers: a reader sees the previous object (or
none) or all of the new one, never a part.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from engine.errors import StorageError
from engine.files import Content


class StoreUnavailable(StorageError, OSError):
    """A request failed after the client's own retries (the store unreachable, timing
    out, answering with server errors): to the replicator an I/O error like a disk's,
    which it retries with backoff (``replicator.retry_max_seconds``). A missing bucket
    or refused credentials stay a :class:`StorageError`: someone must fix them."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored object.

    Attributes:
        path: Relative to the store's root, ``/``-separated.
        size: Bytes.
        modified: When it was last written (UTC).
        version: What :meth:`Storage.replace` compares (an S3 ETag; on a local disk the
            file's modification time, size and inode).
    """

    path: str
    size: int
    modified: datetime
    version: str


class Storage(ABC):
    """A target's bytes: a local folder or an S3-compatible bucket and prefix."""

    #: Where the root is, for messages: a folder or ``s3://bucket/prefix``.
    url: str

    @property
    def name(self) -> str:
        """The root's last part: a table's name when the store is a table's."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @abstractmethod
    def under(self, folder: str) -> Storage:
        """The same store rooted at ``folder`` (a table's folder within a target)."""

    @abstractmethod
    def read(self, path: str) -> bytes:
        """The whole object.

        Raises:
            FileNotFoundError: There is none at ``path``.
            StorageError: The store failed (unreachable, refused).
        """

    @abstractmethod
    def write(
        self, path: str, data: Content, *, staging: str | None = None, sync: bool = True
    ) -> ObjectInfo:
        """Make ``data`` the object at ``path``, replacing any, whole or nothing.

        Args:
            data: The bytes, or a callable writing the whole object to the local file it
                is given (a Parquet writer streams into it; an object store uploads it).
            staging: The folder a local store stages the new file in before its rename
                (None: beside it); object stores ignore it.
            sync: Also make the folder's entry durable now; False when the caller
                :meth:`sync` s the folder once after several writes.
        """

    @abstractmethod
    def create(self, path: str, data: Content, *, staging: str | None = None) -> ObjectInfo | None:
        """Make ``data`` the object at ``path`` only if there is none; None if there is."""

    @abstractmethod
    def replace(self, path: str, data: bytes, version: str) -> ObjectInfo | None:
        """Overwrite the object at ``path`` only if its version is still ``version``;
        None if it changed or was deleted since."""

    @abstractmethod
    def head(self, path: str) -> ObjectInfo | None:
        """The object's size, time and version; None if there is none."""

    @abstractmethod
    def entries(self, folder: str = "") -> list[ObjectInfo]:
        """The objects directly in ``folder`` (not in its subfolders), in name order;
        their paths are relative to the root. A missing folder has none."""

    @abstractmethod
    def folders(self, folder: str = "") -> list[str]:
        """The names of the folders directly in ``folder`` (on object storage: the
        prefixes one level down that hold objects), sorted. A missing folder has none."""

    @abstractmethod
    def read_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the object).

        Raises:
            FileNotFoundError: There is no object at ``path``.
        """

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix`` (a folder path, ``""`` for the root), at any
        depth, in path order."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove the object at ``path`` (nothing happens if there is none)."""

    # What a local folder has beyond objects; an object store has nothing to do.

    def reader_options(self) -> dict[str, str]:
        """The storage options a reader built on Rust's ``object_store`` (hudi-rs) needs
        to reach this store: none for a folder. Secrets included: never log them."""
        return {}

    def local_path(self, path: str) -> Path | None:
        """The file behind ``path`` when the store is a local folder (for memory-mapped
        reads and file metadata), else None."""
        return None

    def sync(self, folder: str = "", files: Sequence[str] = ()) -> None:
        """Make ``files`` (written by any process) and the entries of ``folder`` durable:
        what a commit needs before it names them. A finished put is durable already.

        Raises:
            FileNotFoundError: One of ``files`` is missing (a local folder).
        """
        return None

    def make_folders(self, *folders: str) -> None:
        """Create empty folders where the store has folders (a local disk; ``""``: the
        root)."""
        return None

    def discard_staged(self, staging: str) -> None:
        """Remove what interrupted writes left staged in ``staging`` (a crash between
        writing a temporary file and its rename)."""
        return None


def check_path(path: str) -> str:
    """``path`` if it is a plain relative path inside the root, else ValueError: names
    that come from topics and tables must never reach outside the target."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a relative path inside the target: {path!r}")
    return path
