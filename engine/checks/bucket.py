"""Object-storage target checks: the bucket answers, and it honours the conditional
writes the table's commit protocol and the writer's lease rely on.

A store that accepts a second create of the same object, or a replace naming a version
that is no longer current, would let two writers both complete an instant or both hold
the lease: that is a failure to fix before any table is written there, not a warning.
The probe objects live under ``<prefix>/.cdcctl-probe/`` and are deleted afterwards.
"""

from __future__ import annotations

import time
import uuid

from engine.checks.result import Check, failed, passed
from engine.config import Config
from engine.errors import CdcError
from engine.storage import Storage, StorageError, open_storage

#: Where the probe objects go, under the target's prefix.
PROBE_DIR = ".cdcctl-probe"


def _probe(store: Storage) -> str:
    """Run the probe; the detail of a pass. Raises StorageError with what failed."""
    started = time.monotonic()
    store.list(PROBE_DIR)
    path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
    created = store.create(path, b"cdcctl test-connection probe 1")
    if created is None:
        raise StorageError(f"creating {store.url}/{path}: refused although it did not exist")
    try:
        if store.create(path, b"cdcctl test-connection probe 2") is not None:
            raise StorageError(
                f"{store.url} ignores conditional writes: a second create of {path} "
                "(If-None-Match: *) replaced the first",
                hint="use a store that honours If-None-Match and If-Match on PUT (AWS S3, "
                "MinIO, Ceph RGW 19+, recent R2); without them two writers could both "
                "complete a commit",
            )
        current = store.replace(path, b"cdcctl test-connection probe 3", created.version)
        if current is None:
            raise StorageError(
                f"{store.url}: replacing {path} at its current version (If-Match) was refused",
                hint="use a store that honours If-Match on PUT",
            )
        if store.replace(path, b"cdcctl test-connection probe 4", created.version) is not None:
            raise StorageError(
                f"{store.url} ignores conditional writes: a replace of {path} naming an "
                "old version (If-Match) succeeded",
                hint="use a store that honours If-Match on PUT; without it a stalled "
                "writer could complete a commit after another took over",
            )
        if store.read(path) != b"cdcctl test-connection probe 3":
            raise StorageError(f"{store.url}: {path} does not read back as written")
    finally:
        store.delete(path)
    if store.head(path) is not None:
        raise StorageError(f"{store.url}: {path} is still there after its delete")
    took = time.monotonic() - started
    return (
        f"{store.url}: list, create, create-if-absent refused, compare-and-swap, read, "
        f"delete ({took:.2f} s)"
    )


def check_bucket(cfg: Config) -> Check:
    """The bucket and prefix of an ``s3://`` target can be listed, written
    conditionally, read and deleted."""
    try:
        store = open_storage(cfg.target_s3(), patient=False)
        return passed("target.bucket", _probe(store))
    except CdcError as exc:
        return failed("target.bucket", exc.message, exc.hint or "check [target.s3]")


def object_target_checks(cfg: Config) -> list[Check]:
    """Every check of an object-storage target, in order."""
    return [check_bucket(cfg)]
