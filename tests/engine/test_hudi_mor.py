"""Merge-on-Read: log files written by engine.hudi.log_file, slices built by
engine.hudi.table, and the replicator's append/compaction policy, all read back by hudi-rs.
"""

from __future__ import annotations

import json
from pathlib import Path

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.hudi.avro_models import decode_delete_list, encode_delete_list
from engine.hudi.bucket_index import bucket_file_id
from engine.hudi.commit import WriteStat
from engine.hudi.file_slice import base_file_name, read_slice
from engine.hudi.log_file import (
    LogFileName,
    _delete_content,
    encode_log_file,
    log_instant,
    read_log_file,
)
from engine.hudi.schema import avro_schema_json, conform, file_schema
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.replicator import Replicator
from tests import builders
from tests.engine.test_properties import Msg
from tests.oracle import fold

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("_cdc_pos", pa.int64())])
FILE_SCHEMA = file_schema(SCHEMA)
FID = bucket_file_id(0)


def rows(instant: str, file_name: str, items: dict[int, tuple[str, int]]) -> pa.Table:
    keys = sorted(items)
    return pa.table(
        {
            "_hoodie_commit_time": [instant] * len(keys),
            "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in range(len(keys))],
            "_hoodie_record_key": [str(k) for k in keys],
            "_hoodie_partition_path": [""] * len(keys),
            "_hoodie_file_name": [file_name] * len(keys),
            "id": keys,
            "name": [items[k][0] for k in keys],
            "_cdc_pos": [items[k][1] for k in keys],
        },
        schema=FILE_SCHEMA,
    )


def make_table(path: Path) -> HudiTable:
    return HudiTable.create(path, "t", ["id"], "_cdc_pos", 1, SCHEMA, table_type="MERGE_ON_READ")


def write_base(table: HudiTable, items: dict[int, tuple[str, int]], prev: str = "null") -> str:
    instant = table.new_instant_time()
    table.start_commit(instant)
    name = base_file_name(FID, "0-1-0", instant)
    pq.write_table(rows(instant, name, items), table.base_path / name)
    size = (table.base_path / name).stat().st_size
    table.commit(instant, [WriteStat(FID, name, prev, len(items), 0, 0, 0, size, size)], SCHEMA, {})
    return instant


def append_log(
    table: HudiTable,
    base_instant: str,
    version: int,
    upserts: dict[int, tuple[str, int]],
    deletes: list[int],
    *,
    commit: bool = True,
) -> tuple[str, str]:
    instant = table.new_instant_time()
    table.start_commit(instant)
    name = LogFileName(FID, base_instant, version, 0).name
    data = encode_log_file(
        instant,
        avro_schema_json(FILE_SCHEMA, "t"),
        rows(instant, name, upserts) if upserts else None,
        [str(k) for k in deletes],
    )
    (table.base_path / name).write_bytes(data)
    if commit:
        base = base_file_name(FID, "0-1-0", base_instant)
        stat = WriteStat(
            FID,
            name,
            base_instant,
            len(upserts),
            len(deletes),
            0,
            0,
            len(data),
            len(data),
            base_file=base,
        )
        table.commit(instant, [stat], SCHEMA, {})
    return instant, name


def hudi_rs_rows(path: Path) -> dict[str, tuple[str, int]]:
    batches = hudi.HudiTable(str(path)).read()
    if not batches:
        return {}
    t = conform(pa.Table.from_batches(batches), SCHEMA)
    out = {}
    for r in t.to_pylist():
        assert r["_hoodie_record_key"] not in out, "duplicate live row"
        out[r["_hoodie_record_key"]] = (r["name"], r["_cdc_pos"])
    return out


def test_log_file_round_trip(tmp_path: Path) -> None:
    keys = ["1", "ключ", "x" * 300, ""]
    upserts = rows("20250101000000000", "f", {5: ("a", 1), 6: ("b", 2)})
    data = encode_log_file("20250101000000000", "{}", upserts, keys)
    path = tmp_path / LogFileName(FID, "20250101000000000", 1, 0).name
    path.write_bytes(data)
    blocks = list(read_log_file(path))
    assert [b.instant for b in blocks] == ["20250101000000000"] * 2
    assert blocks[0].rows is not None and blocks[0].rows.equals(upserts)
    assert blocks[1].deleted_keys == keys
    empty = tmp_path / LogFileName(FID, "20250101000000000", 2, 0).name
    empty.write_bytes(encode_log_file("20250101000000002", "{}", None, []))
    (block,) = list(read_log_file(empty))  # never an empty file: one empty delete block
    assert block.instant == "20250101000000002" and block.deleted_keys == []
    parsed = LogFileName.parse(path.name)
    assert parsed == LogFileName(FID, "20250101000000000", 1, 0)
    # Hudi parses each part of the write token as an int.
    assert [int(part) for part in path.name.rsplit("_", 1)[1].split("-")] == [0, 1, 0]
    assert log_instant(path) == "20250101000000000"  # the first block's header says
    assert LogFileName.parse(".x_1.log.1_0-1-0") is None  # not a 17-digit base instant
    # A file an earlier cdcctl named with the instant in its token is still understood.
    legacy = LogFileName.parse(f".{FID}_20250101000000000.log.2_3-20250101000000009-0")
    assert legacy is not None and log_instant(tmp_path / "absent", legacy) == "20250101000000009"


@given(
    st.lists(st.text(max_size=40) | st.text(min_size=60, max_size=9000), max_size=30),
    st.integers(0, 3),
)
def test_delete_block_is_hudis_published_avro(keys: list[str], skip: int) -> None:
    """The array-built delete block is byte for byte fastavro's encoding against Hudi's
    ``HoodieDeleteRecordList`` schema (keys of every varint length), and decodes to
    the keys in natural order (``IntWrapper`` 0, Java's default)."""
    array = pa.array(["pad"] * skip + keys, pa.string()).slice(skip)  # a non-zero offset
    content = _delete_content(array)
    assert content[8:] == encode_delete_list(keys)
    assert _delete_content(keys) == content
    assert _delete_content(pa.chunked_array([array], pa.string())) == content
    records = decode_delete_list(content[8:])
    assert [r["recordKey"] for r in records] == keys
    assert all(r["orderingVal"] == ("IntWrapper", 0) for r in records)


def test_delete_block_of_huge_keys_goes_through_fastavro() -> None:
    keys = ["k" * (1 << 20), "small"]  # a 1 MiB key needs a four-byte length varint
    content = _delete_content(keys)
    assert content[8:] == encode_delete_list(keys)
    assert [r["recordKey"] for r in decode_delete_list(content[8:])] == keys


def test_slices_with_logs_read_by_hudi_rs(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    base = write_base(table, {1: ("a", 10), 2: ("b", 10), 3: ("c", 10)})
    i1, log1 = append_log(table, base, 1, {1: ("a2", 20), 4: ("d", 20)}, [2])
    i2, log2 = append_log(table, base, 2, {2: ("b3", 30)}, [4, 3])
    expected = {"1": ("a2", 20), "2": ("b3", 30)}
    assert hudi_rs_rows(table.base_path) == expected
    assert json.loads((table.base_path / f".hoodie/{i2}.deltacommit").read_text())
    (group,) = table.file_groups().values()
    assert group.instant == base and group.log_files == (log1, log2)
    assert group.state_instant == i2 and group.log_size > 0
    # The merge's own view of the slice agrees with hudi-rs.
    mine = read_slice(group.path, [str(table.base_path / n) for n in group.log_files])
    assert mine is not None
    assert {
        r["_hoodie_record_key"]: (r["name"], r["_cdc_pos"]) for r in mine.to_pylist()
    } == expected
    only = read_slice(
        group.path,
        [str(table.base_path / n) for n in group.log_files],
        keys=pa.array(["2", "3"]),
        columns=["_hoodie_record_key", "_cdc_pos"],
    )
    assert only is not None and only.to_pylist() == [{"_hoodie_record_key": "2", "_cdc_pos": 30}]


def test_pending_log_is_invisible_then_rolled_back(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    base = write_base(table, {1: ("a", 10)})
    pending, name = append_log(table, base, 1, {1: ("lost", 99), 2: ("lost", 99)}, [], commit=False)
    assert hudi_rs_rows(table.base_path) == {"1": ("a", 10)}
    assert table.file_groups()[0].log_files == ()
    assert table.rollback_pending() == [pending]
    assert not (table.base_path / name).exists()
    assert not list((table.base_path / ".hoodie").glob(f"{pending}.*"))
    _, log = append_log(table, base, 1, {2: ("kept", 11)}, [])
    assert hudi_rs_rows(table.base_path) == {"1": ("a", 10), "2": ("kept", 11)}


def test_compaction_slice_and_clean(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    base = write_base(table, {1: ("a", 10), 2: ("b", 10)})
    _, log = append_log(table, base, 1, {1: ("a2", 20)}, [2])
    # A delta commit that writes a new base file starts a new slice; old logs drop out.
    compacted = write_base(table, {1: ("a2", 20), 3: ("c", 30)}, prev=base)
    group = table.file_groups()[0]
    assert group.instant == compacted and group.log_files == ()
    assert hudi_rs_rows(table.base_path) == {"1": ("a2", 20), "3": ("c", 30)}
    append_log(table, compacted, 1, {3: ("c2", 40)}, [])
    deleted = set(table.clean(1))
    assert deleted == {base_file_name(FID, "0-1-0", base), log}
    assert hudi_rs_rows(table.base_path) == {"1": ("a2", 20), "3": ("c2", 40)}


def _stream(n_keys: int, rounds: int) -> list[tuple[str, bytes | None, bytes | None]]:
    cols = [("id", "int32"), ("name", "string"), ("note", "string")]
    topic, lsn, out = "srv.app.mor", 100, []
    for k in range(n_keys):
        out.append(
            (
                topic,
                builders.key(k),
                builders.value("r", lsn, {"id": k, "name": "s", "note": "n"}, cols, snapshot=True),
            )
        )
    for r in range(rounds):
        for k in range(r % 3, n_keys, 3):
            lsn += 1
            if (k + r) % 7 == 0:
                out.append((topic, builders.key(k), builders.value("d", lsn, None, cols)))
                out.append((topic, builders.key(k), None))
            else:
                row = {
                    "id": k,
                    "name": f"r{r}",
                    "note": "__debezium_unavailable_value" if r % 2 else f"n{r}",
                }
                out.append(
                    (topic, builders.key(k), builders.value("u" if r else "c", lsn, row, cols))
                )
    return out


@pytest.mark.spark
def test_replicator_appends_logs_then_compacts(spark, tmp_path: Path) -> None:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 2, "compaction_max_log_files": 3},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    msgs = _stream(60, 8)
    records = [Msg(t, k, v, i) for i, (t, k, v) in enumerate(msgs)]
    first = 60  # the snapshot: creates the base files
    cuts = [first] + [first + (len(records) - first) * i // 6 for i in range(1, 7)]
    replicator = Replicator(cfg, spark=spark)
    path = tmp_path / "lake" / table_name_for_topic("srv.app.mor")
    logs_per_batch: list[list[int]] = []
    for lo, hi in zip([0, *cuts], cuts, strict=False):
        replicator.apply(records[lo:hi])
        table = HudiTable.open(path)
        groups = table.file_groups()
        logs_per_batch.append([len(groups[b].log_files) for b in sorted(groups)])
        # Every intermediate state is what hudi-rs shows, and equals the oracle.
        expected = fold(msgs[:hi]).get("srv.app.mor", {})
        assert _replica(path) == expected  # TOAST notes resolved from base or log rows
    assert table.is_mor
    assert {a for a in (p.name.split(".", 1)[1] for p in (path / ".hoodie").glob("*.*commit"))} == {
        "deltacommit"
    }
    # Both groups get logs; a group is compacted after its third log, one group per batch
    # (a quarter of the groups, at least one): the second appends once more, then waits its turn.
    assert logs_per_batch == [[0, 0], [1, 1], [2, 2], [3, 3], [4, 0], [0, 1], [1, 2]], (
        logs_per_batch
    )
    counters = replicator.tables["srv.app.mor"].counters
    assert counters.updates > 0 and counters.deletes > 0


def _replica(path: Path) -> dict[str, dict]:
    from tests.integration.replicas import read_replica

    return read_replica(path)


def test_column_cache_serves_immutable_files_and_evicts(tmp_path: Path) -> None:
    from engine.hudi.key_index import ColumnCache

    paths = []
    for i in range(3):
        path = tmp_path / f"f{i}.parquet"
        pq.write_table(pa.table({"_hoodie_record_key": [str(i)] * 1000}), path)
        paths.append(path)
    loads: list[str] = []

    def loader(path: Path):
        def load():
            loads.append(path.name)
            return pq.read_table(path, columns=["_hoodie_record_key"])

        return load

    one = pq.read_table(paths[0]).nbytes
    cache = ColumnCache(limit=2 * one)
    cols = ["_hoodie_record_key"]
    assert cache.get(paths[0], cols, loader(paths[0])).num_rows == 1000
    cache.get(paths[0], cols, loader(paths[0]))
    assert loads == ["f0.parquet"]  # served from memory
    cache.get(paths[0], None, loader(paths[0]))
    assert loads == ["f0.parquet"] * 2  # full reads are never cached
    cache.get(paths[1], cols, loader(paths[1]))
    cache.get(paths[2], cols, loader(paths[2]))  # over the limit: f0, the oldest, goes
    assert cache.used <= 2 * one
    cache.get(paths[0], cols, loader(paths[0]))
    assert loads[-1] == "f0.parquet" and len(loads) == 5
    pq.write_table(pa.table({"_hoodie_record_key": ["x"]}), paths[0])  # a changed file
    assert cache.get(paths[0], cols, loader(paths[0])).num_rows == 1


def test_columns_kept_at_write_equal_a_read_of_the_file(tmp_path: Path) -> None:
    """The merge keeps the key and position columns of each log file it writes (the next
    appends read them); they must be exactly what reading the file gives."""
    from engine.hudi.file_slice import written_blocks
    from engine.hudi.schema import reader_schema
    from engine.merge.task import APPEND_COLUMNS

    name = "log"
    upserts = rows("001", name, {i: (f"n{i}", 10 * i) for i in range(1, 300)})
    upserts = upserts.append_column("_cdc_pos_sub", pa.array(range(299), pa.int64()))
    upserts = upserts.cast(reader_schema(upserts.schema))
    cases = [
        (upserts, pa.array(["900", "901"])),
        (upserts, pa.array([], pa.string())),
        (None, pa.array(["7"])),
        (upserts.slice(0, 0), pa.array(["8", "9"])),
    ]
    schema_json = avro_schema_json(upserts.schema, "t")
    for i, (data, deleted) in enumerate(cases):
        path = tmp_path / f"{i}.log"
        path.write_bytes(encode_log_file("001", schema_json, data, deleted))
        read = list(read_log_file(path, columns=APPEND_COLUMNS))
        kept = written_blocks("001", data, deleted, APPEND_COLUMNS)
        assert [(b.instant, b.deleted_keys) for b in kept] == [
            (b.instant, b.deleted_keys) for b in read
        ]
        assert [b.rows for b in kept] == [b.rows for b in read]  # types and values


def test_a_log_file_with_nothing_but_an_empty_delete_block_reads_back(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    base = write_base(table, {1: ("a", 10), 2: ("b", 10)})
    _, log = append_log(table, base, 1, {}, [])
    assert (table.base_path / log).stat().st_size > 0
    assert hudi_rs_rows(table.base_path) == {"1": ("a", 10), "2": ("b", 10)}
