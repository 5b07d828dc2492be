"""A target folder on a local (or mounted) file system.

Writes go through :func:`engine.files.atomic_write` (a temporary name, fsync, rename,
folder fsync), and :meth:`LocalStorage.create` through :func:`engine.files.atomic_create`
(the same, hard-linked instead of renamed: of concurrent creators exactly one succeeds).
:meth:`LocalStorage.replace` compares and writes under an exclusive ``flock`` of a lock
file beside the object, which serialises the processes of one machine (the only writers
a local folder has).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from engine.files import Content, atomic_create, atomic_write, fsync
from engine.storage.base import ObjectInfo, Storage, check_path


class LocalStorage(Storage):
    """A folder; paths are relative to it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def under(self, folder: str) -> LocalStorage:
        return LocalStorage(self._file(folder))

    def _file(self, path: str) -> Path:
        return self.root / check_path(path)

    @staticmethod
    def _info(path: str, st: os.stat_result) -> ObjectInfo:
        modified = datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC)
        return ObjectInfo(path, st.st_size, modified, f"{st.st_mtime_ns}-{st.st_size}-{st.st_ino}")

    def read(self, path: str) -> bytes:
        return self._file(path).read_bytes()

    def _stage(self, staging: str | None) -> Path | None:
        return None if staging is None else self._file(staging)

    def write(
        self, path: str, data: Content, *, staging: str | None = None, sync: bool = True
    ) -> ObjectInfo:
        file = self._file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(file, data, tmp_dir=self._stage(staging), sync_dir=sync)
        return self._info(path, file.stat())

    def create(self, path: str, data: Content, *, staging: str | None = None) -> ObjectInfo | None:
        file = self._file(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        if atomic_create(file, data, tmp_dir=self._stage(staging)) is None:
            return None
        return self._info(path, file.stat())

    @contextmanager
    def _locked(self, file: Path) -> Iterator[None]:
        fd = os.open(file.parent / f".{file.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def replace(self, path: str, data: bytes, version: str) -> ObjectInfo | None:
        file = self._file(path)
        with self._locked(file):
            current = self.head(path)
            if current is None or current.version != version:
                return None
            # A new inode (the rename), so the version changes even within one tick.
            return self.write(path, data)

    def head(self, path: str) -> ObjectInfo | None:
        try:
            return self._info(path, self._file(path).stat())
        except FileNotFoundError:
            return None

    @staticmethod
    def _own(name: str) -> bool:
        """This store's own temporary and lock files, which no listing shows."""
        return name.startswith(".") and name.endswith((".tmp", ".lock"))

    def entries(self, folder: str = "") -> list[ObjectInfo]:
        top = self._file(folder) if folder else self.root
        out = []
        try:
            with os.scandir(top) as found:
                for entry in found:
                    if self._own(entry.name):
                        continue
                    try:
                        if not entry.is_file():
                            continue
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    path = f"{folder}/{entry.name}" if folder else entry.name
                    out.append(self._info(path, st))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(out, key=lambda o: o.path)

    def folders(self, folder: str = "") -> list[str]:
        top = self._file(folder) if folder else self.root
        try:
            with os.scandir(top) as found:
                return sorted(e.name for e in found if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_range(self, path: str, start: int, length: int) -> bytes:
        with open(self._file(path), "rb") as f:
            f.seek(start)
            return f.read(length)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        top = self._file(prefix) if prefix else self.root
        out = []
        for folder, _dirs, files in os.walk(top):
            for name in files:
                if self._own(name):
                    continue
                full = Path(folder) / name
                try:
                    st = full.stat()
                except FileNotFoundError:
                    continue
                out.append(self._info(full.relative_to(self.root).as_posix(), st))
        return sorted(out, key=lambda o: o.path)

    def delete(self, path: str) -> None:
        self._file(path).unlink(missing_ok=True)

    def local_path(self, path: str) -> Path:
        return self._file(path) if path else self.root

    def sync(self, folder: str = "", files: Sequence[str] = ()) -> None:
        for name in files:
            fsync(self._file(name))
        fsync(self.local_path(folder))

    def make_folders(self, *folders: str) -> None:
        for folder in folders:
            self.local_path(folder).mkdir(parents=True, exist_ok=True)

    def discard_staged(self, staging: str) -> None:
        top = self.local_path(staging)
        try:
            found = list(os.scandir(top))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in found:
            if _staged_name(entry.name):
                Path(entry.path).unlink(missing_ok=True)
            elif staging and entry.is_dir(follow_symlinks=False):
                # A staging folder of its own (an instant's, by earlier versions).
                for inner in os.scandir(entry.path):
                    if _staged_name(inner.name):
                        Path(inner.path).unlink(missing_ok=True)
                try:
                    os.rmdir(entry.path)
                except OSError:
                    pass  # not empty: not only staged files


def _staged_name(name: str) -> bool:
    """A temporary file of :func:`engine.files.atomic_write` (``.<name>.<random>.tmp``)."""
    return name.startswith(".") and name.endswith(".tmp")
