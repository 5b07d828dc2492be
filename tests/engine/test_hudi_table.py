"""Tests of engine.hudi.table against real files, with hudi-rs (``hudi``) as the reader.

Base files are written here with pyarrow the way the merge writes them: the five
``_hoodie_*`` string columns, then the data columns; one file per file group touched.
"""

from __future__ import annotations

import json
import os
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import HudiError
from engine.hudi import options as o
from engine.hudi import table as table_module
from engine.hudi import timeline as timeline_module
from engine.hudi.bucket_index import bucket_file_id, bucket_id
from engine.hudi.commit import WriteStat
from engine.hudi.file_slice import base_file_name
from engine.hudi.schema import (
    HOODIE_COMMIT_SEQNO,
    HOODIE_COMMIT_TIME,
    HOODIE_FILE_NAME,
    HOODIE_PARTITION_PATH,
    HOODIE_RECORD_KEY,
)
from engine.hudi.table import HudiTable

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ts", pa.int64())])
NUM_BUCKETS = 4

# A row of the table as the tests track it: key -> (name, ts, commit time, seqno).
Rows = dict[int, tuple[str, int, str, str]]


# ----------------------------------------------------------------------------- helpers


def make_table(path: Path) -> HudiTable:
    return HudiTable.create(path, "orders", ["id"], "ts", NUM_BUCKETS, SCHEMA)


def write_slice(table: HudiTable, instant: str, file_id: str, rows: Rows) -> Path:
    """Write one base file holding ``rows`` (already carrying their meta values)."""
    name = base_file_name(file_id, "0-1-0", instant)
    keys = sorted(rows)
    columns: dict[str, pa.Array] = {
        HOODIE_COMMIT_TIME: pa.array([rows[k][2] for k in keys], pa.string()),
        HOODIE_COMMIT_SEQNO: pa.array([rows[k][3] for k in keys], pa.string()),
        HOODIE_RECORD_KEY: pa.array([str(k) for k in keys], pa.string()),
        HOODIE_PARTITION_PATH: pa.array([""] * len(keys), pa.string()),
        HOODIE_FILE_NAME: pa.array([name] * len(keys), pa.string()),
        "id": pa.array(keys, pa.int64()),
        "name": pa.array([rows[k][0] for k in keys], pa.string()),
        "ts": pa.array([rows[k][1] for k in keys], pa.int64()),
    }
    path = table.base_file_path(name)
    pq.write_table(pa.table(columns), path)
    return path


class Writer:
    """Plays the merge: keeps the table state, writes slices, commits."""

    def __init__(self, table: HudiTable) -> None:
        self.table = table
        self.groups: dict[int, Rows] = {}  # bucket -> rows of the live group
        self.file_ids: dict[int, str] = {}
        self.slice_instant: dict[int, str] = {}

    def expected(self) -> list[tuple[int, str, int]]:
        return sorted((k, r[0], r[1]) for rows in self.groups.values() for k, r in rows.items())

    def upsert(
        self,
        changes: dict[int, tuple[str, int] | None],
        checkpoint: str | None = None,
        complete: bool = True,
    ) -> str:
        """Apply upserts (value) and deletes (None); one new slice per touched bucket."""
        t = self.table.new_instant_time()
        self.table.start_commit(t)
        touched: dict[int, dict[str, int]] = {}
        new_groups = {b: dict(rows) for b, rows in self.groups.items()}
        for key, value in changes.items():
            bucket = bucket_id(str(key), NUM_BUCKETS)
            rows = new_groups.setdefault(bucket, {})
            counts = touched.setdefault(bucket, {"ins": 0, "upd": 0, "del": 0})
            if value is None:
                counts["del"] += key in rows
                rows.pop(key, None)
            else:
                counts["upd" if key in rows else "ins"] += 1
                rows[key] = (value[0], value[1], t, "")
        stats = []
        for bucket, counts in touched.items():
            rows = new_groups[bucket]
            # Changed rows get this instant's seqno; carried-over rows keep theirs.
            for i, key in enumerate(sorted(rows)):
                name, ts, ctime, seqno = rows[key]
                if ctime == t:
                    rows[key] = (name, ts, t, f"{t}_0_{i}")
            file_id = self.file_ids.get(bucket) or bucket_file_id(bucket)
            path = write_slice(self.table, t, file_id, rows)
            size = path.stat().st_size
            stats.append(
                WriteStat(
                    file_id=file_id,
                    path=path.name,
                    prev_commit=self.slice_instant.get(bucket, "null"),
                    num_writes=len(rows),
                    num_deletes=counts["del"],
                    num_update_writes=counts["upd"],
                    num_inserts=counts["ins"],
                    total_write_bytes=size,
                    file_size_in_bytes=size,
                )
            )
            if complete:
                self.file_ids[bucket] = file_id
                self.slice_instant[bucket] = t
        if complete:
            extra = {o.CHECKPOINT_KEY: checkpoint} if checkpoint else {}
            self.table.commit(t, stats, SCHEMA, extra)
            self.groups = new_groups
        return t


def hudi_read(path: Path, as_of: str | None = None) -> pa.Table:
    options = hudi.HudiReadOptions()
    if as_of:
        options = options.with_as_of_timestamp(as_of)
    reader = hudi.HudiTable(str(path))  # new object: hudi-rs caches the timeline
    batches = reader.read(options)
    if not batches:
        return SCHEMA.empty_table()
    return pa.Table.from_batches(batches)


def hudi_rows(path: Path, as_of: str | None = None) -> list[tuple[int, str, int]]:
    t = hudi_read(path, as_of)
    return sorted(zip(t["id"].to_pylist(), t["name"].to_pylist(), t["ts"].to_pylist(), strict=True))


def keys_by_bucket(count: int) -> dict[int, list[int]]:
    """Return ``count`` integer keys for each bucket."""
    found: dict[int, list[int]] = {b: [] for b in range(NUM_BUCKETS)}
    key = 1
    while any(len(v) < count for v in found.values()):
        bucket = bucket_id(str(key), NUM_BUCKETS)
        if len(found[bucket]) < count:
            found[bucket].append(key)
        key += 1
    return found


# ----------------------------------------------------------------------------- tests


def test_create_writes_properties(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    assert not HudiTable.exists(base)
    make_table(base)
    assert HudiTable.exists(base)
    props = (base / ".hoodie" / "hoodie.properties").read_text().splitlines()
    parsed = dict(line.split("=", 1) for line in props)
    assert parsed["hoodie.table.name"] == "orders"
    assert parsed["hoodie.table.type"] == "COPY_ON_WRITE"
    assert parsed["hoodie.table.version"] == "6"
    assert parsed["hoodie.timeline.layout.version"] == "1"
    assert parsed["hoodie.table.timeline.timezone"] == "UTC"
    assert parsed["hoodie.table.recordkey.fields"] == "id"
    assert parsed["hoodie.table.precombine.field"] == "ts"
    assert parsed["hoodie.table.keygenerator.class"].endswith("NonpartitionedKeyGenerator")
    # Empty, as Hudi 0.15.0's Spark writer leaves it on a non-partitioned table, with the
    # other keys it writes (its log reader needs the payload class).
    assert parsed["hoodie.table.partition.fields"] == ""
    assert parsed["hoodie.compaction.payload.class"].endswith(".OverwriteWithLatestAvroPayload")
    assert parsed["hoodie.compaction.record.merger.strategy"] == (
        "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
    )
    # Section 2.2: CRC32 of "<database>.<table>", database unset -> "".
    assert parsed["hoodie.table.checksum"] == str(zlib.crc32(b".orders"))
    assert props[-1].startswith("hoodie.table.checksum=")
    assert json.loads(parsed["hoodie.table.create.schema"])["name"] == "orders_record"
    # Section 2.2 sample value, to pin the algorithm.
    assert table_module._table_checksum("v6_nonpartitioned", "default") == "1363530505"

    reader = hudi.HudiTable(str(base))
    assert reader.table_name == "orders"
    assert reader.table_type == "COPY_ON_WRITE"
    assert reader.get_schema() == SCHEMA  # from hoodie.table.create.schema
    assert reader.read() == []

    table = HudiTable.open(base)
    assert table.arrow_schema() == SCHEMA
    assert table.num_buckets == NUM_BUCKETS
    assert table.record_key_fields == ["id"]
    assert table.completed_instants() == []
    assert table.checkpoint() is None
    assert table.file_groups() == {}
    with pytest.raises(HudiError):
        make_table(base)


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(HudiError, match="not a Hudi table"):
        HudiTable.open(tmp_path)
    make_table(tmp_path / "t")
    props = tmp_path / "t" / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=6", "hoodie.table.version=8"))
    with pytest.raises(HudiError, match="version"):
        HudiTable.open(tmp_path / "t")


def test_commits_are_read_by_hudi_rs(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    keys = keys_by_bucket(3)
    a, b, c = keys[0], keys[1], keys[2]  # bucket 3 stays empty

    # 1. Insert into three buckets.
    t1 = w.upsert({k: (f"n{k}", 1) for k in a + b + c}, checkpoint="orders,0:10")
    assert hudi_rows(base) == w.expected()
    groups = table.file_groups()
    assert sorted(groups) == [0, 1, 2]
    assert all(s.instant == t1 and s.path.is_file() for s in groups.values())
    assert (base / ".hoodie_partition_metadata").read_text().splitlines()[1:] == [
        f"commitTime={t1}",
        "partitionDepth=0",
    ]
    assert table.checkpoint() == "orders,0:10"

    # 2. Update one key of bucket 0: a new slice of the same file group.
    t2 = w.upsert({a[0]: ("changed", 2)}, checkpoint="orders,0:20")
    assert hudi_rows(base) == w.expected()
    groups = table.file_groups()
    assert groups[0].instant == t2 and groups[0].file_id == w.file_ids[0]
    assert groups[1].instant == t1 and groups[2].instant == t1
    snapshot = hudi_read(base)
    commit_times = dict(
        zip(snapshot["id"].to_pylist(), snapshot[HOODIE_COMMIT_TIME].to_pylist(), strict=True)
    )
    assert commit_times[a[0]] == t2 and commit_times[a[1]] == t1  # carry-over rule

    # 3. Delete every row of bucket 1: a 0-row slice hides the group's rows.
    t3 = w.upsert({k: None for k in b})
    assert hudi_rows(base) == w.expected()
    assert table.file_groups()[1].instant == t3
    assert pq.read_metadata(table.file_groups()[1].path).num_rows == 0

    # Time travel sees every earlier state.
    assert len(hudi_rows(base, as_of=t1)) == 9
    assert "changed" in {r[1] for r in hudi_rows(base, as_of=t2)}

    # Timeline as hudi-rs sees it; the checkpoint is visible through its metadata API.
    assert table.completed_instants() == [t1, t2, t3]
    timeline = hudi.HudiTable(str(base)).get_timeline()
    instants = timeline.get_completed_commits()
    assert [i.timestamp for i in instants] == [t1, t2, t3]
    assert all(i.action == "commit" for i in instants)
    meta = json.loads(timeline.get_instant_metadata_in_json(instants[1]))
    assert meta["extraMetadata"][o.CHECKPOINT_KEY] == "orders,0:20"
    assert meta["extraMetadata"][o.BUCKET_NUM_KEY] == str(NUM_BUCKETS)
    assert timeline.get_latest_commit_timestamp() == t3
    # epoch_mills is the UTC reading of the instant (timezone UTC in hoodie.properties).
    t1_utc = datetime.strptime(t1, "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)
    assert instants[0].epoch_mills == int(t1_utc.timestamp() * 1000)

    # A commit without a checkpoint leaves the newest checkpoint in force.
    assert table.checkpoint() == "orders,0:20"
    assert o.CHECKPOINT_KEY not in table.latest_extra_metadata()
    assert table.latest_extra_metadata()[o.BUCKET_NUM_KEY] == str(NUM_BUCKETS)

    # Stats of the completed commit (section 7.1).
    stat = table.commit_metadata(t2)["partitionToWriteStats"][""][0]
    assert stat["fileId"] == w.file_ids[0] and stat["prevCommit"] == t1
    assert stat["numUpdateWrites"] == 1 and stat["numWrites"] == 3
    assert table.commit_metadata(t1)["partitionToWriteStats"][""][0]["prevCommit"] == "null"
    assert table.commit_metadata(t1)["operationType"] == "UPSERT"
    assert not (base / ".hoodie" / ".temp" / t1).exists()


def test_pending_instant_is_invisible_and_rolled_back(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    keys = keys_by_bucket(2)
    w.upsert({k: (f"n{k}", 1) for k in keys[0] + keys[1] + keys[2]}, checkpoint="c1")
    before = hudi_rows(base)
    groups_before = table.file_groups()

    # A write that crashed before its commit: requested + inflight + parquet written.
    t_failed = w.upsert({keys[0][0]: ("lost", 9), keys[3][0]: ("lost", 9)}, complete=False)
    hoodie = base / ".hoodie"
    assert (hoodie / f"{t_failed}.commit.requested").exists()
    assert (hoodie / f"{t_failed}.inflight").exists()
    failed_files = sorted(base.glob(f"*_{t_failed}.parquet"))
    assert len(failed_files) == 2
    (hoodie / ".temp" / t_failed).mkdir(parents=True)  # e.g. markers

    assert hudi_rows(base) == before
    assert table.file_groups() == groups_before
    assert table.pending_instants() == [t_failed]
    assert table.completed_instants() == [w.slice_instant[0]]
    assert table.checkpoint() == "c1"

    reopened = HudiTable.open(base)
    assert reopened.rollback_pending() == [t_failed]
    assert not any(p.exists() for p in failed_files)
    assert not list(hoodie.glob(f"{t_failed}*"))
    assert not (hoodie / ".temp" / t_failed).exists()
    assert reopened.pending_instants() == []
    assert reopened.rollback_pending() == []

    # The next commit gets a later instant and reads correctly.
    w.table = reopened
    t_next = w.upsert({keys[0][0]: ("kept", 3), keys[3][0]: ("new", 3)}, checkpoint="c2")
    assert t_next > t_failed
    assert hudi_rows(base) == w.expected()
    assert reopened.checkpoint() == "c2"


def test_failed_first_commit_is_rolled_back(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    t0 = w.upsert({1: ("x", 1), 2: ("y", 1)}, complete=False)
    # Partition marker left by a crash between marker write and commit.
    (base / ".hoodie_partition_metadata").write_text(
        f"#partition metadata\ncommitTime={t0}\npartitionDepth=0\n"
    )
    assert hudi_rows(base) == []
    assert table.rollback_pending() == [t0]
    # Data files went first, then the instant files (section 12.1 trap): nothing is left
    # that a reader could take for archived data.
    assert not list(base.glob("*.parquet"))
    assert not (base / ".hoodie_partition_metadata").exists()
    assert hudi_rows(base) == []
    t1 = w.upsert({1: ("x", 1)})
    assert t1 > t0
    assert hudi_rows(base) == [(1, "x", 1)]


def test_clean_keeps_table_readable(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    keys = keys_by_bucket(2)
    t1 = w.upsert({k: ("v1", 1) for k in keys[0] + keys[1] + keys[2]})
    t2 = w.upsert({keys[0][0]: ("v2", 2)})
    t3 = w.upsert({keys[0][1]: ("v3", 3), keys[1][0]: ("v3", 3)})
    t4 = w.upsert({keys[1][1]: ("v4", 4)})
    states = {t: hudi_rows(base, as_of=t) for t in (t1, t2, t3, t4)}
    latest = table.file_groups()

    # Keep the last two commits (t3, t4) readable.
    deleted = table.clean(2)
    names = sorted(deleted)
    # Bucket 0 has slices t1, t2, t3: at t3 the t3 slice is current, so t1 and t2 go.
    # Bucket 1 has slices t1, t3, t4: at t3 the t3 slice is current, so t1 goes.
    # Bucket 2 only has its t1 slice, which is still current.
    assert names == sorted(
        [
            base_file_name(w.file_ids[0], "0-1-0", t1),
            base_file_name(w.file_ids[0], "0-1-0", t2),
            base_file_name(w.file_ids[1], "0-1-0", t1),
        ]
    )
    assert not any((base / n).exists() for n in deleted)
    assert table.file_groups() == latest
    assert hudi_rows(base) == states[t4] == w.expected()
    assert hudi_rows(base, as_of=t3) == states[t3]

    assert table.clean(2) == []
    deleted = table.clean(1)
    assert deleted == [base_file_name(w.file_ids[1], "0-1-0", t3)]
    assert hudi_rows(base) == states[t4]
    assert table.file_groups() == latest
    with pytest.raises(HudiError):
        table.clean(0)


def test_replacecommit_truncates(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    t1 = w.upsert({1: ("a", 1), 2: ("b", 1), 3: ("c", 1)})
    old_ids = [s.file_id for s in table.file_groups().values()]

    t2 = table.new_instant_time()
    with pytest.raises(HudiError, match="replace=True"):
        table.commit(t2, [], SCHEMA, {}, "INSERT_OVERWRITE_TABLE", replaced_file_ids=old_ids)
    table.start_commit(t2, replace=True)
    assert (base / ".hoodie" / f"{t2}.replacecommit.requested").exists()
    table.commit(t2, [], SCHEMA, {}, "INSERT_OVERWRITE_TABLE", replaced_file_ids=old_ids)
    assert table.completed_instants() == [t1, t2]
    assert table.file_groups() == {}
    assert hudi_rows(base) == []
    assert len(hudi_rows(base, as_of=t1)) == 3
    timeline = hudi.HudiTable(str(base)).get_timeline()
    assert [i.timestamp for i in timeline.get_completed_replacecommits()] == [t2]

    # New groups (new file ids) after the truncate.
    w.groups, w.file_ids, w.slice_instant = {}, {}, {}
    w.upsert({5: ("e", 2)})
    assert hudi_rows(base) == [(5, "e", 2)]
    assert all(s.file_id not in old_ids for s in table.file_groups().values())
    # The replaced groups are dead for every kept query: cleaning removes their files.
    deleted = table.clean(1)
    assert sorted(n.split("_")[0] for n in deleted) == sorted(old_ids)
    assert hudi_rows(base) == [(5, "e", 2)]


def test_commit_requires_start_and_stable_buckets(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    t = table.new_instant_time()
    with pytest.raises(HudiError, match="start_commit"):
        table.commit(t, [], SCHEMA, {})
    table.start_commit(t)
    with pytest.raises(HudiError, match="buckets"):
        table.commit(t, [], SCHEMA, {o.BUCKET_NUM_KEY: "8"})
    missing = WriteStat(bucket_file_id(0), "nope.parquet", "null", 1, 0, 0, 1, 1, 1)
    with pytest.raises(HudiError, match="missing"):
        table.commit(t, [missing], SCHEMA, {})
    with pytest.raises(HudiError):
        table.start_commit(t)  # not newer than the timeline
    table.commit(t, [], SCHEMA, {"note": "empty commit"})
    assert table.completed_instants() == [t]
    assert hudi_rows(tmp_path / "t") == []  # schema present: an empty commit is readable


def test_arrow_schema_follows_commits(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    assert table.arrow_schema() == SCHEMA
    evolved = SCHEMA.append(pa.field("note", pa.large_string()))
    t = table.new_instant_time()
    table.start_commit(t, planned={bucket_file_id(0): {"numInserts": 1}})
    inflight = json.loads((tmp_path / "t" / ".hoodie" / f"{t}.inflight").read_text())
    planned_stat = inflight["partitionToWriteStats"][""][0]
    assert planned_stat["path"] is None and planned_stat["numInserts"] == 1
    table.commit(t, [], evolved, {})
    assert table.arrow_schema() == evolved
    assert HudiTable.open(tmp_path / "t").arrow_schema() == evolved
    schema_json = json.loads(table.latest_extra_metadata()[o.SCHEMA_KEY])
    assert [f["name"] for f in schema_json["fields"]] == ["id", "name", "ts", "note"]


def test_instant_time_strictly_increasing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(tmp_path / "t")

    class FrozenClock(datetime):
        now_value = datetime(2025, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)

        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # noqa: ANN401 - mirrors datetime.now
            return cls.now_value

    monkeypatch.setattr(timeline_module, "datetime", FrozenClock)
    first = table.new_instant_time()
    second = table.new_instant_time()  # same millisecond
    assert first == "20250101120000123"
    assert second == "20250101120000124"
    assert len(second) == 17

    # Any instant file on disk counts, whatever its action or state.
    hoodie = tmp_path / "t" / ".hoodie"
    (hoodie / "20250101120000999.rollback").write_text("")
    assert table.new_instant_time() == "20250101120001000"
    (hoodie / "20251231235959999.commit.requested").write_text("")
    assert HudiTable.open(tmp_path / "t").new_instant_time() == "20260101000000000"

    monkeypatch.undo()
    real = [table.new_instant_time() for _ in range(50)]
    assert real == sorted(set(real))


def test_foreign_parquet_and_duplicates_are_refused(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table = make_table(base)
    w = Writer(table)
    t1 = w.upsert({1: ("a", 1)})
    pq.write_table(pa.table({"x": [1]}), base / "foreign.parquet")
    with pytest.raises(HudiError, match="not a Hudi base file"):
        table.file_groups()
    os.unlink(base / "foreign.parquet")
    dup = base / base_file_name(w.file_ids[bucket_id("1", NUM_BUCKETS)], "0-2-1", t1)
    pq.write_table(pa.table({"x": [1]}), dup)
    with pytest.raises(HudiError, match="share instant"):
        table.file_groups()


def test_archived_slices_stay_visible(tmp_path: Path) -> None:
    """Slices older than the first completed instant count as archived (section 4.2),
    for hudi-rs and for file_groups() alike: a Java writer may archive our instants."""
    base = tmp_path / "t"
    table = make_table(base)
    w = Writer(table)
    keys = keys_by_bucket(1)
    t1 = w.upsert({keys[0][0]: ("a", 1), keys[1][0]: ("b", 1)})
    t2 = w.upsert({keys[1][0]: ("b2", 2)})
    hoodie = base / ".hoodie"
    for path in hoodie.glob(f"{t1}*"):
        path.rename(hoodie / "archived" / path.name)
    assert table.completed_instants() == [t2]
    assert hudi_rows(base) == w.expected()
    groups = table.file_groups()
    assert groups[0].instant == t1 and groups[1].instant == t2
    # hudi-rs starts the timeline at the earliest write instant in any state: a pending
    # instant older than t1 hides t1's archived slice (and its own). file_groups() agrees
    # with the reader in this odd state too, and rollback restores the view.
    t0 = "20000101000000000"
    (hoodie / f"{t0}.commit.requested").write_text("")
    write_slice(table, t0, bucket_file_id(2), {99: ("ghost", 0, t0, f"{t0}_0_0")})
    assert sorted(table.file_groups()) == [1]
    assert hudi_rows(base) == [r for r in w.expected() if r[0] != keys[0][0]]
    assert table.rollback_pending() == [t0]
    assert not list(base.glob(f"*_{t0}.parquet"))
    assert table.file_groups() == groups
    assert hudi_rows(base) == w.expected()
