"""Base file footers: the bloom filter and min/max record key Hudi's writers put there.

Checked three ways (``engine/hudi/bloom.py`` describes the format):

* against base files Hudi's Spark writer made (hudi-rs's test tables,
  ``tests/hudi_rs_data.py``): given a file's record keys in row order, the footer
  values we compute equal Hudi's byte for byte, and Hudi's filter, decoded, holds them;
* against Hadoop's ``DynamicBloomFilter`` in the JVM of the session's SparkContext
  (Hudi's filter is a port of it with the same serialization): Hadoop reads the filters
  we write and finds their keys, builds the same bytes from the same keys, and Java's
  ``String`` order picks the same min/max keys;
* on files ``write_base_file`` writes, through the writer's own write paths.
"""

from __future__ import annotations

import base64
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from engine.errors import HudiError
from engine.hudi import bloom
from engine.hudi.bloom import DynamicBloomFilter, footer_metadata, min_max_keys
from engine.hudi.file_slice import RowCounts, SliceWrite, base_rows, write_base_file
from engine.hudi.log_file import LogFileName
from engine.hudi.parquet import read_table
from engine.hudi.schema import HOODIE_RECORD_KEY
from engine.storage import LocalStorage
from tests.hudi_rs_data import table_zip

#: Every hudi-rs test table (zips of tables Hudi's Spark writer made) with base files
#: carrying Hudi's bloom filter: table versions 6, 8 and 9, Copy-on-Write and
#: Merge-on-Read, simple, complex (``field:value,...``) and time-based keys, UUID keys,
#: files without rows. (The others hold no base file, only Lance files, or were
#: written without meta fields and bloom filter.)
HUDI_TABLES = [
    "quickstart_trips_table/mor/avro/table_all_data_types.zip",
    "quickstart_trips_table/mor/avro/table_column_projection.zip",
    "quickstart_trips_table/mor/avro/table_corrupt_tail_block.zip",
    "quickstart_trips_table/mor/avro/table_delete_ord_decimal.zip",
    "quickstart_trips_table/mor/avro/table_delete_ord_double.zip",
    "quickstart_trips_table/mor/avro/table_delete_ord_int.zip",
    "quickstart_trips_table/mor/avro/table_delete_ord_long.zip",
    "quickstart_trips_table/mor/avro/table_delete_ord_string.zip",
    "quickstart_trips_table/mor/avro/table_delete_ord_timestamp.zip",
    "quickstart_trips_table/mor/avro/table_duplicate_keys.zip",
    "quickstart_trips_table/mor/avro/table_event_time_stale.zip",
    "quickstart_trips_table/mor/avro/table_evo_add_col.zip",
    "quickstart_trips_table/mor/avro/table_evo_promotion.zip",
    "quickstart_trips_table/mor/avro/table_hfile_log_block.zip",
    "quickstart_trips_table/mor/avro/table_null_containers.zip",
    "quickstart_trips_table/mor/avro/table_parquet_log_block.zip",
    "quickstart_trips_table/mor/avro/table_partial_update.zip",
    "quickstart_trips_table/mor/avro/table_partial_update_event_time.zip",
    "quickstart_trips_table/mor/avro/table_uncommitted_log_v6.zip",
    "quickstart_trips_table/mor/avro/table_uncommitted_log_v9.zip",
    "quickstart_trips_table/mor/avro/v6_trips_8i1u.zip",
    "quickstart_trips_table/mor/avro/v6_trips_8i3d.zip",
    "quickstart_trips_table/mor/avro/v8_mor_boundary_windows.zip",
    "quickstart_trips_table/mor/avro/v8_trips_8i3u1d.zip",
    "quickstart_trips_table/mor/avro/v9_mor_8i4u_commit_time.zip",
    "quickstart_trips_table/mor/avro/v9_mor_compacted_incremental.zip",
    "quickstart_trips_table/mor/avro/v9_mor_nonpart_3commits.zip",
    "sample_table/cow/v6_complexkeygen_hivestyle.zip",
    "sample_table/cow/v6_nonpartitioned.zip",
    "sample_table/cow/v6_simplekeygen_nonhivestyle.zip",
    "sample_table/cow/v6_simplekeygen_nonhivestyle_overwritetable.zip",
    "sample_table/cow/v6_timebasedkeygen_nonhivestyle.zip",
    "sample_table/cow/v8_complexkeygen_hivestyle.zip",
    "sample_table/cow/v8_nonpartitioned.zip",
    "sample_table/cow/v8_simplekeygen_nonhivestyle.zip",
    "sample_table/cow/v9_timebasedkeygen_epochmillis.zip",
    "sample_table/cow/v9_timebasedkeygen_nonhivestyle.zip",
    "sample_table/cow/v9_timebasedkeygen_unixtimestamp.zip",
    "sample_table/cow/v9_txns_complex_meta.zip",
    "sample_table/cow/v9_txns_complex_nometa.zip",
    "sample_table/cow/v9_txns_nonpart_meta.zip",
    "sample_table/cow/v9_txns_nonpart_nometa.zip",
    "sample_table/cow/v9_txns_simple_meta.zip",
    "sample_table/cow/v9_txns_simple_nometa.zip",
    "sample_table/cow/v9_txns_simple_overwrite.zip",
    "sample_table/mor/avro/v9_nonpartitioned_rollback.zip",
    "sample_table/mor/avro/v9_timebasedkeygen_nonhivestyle.zip",
    "sample_table/mor/avro/v9_txns_complex_meta.zip",
    "sample_table/mor/avro/v9_txns_complex_nometa.zip",
    "sample_table/mor/avro/v9_txns_nonpart_meta.zip",
    "sample_table/mor/avro/v9_txns_nonpart_nometa.zip",
    "sample_table/mor/avro/v9_txns_simple_meta.zip",
    "sample_table/mor/avro/v9_txns_simple_nometa.zip",
    "sample_table/mor/avro/v9_txns_simple_overwrite.zip",
    "sample_table/mor/parquet/v6_complexkeygen_hivestyle.zip",
    "sample_table/mor/parquet/v6_nonpartitioned.zip",
    "sample_table/mor/parquet/v6_nonpartitioned_rollback.zip",
    "sample_table/mor/parquet/v6_simplekeygen_nonhivestyle.zip",
    "sample_table/mor/parquet/v6_simplekeygen_nonhivestyle_overwritetable.zip",
]

ABSENT = pa.array([f"absent-{i}" for i in range(2000)] + ["id:999,name:nobody", "∅"])


def hudi_base_files(name: str) -> list[tuple[str, pq.ParquetFile]]:
    """The base files of a test table that carry Hudi's bloom filter (macOS forks left out)."""
    found = []
    with zipfile.ZipFile(table_zip(name)) as archive:
        for member in archive.namelist():
            if not member.endswith(".parquet") or "/.hoodie/" in member:
                continue
            if member.startswith("__MACOSX/"):
                continue
            file = pq.ParquetFile(io.BytesIO(archive.read(member)))
            if bloom.BLOOM_FILTER_KEY.encode() in (file.metadata.metadata or {}):
                found.append((member, file))
    return found


def footer(file: pq.ParquetFile | Path) -> dict[str, str]:
    meta = pq.read_metadata(file).metadata if isinstance(file, Path) else file.metadata.metadata
    return {k.decode(): v.decode() for k, v in (meta or {}).items()}


@pytest.mark.parametrize("name", HUDI_TABLES)
def test_footer_equals_hudis(name: str) -> None:
    files = hudi_base_files(name)
    assert files, f"no base file with a bloom filter in {name}"
    for member, file in files:
        keys = file.read(columns=[HOODIE_RECORD_KEY]).column(0)
        theirs = {k: v for k, v in footer(file).items() if k in bloom.FOOTER_KEYS}
        ours = footer_metadata(keys)
        assert ours == theirs, member
        assert theirs[bloom.TYPE_CODE_KEY] == "DYNAMIC_V0"
        assert (bloom.MIN_RECORD_KEY in theirs) == (len(keys) > 0)
        decoded = DynamicBloomFilter.from_footer(theirs[bloom.BLOOM_FILTER_KEY])
        assert decoded.might_contain(keys).all(), member
        assert not decoded.might_contain(ABSENT).any(), member
        assert decoded.to_footer() == theirs[bloom.BLOOM_FILTER_KEY]


def test_hudi_tables_checked() -> None:
    """How many of Hudi's files the comparison covers."""
    files = [f for name in HUDI_TABLES for f in hudi_base_files(name)]
    rows = sum(f.metadata.num_rows for _, f in files)
    empty = sum(1 for _, f in files if f.metadata.num_rows == 0)
    assert (len(files), rows, empty) == (291, 753, 2)


# ------------------------------------------------------------------------- the format


def keys_of_every_shape(count: int, seed: int = 3) -> pa.Array:
    """Keys of 1 to 40 bytes, ASCII and not (tail bytes ≥ 0x80 are negative in Java)."""
    rng = np.random.default_rng(seed)
    alphabet = list("abcXYZ0189:,-_ ") + ["é", "ß", "中", "文", "€", "\ue000", "\uffff"]
    alphabet += ["😀", "\U00010000", "\U0010ffff"]
    keys: set[str] = set()
    while len(keys) < count:
        size = int(rng.integers(1, 13))
        keys.add("".join(rng.choice(alphabet, size)))
    return pa.array(sorted(keys, key=lambda k: rng.random()))


def test_rows_fill_then_wrap_at_the_bound() -> None:
    """60000 keys a row; two rows reach the bound of 100000; later keys alternate from row 0."""
    small = DynamicBloomFilter.build(pa.array([], pa.string()))
    assert (len(small.bits), small.last_row_keys) == (1, 0)
    assert bloom._rows_of(0, 5, 2, 2).tolist() == [0, 0, 1, 1, 0]  # the 5th finds the bound
    assert bloom._rows_of(4, 6, 2, 2).tolist() == [0, 0, 1, 0, 1, 0]
    assert bloom._rows_of(0, 7, 3, 1).tolist() == [0, 0, 0, 0, 0, 0, 0]
    keys = pa.array([f"key-{i}" for i in range(130_000)])
    built = DynamicBloomFilter.build(keys)
    assert (len(built.bits), built.last_row_keys) == (2, 70_000)
    assert built.vector_size == 2_587_966 and built.num_hashes == 30
    assert built.might_contain(keys).all()
    # Each row holds what its keys set, nothing of the others: row 1 has keys
    # 60000..119999 and the wrapped keys 120001, 120003, ...
    row1 = DynamicBloomFilter.build(keys.slice(60_000, 60_000))
    wrapped = np.arange(120_002, 130_000, 2)
    extra = DynamicBloomFilter.build(keys.take(pa.array(wrapped)))
    assert np.array_equal(built.bits[1], row1.bits[0] | extra.bits[0])
    back = DynamicBloomFilter.deserialize(built.serialize())
    assert np.array_equal(back.bits, built.bits) and back.last_row_keys == 70_000


def test_chunks_and_slices_do_not_change_the_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = keys_of_every_shape(3000)
    whole = DynamicBloomFilter.build(keys).serialize()
    monkeypatch.setattr(bloom, "CHUNK", 7)
    assert DynamicBloomFilter.build(keys).serialize() == whole
    chunked = pa.chunked_array([keys.slice(0, 1000), keys.slice(1000)])
    assert DynamicBloomFilter.build(chunked).serialize() == whole
    assert DynamicBloomFilter.build(keys.cast(pa.large_string())).serialize() == whole
    padded = pa.concat_arrays([pa.array(["x" * 50]), keys]).slice(1)
    assert DynamicBloomFilter.build(padded).serialize() == whole


def test_empty_or_null_keys_are_refused() -> None:
    with pytest.raises(HudiError, match="empty"):
        DynamicBloomFilter.build(pa.array(["a", ""]))
    with pytest.raises(HudiError, match="null"):
        footer_metadata(pa.array(["a", None]))


def test_min_max_in_java_string_order() -> None:
    # U+10000 is a surrogate pair (0xD800 0xDC00): before U+E000..U+FFFF in Java.
    keys = pa.array(["\uffff", "\U00010000", "\ue000x", "b", "\U0010ffff"])
    assert min_max_keys(keys) == ("b", "\uffff")
    assert min_max_keys(pa.array(["b", "a", "ab"])) == ("a", "b")
    assert min_max_keys(pa.array(["\U0001f600", "\U00010000z"])) == ("\U00010000z", "\U0001f600")
    assert min_max_keys(pa.array([], pa.string())) is None


# ------------------------------------------------------------------- Hadoop in the JVM


def hadoop_bytes(spark, keys: list[str], vector_size: int, num_hashes: int, per_row: int) -> bytes:
    """What Hadoop's DynamicBloomFilter serializes after adding ``keys`` (UTF-8) in order."""
    jvm = spark._jvm
    made = jvm.org.apache.hadoop.util.bloom.DynamicBloomFilter(
        vector_size, num_hashes, 1, per_row
    )  # 1: org.apache.hadoop.util.hash.Hash.MURMUR_HASH
    for key in keys:
        made.add(jvm.org.apache.hadoop.util.bloom.Key(bytearray(key.encode("utf-8"))))
    out = jvm.java.io.ByteArrayOutputStream()
    data = jvm.java.io.DataOutputStream(out)
    made.write(data)
    data.flush()
    return bytes(out.toByteArray())


def test_hadoop_builds_the_same_bytes(spark) -> None:
    """Up to the bound Hudi's filter adds rows as Hadoop's does: same keys, same bytes."""
    keys = keys_of_every_shape(150, seed=5)
    # 3 rows of 50 keys (vector 480 bits, 7 hashes), the last one full: Hadoop grows a
    # row where Hudi's bound (max 150) would start wrapping, so stop there.
    ours = DynamicBloomFilter.build(keys, num_entries=50, fpp=0.01, max_entries=150)
    assert (ours.vector_size, ours.num_hashes, len(ours.bits)) == (480, 7, 3)
    assert ours.serialize() == hadoop_bytes(spark, keys.to_pylist(), 480, 7, 50)
    # Hudi's defaults, one row.
    few = keys_of_every_shape(120, seed=9)
    default = DynamicBloomFilter.build(few)
    assert default.serialize() == hadoop_bytes(spark, few.to_pylist(), 2_587_966, 30, 60_000)


def test_hadoop_reads_our_filter(spark) -> None:
    """Hadoop's readFields takes a filter we wrote (two rows, keys past the bound too)."""
    keys = pa.concat_arrays(
        [keys_of_every_shape(2000, seed=11), pa.array([f"order-{i}" for i in range(128_000)])]
    )
    text = footer_metadata(keys)[bloom.BLOOM_FILTER_KEY]
    jvm = spark._jvm
    read = jvm.org.apache.hadoop.util.bloom.DynamicBloomFilter()
    raw = bytearray(base64.b64decode(text))
    read.readFields(jvm.java.io.DataInputStream(jvm.java.io.ByteArrayInputStream(raw)))
    key = jvm.org.apache.hadoop.util.bloom.Key
    # Present keys from every part: the first row, the second, the wrapped tail.
    sample = keys.take(pa.array(np.r_[0:1000, 61_000:61_300, 129_500:130_000]))
    for k in sample.to_pylist():
        assert read.membershipTest(key(bytearray(k.encode("utf-8")))), k
    for k in ABSENT.to_pylist()[:500]:
        assert not read.membershipTest(key(bytearray(k.encode("utf-8")))), k


def test_java_picks_the_same_min_max(spark) -> None:
    keys = keys_of_every_shape(400, seed=13).to_pylist()
    listed = spark._jvm.java.util.ArrayList()
    for k in keys:
        listed.add(k)
    collections = spark._jvm.java.util.Collections
    assert min_max_keys(pa.array(keys)) == (collections.min(listed), collections.max(listed))
    assert min_max_keys(pa.array(keys)) != (min(keys), max(keys))  # Python's order differs


# --------------------------------------------------------------- the files we write

DATA_SCHEMA = pa.schema([("id", pa.string()), ("v", pa.int64()), ("t", pa.time64("us"))])


def upserts(ids: list[str]) -> pa.Table:
    return pa.table(
        {"id": ids, "v": list(range(len(ids))), "t": pa.array([1] * len(ids), pa.time64("us"))}
    )


def written_base_file(folder: Path, ids: list[str], instant: str) -> Path:
    """A base file of these record keys, as the writer writes it."""
    name = f"f-0_0-1-0_{instant}.parquet"
    rows = base_rows(
        pa.table({}),
        upserts(ids),
        "id",
        instant=instant,
        task_partition=0,
        file_name=name,
        data_schema=DATA_SCHEMA,
    )
    write_base_file(rows, folder / name)
    return folder / name


def test_write_base_file_writes_hudis_footer(tmp_path: Path) -> None:
    ids = ["b", "\U00010000", "\uffff", "a1"] + [f"k{i}" for i in range(60_000)]
    # 60004 rows: the footer is made beside the rows
    path = written_base_file(tmp_path, ids, "20261125120000000")
    written = footer(path)
    assert {k: written[k] for k in bloom.FOOTER_KEYS} == footer_metadata(pa.array(ids))
    assert written[bloom.MIN_RECORD_KEY] == "a1" and written[bloom.MAX_RECORD_KEY] == "\uffff"
    assert len(DynamicBloomFilter.from_footer(written[bloom.BLOOM_FILTER_KEY]).bits) == 2
    # Arrow's schema is still there and holds none of the footer's entries; the time
    # column is a plain int64 in the file (Spark's Parquet reader refuses TIME) and the
    # engine's reader gives it back as a time; reading leaves the footer's entries out.
    assert "ARROW:schema" in written
    assert pq.read_schema(path).field("t").type == pa.int64()
    back = read_table(path)
    assert back.schema.field("t").type == pa.time64("us")
    assert back.schema.metadata is None or not (
        set(back.schema.metadata) & {k.encode() for k in bloom.FOOTER_KEYS}
    )
    assert back.column(HOODIE_RECORD_KEY).to_pylist() == ids


def test_a_small_files_filter_is_sized_for_its_keys(tmp_path: Path, spark) -> None:
    """A base file's filter is sized for its own keys (at least MIN_ENTRIES, at most
    Hudi's default) at Hudi's false-positive rate: a 1,500-key file's footer is ~40 times
    smaller than Hudi's 60,000-entry filter, holds every key and none of the absent
    ones, and Hadoop reads it."""
    assert [bloom.entries_for(n) for n in (0, 999, 1_500, 60_000, 130_000)] == [
        bloom.MIN_ENTRIES,
        bloom.MIN_ENTRIES,
        1_500,
        bloom.NUM_ENTRIES,
        bloom.NUM_ENTRIES,
    ]
    ids = [f"order-{i}" for i in range(1_500)]
    path = written_base_file(tmp_path, ids, "20261128120000000")
    text = footer(path)[bloom.BLOOM_FILTER_KEY]
    assert text == footer_metadata(pa.array(ids), 1_500)[bloom.BLOOM_FILTER_KEY]
    hudi_default = footer_metadata(pa.array(ids))[bloom.BLOOM_FILTER_KEY]
    assert len(hudi_default) > 35 * len(text)
    sized = DynamicBloomFilter.from_footer(text)
    assert (sized.num_entries, sized.num_hashes, len(sized.bits)) == (1_500, 30, 1)
    assert sized.might_contain(pa.array(ids)).all()
    assert not sized.might_contain(ABSENT).any()
    jvm = spark._jvm
    read = jvm.org.apache.hadoop.util.bloom.DynamicBloomFilter()
    raw = bytearray(base64.b64decode(text))
    read.readFields(jvm.java.io.DataInputStream(jvm.java.io.ByteArrayInputStream(raw)))
    key = jvm.org.apache.hadoop.util.bloom.Key

    def member(k: str) -> bool:
        return read.membershipTest(key(bytearray(k.encode())))

    assert all(member(k) for k in ids[:300])
    assert not any(member(k) for k in ABSENT.to_pylist()[:300])


def test_rewrites_and_compactions_carry_the_footer(tmp_path: Path) -> None:
    """Copy-on-Write rewrites and Merge-on-Read base files (new group, compaction)."""
    instants = ["20261125120000000", "20261125120000100"]
    for table_type, avro_schema in (("cow", ""), ("mor", '{"type":"record"}')):
        table = tmp_path / table_type
        table.mkdir()
        first = SliceWrite(
            LocalStorage(table),
            instants[0],
            0,
            "g-0",
            "g-0_0-1-0_" + instants[0] + ".parquet",
            0,
            avro_schema=avro_schema,
        )
        first.write(
            carried=pa.table({}),
            upserts=upserts(["3", "1", "2"]),
            deleted_keys=pa.array([], pa.string()),
            tombs=None,
            key_column="id",
            data_schema=DATA_SCHEMA,
            counts=RowCounts(inserts=3),
        )
        base = table / first.file_name
        assert footer(base)[bloom.MIN_RECORD_KEY] == "1"
        stored = read_table(base)
        carried = stored.filter(
            pc.invert(pc.is_in(stored.column(HOODIE_RECORD_KEY), pa.array(["1", "2"])))
        )
        second = SliceWrite(
            LocalStorage(table),
            instants[1],
            0,
            "g-0",
            "g-0_0-1-0_" + instants[1] + ".parquet",
            0,
            base_file=base.name,
            base_instant=instants[0],
            avro_schema=avro_schema,
        )
        second.write(
            carried=carried,
            upserts=upserts(["4", "2"]),
            deleted_keys=pa.array(["1"]),
            tombs=None,
            key_column="id",
            data_schema=DATA_SCHEMA,
            counts=RowCounts(inserts=1, updates=1, deletes=1),
        )
        path = table / second.file_name
        keys = pq.read_table(path).column(HOODIE_RECORD_KEY)
        assert keys.to_pylist() == ["3", "4", "2"]
        written = footer(path)
        sized = footer_metadata(keys, bloom.MIN_ENTRIES)  # a small file's filter
        assert {k: written[k] for k in bloom.FOOTER_KEYS} == sized
        assert (written[bloom.MIN_RECORD_KEY], written[bloom.MAX_RECORD_KEY]) == ("2", "4")
        flt = DynamicBloomFilter.from_footer(written[bloom.BLOOM_FILTER_KEY])
        assert flt.might_contain(keys).all() and not flt.might_contain(pa.array(["1"])).any()


def test_data_files_are_staged_outside_the_table_folder(tmp_path: Path, monkeypatch) -> None:
    """A staged file beside the data files is seen by readers: a log file's name is hidden
    like a temporary name, and hudi-rs listed ``..<log>.<random>.tmp`` as a log file, then
    failed when the rename took it away. Base and log files are staged in ``.hoodie/.temp``."""
    table = tmp_path / "t"
    table.mkdir()
    seen: list[tuple[Path, list[str]]] = []
    rename = os.replace

    def spy(src, dst) -> None:
        seen.append((Path(src).parent, sorted(os.listdir(table))))
        rename(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    instants = ["20261125120000000", "20261125120000100"]
    base = SliceWrite(
        LocalStorage(table),
        instants[0],
        0,
        "g-0",
        f"g-0_0-1-0_{instants[0]}.parquet",
        0,
        avro_schema='{"type":"record"}',
    )
    write = {
        "carried": pa.table({}),
        "deleted_keys": pa.array([], pa.string()),
        "tombs": None,
        "key_column": "id",
        "data_schema": DATA_SCHEMA,
    }
    base.write(upserts=upserts(["1", "2"]), counts=RowCounts(inserts=2), **write)
    log = SliceWrite(
        LocalStorage(table),
        instants[1],
        0,
        "g-0",
        LogFileName("g-0", instants[0], 1, 0).name,
        0,
        base_file=base.file_name,
        base_instant=instants[0],
        append=True,
        avro_schema=base.avro_schema,
    )
    log.write(upserts=upserts(["2"]), counts=RowCounts(updates=1), **write)
    assert [folder for folder, _ in seen] == [table / ".hoodie" / ".temp"] * 2
    assert [names for _, names in seen] == [[".hoodie"], [".hoodie", base.file_name]]
    assert sorted(os.listdir(table / ".hoodie" / ".temp")) == []
    assert sorted(os.listdir(table)) == sorted([".hoodie", base.file_name, log.file_name])
