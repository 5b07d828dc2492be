"""Tests of engine.hudi.schema: the Avro mapping as hudi-rs reads it back."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from pathlib import Path

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import HudiError
from engine.hudi.bucket_index import bucket_file_id
from engine.hudi.commit import WriteStat
from engine.hudi.file_slice import base_file_name
from engine.hudi.schema import (
    HOODIE_META_COLUMNS,
    arrow_schema_from_b64,
    arrow_schema_to_b64,
    avro_schema,
    avro_schema_json,
    conform,
    decimal_fixed_size,
    storage_type,
)
from engine.hudi.table import HudiTable

UTC = dt.UTC

# Every supported type, with edge values. Second element: the type hudi-rs 0.5.0
# returns for it (found by running it); None means "the same type".
TYPED_COLUMNS: list[tuple[str, pa.Array, pa.DataType | None]] = [
    ("i8", pa.array([-128, None, 127], pa.int8()), pa.int32()),
    ("i16", pa.array([-32768, 5, None], pa.int16()), pa.int32()),
    ("i32", pa.array([2**31 - 1, None, -(2**31)], pa.int32()), None),
    ("i64", pa.array([2**63 - 1, -1, None], pa.int64()), None),
    ("f32", pa.array([1.5, None, -0.25], pa.float32()), None),
    ("f64", pa.array([2.25, -0.0, None], pa.float64()), None),
    ("flag", pa.array([True, None, False]), None),
    ("s", pa.array(["x", None, "😀é"]), None),
    ("ls", pa.array(["é", "", None], pa.large_string()), pa.string()),
    ("bin", pa.array([b"\x00\x01", None, b""], pa.binary()), None),
    ("d", pa.array([dt.date(2024, 2, 29), None, dt.date(1, 1, 1)], pa.date32()), None),
    (
        "ts",
        pa.array(
            [dt.datetime(2024, 1, 1, 12, 0, 0, 123456), None, dt.datetime(1969, 12, 31)],
            pa.timestamp("us"),
        ),
        pa.timestamp("us", tz="UTC"),
    ),
    (
        "tsz",
        pa.array(
            [
                dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
                None,
                dt.datetime(1900, 1, 1, tzinfo=UTC),
            ],
            pa.timestamp("us", tz="UTC"),
        ),
        None,
    ),
    (
        "dec",
        pa.array(
            [decimal.Decimal("12345678.90"), decimal.Decimal("-0.01"), None], pa.decimal128(10, 2)
        ),
        None,
    ),
    (
        "dec38",
        pa.array(
            [decimal.Decimal("9" * 38), None, decimal.Decimal("-" + "9" * 38)], pa.decimal128(38, 0)
        ),
        None,
    ),
    (
        "dec1",
        pa.array([decimal.Decimal("9"), None, decimal.Decimal("-9")], pa.decimal128(1, 0)),
        None,
    ),
    ("li", pa.array([[1, 2, None], None, []], pa.list_(pa.int64())), None),
    ("lstr", pa.array([["a"], [], None], pa.list_(pa.string())), None),
]


def write_table(base: Path, data: pa.Table) -> None:
    """Create a table holding ``data`` in one commit, as the merge would."""
    table = HudiTable.create(base, "types", ["s"], "i64", 1, data.schema)
    instant = table.new_instant_time()
    table.start_commit(instant)
    file_id = bucket_file_id(0)
    name = base_file_name(file_id, "0-1-0", instant)
    n = data.num_rows
    meta = [
        pa.array([instant] * n),
        pa.array([f"{instant}_0_{i}" for i in range(n)]),
        pa.array([str(i) for i in range(n)]),
        pa.array([""] * n),
        pa.array([name] * n),
    ]
    full = pa.Table.from_arrays(
        meta + data.columns, names=[*HOODIE_META_COLUMNS, *data.column_names]
    )
    path = table.base_file_path(name)
    pq.write_table(full, path)
    size = path.stat().st_size
    table.commit(
        instant, [WriteStat(file_id, name, "null", n, 0, 0, n, size, size)], data.schema, {}
    )


def test_hudi_rs_reads_every_type(tmp_path: Path) -> None:
    data = pa.table({name: arr for name, arr, _ in TYPED_COLUMNS})
    write_table(tmp_path / "types", data)
    reader = hudi.HudiTable(str(tmp_path / "types"))
    out = pa.Table.from_batches(reader.read())
    assert out.column_names == [*HOODIE_META_COLUMNS, *data.column_names]
    for name, arr, read_type in TYPED_COLUMNS:
        expected_type = read_type or arr.type
        assert out.schema.field(name).type == expected_type, name
        # Values are unchanged; only the type label may differ (e.g. tz=UTC added).
        if pa.types.is_timestamp(arr.type):
            got = out[name].cast(pa.int64()).to_pylist()
            assert got == arr.cast(pa.int64()).to_pylist(), name
        else:
            assert out[name].cast(arr.type).combine_chunks().equals(arr), name
    assert reader.get_schema().names == data.column_names

    # conform() restores the exact Arrow schema stored in cdcctl.arrow_schema.
    stored = HudiTable.open(tmp_path / "types").arrow_schema()
    assert stored == data.schema
    restored = conform(out, stored)
    assert restored.select(data.column_names).equals(data)
    assert restored.column_names[:5] == list(HOODIE_META_COLUMNS)


def test_decimal_fixed_size_matches_parquet(tmp_path: Path) -> None:
    # Sizes that Avro/Parquet specify for FIXED_LEN_BYTE_ARRAY decimals.
    assert [decimal_fixed_size(p) for p in (1, 2, 3, 4, 9, 10, 18, 19, 38)] == [
        1,
        1,
        2,
        2,
        4,
        5,
        8,
        9,
        16,
    ]
    # And what pyarrow actually writes.
    for precision in range(1, 39):
        path = tmp_path / f"d{precision}.parquet"
        pq.write_table(pa.table({"x": pa.array([None], pa.decimal128(precision, 0))}), path)
        column = pq.ParquetFile(path).schema.column(0)
        assert column.physical_type == "FIXED_LEN_BYTE_ARRAY"
        assert column.length == decimal_fixed_size(precision), precision


def test_avro_schema_shape() -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("price", pa.decimal128(10, 2)),
            ("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
        ]
    )
    parsed = json.loads(avro_schema_json(schema, "orders"))
    assert parsed == avro_schema(schema, "orders")
    assert parsed["type"] == "record"
    assert parsed["name"] == "orders_record"
    assert parsed["namespace"] == "hoodie.orders"
    assert [f["name"] for f in parsed["fields"]] == ["id", "price", "tags"]
    assert all(f["default"] is None and f["type"][0] == "null" for f in parsed["fields"])
    assert parsed["fields"][0]["type"] == ["null", "long"]
    price = parsed["fields"][1]["type"][1]
    assert price == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.orders.orders_record.price",
        "size": 5,
        "logicalType": "decimal",
        "precision": 10,
        "scale": 2,
    }
    assert parsed["fields"][2]["type"][1] == {"type": "array", "items": "string"}
    assert "_hoodie_commit_time" not in json.dumps(parsed)


def test_unsupported_types_and_names() -> None:
    with pytest.raises(HudiError, match="no Hudi"):
        avro_schema_json(pa.schema([("x", pa.map_(pa.int32(), pa.string()))]), "t")
    with pytest.raises(HudiError, match="no Hudi"):
        avro_schema_json(pa.schema([("x", pa.time64("ns"))]), "t")
    with pytest.raises(HudiError, match="Avro name"):
        avro_schema_json(pa.schema([("x", pa.struct([("not ok", pa.int8())]))]), "t")
    with pytest.raises(HudiError, match="no Hudi"):
        avro_schema_json(pa.schema([("x", pa.timestamp("ns"))]), "t")
    with pytest.raises(HudiError, match="Avro name"):
        avro_schema_json(pa.schema([("bad-name", pa.int8())]), "t")
    with pytest.raises(HudiError, match="Avro name"):
        avro_schema_json(pa.schema([("x", pa.int8())]), "my-table")


def test_arrow_schema_b64_roundtrip() -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.int8(), nullable=False),
            ("b", pa.timestamp("us")),
            ("c", pa.large_string()),
            ("d", pa.decimal128(20, 4)),
        ],
        metadata={b"k": b"v"},
    )
    text = arrow_schema_to_b64(schema)
    assert text.isascii() and "\n" not in text
    back = arrow_schema_from_b64(text)
    assert back.equals(schema, check_metadata=True)
    with pytest.raises(HudiError):
        arrow_schema_from_b64("not base64!")


def test_local_timestamp_breaks_hudi_rs(tmp_path: Path) -> None:
    """Pins the finding behind the timestamp mapping: hudi-rs 0.5.0 cannot convert
    ``local-timestamp-micros`` (``todo!()`` in its Avro -> Arrow conversion), so a
    commit schema using it makes every read panic. Naive timestamps therefore map to
    ``timestamp-micros``. If this test starts failing, hudi-rs learned the type and the
    mapping of naive timestamps can be revisited."""
    base = tmp_path / "t"
    write_table(base, pa.table({"s": ["a"], "i64": [1], "ts": pa.array([1], pa.timestamp("us"))}))
    table = HudiTable.open(base)
    instant = table.completed_instants()[-1]
    path = base / ".hoodie" / f"{instant}.commit"
    meta = json.loads(path.read_text())
    meta["extraMetadata"]["schema"] = meta["extraMetadata"]["schema"].replace(
        '"timestamp-micros"', '"local-timestamp-micros"'
    )
    path.write_text(json.dumps(meta))
    with pytest.raises(BaseException) as info:  # pyo3 PanicException is a BaseException
        hudi.HudiTable(str(base)).read()
    assert "not yet implemented" in str(info.value)


def test_nested_and_time_types_map_as_hudis_spark_converter_names_them() -> None:
    schema = pa.schema(
        [
            ("t", pa.time64("us")),
            ("geom", pa.struct([("wkb", pa.binary()), ("srid", pa.int32())])),
            ("tags", pa.map_(pa.string(), pa.string())),
        ]
    )
    fields = {f["name"]: f["type"][1] for f in json.loads(avro_schema_json(schema, "t"))["fields"]}
    # Microseconds since midnight, as Hudi's Spark readers see a time of day (no TIME in
    # Spark; Parquet TIME is refused by its reader): see engine/hudi/schema.py (*).
    assert fields["t"] == "long"
    assert fields["geom"]["type"] == "record" and fields["geom"]["name"] == "geom"
    assert fields["geom"]["namespace"] == "hoodie.t.t_record"
    assert [f["name"] for f in fields["geom"]["fields"]] == ["wkb", "srid"]
    assert fields["tags"] == {"type": "map", "values": ["null", "string"]}
    # Decimals beyond Spark's 38 digits are stored as their exact text.
    assert storage_type(pa.decimal256(40, 2)) == pa.string()
    nested = pa.struct([("d", pa.decimal256(50, 0))])
    assert storage_type(nested) == pa.struct([("d", pa.string())])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("a", pa.int32()), ("A", pa.int32())], "fields 'a' and 'A' (in hoodie.t.t_record.s)"),
        ([("ok", pa.int32()), ("b-c", pa.int32())], "field 'b-c' (in hoodie.t.t_record.s) is"),
        ([("x", pa.int32()), ("x", pa.int32())], "field 'x' (in hoodie.t.t_record.s) appears"),
    ],
)
def test_nested_field_names_follow_the_column_rule(fields, message) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", pa.struct(fields))])
    with pytest.raises(HudiError, match=re.escape(message)):
        avro_schema(schema, "t")
