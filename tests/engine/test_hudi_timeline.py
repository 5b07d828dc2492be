"""A timeline that stays small: clean and rollback instants, archiving, bounded caches.

Checked against what Hudi itself wrote (the rollback instants of hudi-rs's
``v6_nonpartitioned_rollback`` table, read from the cached source archive) and by reading
every table with hudi-rs before and after archiving.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import fastavro
import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.config import config_from_dict
from engine.errors import ConfigError
from engine.hudi import archive as ar
from engine.hudi import avro_models as am
from engine.hudi import timeline as tl
from engine.hudi.bucket_index import bucket_file_id
from engine.hudi.commit import WriteStat
from engine.hudi.file_slice import base_file_name
from engine.hudi.log_file import LogFileName, encode_log_file
from engine.hudi.schema import avro_schema_json, conform, file_schema
from engine.hudi.table import HudiTable
from engine.hudi.writer import HudiWriter
from tests.hudi_rs_data import table_zip

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("_cdc_pos", pa.int64())])
FILE_SCHEMA = file_schema(SCHEMA)
ROLLBACK_ZIP = "sample_table/mor/parquet/v6_nonpartitioned_rollback.zip"
HUDI_ROLLBACK = "v6_nonpartitioned_rollback/.hoodie/20250126040936578.rollback"


# ----------------------------------------------------------------- helpers


def _rows(instant: str, file_name: str, items: dict[int, tuple[str, int]]) -> pa.Table:
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


class Model:
    """Writes one bucket of a MOR (or COW) table through HudiTable and keeps the oracle:
    the rows a reader must see."""

    def __init__(self, path: Path, table_type: str = "MERGE_ON_READ") -> None:
        self.table = HudiTable.create(path, "t", ["id"], "_cdc_pos", 1, SCHEMA, table_type)
        self.file_id = bucket_file_id(0)
        self.base = ""
        self.version = 0
        self.rows: dict[int, tuple[str, int]] = {}

    def base_write(self, items: dict[int, tuple[str, int]], *, commit: bool = True) -> str:
        """A new slice holding ``items`` over the current rows (a compaction)."""
        t = self.table.new_instant_time()
        self.table.start_commit(t)
        rows = {**self.rows, **items}
        name = base_file_name(self.file_id, "0-1-0", t)
        pq.write_table(_rows(t, name, rows), self.table.base_path / name)
        if not commit:
            return t
        size = (self.table.base_path / name).stat().st_size
        prev = self.base or "null"
        stat = WriteStat(self.file_id, name, prev, len(rows), 0, 0, len(items), size, size)
        self.table.commit(t, [stat], SCHEMA, {"cdcctl.tombstones": ""})
        self.base, self.version, self.rows = t, 0, rows
        return t

    def log_write(self, upserts: dict[int, tuple[str, int]], deletes: list[int]) -> str:
        t = self.table.new_instant_time()
        self.table.start_commit(t)
        name = LogFileName(self.file_id, self.base, self.version + 1, 0).name
        data = encode_log_file(
            t,
            avro_schema_json(FILE_SCHEMA, "t"),
            _rows(t, name, upserts) if upserts else None,
            [str(k) for k in deletes],
        )
        (self.table.base_path / name).write_bytes(data)
        base = base_file_name(self.file_id, "0-1-0", self.base)
        stat = WriteStat(
            self.file_id, name, self.base, len(upserts), len(deletes), 0, 0, len(data), len(data),
            base_file=base,
        )  # fmt: skip
        self.table.commit(t, [stat], SCHEMA, {"cdcctl.tombstones": ""})
        self.version += 1
        self.rows.update(upserts)
        for k in deletes:
            self.rows.pop(k, None)
        return t

    def truncate(self, items: dict[int, tuple[str, int]]) -> str:
        """A replacecommit: the group is replaced by a new one holding only ``items``."""
        t = self.table.new_instant_time()
        self.table.start_commit(t, replace=True)
        old, self.file_id = self.file_id, bucket_file_id(0)
        name = base_file_name(self.file_id, "0-1-0", t)
        pq.write_table(_rows(t, name, items), self.table.base_path / name)
        size = (self.table.base_path / name).stat().st_size
        stat = WriteStat(self.file_id, name, "null", len(items), 0, 0, len(items), size, size)
        self.table.commit(
            t, [stat], SCHEMA, {}, operation_type="INSERT_OVERWRITE", replaced_file_ids=[old]
        )
        self.base, self.version, self.rows = t, 0, dict(items)
        return t

    def expected(self) -> dict[str, tuple[str, int]]:
        return {str(k): v for k, v in self.rows.items()}


def hudi_rs(path: Path) -> dict[str, tuple[str, int]]:
    """The snapshot hudi-rs reads (no duplicate keys allowed)."""
    batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    out: dict[str, tuple[str, int]] = {}
    if not batches:
        return out
    for r in conform(pa.Table.from_batches(batches), SCHEMA).to_pylist():
        assert r["_hoodie_record_key"] not in out, "duplicate live row"
        out[r["_hoodie_record_key"]] = (r["name"], r["_cdc_pos"])
    return out


def hoodie_names(table: HudiTable) -> set[str]:
    return {p.name for p in (table.base_path / ".hoodie").iterdir() if p.is_file()}


def container(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The embedded writer schema (JSON) and the one record of an instant file."""
    reader = fastavro.reader(io.BytesIO(path.read_bytes()))
    assert reader.codec == "null"
    records = list(reader)
    assert len(records) == 1
    return json.loads(reader.metadata["avro.schema"]), records[0]


def hudi_file(name: str) -> bytes:
    with zipfile.ZipFile(table_zip(ROLLBACK_ZIP)) as z:
        return z.read(name)


# ----------------------------------------------------------------- Avro of Hudi's instants


@pytest.mark.parametrize(
    ("suffix", "schema"), [(".requested", am.ROLLBACK_PLAN), ("", am.ROLLBACK_METADATA)]
)
def test_hudis_rollback_files_decode_with_our_schemas(suffix: str, schema: dict) -> None:
    data = hudi_file(HUDI_ROLLBACK + suffix)
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.codec == "null"
    embedded = json.loads(reader.metadata["avro.schema"])
    # Field by field, the schema Hudi 0.15 embedded is ours.
    assert embedded["name"] == schema["name"]
    assert [f["name"] for f in embedded["fields"]] == [f["name"] for f in schema["fields"]]
    for theirs, ours in zip(embedded["fields"], schema["fields"], strict=True):
        assert theirs == ours
    assert embedded == schema
    # ...and our schema as reader schema reads their record unchanged.
    ours_read = list(fastavro.reader(io.BytesIO(data), am.parsed(schema)))
    assert ours_read == list(reader)
    if suffix:
        assert ours_read[0]["instantToRollback"] == {
            "commitTime": "20250126040826878",
            "action": "deltacommit",
        }
    else:
        assert ours_read[0]["commitsRollback"] == ["20250126040826878"]
    # Hudi's rollback inflight file is empty.
    assert hudi_file(HUDI_ROLLBACK + ".inflight") == b""


def _rollback_reader_schema(suffix: str) -> Any:
    data = hudi_file(HUDI_ROLLBACK + suffix)
    return fastavro.parse_schema(
        json.loads(fastavro.reader(io.BytesIO(data)).metadata["avro.schema"])
    )


# ----------------------------------------------------------------- rollback


def test_rollback_is_recorded_and_reads_with_hudis_schema(tmp_path: Path) -> None:
    m = Model(tmp_path / "t")
    m.base_write({1: ("a", 1), 2: ("b", 1)})
    m.log_write({3: ("c", 2)}, [1])
    failed = m.base_write({9: ("lost", 9)}, commit=False)
    lost = base_file_name(m.file_id, "0-1-0", failed)
    assert hudi_rs(m.table.base_path) == m.expected()

    table = HudiTable.open(m.table.base_path)
    assert table.rollback_pending() == [failed]
    assert not (table.base_path / lost).exists()
    timeline = tl.scan(table.base_path / ".hoodie")
    assert not timeline.pending
    [r] = timeline.completed_services("rollback")
    assert r > failed and r == timeline.latest
    hoodie = table.base_path / ".hoodie"
    assert (hoodie / f"{r}.rollback.inflight").read_bytes() == b""
    # Ours decode with the schemas Hudi embedded in its own rollback files.
    for suffix, expect in ((".requested", am.ROLLBACK_PLAN), ("", am.ROLLBACK_METADATA)):
        embedded, record = container(hoodie / f"{r}.rollback{suffix}")
        assert embedded == expect
        data = (hoodie / f"{r}.rollback{suffix}").read_bytes()
        [theirs] = fastavro.reader(io.BytesIO(data), _rollback_reader_schema(suffix))
        assert theirs == record
    plan = container(hoodie / f"{r}.rollback.requested")[1]
    assert plan["instantToRollback"] == {"commitTime": failed, "action": "deltacommit"}
    assert [req["filesToBeDeleted"] for req in plan["RollbackRequests"]] == [
        [str(table.base_path / lost)]
    ]
    meta = container(hoodie / f"{r}.rollback")[1]
    assert meta["commitsRollback"] == [failed]
    assert meta["instantsRollback"] == [{"commitTime": failed, "action": "deltacommit"}]
    assert meta["partitionMetadata"][""]["successDeleteFiles"] == [str(table.base_path / lost)]
    # A pending rollback is not a pending write; readers and the writer go on.
    assert hudi_rs(table.base_path) == m.expected()
    assert table.new_instant_time() > r


def test_a_rollback_interrupted_by_a_crash_is_finished_on_start(tmp_path: Path) -> None:
    m = Model(tmp_path / "t")
    m.base_write({1: ("a", 1)})
    failed = m.base_write({2: ("lost", 2)}, commit=False)
    lost = m.table.base_path / base_file_name(m.file_id, "0-1-0", failed)
    hoodie = m.table.base_path / ".hoodie"
    # The crash came after R.rollback.requested: R's plan is there, nothing else done.
    r = m.table.new_instant_time()
    plan = {
        "instantToRollback": {"commitTime": failed, "action": "deltacommit"},
        "RollbackRequests": [
            {
                "partitionPath": "",
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": [str(lost)],
                "logBlocksToBeDeleted": {},
            }
        ],
        "version": 1,
    }
    (hoodie / f"{r}.rollback.requested").write_bytes(
        am.serialize_avro_metadata(am.ROLLBACK_PLAN, plan)
    )
    timeline = tl.scan(hoodie)
    assert timeline.pending_services("rollback") == [r]
    assert list(timeline.pending) == [failed]

    table = HudiTable.open(m.table.base_path)
    assert table.rollback_pending() == [failed]
    timeline = tl.scan(hoodie)
    # Finished under R itself: no second rollback instant.
    assert timeline.completed_services("rollback") == [r]
    assert not timeline.pending and not timeline.pending_services("rollback")
    assert not lost.exists()
    assert hudi_rs(table.base_path) == m.expected()


# ----------------------------------------------------------------- clean


def test_clean_is_recorded_and_a_pending_clean_finished(tmp_path: Path) -> None:
    m = Model(tmp_path / "t")
    first = m.base_write({1: ("a", 1), 2: ("b", 1)})
    m.log_write({1: ("a2", 2)}, [])
    second = m.base_write({3: ("c", 3)})
    m.log_write({3: ("c2", 4)}, [2])
    deleted = set(m.table.clean(1))
    assert base_file_name(m.file_id, "0-1-0", first) in deleted
    hoodie = m.table.base_path / ".hoodie"
    timeline = tl.scan(hoodie)
    [c] = timeline.completed_services("clean")
    plan_schema, plan = container(hoodie / f"{c}.clean.requested")
    assert plan_schema == am.CLEANER_PLAN
    assert container(hoodie / f"{c}.clean.inflight") == (plan_schema, plan)  # the plan again
    last = sorted(timeline.completed)[-1]
    assert plan["earliestInstantToRetain"] == {
        "timestamp": last,
        "action": "deltacommit",
        "state": "COMPLETED",
    }
    assert plan["policy"] == "KEEP_LATEST_COMMITS" and plan["version"] == 2
    files = {Path(f["filePath"]).name for f in plan["filePathsToBeDeletedPerPartition"][""]}
    assert files == deleted
    meta_schema, meta = container(hoodie / f"{c}.clean")
    assert meta_schema == am.CLEAN_METADATA
    assert meta["earliestCommitToRetain"] == last
    assert set(meta["partitionMetadata"][""]["successDeleteFiles"]) == deleted
    assert meta["totalFilesDeleted"] == len(deleted)
    assert hudi_rs(m.table.base_path) == m.expected()
    assert m.table.clean(1) == []  # nothing to delete: no clean instant (Hudi plans none)
    assert tl.scan(hoodie).completed_services("clean") == [c]

    # A crash after C.clean.requested: the next start deletes the files and completes C.
    m.log_write({4: ("d", 5)}, [])
    m.base_write({5: ("e", 6)})
    before = set(tl.scan(hoodie).files)
    table = HudiTable.open(m.table.base_path)
    doomed = base_file_name(m.file_id, "0-1-0", second)
    c2 = table.new_instant_time()
    plan["filePathsToBeDeletedPerPartition"] = {
        "": [{"filePath": str(table.base_path / doomed), "isBootstrapBaseFile": False}]
    }
    (hoodie / f"{c2}.clean.requested").write_bytes(
        am.serialize_avro_metadata(am.CLEANER_PLAN, plan)
    )
    assert tl.scan(hoodie).pending_services("clean") == [c2]
    assert HudiTable.open(table.base_path).rollback_pending() == []
    timeline = tl.scan(hoodie)
    assert timeline.completed_services("clean") == [c, c2]
    assert set(timeline.files) == before | {c2}
    assert not (table.base_path / doomed).exists()
    assert hudi_rs(table.base_path) == m.expected()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_pending_clean_deletes_nothing_outside_the_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table copied with a clean pending (its plan names the files at the old place):
    completing the clean in the copy deletes no file outside the copy's folder, nor any
    file there that is not a data file; a bare file name is taken in the copy's folder."""
    m = Model(tmp_path / "old")
    first = m.base_write({1: ("a", 1), 2: ("b", 1)})
    m.log_write({1: ("a2", 2)}, [])
    m.base_write({3: ("c", 3)})
    m.log_write({3: ("c2", 4)}, [2])
    old, new, outside = m.table.base_path, tmp_path / "new", tmp_path / "outside"
    base = base_file_name(m.file_id, "0-1-0", first)
    log = LogFileName(m.file_id, first, 1, 0).name
    outside.mkdir()
    (outside / base).write_bytes(b"someone else's")
    (old / "notes.txt").write_text("not a data file")
    planned = [
        str(old / base),  # the plan's own full path: the old place, not the copy
        str(outside / base),
        f"../outside/{base}",
        str(new / ".." / "outside" / base),
        str(new / "notes.txt"),
        log,  # a bare name: the copy's own file
    ]
    timeline = tl.scan(old / ".hoodie")
    last = sorted(timeline.completed)[-1]
    plan = {
        "earliestInstantToRetain": {
            "timestamp": last,
            "action": timeline.completed[last],
            "state": "COMPLETED",
        },
        "lastCompletedCommitTimestamp": last,
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {},
        "version": 2,
        "filePathsToBeDeletedPerPartition": {
            "": [{"filePath": p, "isBootstrapBaseFile": False} for p in planned]
        },
        "partitionsToBeDeleted": [],
    }
    c = m.table.new_instant_time()
    (old / ".hoodie" / f"{c}.clean.requested").write_bytes(
        am.serialize_avro_metadata(am.CLEANER_PLAN, plan)
    )
    shutil.copytree(old, new)
    before_old, before_outside = _files(old), _files(outside)

    with caplog.at_level("WARNING", logger="cdcctl.hudi"):
        assert HudiTable.open(new).rollback_pending() == []
    assert tl.scan(new / ".hoodie").completed_services("clean") == [c]
    assert _files(old) == before_old and _files(outside) == before_outside
    assert (new / base).is_file() and (new / "notes.txt").is_file()
    assert not (new / log).exists()
    _, meta = container(new / ".hoodie" / f"{c}.clean")
    partition = meta["partitionMetadata"][""]
    assert partition["successDeleteFiles"] == [log] and meta["totalFilesDeleted"] == 1
    assert partition["failedDeleteFiles"] == [Path(p).name for p in planned[:-1]]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "cdcctl.hudi"]
    assert "5 file(s) of its plan left in place" in warning and str(old / base) in warning
    assert hudi_rs(new) == m.expected()


# ----------------------------------------------------------------- archiving


def _grow(m: Model, n: int, start: int, compact: bool = True) -> None:
    """``n`` commits: logs with upserts and deletes, and a compaction every 7th."""
    for i in range(start, start + n):
        if compact and i % 7 == 6:
            m.base_write({i: (f"c{i}", i)})
        else:
            m.log_write({i: (f"v{i}", i), i + 1000: (f"w{i}", i)}, [i - 3] if i % 3 == 0 else [])


def test_archiving_keeps_every_reader_and_the_writer_working(tmp_path: Path) -> None:
    m = Model(tmp_path / "t")
    m.base_write({k: (f"init{k}", 0) for k in range(5)})
    _grow(m, 30, 1)
    truncated = m.truncate({500: ("after-truncate", 500)})
    # After the truncate the group only gets log files: its live slice's base instant
    # (the truncate) gets archived.
    _grow(m, 35, 40, compact=False)
    table = m.table
    writer = HudiWriter(HudiTable.open(table.base_path))
    assert len(writer.completed_instants()) > 60
    before_rows = hudi_rs(table.base_path)
    assert before_rows == m.expected()
    before_groups = writer.file_groups()
    hoodie_before = len(hoodie_names(table))

    # The replaced group still has files: the truncate and everything after stay active.
    archived = writer.archive(20, 30)
    assert archived and max(archived) < truncated
    assert truncated in writer.completed_instants()
    assert hudi_rs(table.base_path) == m.expected()

    # Clean removes the replaced group; now archiving goes up to the clean's retained commit.
    writer.clean(10)
    archived2 = writer.archive(20, 30)
    active = writer.completed_instants()
    assert truncated in archived2 and len(active) == 20
    assert len(hoodie_names(table)) < hoodie_before / 2
    cleans = tl.scan(table.base_path / ".hoodie").completed_services("clean")
    ectr = container(table.base_path / ".hoodie" / f"{cleans[-1]}.clean")[1]
    assert max(archived2) < ectr["earliestCommitToRetain"]

    # Readers see the same table: hudi-rs, the writer's slice view, and the oracle.
    after_rows = hudi_rs(table.base_path)
    assert after_rows == before_rows == m.expected()
    reopened = HudiWriter.open(table.base_path)
    after_groups = reopened.file_groups()
    assert {b: (g.file_id, g.instant, g.log_files) for b, g in after_groups.items()} == {
        b: (g.file_id, g.instant, g.log_files) for b, g in before_groups.items()
    }
    # The live slice's base instant is archived: its metadata is read back from the archive.
    state = after_groups[0].instant
    assert state not in reopened.completed_instants()
    meta = reopened._table.commit_metadata(state)
    assert state == truncated and meta["operationType"] == "INSERT_OVERWRITE"
    [replaced] = meta["partitionToReplaceFileIds"][""]
    assert replaced != after_groups[0].file_id
    assert "cdcctl.arrow_schema" in meta["extraMetadata"]
    assert reopened.schema_at(state) == SCHEMA
    plan = reopened.plan_writes(reopened.begin(), after_groups, [0], set(), SCHEMA, 0)
    assert plan[0].base_instant == state

    # The archive files are Hudi log files of Avro data blocks of HoodieArchivedMetaEntry.
    archives = ar.list_archives(table.base_path / ".hoodie" / "archived")
    assert [name for _, name, _ in archives] == [
        ".commits_.archive.1_1-0-1",
        ".commits_.archive.2_1-0-1",
    ]
    folder = table.base_path / ".hoodie" / "archived"
    entries = [e for _, name, _ in archives for e in ar.read_archive(folder / name)]
    states = {(e.instant, e.state) for e in entries}
    for instant in [*archived, *archived2]:
        assert (instant, "COMPLETED") in states and (instant, "REQUESTED") in states
    replace = next(e for e in entries if e.instant == truncated and e.state == "COMPLETED")
    assert replace.record["hoodieReplaceCommitMetadata"]["partitionToReplaceFileIds"]
    data = (table.base_path / ".hoodie" / "archived" / archives[0][1]).read_bytes()
    assert data[:6] == b"#HUDI#" and data[18:22] == b"\x00\x00\x00\x03"  # Avro data block


def test_archiving_boundaries(tmp_path: Path) -> None:
    m = Model(tmp_path / "t", "COPY_ON_WRITE")
    for i in range(12):
        m.base_write({i: (f"v{i}", i)})
    table = m.table
    writes = table.completed_instants()
    # Below keep_max nothing moves; above it, all but keep_min.
    assert table.instants_to_archive(4, 12) == []
    assert table.instants_to_archive(4, 10) == writes[:8]
    # Never at or after the greatest completed write before the oldest pending one.
    pending = m.base_write({99: ("p", 99)}, commit=False)
    assert table.instants_to_archive(2, 5) == writes[:10]
    assert pending not in table.instants_to_archive(2, 5)
    table.rollback_pending()
    # Never past the earliest commit the last clean retained.
    table.clean(6)
    ectr = writes[-6]
    assert table.instants_to_archive(2, 5) == [w for w in writes if w < ectr]


def test_a_crash_between_archive_file_and_deletion_is_repaired(tmp_path: Path) -> None:
    m = Model(tmp_path / "t", "COPY_ON_WRITE")
    for i in range(12):
        m.base_write({i: (f"v{i}", i)})
    hoodie = m.table.base_path / ".hoodie"
    saved = {p.name: p.read_bytes() for p in hoodie.iterdir() if p.is_file()}
    archived = m.table.archive(4, 10)
    # Put the archived instants' files back: as if the process died right after the
    # archive file became durable.
    for name, data in saved.items():
        (hoodie / name).write_bytes(data)
    assert set(tl.scan(hoodie).completed) >= set(archived)
    table = HudiTable.open(m.table.base_path)
    table.rollback_pending()  # start-up
    assert set(tl.scan(hoodie).completed).isdisjoint(archived)
    assert hudi_rs(table.base_path) == m.expected()


def test_archive_files_expire_unless_a_live_slice_needs_them(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table = HudiTable.create(base, "t", ["id"], "_cdc_pos", 2, SCHEMA, "COPY_ON_WRITE")
    ids = [bucket_file_id(0), bucket_file_id(1)]
    # Years ago: bucket 1 written once, then only bucket 0.
    instants = [f"20200101{i:02d}0000000" for i in range(20)]
    prev = {0: "null", 1: "null"}

    def write(t: str, bucket: int, i: int) -> None:
        table.start_commit(t)
        name = base_file_name(ids[bucket], "0-1-0", t)
        pq.write_table(_rows(t, name, {bucket * 100 + i: ("x", i)}), base / name)
        size = (base / name).stat().st_size
        stat = WriteStat(ids[bucket], name, prev[bucket], 1, 0, 0, 1, size, size)
        table.commit(t, [stat], SCHEMA, {"cdcctl.tombstones": ""})
        prev[bucket] = t

    for i, t in enumerate(instants[:12]):
        write(t, 1 if i == 0 else 0, i)
    writer = HudiWriter(table)
    archived_dir = base / ".hoodie" / "archived"
    assert writer.archive(2, 4, 1.0) == instants[:10]
    # Expired, but it holds bucket 1's live slice instant: it stays.
    assert [n for _, n, _ in ar.list_archives(archived_dir)] == [".commits_.archive.1_1-0-1"]
    for i, t in enumerate(instants[12:], 12):
        write(t, 0, i)
    assert writer.archive(2, 4, 1.0) == instants[10:18]
    # The second file holds no live instant: expired, it goes at once.
    assert [n for _, n, _ in ar.list_archives(archived_dir)] == [".commits_.archive.1_1-0-1"]
    assert writer.schema_at(instants[0]) == SCHEMA
    assert hudi_rs(base) == {"100": ("x", 0), "19": ("x", 19)}
    # 0 keeps archive files forever.
    for i in range(20, 24):
        write(f"20200101{i:02d}0000000", 0, i)
    writer.archive(2, 4, 0)
    assert len(ar.list_archives(archived_dir)) == 2


# ----------------------------------------------------------------- caches and listings


def test_caches_are_bounded_and_a_batch_lists_hoodie_once(tmp_path: Path) -> None:
    m = Model(tmp_path / "t")
    m.base_write({1: ("a", 1)})
    writer = HudiWriter(HudiTable.open(m.table.base_path))
    counts = []
    for i in range(3):
        before = tl.SCANS
        # One batch as the replicator drives it (planning, merge, commit).
        instant = writer.begin()
        writer.completed_instants()
        groups = writer.file_groups()
        writer.bucket_ids(pa.array(["1"]))
        writer.schema()
        write = writer.plan_writes(instant, groups, [0], set(), SCHEMA, 0)[0]
        upserts = _rows(instant, write.file_name, {i: ("x", i)})
        data = encode_log_file(instant, avro_schema_json(FILE_SCHEMA, "t"), upserts, [])
        (writer.path / write.file_name).write_bytes(data)
        stat = WriteStat(
            write.file_id, write.file_name, write.base_instant or "null", 1, 0, 0, 1, len(data),
            len(data), base_file=Path(write.base_file or "").name,
        )  # fmt: skip
        writer._table.commit(instant, [stat], SCHEMA, {"cdcctl.tombstones": ""})
        writer.checkpoint("topic")
        writer.extra_metadata()
        counts.append(tl.SCANS - before)
    assert counts == [1, 1, 1]
    table = writer._table
    for i in range(300):
        table._cache_metadata(f"x{i}", {})
    assert len(table._metadata_cache) == 256


def test_config_validates_archiving() -> None:
    base = {
        "source": {"bootstrap_servers": "localhost:9092", "topics": "^db"},
        "target": {"path": "."},
    }
    cfg = config_from_dict(base)
    assert (cfg.hudi.keep_min_commits, cfg.hudi.keep_max_commits) == (20, 30)
    # Archive files are kept, as Hudi keeps them (its archiver never deletes one).
    assert cfg.hudi.archive_retention_hours == 0
    for bad in (
        {"keep_min_commits": 30, "keep_max_commits": 30},
        {"keep_min_commits": 10, "clean_retain_commits": 10},
        {"archive_retention_hours": -1},
    ):
        with pytest.raises(ConfigError):
            config_from_dict({**base, "hudi": bad})


def test_a_copy_with_an_unknown_archive_block_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ".commits_.archive.1_1-0-1"
    path.write_bytes(encode_log_file("20250101000000000", "{}", None, []))
    with pytest.raises(Exception, match="Avro data blocks"):
        list(ar.read_archive(path))
    shutil.rmtree(tmp_path, ignore_errors=True)
