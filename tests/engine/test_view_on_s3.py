"""The reader view (``HudiView``) of a table on object storage reads what it reads of the
same table in a folder. A Merge-on-Read table is written batch by batch by the real
replicator (with compactions, cleans and archived instants), its files are copied into
moto's S3 server as they are, and the view through the store must give the same
properties, timeline, commit metadata (archived instants included), checkpoint, schema,
file groups and readable bounds. hudi-rs, reading the copy from S3 itself, must give
the rows it gives from the folder."""

from __future__ import annotations

import os
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from engine.config import config_from_dict
from engine.errors import StorageError
from engine.hudi import HudiView
from engine.hudi.archive import list_archives, read_archive
from engine.playground.objectstore import S3Server
from engine.query import query
from engine.replicator import Replicator
from engine.storage import open_storage
from tests import builders
from tests.engine.test_properties import Msg
from tests.s3_support import hudi_rs_options, s3_settings

pytestmark = [pytest.mark.spark]

TOPIC = "srv.app.t"
COLUMNS = [("id", "int32"), ("name", "string")]


def _write_table(root: Path, spark) -> Path:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(root / "lake")},
            "hudi": {
                "num_buckets": 2,
                "clean_retain_commits": 2,
                "keep_min_commits": 3,
                "keep_max_commits": 4,
                "compaction_max_log_files": 3,
            },
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    replicator = Replicator(cfg, spark=spark)
    lsn, offset = 100, 0
    for batch in range(14):
        msgs = []
        for k in range(batch * 3, batch * 3 + 40):
            lsn += 1
            op = "c" if k >= batch * 3 + 37 else "u"
            row = {"id": k, "name": f"{op}{lsn}"}
            msgs.append(Msg(TOPIC, builders.key(k), builders.value(op, lsn, row, COLUMNS), offset))
            offset += 1
        lsn += 1
        gone = batch * 3
        msgs.append(Msg(TOPIC, builders.key(gone), builders.value("d", lsn, None, COLUMNS), offset))
        msgs.append(Msg(TOPIC, builders.key(gone), None, offset + 1))
        offset += 2
        replicator.apply(msgs)
    return root / "lake" / "app_t"


def _upload(folder: Path, store) -> int:
    count = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            full = Path(dirpath) / name
            store.write(full.relative_to(folder).as_posix(), full.read_bytes())
            count += 1
    return count


def _slices(view: HudiView) -> dict:
    return {
        bucket: (s.file_id, s.instant, s.file_name, s.log_files, s.latest_instant, s.base_size,
                 s.log_size)
        for bucket, s in view.file_groups().items()
    }  # fmt: skip


def test_the_view_of_a_table_on_s3_reads_what_the_folder_holds(
    s3: S3Server, tmp_path: Path, spark
) -> None:
    folder = _write_table(tmp_path, spark)
    url = f"s3://lake/{tmp_path.name}/lake"
    target = open_storage(s3_settings(s3, url))
    assert _upload(folder, target.under("app_t")) > 20
    local = HudiView.open(folder)
    remote = HudiView.open(target.under("app_t"))
    assert remote.location == f"{url}/app_t"
    assert HudiView.exists(target.under("app_t")) and not HudiView.exists(target.under("other"))

    assert remote.properties == local.properties
    assert remote.completed_instants() == local.completed_instants()
    assert remote.pending_instants() == local.pending_instants()
    assert remote.timeline().entries() == local.timeline().entries()
    assert local.has_archive() and remote.has_archive()
    archived = sorted(
        e.instant
        for _, name, _ in list_archives(folder / ".hoodie" / "archived")
        for e in read_archive(folder / ".hoodie" / "archived" / name)
        if e.state == "COMPLETED" and e.action == "deltacommit"
    )
    assert archived and max(archived) < min(local.completed_instants())
    for instant in [*local.completed_instants(), *archived]:
        assert remote.commit_metadata(instant) == local.commit_metadata(instant)
    assert remote.checkpoint() == local.checkpoint() == f"{TOPIC},0:{14 * 42}"
    assert remote.arrow_schema() == local.arrow_schema()
    assert remote.readable_from() == local.readable_from()
    assert remote.oldest_readable() is not None
    assert _slices(remote) == _slices(local)
    assert any(s[3] for s in _slices(local).values())  # some slices have log files
    with pytest.raises(Exception, match="on object storage"):
        _ = remote.base_path

    # hudi-rs reads the copy from S3 itself: the same rows as from the folder.
    from_s3 = pa.Table.from_batches(hudi.HudiTable(f"{url}/app_t", hudi_rs_options(s3)).read())
    from_folder = pa.Table.from_batches(hudi.HudiTable(str(folder)).read())
    key = "_hoodie_record_key"
    assert from_s3.num_rows == from_folder.num_rows > 0
    assert from_s3.sort_by(key).to_pylist() == from_folder.sort_by(key).to_pylist()

    # The engine's query over the bucket's store: the same rows, as of an old instant too.
    sql = "SELECT * FROM app_t ORDER BY ALL"
    assert query(target, sql) == query(folder.parent, sql)
    oldest = local.oldest_readable()
    assert oldest is not None and oldest < local.completed_instants()[-1]
    old = query(target, sql, as_of=oldest)
    assert old == query(folder.parent, sql, as_of=oldest)
    with pytest.raises(StorageError, match="is a bucket"):
        query(url, "SELECT 1")


def test_a_bucket_url_without_its_config_is_refused(tmp_path: Path) -> None:
    """Given as text, an ``s3://`` URL is never taken for a folder named ``s3:``."""
    from engine.query import list_tables, read_table
    from engine.validate import validate_replicas

    url = "s3://lake/replicas"
    for call in (
        lambda: list_tables(url),
        lambda: read_table(f"{url}/t"),
        lambda: validate_replicas(url, "postgresql://u@127.0.0.1:1/x"),
    ):
        with pytest.raises(StorageError, match="is a bucket") as info:
            call()
        assert "target_store()" in (info.value.hint or "")
    assert not Path("s3:").exists()
