"""Tables written by Apache Hudi itself, read with the engine's own slice reader.

The tables were written by Hudi's Spark writer (table version 6) for hudi-rs's test
suite; ``tests/hudi_rs_data.py`` says where they come from and how they are fetched. The engine's reader (``read_slice``: a base file with its log files' data and
delete blocks applied) must see what hudi-rs sees, and the Avro delete blocks Hudi
wrote must decode against Hudi's published schema the way the engine's own do.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from engine.hudi.avro_models import decode_delete_list
from engine.hudi.file_slice import BASE_FILE_RE, read_slice
from engine.hudi.log_file import _delete_content, read_log_file
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
