"""The writer's whole cycle through a table's store, once in a folder and once in moto's
S3 server: create, batches of upserts and deletes (Merge-on-Read appends with delta
tombstone sidecars, and rewrites), cleaning and archiving, an unfinished instant rolled
back by the next writer, the consistency check. Each file is written as a merge task
writes it (``SliceWrite.write``), in this process.

The oracle is a plain dict of the rows and of the deleted keys' tombstones; hudi-rs
reads the table (from S3 itself for the bucket), and the tombstones come back through
the sidecar chain the writer plans the next write on."""

from __future__ import annotations

import itertools
import json
import random

import hudi
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engine.errors import HudiError
from engine.hudi import LEASE_FILE, HudiWriter, options, tombstones
from engine.hudi import timeline as tl
from engine.hudi.bucket_index import bucket_file_id
from engine.hudi.file_slice import RowCounts, SliceWrite, base_file_name
from engine.hudi.retention import Retention
from engine.hudi.schema import HOODIE_RECORD_KEY
from engine.model import KEY, POS, POS_SUB, SOURCE_TS
from engine.storage import LocalStorage, Storage, StoreUnavailable, open_storage
from engine.storage.lease import Lease
from tests.s3_support import hudi_rs_options, s3_settings

SCHEMA = pa.schema([("id", pa.string()), ("name", pa.string()), ("_cdc_pos", pa.int64())])
TOPIC = "srv.app.t"
BUCKETS = 3


def _tombs(keys: list[str], pos: int, instant: str) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            KEY: pa.array(keys, pa.string()),
            POS: pa.array([pos] * n, pa.int64()),
            POS_SUB: pa.array([0] * n, pa.int64()),
            SOURCE_TS: pa.array([pos] * n, pa.int64()),
            tombstones.INSTANT: pa.array([instant] * n, pa.string()),
        },
        schema=tombstones.SCHEMA,
    )


def _write(w: SliceWrite, upserts: dict[str, str], deletes: list[str], pos: int) -> object:
    """What a merge task does with one group: read, fold (here: the batch wins), write."""
    previous = w.read_tombstone_chain()
    known = previous.rows if previous is not None else tombstones.SCHEMA.empty_table()
    touched = [*upserts, *deletes]
    # A key written again loses its tombstone; a deleted key gets one.
    kept = known.filter(pc.invert(pc.is_in(known.column(KEY), pa.array(touched, pa.string()))))
    tombs = pa.concat_tables([kept, _tombs(deletes, pos, w.instant)])
    rows = pa.table(
        {
            "id": pa.array(list(upserts), pa.string()),
            "name": pa.array(list(upserts.values()), pa.string()),
            "_cdc_pos": pa.array([pos] * len(upserts), pa.int64()),
        },
        schema=SCHEMA,
    )
    if w.append:
        carried = pa.table({})
        gone = pa.array(deletes, pa.string())
    else:
        stored = w.read()
        carried = pa.table({}) if stored is None else stored
        if carried.num_rows:
            keep = pc.invert(pc.is_in(carried.column(HOODIE_RECORD_KEY), pa.array(touched)))
            carried = carried.filter(keep)
        gone = pa.array([], pa.string())
    return w.write(
        carried=carried,
        upserts=rows,
        deleted_keys=gone,
        tombs=tombs,
        key_column="id",
        data_schema=SCHEMA,
        counts=RowCounts(inserts=len(upserts), deletes=len(deletes)),
        previous=previous,
    )


def _batch(writer: HudiWriter, number: int, upserts: dict[str, str], deletes: list[str]):
    """One batch of the replicator's writer calls; returns the instant and the writes."""
    instant = writer.begin()
    groups = writer.file_groups()
    keys = [*upserts, *deletes]
    buckets = writer.bucket_ids(pa.array(keys, pa.string()))
    by_bucket: dict[int, tuple[dict[str, str], list[str]]] = {}
    for key, bucket in zip(keys, buckets, strict=True):
        ups, dels = by_bucket.setdefault(int(bucket), ({}, []))
        if key in upserts:
            ups[key] = upserts[key]
        else:
            dels.append(key)
    touched = sorted(by_bucket)
    # Every third batch compacts (a new base file); the others append a log file.
    rewrite = {b for b in touched if b not in groups or number % 3 == 0}
    writes = writer.plan_writes(instant, groups, touched, rewrite, SCHEMA, 0)
    return instant, [_write(w, *by_bucket[w.bucket], number) for w in writes]


def _rows(table: Storage, s3) -> dict[str, tuple[str, int]]:
    local = table.local_path("")
    if local is not None:
        reader = hudi.HudiTable(str(local))
    else:
        reader = hudi.HudiTable(table.url, hudi_rs_options(s3))
    batches = reader.read()
    out: dict[str, tuple[str, int]] = {}
    for r in pa.Table.from_batches(batches).to_pylist() if batches else []:
        assert r[HOODIE_RECORD_KEY] not in out, "a key is live twice"
        out[r[HOODIE_RECORD_KEY]] = (r["name"], r["_cdc_pos"])
    return out


def _create(table: Storage) -> HudiWriter:
    """The Merge-on-Read table ``app_t`` in ``table``'s store."""
    return HudiWriter.create(
        table,
        name="app_t",
        record_key_fields=["id"],
        ordering_field="_cdc_pos",
        num_buckets=BUCKETS,
        schema=SCHEMA,
        table_type=options.TABLE_TYPE_MOR,
    )


#: Batches of the writer's cycle: the tenth cleans and archives (on a bucket each takes a
#: second: instants a second apart).
BATCHES = 14


def _assert_completion_times_slice_logs(table: Storage) -> None:
    """What Hudi 1.x readers need of a version-6 table on object storage: the completion
    time they take for an instant (its completed file's Last-Modified, whole seconds)
    is at or after the instant and before the next one, so each log file joins the
    slice of the base instant its name carries (docs/guide/tables.md#object-storage)."""
    done = sorted(
        (o.path.rsplit("/", 1)[-1].split(".")[0], o.modified)
        for o in table.entries(".hoodie")
        if o.path.endswith((".deltacommit", ".commit", ".clean", ".rollback"))
    )
    assert len(done) >= 8  # the active timeline after archiving
    for (instant, written), (after, _) in itertools.pairwise(done):
        completion = tl.instant_at(written.replace(microsecond=0))
        assert instant.endswith("000") and instant <= completion < after, (instant, after)


def test_the_writer_keeps_a_table_through_its_store(store: Storage, request) -> None:
    s3 = request.getfixturevalue("s3") if not isinstance(store, LocalStorage) else None
    table = store.under("app_t")
    writer = _create(table)
    rng = random.Random(26)
    rows: dict[str, tuple[str, int]] = {}
    deleted: dict[str, int] = {}
    retention = Retention(commits=3)
    for number in range(1, BATCHES + 1):
        keys = rng.sample(range(40), 8)
        upserts = {str(k): f"v{number}-{k}" for k in keys[:6]}
        deletes = [str(k) for k in keys[6:]]
        instant, results = _batch(writer, number, upserts, deletes)
        writer.commit(instant, results, SCHEMA, TOPIC, {0: number * 10}, {})
        writer.maintain(number, retention, keep_min=2, keep_max=4)
        for k, v in upserts.items():
            rows[k] = (v, number)
            deleted.pop(k, None)
        for k in deletes:
            rows.pop(k, None)
            deleted[k] = number
    assert _rows(table, s3) == rows
    assert writer.checkpoint(TOPIC) == {0: BATCHES * 10}
    if s3 is not None:
        _assert_completion_times_slice_logs(table)

    # A batch whose commit never came: its files are there, its instant pending.
    instant, _ = _batch(writer, BATCHES + 1, {"1": "lost", "99": "lost"}, ["2"])
    written = {o.path for o in table.entries()}
    assert _rows(table, s3) == rows  # readers skip the pending instant's files

    reopened = HudiWriter.open(table)
    assert reopened.verify() == []
    assert reopened.recover() == [instant]
    assert reopened.verify() == []
    left = {o.path for o in table.entries()}
    assert not any(instant in name for name in left) and left < written
    assert _rows(table, s3) == rows

    # The tombstones, read back through each group's sidecar chain.
    groups = reopened.file_groups()
    plans = reopened.plan_writes(reopened.begin(), groups, sorted(groups), set(), SCHEMA, 0)
    found = {}
    for w in plans:
        chain = w.read_tombstone_chain()
        if chain is not None:
            found.update(zip(*chain.rows.select([KEY, POS]).to_pydict().values(), strict=True))
    assert found == deleted

    # Cleaning and archiving ran through the store too.
    meta = {o.path.rsplit("/", 1)[-1] for o in table.entries(".hoodie")}
    assert any(n.endswith(".clean") for n in meta)
    assert table.entries(".hoodie/archived"), "nothing was archived"
    assert len(reopened.completed_instants()) < BATCHES


def _fenced_writer(s3, tmp_path) -> tuple[Storage, HudiWriter, Lease]:
    table = open_storage(s3_settings(s3, f"s3://lake/{tmp_path.name}")).under("app_t")
    writer = _create(table)
    lease = Lease.acquire(table, LEASE_FILE, "table app_t", ttl=5)
    writer.fence(lease)
    return table, writer, lease


def test_a_decided_commit_whose_file_failed_is_completed_not_rolled_back(
    s3, tmp_path, monkeypatch
) -> None:
    """The lease's swap decided the commit, then creating its completed file failed (the
    store): the reopen's recovery completes it from the lease, never rolls it back (a
    later holder would roll it forward over the rollback)."""
    table, writer, lease = _fenced_writer(s3, tmp_path)
    instant, results = _batch(writer, 1, {"1": "a", "2": "b"}, [])
    writer.commit(instant, results, SCHEMA, TOPIC, {0: 2}, {})
    instant, results = _batch(writer, 2, {"1": "a2", "3": "c"}, ["2"])
    create = table.create

    def failing(path: str, data, **kw):
        if path.endswith(".deltacommit"):
            raise StoreUnavailable(f"creating {path}: injected", hint="")
        return create(path, data, **kw)

    monkeypatch.setattr(table, "create", failing)
    with pytest.raises(StoreUnavailable):
        writer.commit(instant, results, SCHEMA, TOPIC, {0: 5}, {})
    monkeypatch.setattr(table, "create", create)
    reopened = HudiWriter.open(table)
    reopened.fence(lease)
    reopened.verify()
    assert reopened.recover() == []
    assert instant in reopened.completed_instants()
    assert reopened.checkpoint(TOPIC) == {0: 5}
    assert _rows(table, s3) == {"1": ("a2", 2), "3": ("c", 2)}
    stored = json.loads(table.read(LEASE_FILE))
    assert stored["completing"] is None and stored["epoch"] == lease.epoch
    assert not table.entries(".hoodie/.cdcctl/staged")
    lease.release()


def test_a_fenced_writer_clears_what_a_writer_that_lost_its_lease_left(s3, tmp_path) -> None:
    """An instant the stale writer began (older than its successor's commits) and a late
    upload of an instant the timeline never knew: with the lease held they cannot have
    been committed, so the holder's recovery removes them; without it, the consistency
    check refuses the table (they would mean lost commit files)."""
    table, stale, old = _fenced_writer(s3, tmp_path)
    instant, results = _batch(stale, 1, {"1": "a", "2": "b", "3": "c"}, [])
    stale.commit(instant, results, SCHEMA, TOPIC, {0: 3}, {})
    old.release()  # stands for its expiry: the next writer takes the lease over
    lease = Lease.acquire(table, LEASE_FILE, "table app_t", ttl=5)
    assert lease.epoch == old.epoch + 1
    writer = HudiWriter.open(table)
    writer.fence(lease)
    begun, _ = _batch(stale, 2, {"1": "lost", "4": "lost"}, [])  # it still runs
    instant, results = _batch(writer, 3, {"2": "b3"}, ["3"])
    writer.commit(instant, results, SCHEMA, TOPIC, {0: 5}, {})
    assert begun < instant
    # A late upload of an instant its successor rolled back (the instant files are gone).
    late = base_file_name(bucket_file_id(0), "0-1-0", tl.instant_plus_1ms(instant))
    some = next(iter(writer.file_groups().values()))
    table.write(late, table.read(some.file_name))
    with pytest.raises(HudiError, match="unfinished"):
        HudiWriter.open(table).verify()
    reopened = HudiWriter.open(table)
    reopened.fence(lease)
    reopened.verify()
    assert reopened.recover() == [begun]
    names = {o.path for o in table.entries()}
    assert late not in names and not any(begun in n for n in names)
    assert _rows(table, s3) == {"1": ("a", 1), "2": ("b3", 3)}
    assert HudiWriter.open(table).verify() == []
    lease.release()
