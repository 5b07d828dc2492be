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
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from engine.errors import HudiError
from engine.files import atomic_write, fsync
from engine.hudi import parquet
from engine.hudi.layout import own_dir
from engine.model import KEY, POS, POS_SUB, SOURCE_TS

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


def folder(table_path: Path) -> Path:
    """The sidecar folder of a table."""
    return own_dir(table_path) / "tombstones"


def sidecar_path(table_path: Path, file_id: str, instant: str) -> Path:
    """The tombstone file belonging to one base file slice."""
    return folder(table_path) / f"{file_id}_{instant}.parquet"


def read(path: Path) -> pa.Table | None:
    """The tombstones of a slice (None when it has no sidecar).

    Raises:
        HudiError: The sidecar exists but cannot be read.
    """
    try:
        return parquet.read_table(path).cast(SCHEMA)
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowException) as exc:
        raise HudiError(
            f"the tombstone sidecar {path} is unreadable ({exc})",
            "the table's delete history is damaged: rebuild the table from its topic",
        ) from None


def missing(path: Path, instant: str) -> HudiError:
    """The error for a sidecar its commit recorded but that is not there."""
    return HudiError(
        f"the tombstone sidecar {path} that commit {instant} recorded is missing",
        "the table's delete history is incomplete (late events could resurrect deleted "
        "rows): rebuild the table from its topic",
    )


def write(table: pa.Table, path: Path) -> None:
    """Write a sidecar atomically, its content durably (staged under a name readers never
    pick up); the commit that makes it count syncs the folder (:func:`sync_folder`)."""
    rows = table.cast(SCHEMA)
    atomic_write(path, lambda tmp: parquet.write_table(rows, tmp), sync_dir=False)


def sync_folder(table_path: Path) -> None:
    """Make the sidecars written so far durable in the folder (before a commit names them)."""
    fsync(folder(table_path))


def sweep(table_path: Path, live: set[tuple[str, str]]) -> int:
    """Delete sidecars of slices that are not live (rolled back or cleaned); return count."""
    removed = 0
    root = folder(table_path)
    if not root.is_dir():
        return 0
    for entry in root.iterdir():
        name = entry.name
        if name.startswith("."):
            entry.unlink(missing_ok=True)  # a staged file a crash left behind
            removed += 1
            continue
        file_id, _, rest = name.rpartition("_")
        if (file_id, rest.removesuffix(".parquet")) not in live:
            entry.unlink(missing_ok=True)
            removed += 1
    return removed
