"""Dropping what a replicator wrote: one table's replica (resync), or all of its state.

Nothing outside the target and the work folder is ever removed, and inside them only
what cdcctl itself names: a table's folder is the one :func:`engine.naming.table_path`
gives for its name (a direct child of the target, never a link out of it), and of the
work folder only the files the replicator writes (:data:`WORK_FILES`), so a work folder
shared with other files (``work_dir = "."``) keeps them.

- :func:`drop_replica` empties one table's folder; the running replicator uses it for a
  live resync (between batches, holding the table's writer lock, whose file it keeps).
- :func:`resync_offline` does a resync without a running replicator: under the work
  folder's and the table's writer locks it removes the folder, the table's staging files
  and resets its row in the state store, so the next ``cdcctl start`` reads its topic
  from the beginning.
- :func:`plan_delete` lists what ``cdcctl delete`` removes (the state; with ``purge``
  also the tables this replicator wrote) and :func:`delete_state` removes it.
"""

from __future__ import annotations

import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import LOG_NAME, Config
from engine.errors import ForeignTableError, HudiError, StateError, TableNameError
from engine.hudi import HudiView, ownership
from engine.lock import LOCK_NAME, Locks, table_lock_path
from engine.naming import table_path
from engine.replicator import trimmed
from engine.replicator.known import require_tables
from engine.replicator.tables import table_selected
from engine.source.kafka import topic_matches
from engine.state.control import alive, open_store
from engine.state.recorder import RESYNC_EVENT
from engine.state.store import STORE_NAME

log = logging.getLogger("cdcctl.replicator")

#: The work folder's own entries: the state store and its WAL files, the writer lock,
#: staged events, dead letters, Spark's output, the log file (rotated ones match too).
WORK_FILES = (
    STORE_NAME,
    f"{STORE_NAME}-wal",
    f"{STORE_NAME}-shm",
    LOCK_NAME,
    "staging",
    "deadletter",
    "spark.log",
)
_LOG_FILES = re.compile(rf"^{re.escape(LOG_NAME)}(\.\d+)?$")


def _remove(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a folder tree."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def replica_folder(target: Path, name: str) -> Path:
    """A table's folder: a direct child of the target, and not a link out of it.

    Raises:
        TableNameError: the name is not a table name, or its folder is a link.
    """
    unresolved = target.resolve() / name
    if unresolved.is_symlink():
        raise TableNameError(
            f"{unresolved} is a link, not a table folder cdcctl wrote",
            hint="cdcctl never removes what a link points to; remove it yourself if meant",
        )
    return table_path(target, name)


def drop_replica(target: Path, name: str, *, keep_lock: bool) -> bool:
    """Empty a table's folder (``keep_lock``: all but its writer lock file, which the
    caller holds); whether there was anything."""
    folder = replica_folder(target, name)
    if not folder.is_dir():
        return False
    lock = table_lock_path(folder)
    if not keep_lock:
        shutil.rmtree(folder)
        return True
    _remove_all_but(folder, lock)
    return True


def _remove_all_but(folder: Path, keep: Path) -> None:
    """Remove everything in ``folder`` but ``keep`` and the folders (not links) holding it."""
    for entry in folder.iterdir():
        if entry in keep.parents and entry.is_dir() and not entry.is_symlink():
            _remove_all_but(entry, keep)
        elif entry != keep:
            _remove(entry)


def resync_offline(cfg: Config, table: str, force: bool = False) -> list[Path]:
    """Resync a table with no replicator running: what was removed.

    Refused when its topic was trimmed past what rebuilds it whole, unless ``force``
    (:func:`engine.replicator.trimmed.guard`).

    A table known only by its dead letters (no row in the state store, no replica) has
    nothing to drop: nothing is removed and the list is empty, as it is for a table whose
    replica is already gone.

    Raises:
        UnknownTableError: no such table is known (:func:`~engine.replicator.known.require_tables`).
        StateError: a replicator runs on the work folder, or the rebuild would be partial.
        ForeignTableError: another Hudi writer made or changed the table (nothing removed).
        WriterLockError: a replicator took the work folder or the table meanwhile.
    """
    require_tables(cfg, [table])
    work, target = cfg.work_path(), cfg.target_path()
    if alive(work):
        raise StateError(
            f"a replicator runs on {work}", hint="`cdcctl resync` asks it to resync the table"
        )
    store = open_store(work)
    try:
        known = {t["name"]: t["topic"] for t in store.tables()} if store is not None else {}
        folder = replica_folder(target, table)
        if table not in known and not HudiView.exists(folder):
            log.info("%s: resync: no replica and no state to drop (dead letters only)", table)
            return []
        ownership.check(folder, table)  # never removed: another writer's data may be there
        topic = known.get(table) or _checkpoint_topic(folder)
        if topic:  # refused here when the rebuild would be partial (unless forced)
            trimmed.guard(cfg, table, topic, folder, force=force)
        locks = Locks()
        removed = []
        try:
            locks.take(work / LOCK_NAME, f"the work folder {work}")
            if folder.is_dir():
                locks.take(table_lock_path(folder), f"table {table} ({folder})")
            # The store first: a crash before the replica is gone leaves the next start
            # counting the commits it still finds.
            if store is not None:
                with store.transaction() as db:
                    store.reset_table(db, table, known.get(table))
                    store.add_event(db, table, "resync", RESYNC_EVENT)
            if drop_replica(target, table, keep_lock=False):
                removed.append(folder)
            staging = work / "staging" / table
            if staging.exists():
                shutil.rmtree(staging)
                removed.append(staging)
        finally:
            locks.release_all()
    finally:
        if store is not None:
            store.close()
    log.info("%s: resync: replica dropped; the next start reads its topic again", table)
    return removed


def _checkpoint_topic(folder: Path) -> str | None:
    """The topic a table's checkpoint names (None: none, or not a table cdcctl reads)."""
    if not HudiView.exists(folder):
        return None
    try:
        checkpoint = HudiView.open(folder).checkpoint()
    except HudiError:
        return None
    return checkpoint.partition(",")[0] if checkpoint else None


@dataclass
class DeletePlan:
    """What ``cdcctl delete`` removes."""

    work_dir: Path
    #: The work folder's own files and folders.
    work_files: list[Path] = field(default_factory=list)
    #: With ``purge``: table name -> folder.
    tables: dict[str, Path] = field(default_factory=dict)

    @property
    def paths(self) -> list[Path]:
        return [*self.work_files, *self.tables.values()]


def _selects(cfg: Config, topic: str, name: str) -> bool:
    """Whether this config replicates ``topic`` into the table ``name``."""
    try:
        mapped = cfg.table_name(topic)
    except TableNameError:
        return False
    return mapped == name and topic_matches(cfg.source, topic) and table_selected(cfg, name)


def _own_tables(cfg: Config, known: dict[str, str | None]) -> dict[str, Path]:
    """Tables under the target that this replicator wrote: Hudi tables with cdcctl's own
    metadata folder whose topic (from their checkpoint, else the state store) is one
    this config replicates and maps to that folder."""
    target = cfg.target_path()
    if not target.is_dir():
        return {}
    own = {}
    for entry in sorted(target.iterdir()):
        try:
            folder = replica_folder(target, entry.name)
        except TableNameError:
            continue
        if not HudiView.exists(folder) or not table_lock_path(folder).parent.is_dir():
            continue
        try:
            checkpoint = HudiView.open(folder).checkpoint()
        except HudiError as exc:  # not a table cdcctl can read: not one it wrote
            log.debug("not purging %s: %s", folder, exc.message)
            continue
        topic = checkpoint.partition(",")[0] if checkpoint else known.get(entry.name)
        if topic and _selects(cfg, topic, entry.name):
            found = ownership.findings(folder)
            if found:  # made by cdcctl, changed by another writer: not removed
                raise ForeignTableError(
                    f"table {entry.name}: another Hudi writer changed {folder}: "
                    f"{'; '.join(found)}; `cdcctl delete --purge` will not remove it",
                    "move the folder out of target.path (or delete it yourself), or run "
                    "`cdcctl delete` without --purge, which removes only the work folder's "
                    "state",
                )
            own[entry.name] = folder
    return own


def plan_delete(cfg: Config, purge: bool) -> DeletePlan:
    """What ``cdcctl delete`` (``purge``: with the tables) would remove.

    Raises:
        StateError: a replicator runs on the work folder.
    """
    work = cfg.work_path()
    if alive(work):
        raise StateError(
            f"a replicator runs on {work}", hint="stop it first: `cdcctl stop`, then delete"
        )
    plan = DeletePlan(work)
    if work.is_dir():
        plan.work_files = sorted(
            p for p in work.iterdir() if p.name in WORK_FILES or _LOG_FILES.match(p.name)
        )
    if purge:
        store = open_store(work)
        try:
            known = {t["name"]: t["topic"] for t in store.tables()} if store is not None else {}
        finally:
            if store is not None:
                store.close()
        plan.tables = _own_tables(cfg, known)
    return plan


def delete_state(plan: DeletePlan) -> list[Path]:
    """Remove what :func:`plan_delete` listed, under the writer locks; what was removed.

    The work folder itself goes too when nothing else is left in it.

    Raises:
        WriterLockError: a replicator took the work folder or a table meanwhile.
    """
    locks = Locks()
    removed = []
    try:
        if plan.work_dir.is_dir():
            locks.take(plan.work_dir / LOCK_NAME, f"the work folder {plan.work_dir}")
        for name, folder in plan.tables.items():
            locks.take(table_lock_path(folder), f"table {name} ({folder})")
        for name, folder in plan.tables.items():
            drop_replica(folder.parent, name, keep_lock=False)
            removed.append(folder)
        for path in plan.work_files:
            if path.name != LOCK_NAME and (path.exists() or path.is_symlink()):
                _remove(path)
                removed.append(path)
    finally:
        locks.release_all()
    lock = plan.work_dir / LOCK_NAME
    if lock.exists():  # last: it kept a replicator from starting while the rest went
        lock.unlink()
        if lock in plan.work_files:
            removed.append(lock)
    if plan.work_dir.is_dir() and not any(plan.work_dir.iterdir()):
        plan.work_dir.rmdir()
    return removed
