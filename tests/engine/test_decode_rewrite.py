"""The rewriting decoder (engine/decode/rewrite.py) without Spark: flattened events
(`source.format = "debezium-flat"`) and tables configured with `key_fields` or
`keyless = "full-row"`. What ends up in the replicas is checked by tests/cases/flattened,
tests/cases/keyless and test_keyless_oracle.py; here: positions, accounting, reasons and
config validation."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from engine.config import config_from_dict
from engine.decode import RecordBatch, decoder_for, flat, jsonconverter, rewrite
from engine.errors import ConfigError
from engine.model import COPIES, KEY, OFFSET, OP, POS, POS_SUB, ROW_HASH, STREAMED_BIT
from tests.samples import debezium_samples

TOPIC = "srv.app.items"


#: Target and work folders the decoder tests name but never write.
_NEVER_WRITTEN = str(Path(tempfile.gettempdir()) / "cdcctl-rw")


def _cfg(source: dict | None = None, tables: dict | None = None, tmp: str = _NEVER_WRITTEN):
    data: dict[str, Any] = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ".", **(source or {})},
        "target": {"path": f"{tmp}/lake"},
        "replicator": {"work_dir": f"{tmp}/work"},
    }
    if tables:
        data["tables"] = tables
    return config_from_dict(data)


def _run(cfg, msgs: list[tuple[Any, Any]], offsets: list[int] | None = None):
    enc = [None if v is None else json.dumps(v).encode() for _, v in msgs]
    keys = [None if k is None else json.dumps(k).encode() for k, _ in msgs]
    offs = offsets or [100 + i for i in range(len(msgs))]
    result = decoder_for(cfg)(RecordBatch(TOPIC, keys, enc, [0] * len(msgs), offs))
    rows = result.batch.to_pylist() if result.batch is not None else []
    # Every record is accounted for once (a split update gives two rows of one offset).
    assert len({r[OFFSET] for r in rows}) + len(result.bad) + result.ignored == len(msgs)
    return rows, result


FLAT = {"format": "debezium-flat"}


def test_flattened_positions_ops_and_added_fields() -> None:
    rows, result = _run(
        _cfg(FLAT),
        [
            ({"id": 1}, {"id": 1, "name": "a", "__op": "r", "__lsn": 50, "__table": "items"}),
            ({"id": 1}, {"id": 1, "name": "b", "__op": "u", "__lsn": 70, "__source_ts_ms": 9}),
            ({"id": 2}, {"id": 2, "name": "c", "__deleted": "true", "__lsn": 80}),
            (
                {"id": 3},
                {
                    "id": 3,
                    "name": "m",
                    "__op": "c",
                    "__file": "mysql-bin.000007",
                    "__pos": 300,
                    "__row": 2,
                },
            ),  # fmt: skip
            ({"id": 2}, None),
        ],
    )
    assert result.bad == []
    assert [r[OP] for r in rows] == ["r", "u", "d", "c", "x"]
    assert [(r[POS], r[POS_SUB]) for r in rows[:4]] == [
        (50, 50),  # a snapshot read: no streamed bit
        (STREAMED_BIT | 70, 70),
        (STREAMED_BIT | 80, 80),
        (STREAMED_BIT | 7 << 32 | 300, 2),
    ]
    assert rows[1]["_cdc_source_ts_ms"] == 9
    assert rows[2]["name"] == "c"  # a rewrite delete keeps its before image
    assert not [c for c in result.batch.column_names if c.startswith("__")]
    assert [r[OFFSET] for r in rows] == [100, 101, 102, 103, 104]


def test_flattened_with_schema_types_the_row() -> None:
    sample = json.loads((debezium_samples() / "pg-unwrap-snapshot-with-lsn.json").read_text())
    rows, result = _run(_cfg(FLAT), [({"id": 10003}, sample["value"])])
    assert str(result.batch.schema.field("order_date").type) == "date32[day]"
    assert rows[0]["order_date"].isoformat() == "2016-02-19"
    assert rows[0][POS] == 33832960 and rows[0][OP] == "r"


def test_flattened_order_field_and_refusal() -> None:
    by_time = _cfg({**FLAT, "flattened": {"order_field": "at"}})
    rows, result = _run(
        by_time,
        [
            ({"id": 1}, {"id": 1, "at": "1970-01-01T00:00:01Z", "__op": "c"}),
            ({"id": 1}, {"id": 1, "at": 5, "__op": "u"}),
            ({"id": 1}, {"id": 1, "at": -5, "__op": "u"}),
            ({"id": 1}, {"id": 1, "__op": "u"}),
            ({"id": 1}, {"id": 1, "at": 1.5, "__op": "u"}),
        ],
    )
    assert [r[POS_SUB] for r in rows] == [1_000_000, 5]
    assert [b.offset for b in result.bad] == [102, 103, 104]
    assert "from 0 to 2**62" in result.bad[0].reason and "missing" in result.bad[1].reason

    rows, result = _run(_cfg(FLAT), [({"id": 1}, {"id": 1, "__op": "c"})])
    assert rows == [] and "arrival_order = true" in result.bad[0].reason
    assert "order_field" in result.bad[0].reason

    rows, result = _run(
        _cfg({**FLAT, "flattened": {"arrival_order": True}}),
        [({"id": 1}, {"id": 1, "__op": "c"})],
        offsets=[42],
    )
    assert rows[0][POS_SUB] == 42 and result.bad == []


def test_flattened_garbage_is_bad_not_lost() -> None:
    cfg = _cfg(FLAT)
    keys = [b'{"id":1}', b'{"id":2}', b'{"id":3}']
    values = [b"not json", b"[1,2]", b'{"id":3,"__op":"z","__lsn":1}']
    result = decoder_for(cfg)(RecordBatch(TOPIC, keys, values, [0, 0, 0], [1, 2, 3]))
    assert result.batch is None
    assert [b.offset for b in result.bad] == [1, 2, 3]
    assert "__op is 'z', not one of c, u, r, d" in result.bad[2].reason


def _env(op: str, before: dict | None, after: dict | None, lsn: int) -> dict:
    return {
        "op": op,
        "before": before,
        "after": after,
        "source": {"connector": "postgresql", "lsn": lsn, "snapshot": "false"},
    }


def test_full_row_keys_updates_and_reasons() -> None:
    cfg = _cfg(tables={"app_items": {"keyless": "full-row"}})
    a, a_null, b = {"x": 1, "y": None}, {"x": 1}, {"x": 2, "y": "z"}
    rows, result = _run(
        cfg,
        [
            (None, _env("c", None, a, 10)),
            (None, _env("c", None, a_null, 11)),  # a null column is no part of the identity
            (None, _env("u", a, b, 12)),
            (None, _env("u", b, b, 13)),
            (None, _env("u", None, a, 14)),  # no before image
            (None, _env("d", b, None, 15)),
            (None, None),
        ],
    )
    assert result.ignored == 1
    assert len(result.bad) == 1 and "REPLICA IDENTITY FULL" in result.bad[0].reason
    keys = [r[KEY] for r in rows]
    assert keys[0] == keys[1] == keys[2] != keys[3] == keys[4] == keys[5]
    assert [(r[OP], r[COPIES]) for r in rows] == [
        ("c", 1), ("c", 1), ("d", -1), ("u", 1), ("u", 0), ("d", -1)
    ]  # fmt: skip
    assert rows[2][OFFSET] == rows[3][OFFSET] == 102  # one update, two rows
    assert all(r[ROW_HASH] == r[KEY] for r in rows)


def test_key_fields_build_the_key_from_the_row() -> None:
    cfg = _cfg(tables={"app_items": {"key_fields": ["code", "n"]}})
    rows, result = _run(
        cfg,
        [
            (None, _env("c", None, {"code": "a", "n": 1, "v": "x"}, 10)),
            (None, _env("d", {"code": "a", "n": 1, "v": "x"}, None, 11)),
            (None, _env("c", None, {"code": "b", "v": "x"}, 12)),
            (None, _env("d", None, None, 13)),
        ],
    )
    assert [r[KEY] for r in rows] == ["code:a,n:1", "code:a,n:1"]
    assert result.key_fields == ["code", "n"]
    assert "key field(s) n" in result.bad[0].reason and "tables.app_items" in result.bad[0].reason
    assert "REPLICA IDENTITY FULL" in result.bad[1].reason


def test_other_tables_keep_the_bulk_path() -> None:
    cfg = _cfg(tables={"app_other": {"keyless": "full-row"}})
    rows, result = _run(cfg, [({"id": 1}, _env("c", None, {"id": 1}, 10)), (None, None)])
    assert [r[KEY] for r in rows] == ["1", None] and ROW_HASH not in result.batch.column_names


@pytest.mark.parametrize(
    ("tables", "words"),
    [
        ({"t": {"key_fields": ["a"], "keyless": "full-row"}}, "keep one"),
        ({"t": {"key_fields": []}}, "at least one column"),
        ({"t": {"key_fields": ["a", "a"]}}, "twice"),
        ({"t": {"keyless": "yes"}}, "full-row"),
    ],
)
def test_table_identity_config_is_validated(tables: dict, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(tables=tables)
    assert words in str(info.value) + " ".join(m for _, m, _ in info.value.problems)


def test_flattened_settings_are_validated() -> None:
    with pytest.raises(ConfigError) as info:
        _cfg({**FLAT, "flattened": {"order_fild": "x"}})
    assert any("order_fild" in k for k, _, _ in info.value.problems)
    with pytest.raises(ConfigError) as info:
        _cfg({"flattened": {"arrival_order": True}})
    assert "only read with format" in str(info.value) + str(info.value.problems)


FLAT_CASES = sorted((Path(__file__).resolve().parent.parent / "cases" / "flattened").glob("*.json"))


@pytest.mark.parametrize("path", FLAT_CASES, ids=[p.name for p in FLAT_CASES])
def test_bulk_and_per_record_paths_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Flattened topics are decoded in bulk (rows parsed by the Arrow reader, added fields
    # settled with Arrow kernels); the per-record path (used with key_fields / keyless and
    # for odd layouts) must give the very same batches, bad records and counts.
    case = json.loads(path.read_text())
    cfg = _cfg(case["config"].get("source"))
    for batch in case["batches"]:
        for topic in sorted({m["topic"] for m in batch}):
            msgs = [m for m in batch if m["topic"] == topic]
            keys = [None if m["key"] is None else json.dumps(m["key"]).encode() for m in msgs]
            values = [None if m["value"] is None else json.dumps(m["value"]).encode() for m in msgs]
            assert flat.wrap_flat(values, jsonconverter.Unwrapper()) is not None
            out = []
            for bulk in (True, False):
                monkeypatch.setattr(rewrite, "BULK", bulk)
                r = decoder_for(cfg)(
                    RecordBatch(topic, keys, values, [0] * len(msgs), list(range(len(msgs))))
                )
                out.append(
                    (
                        r.batch.to_pylist() if r.batch is not None else None,
                        r.batch.schema if r.batch is not None else None,
                        [(b.offset, b.reason) for b in r.bad],
                        r.ignored,
                    )
                )
            assert out[0] == out[1], (path.name, topic)
