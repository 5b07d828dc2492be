"""Delete tombstones are part of the commit: a missing or unreadable sidecar is an error.

A commit records which file groups it gave a tombstone sidecar; the next write of such a
group finds the sidecar or stops the table, instead of taking "no sidecar" for "no
tombstones" (which would let a late event resurrect a deleted row).
"""

from __future__ import annotations

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
