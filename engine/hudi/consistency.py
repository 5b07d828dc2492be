"""Is a table safe to write on? A cheap check made each time the replicator opens a table.

A replicator that builds a new commit on a damaged table turns damage into silent data
loss: the new commit's checkpoint says events are applied whose rows are gone. So before
a table is written (and before its unfinished instants are rolled back, which deletes
files) :func:`check` verifies, without reading any data:

* every completed write instant of the active timeline has a readable commit file of
  the right shape (a corrupted or truncated ``.commit`` / ``.deltacommit``);
* no unfinished write instant is older than a completed one: the writer rolls back
  before it writes again, so such an instant is a completed one whose commit file was
  deleted (rolling it back would delete rows later checkpoints count as applied);
* no data file belongs to an instant the timeline does not know at all (all of an
  instant's files deleted) unless it predates the timeline (archived history);
* the current file slice of every file group, as the commit metadata records it,
  exists; and every data file a commit recorded has the size the commit recorded
  (``fileSizeInBytes``) and the right magic (``PAR1`` at both ends of a base file,
  ``#HUDI#`` at the start of a log file): truncated or overwritten files.

Each problem raises :class:`HudiError` saying what is wrong and what to do. Files the
format does not know (not a data file name) are reported by :func:`strays` and left
alone: readers skip them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import HudiError
from engine.hudi.file_slice import BASE_FILE_RE
from engine.hudi.layout import (
    HOODIE_DIR,
    OWN_DIR,
    PARTITION_METADATA_FILE,
    PROPERTIES_FILE,
)
from engine.hudi.log_file import MAGIC as LOG_MAGIC
from engine.hudi.log_file import LogFileName, log_instant, log_instant_in
from engine.storage import LocalStorage, Storage, StoreUnavailable

PARQUET_MAGIC = b"PAR1"
#: Names in a table folder that are the format's own (besides data files).
KNOWN_NAMES = frozenset({HOODIE_DIR, PARTITION_METADATA_FILE})


def resync_hint(table: str) -> str:
    """What to do about a damaged table: rebuild it from its topic."""
    return (
        f"rebuild the replica with `cdcctl resync {table}` (it drops the folder and reads "
        "the topic again from its start; events Kafka's retention already deleted cannot "
        "come back), or restore the folder from a backup; the replicator will not write "
        "over a table it cannot read consistently"
    )


def check_no_stray_timeline(path: Path | Storage, name: str) -> None:
    """Raise :class:`HudiError` if ``path`` (a table's folder or store) has no
    ``hoodie.properties`` but its ``.hoodie`` holds files beside cdcctl's own folder: the
    timeline of a damaged table, which the replicator will not create a new table over."""
    store = path if isinstance(path, Storage) else LocalStorage(Path(path))
    if store.head(f"{HOODIE_DIR}/{PROPERTIES_FILE}") is not None:
        return
    own = f"{HOODIE_DIR}/{OWN_DIR}/"
    if any(not o.path.startswith(own) for o in store.list(HOODIE_DIR)):
        raise HudiError(
            f"table {name}: {store.url}/{HOODIE_DIR}/{PROPERTIES_FILE} is missing but "
            f"{store.url}/{HOODIE_DIR} holds a timeline; the replicator will not create a "
            "new table over it",
            resync_hint(name),
        )


@dataclass
class _Recorded:
    instant: str
    size: int | None
    file_id: str
    base_file: str | None  # a log file's slice base file name; None for a base file


def check(table: Any) -> None:
    """Raise :class:`HudiError` if ``table`` (a :class:`HudiTable`) is damaged (see the
    module doc). Lists ``.hoodie`` and the table folder once, parses the active
    timeline's commit files, opens each recorded data file for its magic.

    On a table whose writer holds its lease (object storage), an unfinished instant
    older than a completed one and data files of instants the timeline does not know
    are what a writer that lost the lease left (it can have committed none of it, and
    the lease's decided commit was completed when it was taken over): the rollback and
    :meth:`~engine.hudi.services.TableServices.drop_orphans` remove them instead."""
    store: Storage = table.store
    fenced = table.epoch is not None
    label = store.name
    hint = resync_hint(label)
    timeline = table.rescan()
    completed = sorted(timeline.completed)
    newest = completed[-1] if completed else ""
    action = timeline.completed.get(newest, "commit")
    for instant in sorted(timeline.pending):
        if instant < newest and not fenced:
            raise HudiError(
                f"table {label}: instant {instant} is unfinished but the later instant "
                f"{newest} completed; its completed commit file ({instant}.{action}) "
                "was deleted or lost, so rows later commits count as applied would be rolled "
                "back",
                hint,
            )

    recorded: dict[str, _Recorded] = {}
    for instant in completed:
        try:
            meta = table.commit_metadata(instant)
        except HudiError as exc:
            raise HudiError(f"table {label}: {exc.message}", hint) from exc
        for name, stat in _stats(label, instant, timeline.completed[instant], meta):
            size = stat.get("fileSizeInBytes")
            recorded[name] = _Recorded(
                instant,
                size if isinstance(size, int) else None,
                str(stat.get("fileId") or ""),
                stat.get("baseFile") if isinstance(stat.get("baseFile"), str) else None,
            )

    known = set(timeline.files)
    first = timeline.first
    present: dict[str, int] = {}
    for info in store.entries():
        name = info.path
        where = f"{table.location}/{name}"
        is_base = BASE_FILE_RE.match(name)
        log_name = None if is_base else LogFileName.parse(name)
        if not is_base and name.endswith(".parquet"):
            # hudi-rs fails every read of a table holding one (format doc 5.3).
            raise HudiError(
                f"table {label}: {where} is a Parquet file that is not a Hudi "
                "base file (a stray file); readers refuse such a table",
                "move it out of the table folder, then start again",
            )
        if not (is_base or log_name):
            continue
        present[name] = info.size
        local = store.local_path(name)
        if is_base:
            written = is_base.group(3)
        else:
            assert log_name is not None
            try:
                if local is not None:
                    written = log_instant(local, log_name)
                else:
                    written = log_instant_in(store, info, log_name)
            except StoreUnavailable:
                raise  # the store, not the file: retried
            except (HudiError, ValueError, OSError, UnicodeDecodeError) as exc:
                raise HudiError(
                    f"table {label}: log file {where} is damaged (its first block "
                    f"cannot be read: {exc}); it was truncated or overwritten",
                    hint,
                ) from exc
        if written not in known and not written < first and not fenced:
            raise HudiError(
                f"table {label}: data file {name} was written by instant {written}, "
                "which the timeline does not know: that instant's commit files were "
                "deleted",
                hint,
            )
        rec = recorded.get(name)
        if rec is not None:
            _check_file(label, where, local, info.size, rec, is_base is not None, hint)

    replaced: set[str] = set()
    for instant in completed:
        meta = table.commit_metadata(instant)
        for ids in (meta.get("partitionToReplaceFileIds") or {}).values():
            replaced.update(ids or [])
    # The current slice of each file group as the commits record it must be there (the
    # cleaner only deletes older slices).
    newest_base: dict[str, tuple[str, str]] = {}
    for name, rec in recorded.items():
        if rec.base_file is None and rec.file_id not in replaced:
            if rec.file_id not in newest_base or rec.instant > newest_base[rec.file_id][0]:
                newest_base[rec.file_id] = (rec.instant, name)
    for file_id, (instant, name) in newest_base.items():
        if name not in present:
            raise HudiError(
                f"table {label}: base file {name} of the current slice of file group "
                f"{file_id} (written by instant {instant}) is missing",
                hint,
            )
        for log_file, rec in recorded.items():
            if rec.base_file == name and log_file not in present:
                raise HudiError(
                    f"table {label}: log file {log_file} of the current slice of file "
                    f"group {file_id} (written by instant {rec.instant}) is missing",
                    hint,
                )


def _stats(table: str, instant: str, action: str, meta: Any) -> list[tuple[str, dict[str, Any]]]:
    """The write stats of one commit, by file name; a commit of the wrong shape raises."""
    bad = HudiError(
        f"table {table}: commit file {instant}.{action} is not commit metadata (damaged)",
        resync_hint(table),
    )
    if not isinstance(meta, dict):
        raise bad
    groups = meta.get("partitionToWriteStats") or {}
    if not isinstance(groups, dict):
        raise bad
    out = []
    for stats in groups.values():
        if not isinstance(stats, list):
            raise bad
        for stat in stats:
            if not isinstance(stat, dict) or not isinstance(stat.get("path"), str):
                raise bad
            out.append((os.path.basename(stat["path"]), stat))
    return out


def _check_file(
    table: str,
    where: str,
    path: Path | None,
    size: int,
    rec: _Recorded,
    is_base: bool,
    hint: str,
) -> None:
    if rec.size is not None and size != rec.size:
        raise HudiError(
            f"table {table}: {where} is {size} bytes but commit {rec.instant} recorded "
            f"{rec.size}: the file was truncated or overwritten",
            hint,
        )
    if path is None:
        # On object storage a put is whole or nothing: a size that matches the commit's
        # is the file the commit wrote (and the magic would cost two requests a file).
        return
    magic = PARQUET_MAGIC if is_base else LOG_MAGIC
    try:
        with open(path, "rb") as f:
            head = f.read(len(magic))
            tail = b""
            if is_base and size >= 2 * len(magic):
                f.seek(-len(magic), os.SEEK_END)
                tail = f.read(len(magic))
    except OSError as exc:
        raise HudiError(f"table {table}: cannot read {path}: {exc}", hint) from exc
    if head != magic or (is_base and tail != magic):
        kind = "Parquet" if is_base else "Hudi log"
        raise HudiError(
            f"table {table}: {path} is not a complete {kind} file (its magic bytes are "
            "wrong): it was truncated or overwritten",
            hint,
        )


def strays(store: Storage) -> list[str]:
    """Names in a table's folder that are neither the format's nor cdcctl's own files
    (readers skip them; the replicator warns and leaves them)."""
    local = store.local_path("")
    # A folder's subfolders count too; an object store has none.
    names = os.listdir(local) if local is not None else [o.path for o in store.entries()]
    out = []
    for name in names:
        if name in KNOWN_NAMES or BASE_FILE_RE.match(name) or LogFileName.parse(name):
            continue
        if name.startswith(".") and name.endswith(".tmp"):
            continue  # a staged file of a crashed write: recovery removes it
        out.append(name)
    return sorted(out)
