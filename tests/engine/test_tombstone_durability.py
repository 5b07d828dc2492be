"""Delete tombstones are part of the commit: a missing or unreadable sidecar is an error.

A commit records which file groups it gave a tombstone sidecar; the next write of such a
group finds the sidecar or stops the table, instead of taking "no sidecar" for "no
tombstones" (which would let a late event resurrect a deleted row).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.hudi import options as o
from engine.hudi import tombstones
from engine.hudi.table import HudiTable
from engine.replicator import Replicator
from tests import builders
from tests.engine.test_properties import Msg

pytestmark = [pytest.mark.spark]

TOPIC = "srv.app.t"
COLUMNS = [("id", "int32"), ("name", "string")]


def _msg(offset: int, op: str, k: int, lsn: int) -> Msg:
    after = None if op == "d" else {"id": k, "name": f"n{lsn}"}
    return Msg(TOPIC, builders.key(k), builders.value(op, lsn, after, COLUMNS), offset)


def _replicator(tmp_path: Path, spark) -> Replicator:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 1},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    return Replicator(cfg, spark=spark)


def _with_a_tombstone(tmp_path: Path, spark) -> tuple[Replicator, Path]:
    replicator = _replicator(tmp_path, spark)
    replicator.apply([_msg(i, "c", i, 10 + i) for i in range(3)])
    replicator.apply([_msg(3, "d", 0, 20)])
    table = HudiTable.open(tmp_path / "lake" / "app_t")
    newest = table.completed_instants()[-1]
    recorded = table.commit_metadata(newest)["extraMetadata"][o.TOMBSTONES_KEY]
    (group,) = table.file_groups().values()
    assert recorded == group.file_id
    sidecar = tombstones.sidecar_path(table.base_path, group.file_id, newest)
    assert sidecar.is_file()
    return replicator, sidecar


def test_a_missing_sidecar_stops_the_table(tmp_path: Path, spark) -> None:
    replicator, sidecar = _with_a_tombstone(tmp_path, spark)
    sidecar.unlink()
    replicator.apply([_msg(4, "c", 7, 30)])
    (failed,) = replicator.failing()
    assert f"the tombstone sidecar {sidecar}" in (failed.error or "")
    assert "is missing" in (failed.error or "")


def test_an_unreadable_sidecar_is_an_error(tmp_path: Path, spark) -> None:
    replicator, sidecar = _with_a_tombstone(tmp_path, spark)
    sidecar.chmod(0o644)
    sidecar.write_bytes(b"not parquet")
    with pytest.raises(Exception, match="is unreadable"):
        replicator.apply([_msg(4, "c", 7, 30)])


def test_groups_without_tombstones_record_none(tmp_path: Path, spark) -> None:
    replicator = _replicator(tmp_path, spark)
    replicator.apply([_msg(i, "c", i, 10 + i) for i in range(3)])
    table = HudiTable.open(tmp_path / "lake" / "app_t")
    newest = table.completed_instants()[-1]
    assert table.commit_metadata(newest)["extraMetadata"][o.TOMBSTONES_KEY] == ""


def test_a_commit_makes_its_files_durable_before_it_appears(
    tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge tasks write data files and sidecars unsynced; the commit fsyncs each of
    them, their folders and the table folder in one round before its instant appears."""
    import engine.hudi.table as table_module

    rounds: list[tuple[set[Path], set[str]]] = []
    real = table_module.fsync_all

    def recording(paths):
        paths = [Path(p) for p in paths]
        hoodie = tmp_path / "lake" / "app_t" / ".hoodie"
        rounds.append((set(paths), {n for n in os.listdir(hoodie) if n.endswith("commit")}))
        real(paths)

    replicator = _replicator(tmp_path, spark)
    replicator.apply([_msg(i, "c", i, 10 + i) for i in range(3)])
    rounds.clear()
    monkeypatch.setattr(table_module, "fsync_all", recording)
    replicator.apply([_msg(3, "d", 0, 20), _msg(4, "c", 9, 21)])
    table = HudiTable.open(tmp_path / "lake" / "app_t")
    first, newest = table.completed_instants()
    stats = table.commit_metadata(newest)["partitionToWriteStats"]
    written = {table.base_path / s["path"] for group in stats.values() for s in group}
    (group,) = table.file_groups().values()
    sidecar = tombstones.sidecar_path(table.base_path, group.file_id, newest)
    assert written and sidecar.is_file()
    assert len(rounds) == 1
    ((synced, commits_then),) = rounds
    assert written | {sidecar, sidecar.parent, table.base_path} <= synced
    # Synced while only the first commit had appeared.
    assert {n.split(".")[0] for n in commits_then} == {first}


def test_fsync_all_tries_every_path_and_raises_the_first_error(tmp_path: Path) -> None:
    from engine.files import fsync_all

    files = [tmp_path / f"f{i}" for i in range(5)]
    for f in files:
        f.write_bytes(b"x")
    fsync_all([*files, tmp_path])
    with pytest.raises(FileNotFoundError):
        fsync_all([*files, tmp_path / "missing"])
