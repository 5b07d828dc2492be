"""GTID ordering across a MySQL fail-over, on the real engine (Spark merge, hudi-rs read)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from engine.config import config_from_dict
from engine.decode.gtid import gtid_positions
from engine.model import GTID, POS, POS_SUB, STREAMED_BIT
from engine.replicator import Replicator
from tests.engine.test_properties import Msg
from tests.integration.replicas import read_replica

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "9f2d0c11-1a2b-11ef-8c3d-0242ac120002"
TOPIC = "dbserver1.shop.items"


def _mysql(op: str, row: dict, file: str, pos: int, gtid: str | None) -> bytes:
    source = {
        "connector": "mysql",
        "file": file,
        "pos": pos,
        "row": 0,
        "gtid": gtid,
        "snapshot": "false",
        "server_id": 1,
        "ts_ms": 1_700_000_000_000,
    }
    return json.dumps({"before": None, "after": row, "source": source, "op": op}).encode()


def _failover_stream() -> list[Msg]:
    key = json.dumps({"id": 1}).encode()
    events = [
        _mysql("c", {"id": 1, "v": "a5"}, "mysql-bin.000003", 1000, f"{A}:5"),
        _mysql("u", {"id": 1, "v": "a6"}, "mysql-bin.000003", 2000, f"{A}:6"),
        # Fail-over: the new primary's binlog coordinates are lower than the old one's.
        _mysql("u", {"id": 1, "v": "b1"}, "mysql-bin.000001", 500, f"{B}:1"),
        # A replay from the old primary must stay stale.
        _mysql("u", {"id": 1, "v": "a6"}, "mysql-bin.000003", 2000, f"{A}:6"),
    ]
    return [Msg(TOPIC, key, v, i) for i, v in enumerate(events)]


@pytest.mark.spark
@pytest.mark.parametrize(("gtid", "expected"), [(True, "b1"), (False, "a6")])
def test_failover_applies_new_primary_only_with_gtid_ordering(
    spark, tmp_path: Path, gtid: bool, expected: str
) -> None:
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "mysql_gtid_ordering": gtid,
            },
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    stream = _failover_stream()
    Replicator(cfg, spark=spark).apply(stream[:2])
    # A restart in between: lineages are read back from the commit.
    report = Replicator(cfg, spark=spark).apply(stream[2:])
    rows = read_replica(tmp_path / "lake" / "shop_items")
    # Binlog ordering keeps the old primary's row: the fail-over's change looks late.
    assert rows["1"]["v"] == expected
    assert report.tables["shop_items"]["late"] == (1 if gtid else 2)


def test_lineage_is_a_barrier_and_mariadb_ids_parse() -> None:
    batch = pa.table(
        {
            POS: pa.array([STREAMED_BIT | 5, STREAMED_BIT | 7, 3], pa.int64()),
            POS_SUB: pa.array([0, 1, 0], pa.int64()),
            GTID: pa.array(["0-1-900", "0-2-4", "0-1-1"], pa.string()),
        }
    )
    lineages = ["0-1"]
    out = gtid_positions(batch, lineages)
    pos = out.column(POS).to_pylist()
    assert lineages == ["0-1", "0-2"]
    assert pos[0] == STREAMED_BIT | 900 and pos[1] == STREAMED_BIT | (1 << 40) | 4
    assert pos[1] > pos[0]  # the new origin orders after, whatever its numbers
    assert pos[2] == 3  # a snapshot read keeps its binlog position
    assert out.column(POS_SUB).to_pylist()[:2] == [5 << 20, (7 << 20) | 1]
