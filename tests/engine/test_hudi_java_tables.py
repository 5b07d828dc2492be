"""Tables written by Apache Hudi itself, read with the engine's own slice reader.

The tables were written by Hudi's Spark writer (table version 6) for hudi-rs's test
suite; ``tests/hudi_rs_data.py`` says where they come from and how they are fetched.
The engine's reader (``read_slice``: a base file with its log files' data and delete
blocks applied) must see what hudi-rs sees, the Avro delete blocks Hudi wrote must
decode against Hudi's published schema the way the engine's own do, and the engine's
delta commits and log records must look like Hudi's.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from engine.hudi import HudiWriter, RowCounts
from engine.hudi.avro_models import decode_delete_list
from engine.hudi.file_slice import BASE_FILE_RE, read_slice
from engine.hudi.log_file import _delete_content, read_log_file
from engine.hudi.schema import file_schema
from tests.hudi_rs_data import table_zip

TABLES = {
    # zip in hudi-rs's test data: (folder inside the zip, table type)
    "sample_table/cow/v6_nonpartitioned.zip": ("v6_nonpartitioned", "COPY_ON_WRITE"),
    "sample_table/mor/parquet/v6_nonpartitioned.zip": ("v6_nonpartitioned", "MERGE_ON_READ"),
    "quickstart_trips_table/mor/avro/v6_trips_8i3d.zip": ("v6_trips_8i3d", "MERGE_ON_READ"),
}


def extract(name: str, tmp_path: Path) -> Path:
    with zipfile.ZipFile(table_zip(name)) as archive:
        archive.extractall(tmp_path)
    return tmp_path / TABLES[name][0]


def completed_instants(table: Path) -> set[str]:
    return {
        p.name.split(".")[0]
        for p in (table / ".hoodie").iterdir()
        if p.name.endswith((".commit", ".deltacommit"))
    }


def engine_rows(table: Path) -> dict[str, dict]:
    """Every live row, read slice by slice with the engine's reader, by record key."""
    done = completed_instants(table)
    rows: dict[str, dict] = {}
    partitions = [p.parent for p in table.rglob(".hoodie_partition_metadata")]
    assert partitions, f"no partition folder in {table}"
    for folder in partitions:
        latest: dict[str, tuple[str, Path]] = {}
        for path in folder.glob("*.parquet"):
            m = BASE_FILE_RE.match(path.name)
            assert m, path.name
            file_id, instant = m.group(1), m.group(3)
            if instant in done and instant > latest.get(file_id, ("", path))[0]:
                latest[file_id] = (instant, path)
        for file_id, (instant, base) in latest.items():
            logs = sorted(
                folder.glob(f".{file_id}_{instant}.log.*"),
                key=lambda p: int(p.name.split(".log.")[1].split("_")[0]),
            )
            part = read_slice(base, [str(p) for p in logs])
            assert part is not None
            for row in part.to_pylist():
                key = row["_hoodie_record_key"]
                assert key not in rows, f"{key} is live in two file groups"
                rows[key] = row
    return rows


def hudi_rs_rows(table: Path) -> dict[str, dict]:
    batches = hudi.HudiTable(str(table)).read()
    out = pa.Table.from_batches(batches).to_pylist() if batches else []
    return {row["_hoodie_record_key"]: row for row in out}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_java_written_table_reads_as_hudi_rs_reads_it(name: str, tmp_path: Path) -> None:
    table = extract(name, tmp_path)
    ours, theirs = engine_rows(table), hudi_rs_rows(table)
    assert set(ours) == set(theirs)
    assert ours, "the table has live rows"
    for key, row in theirs.items():
        mine = ours[key]
        for column, value in row.items():
            if column == "_hoodie_partition_path" and not value:
                continue  # hudi-rs may leave it empty for non-partitioned tables
            assert mine[column] == value, (key, column, mine[column], value)


def test_java_delete_block_is_the_natural_order_delete_the_engine_writes(tmp_path: Path) -> None:
    table = extract("quickstart_trips_table/mor/avro/v6_trips_8i3d.zip", tmp_path)
    (log,) = (table / "city=san_francisco").glob(".*.log.*")
    (block,) = list(read_log_file(log))
    deleted = {
        "e96c4396-3fad-413a-a942-4cb36106d721",
        "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
        "334e26e9-8355-45cc-97c6-c31daf0df330",
    }  # rider-A, rider-C, rider-D (the .sql)
    assert block.deleted_keys is not None and set(block.deleted_keys) == deleted
    # Hudi's SQL DELETE wrote each record with Java's default ordering value; decoded with
    # Hudi's published schema, it is the very value the engine writes for its deletes.
    raw = log.read_bytes()
    content = raw[raw.index(bytes.fromhex("00000003")) + 8 :]  # after version and length
    java = decode_delete_list(content)
    ours = decode_delete_list(_delete_content(sorted(deleted))[8:])
    assert (
        {r["orderingVal"] for r in java} == {r["orderingVal"] for r in ours} == {("IntWrapper", 0)}
    )
    assert {r["partitionPath"] for r in java} == {"city=san_francisco"}


SCHEMA = pa.schema([("id", pa.string()), ("v", pa.string()), ("_cdc_pos", pa.int64())])


def new_writer(path: Path) -> HudiWriter:
    """A new one-bucket Merge-on-Read table written by the engine's writer."""
    return HudiWriter.create(
        path,
        name="t",
        record_key_fields=["id"],
        ordering_field="_cdc_pos",
        num_buckets=1,
        schema=SCHEMA,
        table_type="MERGE_ON_READ",
    )


def _write(writer: HudiWriter, rows: dict[str, str], deleted: list[str]) -> tuple[str, dict]:
    """One instant of the real writer on bucket 0: new rows, then deletes of stored keys."""
    schema = SCHEMA
    instant = writer.begin()
    groups = writer.file_groups()
    (write,) = writer.plan_writes(instant, groups, [0], set() if groups else {0}, schema, 0)
    upserts = pa.table(
        {"id": list(rows), "v": list(rows.values()), "_cdc_pos": [1] * len(rows)}, schema=schema
    )
    result = write.write(
        carried=file_schema(schema).empty_table(),
        upserts=upserts,
        deleted_keys=pa.array(deleted, pa.string()),
        tombs=None,
        key_column="id",
        data_schema=schema,
        counts=RowCounts(inserts=len(rows), deletes=len(deleted)),
    )
    writer.commit(instant, [result], schema, "topic", {0: 1}, {})
    meta = json.loads((writer.path / ".hoodie" / f"{instant}.deltacommit").read_text())
    (stat,) = meta["partitionToWriteStats"][""]
    return write.file_name, stat


def test_delta_commits_and_log_records_are_as_hudi_writes_them(tmp_path: Path) -> None:
    hudi_table = extract("sample_table/mor/parquet/v6_nonpartitioned.zip", tmp_path / "hudi")
    meta = json.loads((hudi_table / ".hoodie" / "20250117083136333.deltacommit").read_text())
    java_log_stat, java_base_stat = meta["partitionToWriteStats"][""]
    assert java_log_stat["path"].startswith(".") and "logVersion" in java_log_stat

    writer = new_writer(tmp_path / "ours")
    _, base_stat = _write(writer, {"1": "a", "2": "b"}, [])
    first_log, log_stat = _write(writer, {"1": "a2"}, [])
    second_log, second_stat = _write(writer, {"3": "c"}, ["2"])
    # The same fields, in the same order, as Hudi's delta commit of a base and a log file.
    assert list(base_stat) == list(java_base_stat)
    assert list(log_stat) == list(java_log_stat)
    assert (log_stat["logVersion"], second_stat["logVersion"]) == (1, 2)
    assert second_stat["logFiles"] == [second_log] and second_stat["baseFile"]
    # Log records name their file group, as Hudi's append handle stamps them.
    java_log = next(hudi_table.glob(".*.log.*"))
    (java_block,) = list(read_log_file(java_log))
    assert java_block.rows is not None
    assert java_block.rows.column("_hoodie_file_name").to_pylist() == [java_log.name[1:39]]
    file_id = first_log[1:].split("_")[0]
    for name in (first_log, second_log):
        blocks = [b for b in read_log_file(writer.path / name) if b.rows is not None]
        assert [set(b.rows.column("_hoodie_file_name").to_pylist()) for b in blocks] == [{file_id}]
    assert hudi_rs_rows(writer.path).keys() == {"1", "3"}


def block_headers(path: Path) -> list[tuple[int, set[int]]]:
    """(block type, header keys) of every block of a log file, read from its bytes."""
    raw, at, out = path.read_bytes(), 0, []
    while at < len(raw):
        assert raw[at : at + 6] == b"#HUDI#"
        (size,) = struct.unpack(">q", raw[at + 6 : at + 14])
        _, block_type, count = struct.unpack(">iii", raw[at + 14 : at + 26])
        keys, pos = set(), at + 26
        for _ in range(count):
            key, length = struct.unpack(">ii", raw[pos : pos + 8])
            keys.add(key)
            pos += 8 + length
        out.append((block_type, keys))
        at += 14 + size
    return out


def test_delete_blocks_carry_the_header_hudis_do(tmp_path: Path) -> None:
    table = extract("quickstart_trips_table/mor/avro/v6_trips_8i3d.zip", tmp_path / "hudi")
    (log,) = (table / "city=san_francisco").glob(".*.log.*")
    ((delete_type, java_keys),) = block_headers(log)
    writer = new_writer(tmp_path / "ours")
    _write(writer, {"1": "a", "2": "b"}, [])
    name, _ = _write(writer, {"3": "c"}, ["2"])
    assert block_headers(writer.path / name) == [(5, java_keys), (delete_type, java_keys)]
