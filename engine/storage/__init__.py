"""One interface for a target's bytes: a local folder or an S3-compatible bucket.

:class:`Storage` (``base``) is what the table format's protocol needs: whole-object reads
and writes, create-if-absent, compare-and-swap, listing and deletion.
:class:`LocalStorage` keeps a folder, :class:`ObjectStorage` a bucket and prefix
(obstore). :func:`open_storage` picks one for a ``target.path``.
"""

from __future__ import annotations

from pathlib import Path

from engine.storage.base import ObjectInfo, Storage, StorageError, StoreUnavailable, check_path
from engine.storage.local import LocalStorage
from engine.storage.s3 import SCHEME, ObjectStorage, S3Settings, is_object_url, split_url

__all__ = [
    "SCHEME",
    "LocalStorage",
    "ObjectInfo",
    "ObjectStorage",
    "S3Settings",
    "Storage",
    "StorageError",
    "StoreUnavailable",
    "check_path",
    "folder_store",
    "is_object_url",
    "open_storage",
    "split_url",
]


def folder_store(path: str | Path) -> LocalStorage:
    """The store of a folder given by name (an API caller's target or table folder).

    Raises:
        StorageError: ``path`` is an ``s3://`` URL: a bucket needs its endpoint and
            credentials, which come with a config (``Config.target_store``).
    """
    if is_object_url(str(path)):
        raise StorageError(
            f"{path} is a bucket: its endpoint and credentials come with a config",
            hint="pass the Config (engine.load_config) or its target_store() instead of the URL",
        )
    return LocalStorage(Path(path).resolve())


def open_storage(target: Path | S3Settings, *, patient: bool = True) -> Storage:
    """The store of a target: a folder, or a bucket and prefix."""
    if isinstance(target, S3Settings):
        return ObjectStorage(target, patient=patient)
    return LocalStorage(target)
