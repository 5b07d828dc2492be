"""A table whose initial snapshot has been read to its end is REPLICATING, not
SNAPSHOTTING, even before its first change: Debezium marks each table's last snapshot
record ``source.snapshot = "last_in_data_collection"`` (``"last"`` for the snapshot's
very last record). The ``peers`` tier (tests/peers/test_debezium_postgres.py) found a
table with no change after the snapshot left SNAPSHOTTING for good."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.decode import RecordBatch
from engine.decode.debezium_json.decoder import decode_debezium_json
from engine.replicator import Replicator
from engine.state import TableState
from tests import builders
from tests.engine.test_properties import Msg

COLS = [("id", "int32"), ("name", "string")]
TOPIC = "srv.app.items"


def snapshot_value(k: int, mark: str, *, schemas: bool = True) -> bytes:
    message = json.loads(
        builders.value("r", 10 + k, {"id": k, "name": f"n{k}"}, COLS, snapshot=True)
    )
    message["payload"]["source"]["snapshot"] = mark
    return json.dumps(message if schemas else message["payload"]).encode()


@pytest.mark.parametrize("schemas", [True, False])
@pytest.mark.parametrize(
    ("marks", "ended"),
    [
        (["first", "true", "true"], False),
        (["first", "true", "last_in_data_collection"], True),
        (["first", "true", "last"], True),
    ],
)
def test_decoder_tells_a_snapshot_ended(marks: list[str], ended: bool, schemas: bool) -> None:
    values = [snapshot_value(k, m, schemas=schemas) for k, m in enumerate(marks)]
    keys = [builders.key(k) for k in range(len(marks))]
    result = decode_debezium_json(
        RecordBatch(TOPIC, keys, values, [0] * len(marks), list(range(len(marks))))
    )
    assert result.batch is not None and result.batch.num_rows == len(marks)
    assert result.snapshot_ended is ended


@pytest.mark.spark
def test_table_replicating_once_its_snapshot_ended(spark, tmp_path: Path) -> None:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    replicator = Replicator(cfg, spark=spark)

    def snapshot(ks: range, marks: list[str], first: int) -> list[Msg]:
        return [
            Msg(TOPIC, builders.key(k), snapshot_value(k, m), first + i)
            for i, (k, m) in enumerate(zip(ks, marks, strict=True))
        ]

    replicator.apply(snapshot(range(3), ["first", "true", "true"], 0))
    assert replicator.tables[TOPIC].state is TableState.SNAPSHOTTING
    replicator.apply(snapshot(range(3, 5), ["true", "last_in_data_collection"], 3))
    rt = replicator.tables[TOPIC]
    assert rt.state is TableState.REPLICATING and rt.counters.snapshot_rows == 5
