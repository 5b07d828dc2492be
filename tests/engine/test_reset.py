"""What resync and delete may remove: one table's folder inside the target, the work
folder's own files, never anything else (links out of the target, the user's files)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.errors import TableNameError
from engine.hudi import LEASE_FILE, HudiView, has_meta_dir
from engine.lock import table_lock_path
from engine.replicator.reset import delete_state, drop_replica, plan_delete
from engine.state import StateStore, store_path
from engine.storage import open_storage
from engine.storage.lease import Lease, lease_holder
from tests.s3_support import s3_settings


def _table(folder: Path) -> None:
    """A folder laid out like a table: data files, .hoodie, cdcctl's lock and sidecars."""
    (folder / ".hoodie" / ".cdcctl" / "tombstones").mkdir(parents=True)
    (folder / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\n")
    (folder / ".hoodie" / ".cdcctl" / "tombstones" / "f.parquet").write_bytes(b"x")
    table_lock_path(folder).write_text("{}")
    (folder / "00000000-0_0-1-1_1.parquet").write_bytes(b"x")


def test_drop_replica_empties_only_that_table_and_keeps_a_held_lock(tmp_path: Path) -> None:
    target = tmp_path / "lake"
    _table(target / "a")
    _table(target / "b")
    assert drop_replica(target, "a", keep_lock=True)
    left = sorted(str(p.relative_to(target / "a")) for p in (target / "a").rglob("*"))
    assert left == [".hoodie", ".hoodie/.cdcctl", ".hoodie/.cdcctl/writer.lock"]
    assert (target / "b" / "00000000-0_0-1-1_1.parquet").exists()
    assert drop_replica(target, "a", keep_lock=False) and not (target / "a").exists()
    assert not drop_replica(target, "a", keep_lock=False)


def test_drop_replica_never_leaves_the_target(tmp_path: Path) -> None:
    target = tmp_path / "lake"
    target.mkdir()
    outside = tmp_path / "precious"
    _table(outside)
    (target / "linked").symlink_to(outside)
    for name in ("linked", "..", "../precious", "a/b", ""):
        with pytest.raises(TableNameError):
            drop_replica(target, name, keep_lock=False)
    assert (outside / "00000000-0_0-1-1_1.parquet").exists()


def test_delete_removes_the_work_folders_own_files_only(tmp_path: Path) -> None:
    # The work folder is the config's own folder here: the user's files stay.
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "^srv\\."},
            "target": {"path": "lake"},
            "replicator": {"work_dir": "."},
            "base_dir": str(tmp_path),
        }
    )
    (tmp_path / "cdcctl.toml").write_text("# mine")
    StateStore(store_path(tmp_path)).close()
    for name in ("staging/t/1", "deadletter"):
        (tmp_path / name).mkdir(parents=True)
    for name in ("cdcctl.log", "cdcctl.log.1", "cdcctl.log.old", "spark.log", "writer.lock"):
        (tmp_path / name).write_text("x")
    _table(tmp_path / "lake" / "srv_t")  # no checkpoint, no state row: not known as ours
    plan = plan_delete(cfg, purge=True)
    assert sorted(p.name for p in plan.work_files) == [
        "cdcctl.log",
        "cdcctl.log.1",
        "deadletter",
        "spark.log",
        "staging",
        "state.db",
        "writer.lock",
    ]
    assert plan.tables == {}
    delete_state(plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdcctl.log.old", "cdcctl.toml", "lake"]


def test_a_store_from_before_resync_accepts_resync_requests(tmp_path: Path) -> None:
    path = store_path(tmp_path)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL "
        "CHECK (kind IN ('pause', 'resume', 'stop')), tbl TEXT, created_at REAL NOT NULL, "
        "done_at REAL, outcome TEXT)"
    )
    db.execute("INSERT INTO requests (kind, tbl, created_at) VALUES ('pause', 'a', 1.0)")
    db.commit()
    db.close()
    store = StateStore(path)
    try:
        ids = store.request("resync", ["a"])
        kinds = [(r.kind, r.table) for r in store.requests([1, *ids])]
        assert kinds == [("pause", "a"), ("resync", "a")]
        with pytest.raises(sqlite3.IntegrityError):
            store.request("explode", [None])
    finally:
        store.close()


def test_drop_replica_in_a_bucket_keeps_the_lease_and_only_that_table(s3) -> None:
    """On object storage a table is a prefix: a drop deletes its objects, properties
    first, and keeps the lease object (epochs only grow); another table stays."""
    target = open_storage(s3_settings(s3, "s3://lake/drop-test/lake"))
    for name in ("a", "b"):
        table = target.under(name)
        table.write(".hoodie/hoodie.properties", b"hoodie.table.name=x\n")
        table.write(".hoodie/.cdcctl/tombstones/f.parquet", b"x")
        table.write("00000000-0_0-1-1_1.parquet", b"x")
    Lease.acquire(target.under("a"), LEASE_FILE, "test").release()
    target.write("user-notes.txt", b"not a table")
    assert HudiView.tables_under(target) == ["a", "b"]  # prefixes with properties
    assert target.folders() == ["a", "b"] and has_meta_dir(target.under("a"))
    assert lease_holder(target.under("a"), LEASE_FILE) is None  # released

    assert drop_replica(target, "a", keep_lock=False)
    assert [o.path for o in target.under("a").list()] == [LEASE_FILE]
    assert not has_meta_dir(target.under("a"))  # the lease alone is no table
    assert HudiView.tables_under(target) == ["b"]
    assert len(target.under("b").list()) == 3 and target.head("user-notes.txt") is not None
    assert not drop_replica(target, "a", keep_lock=False)
    for name in ("..", "a/b", "", "x y/../.."):
        with pytest.raises(TableNameError):
            drop_replica(target, name, keep_lock=False)


def test_lease_holder_names_a_live_holder(s3) -> None:
    table = open_storage(s3_settings(s3, "s3://lake/holder-test/t"))
    lease = Lease.acquire(table, LEASE_FILE, "test")
    try:
        said = lease_holder(table, LEASE_FILE)
        assert said is not None and f"pid {os.getpid()}" in said and "lease renewed at" in said
    finally:
        lease.release()
    assert lease_holder(table, LEASE_FILE) is None
