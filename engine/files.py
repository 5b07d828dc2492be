"""Durable, atomic file writes: the one way the engine replaces a file.

Readers (hudi-rs, Java Hudi, the merge of the next batch) must see either the old file
or the whole new one, and after a crash or power loss a file that a commit names must
exist in full. So every write goes to a temporary name in the same folder, is flushed
and fsynced, renamed into place, and the folder is fsynced so the rename itself is
durable. Temporary names start with ``.`` and end with ``.tmp``, so no reader mistakes
a half-written ``.parquet`` for a data file; a Hudi table's data files are staged under
``.hoodie/.temp`` instead (``tmp_dir``), since its log files are hidden names too and
hudi-rs would list a staged one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

#: What :func:`atomic_write` writes: the bytes, or a function that writes the file at the
#: (temporary) path it is given, e.g. a Parquet writer.
Content = bytes | Callable[[Path], None]


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) readable by the owner only (0700).

    The work folder holds the state store, logs, dead letters and staged batches
    (message contents): nobody else may list or read it. An existing folder is
    tightened to 0700 (its existing parents are left as they are).
    """
    path = Path(path)
    missing = []
    folder = path
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    if path.stat().st_mode & 0o777 != 0o700:
        os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """Create ``path`` if missing, readable and writable by the owner only (0600); an
    existing file is tightened to 0600. Its folder must exist."""
    path = Path(path)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    if path.stat().st_mode & 0o777 != 0o600:
        os.chmod(path, 0o600)
    return path


def fsync(path: Path) -> None:
    """Flush a file (e.g. written by another process) or a folder to stable storage.

    For a folder, this makes the renames and unlinks done in it durable.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _staged(path: Path, content: Content, tmp_dir: Path | None) -> Path:
    """``content`` written whole and fsynced under a temporary name beside ``path`` (or
    in ``tmp_dir``): what :func:`atomic_write` and :func:`atomic_create` then link."""
    stage = tmp_dir or path.parent
    stage.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=stage, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if isinstance(content, bytes):
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            os.close(fd)
            content(Path(tmp))
            fsync(Path(tmp))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write(
    path: Path, content: Content, *, tmp_dir: Path | None = None, sync_dir: bool = True
) -> int:
    """Replace ``path`` with ``content`` so that readers see all of it or none of it.

    Args:
        path: The file to write (its folder must exist unless ``tmp_dir`` is given).
        content: Bytes, or a callable that writes the whole file at the path it is given.
        tmp_dir: Where the temporary file is staged (default: next to ``path``); must be
            on the same file system. Created if missing.
        sync_dir: Also fsync ``path``'s folder (skip only when the caller syncs the
            folder once after several writes).

    Returns:
        The size of the written file in bytes.
    """
    path = Path(path)
    tmp = _staged(path, content, tmp_dir)
    try:
        size = os.stat(tmp).st_size
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync(path.parent)
    return size


def atomic_create(path: Path, content: Content, *, tmp_dir: Path | None = None) -> int | None:
    """:func:`atomic_write`, but only if ``path`` does not exist: the temporary file is
    hard-linked to its name, which fails if the name exists, so of concurrent creators
    exactly one succeeds and no reader sees a part. None when ``path`` existed.

    Returns:
        The size of the written file in bytes, or None.
    """
    path = Path(path)
    tmp = _staged(path, content, tmp_dir)
    try:
        size = os.stat(tmp).st_size
        try:
            os.link(tmp, path)
        except FileExistsError:
            return None
    finally:
        tmp.unlink(missing_ok=True)
    fsync(path.parent)
    return size
