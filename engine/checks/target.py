"""Target checks: the folder can hold the replicas, and the tables already in it are
readable Hudi tables whose checkpoints name the topics that map to them."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.checks.bucket import object_target_checks
from engine.checks.common import topic_selected
from engine.checks.result import Check, failed, passed, warned
from engine.config import Config, folder_problem
from engine.errors import CdcError, TableNameError
from engine.hudi import HudiView, has_meta_dir, ownership
from engine.storage import LocalStorage, Storage

#: Less free space than this is a warning.
MIN_FREE_BYTES = 1 << 30


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor."""
    while not path.exists():
        path = path.parent
    return path


def _gib(n: int) -> str:
    return f"{n / (1 << 30):,.1f} GiB"


def folder_check(name: str, key: str, path: Path) -> Check:
    """A folder the replicator writes to exists (or can be created) and accepts a file."""
    problem = folder_problem(path)
    if problem is not None:
        detail, fix = problem
        return failed(name, detail, f"{fix} ({key})")
    if path.is_dir():
        return passed(name, f"{path} exists and is writable")
    return passed(name, f"{path} will be created ({_existing(path)} is writable)")


def check_target_folder(cfg: Config) -> Check:
    """``target.path`` exists or can be created, and is writable."""
    return folder_check("target.folder", "target.path", cfg.target_path())


def check_free_space(cfg: Config) -> Check:
    """Free space on the target's file system (a warning under 1 GiB)."""
    where = _existing(cfg.target_path())
    if not where.is_dir():
        where = where.parent
    usage = shutil.disk_usage(where)
    detail = f"{_gib(usage.free)} free of {_gib(usage.total)} at {where}"
    if usage.free < MIN_FREE_BYTES:
        return warned(
            "target.free_space",
            detail + " (under 1 GiB)",
            "free space on that file system, or set target.path to a folder on a larger disk",
        )
    return passed("target.free_space", detail)


def check_table(cfg: Config, table: Path | Storage) -> Check:
    """One existing table (a folder, or a bucket's prefix): readable, and its
    checkpoint's topic maps to it."""
    store = table if isinstance(table, Storage) else LocalStorage(Path(table))
    path = store.url
    folder = store.name
    name = f"target.table {folder}"
    try:
        hudi = HudiView.open(store)
        completed = hudi.completed_instants()
        pending = hudi.pending_instants()
        checkpoint = hudi.checkpoint()
    except CdcError as exc:
        return failed(
            name,
            f"not a readable Hudi table: {exc.message}",
            exc.hint or f"move {path} out of target.path",
        )
    except (OSError, ValueError) as exc:
        return failed(name, f"not a readable Hudi table: {exc}", f"move {path} out of target.path")
    found = ownership.findings(store)
    if found:
        return failed(
            name,
            f"another Hudi writer made or changed it: {'; '.join(found)}; `cdcctl start` "
            "will not write into it",
            ownership.advice(folder),
        )
    kind = "Merge-on-Read" if hudi.is_mor else "Copy-on-Write"
    summary = f"{kind}, {len(completed)} completed instants"
    if pending:
        summary += f", {len(pending)} unfinished (rolled back by cdcctl start)"
    if not checkpoint:
        return passed(name, f"{summary}; no checkpoint yet (nothing committed)")
    topic, _, offsets = checkpoint.partition(",")
    summary += f"; checkpoint {topic} {offsets.replace(',', ' ')}"
    try:
        mapped = cfg.table_name(topic)
    except TableNameError:
        mapped = ""
    if mapped != folder:
        return failed(
            name,
            f"{summary}: that topic maps to table {mapped or '(none)'}, not {folder}",
            f"move {path} out of target.path (it was not written for this folder)",
        )
    if not topic_selected(cfg, topic):
        return warned(
            name,
            f"{summary}; {topic} is not selected by source.topics / exclude_topics / "
            "include_tables / exclude_tables, so this table is no longer updated",
            f"include {topic} in source.topics (and the table in source.include_tables), "
            f"or move {path} out of target.path",
        )
    return passed(name, summary)


def target_checks(cfg: Config) -> list[Check]:
    """Every target check, in order."""
    if cfg.target_on_object_storage():
        checks = object_target_checks(cfg)
        if any(c.status == "fail" for c in checks):
            return checks
        bucket = cfg.target_store(patient=False)
        for folder in bucket.folders():
            store = bucket.under(folder)
            if has_meta_dir(store):
                checks.append(check_table(cfg, store))
        return checks
    checks = [check_target_folder(cfg), check_free_space(cfg)]
    target = cfg.target_path()
    if target.is_dir():
        for path in sorted(target.iterdir()):
            if path.is_dir() and has_meta_dir(path):
                checks.append(check_table(cfg, path))
    return checks
