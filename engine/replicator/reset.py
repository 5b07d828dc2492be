"""Dropping what a replicator wrote: one table's replica (resync), or all of its state.

Nothing outside the target and the work folder is ever removed, and inside them only
what cdcctl itself names: a table's folder or prefix is the one
:func:`engine.naming.table_store` gives for its name (a direct child of the target, never
a link out of it), and of the
work folder only the files the replicator writes (:data:`WORK_FILES`), so a work folder
shared with other files (``work_dir = "."``) keeps them.

- :func:`drop_replica` empties one table's folder or prefix; the running replicator uses
  it for a live resync (between batches, holding the table's writer lock, whose file it
  keeps, or its lease, which a bucket always keeps).
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
from engine.hudi import HudiView, drop_objects, has_meta_dir, has_own_dir, ownership
from engine.lock import LOCK_NAME, Locks, table_lock_path
from engine.naming import table_store
from engine.replicator import trimmed
from engine.replicator.known import require_tables
from engine.replicator.tables import table_selected
from engine.source.kafka import topic_matches
from engine.state.control import alive, open_store
from engine.state.recorder import RESYNC_EVENT
from engine.state.store import STORE_NAME
from engine.storage import LocalStorage, Storage

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


def replica_store(target: Storage, name: str) -> Storage:
    """A table's store: in a folder, a direct child of the target and not a link out of
    it; in a bucket, the prefix ``<target>/<name>``.

    Raises:
        TableNameError: the name is not a table name, or its folder is a link.
    """
    local = target.local_path("")
    if local is not None:
        unresolved = local.resolve() / name
        if unresolved.is_symlink():
            raise TableNameError(
                f"{unresolved} is a link, not a table folder cdcctl wrote",
                hint="cdcctl never removes what a link points to; remove it yourself if meant",
            )
    return table_store(target, name)


def drop_replica(target: Path | Storage, name: str, *, keep_lock: bool) -> bool:
    """Empty the folder or prefix of table ``name`` in ``target``; whether there was
    anything.

    In a folder ``keep_lock`` keeps its writer lock file (which the caller holds), else
    the folder goes. In a bucket the lease object always stays: a later writer takes it
    at a higher epoch, so fencing never meets an epoch it saw before.
    ``hoodie.properties`` goes first, so a drop cut short leaves no table but what the
    stray-timeline check names, never a table missing its files.

    Raises:
        TableNameError: the name is not a table name, or its folder is a link.
    """
    if not isinstance(target, Storage):
        target = LocalStorage(Path(target))
    table = replica_store(target, name)
    local = table.local_path("")
    if local is not None:
        if not local.is_dir():
            return False
        if not keep_lock:
            shutil.rmtree(local)
            return True
        _remove_all_but(local, table_lock_path(local))
        return True
    return drop_objects(table)


def _remove_all_but(folder: Path, keep: Path) -> None:
    """Remove everything in ``folder`` but ``keep`` and the folders (not links) holding it."""
    for entry in folder.iterdir():
        if entry in keep.parents and entry.is_dir() and not entry.is_symlink():
            _remove_all_but(entry, keep)
        elif entry != keep:
            _remove(entry)


def resync_offline(cfg: Config, table: str, force: bool = False) -> list[str]:
    """Resync a table with no replicator running: what was removed (folders and
    ``s3://`` prefixes).

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
    work, target = cfg.work_path(), cfg.target_store()
    if alive(work):
        raise StateError(
            f"a replicator runs on {work}", hint="`cdcctl resync` asks it to resync the table"
        )
    store = open_store(work)
    try:
        known = {t["name"]: t["topic"] for t in store.tables()} if store is not None else {}
        folder = replica_store(target, table)
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
            local = folder.local_path("")
            if local.is_dir() if local is not None else has_meta_dir(folder):
                locks.take_table(folder, f"table {table} ({folder.url})")
            # The store first: a crash before the replica is gone leaves the next start
            # counting the commits it still finds.
            if store is not None:
                with store.transaction() as db:
                    store.reset_table(db, table, known.get(table))
                    store.add_event(db, table, "resync", RESYNC_EVENT)
            if drop_replica(target, table, keep_lock=False):
                removed.append(folder.url)
            staging = work / "staging" / table
            if staging.exists():
                shutil.rmtree(staging)
                removed.append(str(staging))
        finally:
            locks.release_all()
    finally:
        if store is not None:
            store.close()
    log.info("%s: resync: replica dropped; the next start reads its topic again", table)
    return removed


def _checkpoint_topic(folder: Storage) -> str | None:
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
    #: With ``purge``: table name -> its folder or prefix.
    tables: dict[str, Storage] = field(default_factory=dict)
    #: With ``purge``: the target they are in.
    target: Storage | None = None

    @property
    def paths(self) -> list[str]:
        return [*map(str, self.work_files), *(t.url for t in self.tables.values())]


def _selects(cfg: Config, topic: str, name: str) -> bool:
    """Whether this config replicates ``topic`` into the table ``name``."""
    try:
        mapped = cfg.table_name(topic)
    except TableNameError:
        return False
    return mapped == name and topic_matches(cfg.source, topic) and table_selected(cfg, name)


def _own_tables(cfg: Config, target: Storage, known: dict[str, str | None]) -> dict[str, Storage]:
    """Tables under the target that this replicator wrote: Hudi tables with cdcctl's own
    metadata folder whose topic (from their checkpoint, else the state store) is one
    this config replicates and maps to that folder."""
    own = {}
    for name in target.folders():
        try:
            folder = replica_store(target, name)
        except TableNameError:
            continue
        if not HudiView.exists(folder) or not has_own_dir(folder):
            continue
        try:
            checkpoint = HudiView.open(folder).checkpoint()
        except HudiError as exc:  # not a table cdcctl can read: not one it wrote
            log.debug("not purging %s: %s", folder.url, exc.message)
            continue
        topic = checkpoint.partition(",")[0] if checkpoint else known.get(name)
        if topic and _selects(cfg, topic, name):
            found = ownership.findings(folder)
            if found:  # made by cdcctl, changed by another writer: not removed
                raise ForeignTableError(
                    f"table {name}: another Hudi writer changed {folder.url}: "
                    f"{'; '.join(found)}; `cdcctl delete --purge` will not remove it",
                    "move the folder out of target.path (or delete it yourself), or run "
                    "`cdcctl delete` without --purge, which removes only the work folder's "
                    "state",
                )
            own[name] = folder
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
        plan.target = cfg.target_store()
        plan.tables = _own_tables(cfg, plan.target, known)
    return plan


def delete_state(plan: DeletePlan) -> list[str]:
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
            locks.take_table(folder, f"table {name} ({folder.url})")
        for name, folder in plan.tables.items():
            assert plan.target is not None  # set with the tables
            drop_replica(plan.target, name, keep_lock=False)
            removed.append(folder.url)
        for path in plan.work_files:
            if path.name != LOCK_NAME and (path.exists() or path.is_symlink()):
                _remove(path)
                removed.append(str(path))
    finally:
        locks.release_all()
    lock = plan.work_dir / LOCK_NAME
    if lock.exists():  # last: it kept a replicator from starting while the rest went
        lock.unlink()
        if lock in plan.work_files:
            removed.append(str(lock))
    if plan.work_dir.is_dir() and not any(plan.work_dir.iterdir()):
        plan.work_dir.rmdir()
    return removed
