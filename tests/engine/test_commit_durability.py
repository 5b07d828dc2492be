"""What a commit makes durable before it makes a batch visible.

The merge tasks write each data file and tombstone sidecar's content durably but leave
their folders' entries to the commit: one folder sync for all of a batch's files instead
of one per file. A power loss cannot be caused here, so the test spies on the real
``fsync`` calls of the driver through the table's store (each still runs) and checks
their order against the moment the completed instant appears.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.files import fsync as real_fsync
from engine.hudi import tombstones
from engine.replicator import Replicator
from engine.storage import local as local_storage
from tests import builders
from tests.engine.test_properties import Msg

TOPIC = "srv.app.t"
COLUMNS = [("id", "int32"), ("name", "string")]


def _msg(i: int, lsn: int, op: str, offset: int) -> Msg:
    after = None if op == "d" else {"id": i, "name": f"n{i}"}
    return Msg(TOPIC, builders.key(i), builders.value(op, lsn, after, COLUMNS), offset)


@pytest.mark.spark
@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_folders_are_synced_before_the_commit_names_their_files(
    tmp_path: Path, spark, monkeypatch, table_type: str
) -> None:
    lake = tmp_path / "lake"
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(lake)},
            "hudi": {"table_type": table_type, "num_buckets": 2},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    replicator = Replicator(cfg, spark=spark)
    replicator.apply([_msg(i, 10 + i, "c", i) for i in range(20)])
    table = next(p for p in lake.iterdir() if p.is_dir())
    hoodie = table / ".hoodie"
    completed_before = {p.name for p in hoodie.iterdir()}

    synced: list[tuple[Path, set[str]]] = []  # (path, completed instants at that moment)

    def spy(path: Path) -> None:
        synced.append((Path(path), {p.name for p in hoodie.iterdir()}))
        real_fsync(path)

    # The table's files are synced through its store (engine.storage.local).
    monkeypatch.setattr(local_storage, "fsync", spy)
    # Deletes in both buckets: every touched group gets a tombstone sidecar.
    replicator.apply([_msg(i, 100 + i, "d", 20 + i) for i in range(0, 20, 3)])
    completed = {p.name for p in hoodie.iterdir()} - completed_before
    [commit] = [n for n in completed if n.endswith((".commit", ".deltacommit"))]
    instant = commit.split(".")[0]
    before_commit = [path for path, seen in synced if commit not in seen]
    sidecars = sorted(tombstones.folder(table).glob(f"*_{instant}.parquet"))
    assert sidecars, "the deletes left no tombstone sidecar"
    assert tombstones.folder(table) in before_commit
    assert table in before_commit
    stats = json.loads((hoodie / commit).read_text())["partitionToWriteStats"][""]
    data_files = [table / s["path"] for s in stats]
    assert data_files and all(p in before_commit for p in data_files)
