"""The merge workers' key index (``engine.hudi.key_index.KeyIndex``): an append finds
the stored rows of its keys by binary search over hashes instead of scanning the group.

Each case compares the cached, indexed read of a slice (``read_slice`` with keys and
columns: what a Merge-on-Read append does) with the plain read of the same files (every
row, every column, no cache) cut to the same keys, on real base and log files; once with
the real hash and once with a hash that makes most keys collide, so that the fallback and
the check that a found key is the key asked for are exercised too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.hudi import key_index
from engine.hudi.file_slice import read_slice
from engine.hudi.key_index import ColumnCache, KeyIndex, index_path, load_index
from engine.hudi.log_file import encode_log_file
from engine.hudi.schema import avro_schema_json, file_schema

SCHEMA = pa.schema([("id", pa.string()), ("_cdc_pos", pa.int64())])
FILE_SCHEMA = file_schema(SCHEMA)
COLUMNS = ["_hoodie_record_key", "_cdc_pos"]

key_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)


def _rows(instant: str, items: dict[str, int]) -> pa.Table:
    keys = list(items)
    return pa.table(
        {
            "_hoodie_commit_time": [instant] * len(keys),
            "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in range(len(keys))],
            "_hoodie_record_key": keys,
            "_hoodie_partition_path": [""] * len(keys),
            "_hoodie_file_name": ["f"] * len(keys),
            "id": keys,
            "_cdc_pos": [items[k] for k in keys],
        },
        schema=FILE_SCHEMA,
    )


def _slice(folder: Path, base: dict[str, int], logs: list[tuple[dict[str, int], list[str]]]):
    base_path = folder / "base.parquet"
    pq.write_table(_rows("20260101000000000", base), base_path)
    paths = []
    for i, (upserts, deletes) in enumerate(logs):
        instant = f"2026010100000{i + 1:04d}"
        path = folder / f".log.{i + 1}"
        path.write_bytes(
            encode_log_file(
                instant,
                avro_schema_json(FILE_SCHEMA, "t"),
                _rows(instant, upserts) if upserts else None,
                deletes,
            )
        )
        paths.append(str(path))
    return base_path, paths


def _as_dict(table: pa.Table | None) -> dict[str, int]:
    assert table is not None
    rows = table.select(COLUMNS).to_pylist()
    found = {r["_hoodie_record_key"]: r["_cdc_pos"] for r in rows}
    assert len(found) == len(rows), "a key came back twice"
    return found


def _weak_hash(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Most keys share a hash: collisions inside the base file and with absent keys."""
    return np.array([len(k.encode()) % 3 for k in pa.chunked_array([keys]).to_pylist()], np.uint64)


@pytest.mark.parametrize("weak", [False, True], ids=["real-hash", "colliding-hash"])
@pytest.mark.parametrize("log_index_rows", [1, 4096], ids=["logs-indexed", "logs-scanned"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_indexed_read_equals_plain_read(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    weak: bool,
    log_index_rows: int,
    data: st.DataObject,
) -> None:
    monkeypatch.setattr(key_index, "INDEX_MIN_ROWS", log_index_rows)
    if weak:
        monkeypatch.setattr(key_index, "key_hashes", _weak_hash)
    monkeypatch.setattr(key_index, "FILE_CACHE", ColumnCache(64 << 20))
    universe = data.draw(st.lists(key_text, min_size=1, max_size=30, unique=True))
    pos = st.integers(0, 1000)
    base = data.draw(st.dictionaries(st.sampled_from(universe), pos))
    logs = data.draw(
        st.lists(
            st.tuples(
                st.dictionaries(st.sampled_from(universe), pos, max_size=8),
                st.lists(st.sampled_from(universe), max_size=5, unique=True),
            ),
            max_size=4,
        )
    )
    # Keys asked for: stored, deleted and never stored ones, possibly repeated.
    asked = data.draw(st.lists(st.sampled_from(universe + ["\x00absent", ""]), max_size=20))
    folder = tmp_path_factory.mktemp("slice")
    base_path, log_paths = _slice(folder, base, logs)
    everything = _as_dict(read_slice(base_path, log_paths))
    # The plain read against a fold of the files in write order (a log's rows, then its
    # deletes).
    state = dict(base)
    for upserts, deletes in logs:
        state.update(upserts)
        for k in deletes:
            state.pop(k, None)
    assert everything == state
    expected = {k: v for k, v in everything.items() if k in set(asked)}
    keys = pa.array(asked, pa.string())
    index_dir = folder / "key-index"
    index_dir.mkdir()
    for _ in range(2):  # the second read is served by the cached index
        got = read_slice(base_path, log_paths, keys=keys, columns=COLUMNS, index_dir=index_dir)
        assert _as_dict(got) == expected
    # Another worker (an empty cache) maps the index the first one kept.
    monkeypatch.setattr(key_index, "FILE_CACHE", ColumnCache(64 << 20))
    assert [p.name for p in index_dir.iterdir()] == [index_path(index_dir, base_path, COLUMNS).name]
    got = read_slice(base_path, log_paths, keys=keys, columns=COLUMNS, index_dir=index_dir)
    assert _as_dict(got) == expected
    # The same files with the cache switched off take the scanning path: same answer.
    monkeypatch.setattr(key_index, "FILE_CACHE", ColumnCache(0))
    assert _as_dict(read_slice(base_path, log_paths, keys=keys, columns=COLUMNS)) == expected


def test_index_finds_every_stored_key_and_nothing_else() -> None:
    stored = [f"k{i}" for i in range(50_000)]
    rows = pa.table({"_hoodie_record_key": stored, "_cdc_pos": list(range(50_000))})
    index = KeyIndex.build(rows)
    assert index.distinct and index.rows.num_rows == 50_000
    asked = pa.array([f"k{i}" for i in range(0, 60_000, 7)] + ["k7", "nope"])
    found = index.find(asked)
    assert sorted(found.column("_hoodie_record_key").to_pylist(), key=lambda k: int(k[1:])) == [
        f"k{i}" for i in range(0, 50_000, 7)
    ]
    assert all(r["_cdc_pos"] == int(r["_hoodie_record_key"][1:]) for r in found.to_pylist())
    assert index.find(pa.array([], pa.string())).num_rows == 0


def test_kept_index_is_used_only_for_the_file_it_was_built_from(tmp_path: Path) -> None:
    index_dir = tmp_path / "key-index"
    index_dir.mkdir()
    base = tmp_path / "aaaa-0_0-1-0_20260101000000000.parquet"
    pq.write_table(_rows("20260101000000000", {"a": 1, "b": 2}), base)
    built = load_index(base, COLUMNS, index_dir)
    kept = index_path(index_dir, base, COLUMNS)
    assert kept.exists()
    mapped = KeyIndex.open(kept, base)
    assert mapped is not None and mapped.rows.equals(built.rows)
    assert list(mapped.hashes) == list(built.hashes) and mapped.distinct
    assert list(mapped.order) == list(built.order)
    # The base file replaced (another size and time): the kept index no longer answers.
    pq.write_table(_rows("20260101000000000", {"a": 1, "b": 2, "c": 3}), base)
    assert KeyIndex.open(kept, base) is None
    assert _as_dict(load_index(base, COLUMNS, index_dir).rows) == {"a": 1, "b": 2, "c": 3}
    # A damaged index file is rebuilt from the base file, never trusted.
    kept.write_bytes(kept.read_bytes()[:100])
    assert KeyIndex.open(kept, base) is None
    assert _as_dict(load_index(base, COLUMNS, index_dir).rows) == {"a": 1, "b": 2, "c": 3}
    # The group's next base file replaces the index of the one before.
    newer = tmp_path / "aaaa-0_0-1-0_20260101000000001.parquet"
    pq.write_table(_rows("20260101000000001", {"d": 4}), newer)
    load_index(newer, COLUMNS, index_dir)
    assert [p.name for p in index_dir.iterdir()] == [index_path(index_dir, newer, COLUMNS).name]


def test_an_index_of_many_row_groups_is_kept_and_searched_as_one_chunk(tmp_path: Path) -> None:
    # Arrow's take over a table of several chunks first joins them all (O(rows) per
    # search): an index keeps its rows in one chunk, and its file as one record batch,
    # so that a mapped index is searched without a copy.
    base = tmp_path / "cccc-0_0-1-0_20260101000000000.parquet"
    items = {f"k{i}": i for i in range(5_000)}
    pq.write_table(_rows("20260101000000000", items), base, row_group_size=700)
    assert pq.ParquetFile(base).metadata.num_row_groups == 8
    index_dir = tmp_path / "key-index"
    index_dir.mkdir()
    built = load_index(base, COLUMNS, index_dir)
    assert {c.num_chunks for c in built.rows.columns} == {1}
    kept = index_path(index_dir, base, COLUMNS)
    with pa.memory_map(str(kept)) as source:
        assert pa.ipc.open_file(source).num_record_batches == 1
    mapped = KeyIndex.open(kept, base)
    assert mapped is not None and {c.num_chunks for c in mapped.rows.columns} == {1}
    asked = pa.array(["k4999", "k0", "k701", "k1400", "nope"])
    assert _as_dict(mapped.find(asked)) == {"k0": 0, "k701": 701, "k1400": 1400, "k4999": 4999}
    # An index file of several batches (written before) is still read right.
    many = pa.Table.from_batches(built.rows.to_batches(max_chunksize=900))
    assert KeyIndex(many, built.hashes, built.order, built.distinct).rows.column(0).num_chunks == 1


def test_an_index_that_cannot_be_kept_is_used_from_memory(tmp_path: Path) -> None:
    base = tmp_path / "bbbb-0_0-1-0_20260101000000000.parquet"
    pq.write_table(_rows("20260101000000000", {"a": 1, "b": 2}), base)
    missing = tmp_path / "no-such-folder"  # the write fails: the index still answers
    index = load_index(base, COLUMNS, missing)
    assert _as_dict(index.find(pa.array(["b", "z"]))) == {"b": 2}
    assert not missing.exists()


def test_the_file_cache_default_scales_with_the_machine() -> None:
    """1 GiB, or a sixteenth of the memory when less, 256 MiB when it cannot be told;
    ``CDCCTL_MERGE_CACHE_BYTES`` wins (read when a worker imports the module)."""
    assert key_index.default_cache_bytes(24 << 30) == 1 << 30
    assert key_index.default_cache_bytes(8 << 30) == 512 << 20
    assert key_index.default_cache_bytes(0) == 256 << 20
    code = "from engine.hudi import key_index; print(key_index.FILE_CACHE.limit)"
    for value, expected in (("12345", 12345), ("0", 0), ("", key_index.default_cache_bytes())):
        env = {**os.environ, "CDCCTL_MERGE_CACHE_BYTES": value}
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(out.stdout) == expected, value


def test_a_containers_memory_limit_bounds_the_cache(tmp_path: Path, monkeypatch) -> None:
    """In a container the limit, not the host's memory, sizes the cache (cgroup v2's
    ``max`` and v1's huge "unlimited" value leave the machine's memory)."""
    limit = tmp_path / "memory.max"
    monkeypatch.setattr(key_index, "CGROUP_LIMITS", (str(limit), str(tmp_path / "v1")))
    machine = key_index.available_memory()  # neither file exists: the machine's memory
    assert machine > 0
    limit.write_text("2147483648\n")
    assert key_index.available_memory() == 2 << 30
    assert key_index.default_cache_bytes() == 128 << 20
    limit.write_text("max\n")
    assert key_index.available_memory() == machine
    limit.unlink()
    (tmp_path / "v1").write_text(str(2**63 - 4096))
    assert key_index.available_memory() == machine
