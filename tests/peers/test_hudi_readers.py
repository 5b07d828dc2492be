"""Apache Hudi's own Spark readers (0.15.0 and 1.0.2, default options) read the replicas.

Replicas of one Debezium stream, Copy-on-Write and Merge-on-Read, are written by the real
engine (``tests/peers/hudi_replicas.py``: deletes, late events, keys without a position,
a TIME column, log files, compactions, cleans, archiving), then read by each Hudi version
in one long-lived Spark 3.5 session per version (``tests/peers/hudi_reader.py``):
snapshot, read-optimized, incremental from a past and from an archived instant, time
travel, the archived timeline, and the base files through plain ``spark.read.parquet``.
Every result is compared with hudi-rs's read and with the oracle (``tests.oracle.fold``).

A table written by cdcctl before these fixes (``tests/data/hudi_pre_fix``) is shown to
fail in Hudi's reader, then upgraded by the writer when opened, then read.

A missing peer fails the test with "run ./bootstrap.sh peers".
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.hudi.archive import list_archives, read_archive
from engine.hudi.schema import conform
from engine.hudi.table import HudiTable
from engine.hudi.timeline import WRITE_ACTIONS
from engine.hudi.writer import UPGRADE_KEY, HudiWriter
from engine.model import NO_POS
from engine.storage import ObjectStorage
from tests.peers import hudi_replicas as hr
from tests.peers.hudi_reader import VERSIONS, ReaderError
from tests.s3_support import S3_ENV, S3_SECRET, s3_target_keys

# One worker runs the whole module (``--dist loadgroup``): one reader session per version.
pytestmark = [pytest.mark.peers, pytest.mark.spark, pytest.mark.xdist_group("hudi_readers")]

PRE_FIX = Path(__file__).resolve().parents[1] / "data" / "hudi_pre_fix" / "merge_on_read"
Rows = dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def replicas(spark, tmp_path_factory) -> dict[str, hr.Replica]:
    built = hr.build(spark, tmp_path_factory.mktemp("hudi-peers"))
    return {r.table_type: r for r in built}


def _plain_rows(rows: list[dict[str, Any]]) -> Rows:
    """Reader rows keyed by record key, data columns only, values made comparable."""
    out: Rows = {}
    for row in rows:
        key = row["_hoodie_record_key"]
        assert key not in out, f"two live rows for key {key}"
        out[key] = {c: hr.plain(row[c]) for c in hr.COLUMNS}
    return out


def _row_list(rows: list[dict[str, Any]]) -> list[tuple]:
    """Every row (several slices may hold a key), comparable and sorted."""
    cols = ["_hoodie_record_key", "_hoodie_commit_time", *hr.COLUMNS]
    return sorted(tuple(hr.plain(r[c]) for c in cols) for r in rows)


def _oracle(expected: Rows) -> Rows:
    return {k: {c: hr.plain(v[c]) for c in hr.COLUMNS} for k, v in expected.items()}


def _hudi_rs(path: Path, **opts: str) -> list[dict[str, Any]]:
    options = hudi.HudiReadOptions()
    if "as_of" in opts:
        options = options.with_as_of_timestamp(opts["as_of"])
    if "begin" in opts:
        options = options.with_query_type(hudi.HudiQueryType.Incremental).with_start_timestamp(
            opts["begin"]
        )
    batches = hudi.HudiTable(str(path)).read(options)
    if not batches:
        return []
    table = conform(pa.Table.from_batches(batches), HudiTable.open(path).arrow_schema())
    return table.to_pylist()


def _archived(path: Path) -> list[tuple[str, str, str]]:
    """(instant, action, state) of every entry of the table's archive files, by cdcctl."""
    folder = path / ".hoodie" / "archived"
    return sorted(
        (e.instant, e.action, e.state)
        for _, name, _ in list_archives(folder)
        for e in read_archive(folder / name)
    )


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_snapshot_equals_hudi_rs_and_the_oracle(hudi_readers, replicas, version, table_type):
    replica = replicas[table_type]
    rows = _plain_rows(hudi_readers[version].read(replica.path))
    assert rows == _plain_rows(_hudi_rs(replica.path))
    assert rows == _oracle(replica.expected[-1])
    # The stream reached every state the tier is about: deletes, keys without position.
    assert "11" not in rows and "13" in rows and "50" in rows and "53" in rows


@pytest.mark.parametrize("version", list(VERSIONS))
def test_read_optimized_reads_the_base_files(hudi_readers, replicas, version):
    replica = replicas["MERGE_ON_READ"]
    rows = _plain_rows(hudi_readers[version].read(replica.path, "read_optimized"))
    groups = HudiTable.open(replica.path).file_groups()
    assert any(fs.log_files for fs in groups.values()), "no log files: nothing to tell apart"
    base = pa.concat_tables([pq.read_table(fs.path) for fs in groups.values()])
    schema = HudiTable.open(replica.path).arrow_schema()
    assert rows == _plain_rows(conform(base, schema).to_pylist())
    # Log records are not in it, and it differs from the snapshot.
    assert rows != _oracle(replica.expected[-1])


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_incremental_from_a_past_instant(hudi_readers, replicas, version, table_type):
    replica = replicas[table_type]
    begin = replica.instants[-4]
    rows = _plain_rows(hudi_readers[version].read(replica.path, "incremental", begin=begin))
    assert rows == _plain_rows(_hudi_rs(replica.path, begin=begin))
    # The newest state of the keys written after ``begin``.
    snapshot = hudi_readers[version].read(replica.path)
    changed = {r["_hoodie_record_key"] for r in snapshot if r["_hoodie_commit_time"] > begin}
    assert set(rows) == changed and changed
    final = _oracle(replica.expected[-1])
    assert rows == {k: final[k] for k in changed}


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_incremental_from_an_archived_instant(hudi_readers, replicas, version, table_type):
    """With its defaults Hudi reads only the files the active commits wrote (keys changed
    by archived commits alone are left out: a known limit of Hudi's incremental query);
    with its full-scan fallback on, every key changed since the instant (Copy-on-Write)."""
    replica = replicas[table_type]
    reader = hudi_readers[version]
    begin = replica.instants[2]
    archived = {t for t, a, s in _archived(replica.path) if a in WRITE_ACTIONS}
    assert begin in archived, "the instant is not archived: the test shows nothing"
    snapshot = reader.read(replica.path)
    changed = {r["_hoodie_record_key"] for r in snapshot if r["_hoodie_commit_time"] > begin}
    final = _oracle(replica.expected[-1])
    rows = _plain_rows(reader.read(replica.path, "incremental", begin=begin))
    assert rows and set(rows) <= changed
    assert rows == {k: final[k] for k in rows}
    fallback = {"hoodie.datasource.read.incr.fallback.fulltablescan.enable": "true"}
    rows = _plain_rows(reader.read(replica.path, "incremental", begin=begin, options=fallback))
    if table_type == "COPY_ON_WRITE":
        assert rows == {k: final[k] for k in changed}
    else:
        # Hudi's full-scan fallback on Merge-on-Read reads the base files only (both
        # versions): it equals the read-optimized view since the instant.
        optimized = reader.read(replica.path, "read_optimized")
        since = [r for r in optimized if r["_hoodie_commit_time"] > begin]
        assert rows == _plain_rows(since)


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_time_travel(hudi_readers, replicas, version, table_type):
    replica = replicas[table_type]
    as_of = replica.instants[-2]
    rows = _plain_rows(hudi_readers[version].read(replica.path, "time_travel", as_of=as_of))
    assert rows == _plain_rows(_hudi_rs(replica.path, as_of=as_of))
    assert rows == _oracle(replica.expected[-2])
    assert rows != _oracle(replica.expected[-1])


@pytest.mark.parametrize("version", list(VERSIONS))
@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_hudi_loads_the_archived_timeline(hudi_readers, replicas, version, table_type):
    replica = replicas[table_type]
    timeline = hudi_readers[version].timeline(replica.path)
    ours = _archived(replica.path)
    assert len(ours) > 20
    assert sorted(tuple(i) for i in timeline["archived"]) == ours
    completed = [t for t, a, s in ours if a in WRITE_ACTIONS and s == "COMPLETED"]
    # Hudi decodes each archived commit's metadata: the schema and the checkpoint are there.
    for instant in completed:
        keys = timeline["archived_extra_keys"][instant]
        assert "schema" in keys and "deltastreamer.checkpoint.key" in keys, (instant, keys)


@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_plain_spark_reads_the_base_files(hudi_readers, replicas, table_type):
    """Without Hudi's schema: Spark's own Parquet reader (it refuses Parquet TIME)."""
    replica = replicas[table_type]
    files = sorted(replica.path.glob("*.parquet"))
    assert len(files) > 2
    rows = _row_list(hudi_readers["0.15.0"].read_parquet(files))
    by_engine = pa.concat_tables([pq.read_table(f) for f in files])
    schema = HudiTable.open(replica.path).arrow_schema()
    assert rows == _row_list(conform(by_engine, schema).to_pylist())
    assert all(isinstance(r[-2], int) for r in rows)  # t: microseconds since midnight


@pytest.mark.parametrize("table_type", hr.TABLE_TYPES)
def test_no_row_has_a_null_ordering_value(replicas, table_type):
    """Keys first seen without a position are stored with ``NO_POS``, never null."""
    replica = replicas[table_type]
    rows = _hudi_rs(replica.path)
    positions = {str(r["id"]): r["_cdc_pos"] for r in rows}
    assert None not in positions.values()
    assert positions["55"] == NO_POS  # only ever read without a position


def test_a_table_written_before_the_fixes_is_upgraded_when_opened(hudi_readers, tmp_path):
    path = tmp_path / "app_peers"
    shutil.copytree(PRE_FIX, path)
    expected = _oracle(hr.replay(3))
    props = HudiTable.open(path).properties
    assert "hoodie.compaction.payload.class" not in props
    # As it was written, Hudi's readers fail on it (0.15: no payload class / null
    # ordering values; 1.0: Parquet TIME in the base files).
    for reader in hudi_readers.values():
        with pytest.raises(ReaderError):
            reader.read(path)
    before = _plain_rows(_hudi_rs(path))
    assert before == expected

    writer = HudiWriter.open(path)
    writer.recover()  # what the replicator does when it opens a table
    table = HudiTable.open(path)
    assert table.properties["hoodie.compaction.payload.class"].endswith(
        "OverwriteWithLatestAvroPayload"
    )
    newest = table.completed_instants()[-1]
    meta = table.commit_metadata(newest)["extraMetadata"]
    assert meta[UPGRADE_KEY] == "0,1"
    assert (
        meta["deltastreamer.checkpoint.key"]
        == (
            HudiTable.open(PRE_FIX).commit_metadata(table.completed_instants()[-2])[
                "extraMetadata"
            ]["deltastreamer.checkpoint.key"]
        )
    )
    assert all(not fs.log_files for fs in table.file_groups().values())
    assert _plain_rows(_hudi_rs(path)) == expected
    for reader in hudi_readers.values():
        assert _plain_rows(reader.read(path)) == expected
    # Opened again: nothing more to do.
    HudiWriter.open(path).recover()
    assert HudiTable.open(path).completed_instants()[-1] == newest


def test_a_null_ordering_value_in_a_log_fails_hudi_015_until_upgraded(hudi_readers, tmp_path):
    """The finding itself, apart from the others: a log record whose ordering field is
    null (as cdcctl wrote them for keys without a position) fails Hudi 0.15.0's
    snapshot ("Ordering value is null"); the upgrade rewrites the slice."""
    from tests.engine.test_hudi_mor import append_log, make_table, write_base

    path = tmp_path / "t"
    table = make_table(path)
    base = write_base(table, {1: ("a", 10), 2: ("b", 20)})
    append_log(table, base, 1, {3: ("c", None), 1: ("a2", 30)}, [])  # type: ignore[dict-item]
    with pytest.raises(ReaderError, match="Ordering value is null"):
        hudi_readers["0.15.0"].read(path)
    # As an earlier release wrote hoodie.properties (without the keys Hudi 0.15 writes).
    props = path / ".hoodie" / "hoodie.properties"
    lines = props.read_text().splitlines()
    props.write_text("".join(f"{ln}\n" for ln in lines if not ln.startswith("hoodie.compaction")))
    assert HudiWriter.open(path).upgrade() == [0]
    want = {"1": ("a2", 30), "2": ("b", 20), "3": ("c", NO_POS)}
    for reader in hudi_readers.values():
        rows = reader.read(path)
        assert {r["_hoodie_record_key"]: (r["name"], r["_cdc_pos"]) for r in rows} == want


def test_a_copy_on_write_table_with_parquet_time_is_rewritten_when_opened(hudi_readers, tmp_path):
    """A base file holding a Parquet TIME(MICROS) column, as cdcctl wrote them: Spark's
    Parquet reader refuses it (both versions); the upgrade rewrites the group's slice."""
    import datetime as dt

    from engine.hudi.bucket_index import bucket_file_id
    from engine.hudi.commit import WriteStat
    from engine.hudi.file_slice import base_file_name
    from engine.hudi.schema import file_schema

    schema = pa.schema([("id", pa.int64()), ("t", pa.time64("us")), ("_cdc_pos", pa.int64())])
    path = tmp_path / "t"
    table = HudiTable.create(path, "t", ["id"], "_cdc_pos", 1, schema, "COPY_ON_WRITE")
    instant = table.new_instant_time()
    table.start_commit(instant)
    fid = bucket_file_id(0)
    name = base_file_name(fid, "0-1-0", instant)
    rows = pa.table(
        {
            "_hoodie_commit_time": [instant] * 2,
            "_hoodie_commit_seqno": [f"{instant}_0_0", f"{instant}_0_1"],
            "_hoodie_record_key": ["1", "2"],
            "_hoodie_partition_path": ["", ""],
            "_hoodie_file_name": [name] * 2,
            "id": [1, 2],
            "t": [dt.time(13, 14, 15, 123456), dt.time(0, 0, 1)],
            "_cdc_pos": [10, 20],
        },
        schema=file_schema(schema),
    )
    pq.write_table(rows, path / name)  # Arrow's default: Parquet TIME(MICROS)
    size = (path / name).stat().st_size
    table.commit(instant, [WriteStat(fid, name, "null", 2, 0, 0, 2, size, size)], schema, {})
    # hoodie.properties as an earlier release wrote it.
    props = path / ".hoodie" / "hoodie.properties"
    lines = props.read_text().splitlines()
    props.write_text("".join(f"{ln}\n" for ln in lines if not ln.startswith("hoodie.compaction")))
    for reader in hudi_readers.values():
        with pytest.raises(ReaderError, match="Illegal Parquet type"):
            reader.read(path)
    assert HudiWriter.open(path).upgrade() == [0]
    want = {"1": (13 * 3600 + 14 * 60 + 15) * 1_000_000 + 123_456, "2": 1_000_000}
    for reader in hudi_readers.values():
        assert {r["_hoodie_record_key"]: r["t"] for r in reader.read(path)} == want
    assert {r["_hoodie_record_key"]: r["t"] for r in _hudi_rs(path)} == {
        "1": dt.time(13, 14, 15, 123456),
        "2": dt.time(0, 0, 1),
    }


@pytest.fixture(scope="module")
def bucket_replicas(spark, s3, tmp_path_factory) -> dict[str, hr.Replica]:
    """The same stream replicated into a bucket (moto's S3 server) by the real engine."""
    for key, value in S3_ENV.items():  # what the config's ${env:...} references read
        os.environ.setdefault(key, value)
    url = f"s3://lake/hudi-peers-{os.getpid()}"
    keys = s3_target_keys(s3.endpoint)
    # Merge-on-Read only: its log files are what Hudi 1.x slices by completion time (a
    # bucket's commits start a second apart, so a second table type costs ~30 s more).
    root = tmp_path_factory.mktemp("hudi-peers-s3")
    built = hr.build(spark, root, table_types=("MERGE_ON_READ",), bucket=(url, keys))
    return {r.table_type: r for r in built}


def _s3a(reader, s3) -> None:
    """Point the reader's S3A file system at moto's server (bucket ``lake``)."""
    prefix = "fs.s3a.bucket.lake."
    reader.hadoop(
        {
            prefix + "endpoint": s3.endpoint,
            prefix + "path.style.access": "true",
            prefix + "connection.ssl.enabled": "false",
            prefix + "access.key": S3_ENV["CDCCTL_TEST_S3_KEY"],
            prefix + "secret.key": S3_SECRET,
            prefix + "aws.credentials.provider": (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            ),
        }
    )


@pytest.mark.parametrize("version", list(VERSIONS))
def test_hudi_reads_a_replica_in_a_bucket_over_s3a(hudi_readers, bucket_replicas, s3, version):
    """Hudi's own reader, over Hadoop's S3A file system, reads the replica the engine
    wrote into the bucket: the oracle's rows now and as of an earlier instant, and the
    timeline (archived instants included) as cdcctl wrote it."""
    replica = bucket_replicas["MERGE_ON_READ"]
    store = replica.path
    assert isinstance(store, ObjectStorage)
    url = "s3a://" + store.url.removeprefix("s3://")
    reader = hudi_readers[version]
    _s3a(reader, s3)
    rows = _plain_rows(reader.read(url))
    # Hudi 1.0.2 read stale rows here until each instant started in a second of its own
    # (engine/hudi/services.py, TableServices._second_after).
    assert rows == _oracle(replica.expected[-1])
    assert "11" not in rows and "13" in rows and "50" in rows and "53" in rows
    from_rs = hudi.HudiTable(store.url, store.reader_options()).read()
    assert rows == _plain_rows(pa.Table.from_batches(from_rs).to_pylist())
    oldest = HudiTable.open(store).oldest_readable()
    i = next(i for i, at in enumerate(replica.instants) if oldest is not None and at >= oldest)
    assert i < len(replica.instants) - 1
    past = _plain_rows(reader.read(url, "time_travel", as_of=replica.instants[i]))
    assert past == _oracle(replica.expected[i])
    # The timelines as Hudi's meta client loads them over S3A: the active one as cdcctl
    # lists it, and an archive with the bucket's archived writes.
    table = HudiTable.open(store)
    timeline = reader.timeline(url)
    completed = [i for i, a, st in timeline["active"] if a in WRITE_ACTIONS and st == "COMPLETED"]
    assert completed == table.completed_instants()
    archived = [t for t, a, st in timeline["archived"] if a in WRITE_ACTIONS and st == "COMPLETED"]
    assert table.has_archive() and len(archived) > 5
