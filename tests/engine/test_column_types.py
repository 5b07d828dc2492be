"""Every column type the decoder produces replicates, in both table types.

One PostgreSQL table with the types Debezium sends as JsonConverter messages (with the
Connect schemas of a PostgreSQL connector: time, time with zone, numeric(40,2), variable
scale numeric, geometry, point, hstore as a map, interval, uuid, json, text arrays,
zoned timestamps), replicated through the real engine (Spark merge, Hudi writer) and
read back by hudi-rs. A second batch adds one such column to existing rows.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pytest

from engine.config import config_from_dict
from engine.naming import table_name_for_topic
from engine.replicator import Replicator
from tests.engine.test_properties import Msg
from tests.integration.replicas import read_replica

pytestmark = [pytest.mark.spark]

TOPIC = "srv.app.kinds"


def _field(name: str, typ: str, semantic: str | None = None, **extra) -> dict:
    out = {"type": typ, "optional": True, "field": name, **extra}
    if semantic:
        out["name"] = semantic
    return out


def _unscaled(n: int) -> str:
    """Connect's Decimal wire form: the unscaled value, big-endian two's complement, base64."""
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


#: numeric(40,2) values: 40 digits, more than Spark's 38 (unscaled, scale 2).
BIG = 1234567890123456789012345678901234567890


def _geometry(name: str, semantic: str, *fields: dict) -> dict:
    return {
        "type": "struct",
        "optional": True,
        "field": name,
        "name": semantic,
        "fields": list(fields),
    }


ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    _field("t", "int64", "io.debezium.time.MicroTime"),
    _field("ttz", "string", "io.debezium.time.ZonedTime"),
    _field(
        "big",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        parameters={"scale": "2", "connect.decimal.precision": "40"},
    ),
    _geometry(
        "vs",
        "io.debezium.data.VariableScaleDecimal",
        {"type": "int32", "optional": False, "field": "scale"},
        {"type": "bytes", "optional": False, "field": "value"},
    ),
    _geometry(
        "geom",
        "io.debezium.data.geometry.Geometry",
        {"type": "bytes", "optional": False, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ),
    _geometry(
        "pt",
        "io.debezium.data.geometry.Point",
        {"type": "double", "optional": False, "field": "x"},
        {"type": "double", "optional": False, "field": "y"},
        {"type": "bytes", "optional": True, "field": "wkb"},
        {"type": "int32", "optional": True, "field": "srid"},
    ),
    {
        "type": "map",
        "optional": True,
        "field": "tags",
        "keys": {"type": "string", "optional": False},
        "values": {"type": "string", "optional": True},
    },
    _field("dur", "int64", "io.debezium.time.MicroDuration"),
    _field("uid", "string", "io.debezium.data.Uuid"),
    _field("doc", "string", "io.debezium.data.Json"),
    {
        "type": "array",
        "optional": True,
        "field": "words",
        "items": {"type": "string", "optional": True},
    },
    _field("at", "string", "io.debezium.time.ZonedTimestamp"),
]

WKB = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # POINT(1 2)


def _after(i: int) -> dict:
    return {
        "id": i,
        "t": (13 * 3600 + 14 * 60 + 15) * 1_000_000 + 123_456,
        "ttz": "13:14:15.123456Z",
        "big": _unscaled(BIG + i),
        "vs": {"scale": 3, "value": _unscaled(-1234)},
        "geom": {"wkb": base64.b64encode(WKB).decode(), "srid": 4326},
        "pt": {"x": 1.5, "y": -2.25, "wkb": None, "srid": None},
        "tags": {"a": str(i), "b": None},
        "dur": 90_061_000_001,
        "uid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "doc": json.dumps({"k": [1, 2, i]}),
        "words": ["x", None, "ü"],
        "at": "2024-03-04T05:06:07.654321Z",
    }


def _expected(i: int) -> dict:
    return {
        "id": i,
        "t": dt.time(13, 14, 15, 123456),
        "ttz": dt.time(13, 14, 15, 123456),  # ZonedTime: a time of day in UTC
        # Wider than Spark's 38 digits: exact text.
        "big": f"{(BIG + i) // 100}.{(BIG + i) % 100:02d}",
        "vs": "-1.234",
        "geom": {"wkb": WKB, "srid": 4326},
        "pt": {"x": 1.5, "y": -2.25, "wkb": None, "srid": None},
        "tags": [("a", str(i)), ("b", None)],
        "dur": 90_061_000_001,
        "uid": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "doc": json.dumps({"k": [1, 2, i]}),
        "words": ["x", None, "ü"],
        "at": dt.datetime(2024, 3, 4, 5, 6, 7, 654321, tzinfo=dt.UTC),
    }


def _message(i: int, lsn: int, fields: list[dict], after: dict) -> tuple[bytes, bytes]:
    key = {
        "schema": {"type": "struct", "name": "K", "optional": False, "fields": [ROW_FIELDS[0]]},
        "payload": {"id": i},
    }
    row = {"type": "struct", "optional": True, "name": "V", "fields": fields}
    source = [
        {"type": "int64", "optional": True, "field": "lsn"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ]
    schema = {
        "type": "struct",
        "name": "srv.app.kinds.Envelope",
        "optional": False,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "optional": False, "name": "S", "fields": source, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    payload = {
        "before": None,
        "after": after,
        "source": {"lsn": lsn, "ts_ms": 1_700_000_000_000 + lsn},
        "op": "c",
    }
    return json.dumps(key).encode(), json.dumps({"schema": schema, "payload": payload}).encode()


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_every_decoded_type_replicates(spark, tmp_path: Path, table_type: str) -> None:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 2, "table_type": table_type},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    replicator = Replicator(cfg, spark=spark)
    # First batch: the id and a few plain columns; the second adds every other type to
    # a table that exists (the schema-evolution path), and updates the first rows.
    plain = ["id", "uid", "doc"]
    first = [
        _message(
            i,
            10 + i,
            [f for f in ROW_FIELDS if f["field"] in plain],
            {k: v for k, v in _after(i).items() if k in plain},
        )
        for i in range(3)
    ]
    second = [_message(i, 100 + i, ROW_FIELDS, _after(i)) for i in range(6)]
    for offset, batch in ((0, first), (3, second)):
        report = replicator.apply([Msg(TOPIC, k, v, offset + n) for n, (k, v) in enumerate(batch)])
        assert not replicator.failing(), [s.error for s in replicator.failing()]
        assert report.messages == len(batch)
    rows = read_replica(tmp_path / "lake" / table_name_for_topic(TOPIC))
    assert sorted(rows) == [str(i) for i in range(6)]
    for i in range(6):
        got = {k: v for k, v in rows[str(i)].items() if k in _expected(i)}
        assert got == _expected(i), i


def test_a_map_with_integer_keys_is_stored_as_its_entries(spark, tmp_path: Path) -> None:
    # Hudi (Avro) maps have string keys only: a Connect map with integer keys is kept as
    # its entries, list<struct<key, value>> (the form the AvroConverter writes).
    odd = [
        ROW_FIELDS[0],
        {
            "type": "map",
            "optional": True,
            "field": "m",
            "keys": {"type": "int32", "optional": False},
            "values": {"type": "string", "optional": True},
        },
    ]
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 2, "table_type": "COPY_ON_WRITE"},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    replicator = Replicator(cfg, spark=spark)
    good = [_message(i, 10 + i, ROW_FIELDS, _after(i)) for i in range(2)]
    bad = [_message(i, 10 + i, odd, {"id": i, "m": [[1, "x"]]}) for i in range(2)]
    records = [Msg(TOPIC, k, v, n) for n, (k, v) in enumerate(good)]
    records += [Msg("srv.app.odd", k, v, n) for n, (k, v) in enumerate(bad)]
    replicator.apply(records)
    assert not replicator.failing(), [s.error for s in replicator.failing()]
    stored = read_replica(tmp_path / "lake" / "app_odd")
    assert {k: r["m"] for k, r in stored.items()} == {
        "0": [{"key": 1, "value": "x"}],
        "1": [{"key": 1, "value": "x"}],
    }
    rows = read_replica(tmp_path / "lake" / table_name_for_topic(TOPIC))
    assert sorted(rows) == ["0", "1"]
