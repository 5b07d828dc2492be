"""The target stores' contract, on a local folder and on a real S3 server (moto's, in a
child process): whole-object writes, create-if-absent with exactly one winner among
concurrent creators, compare-and-swap, listing, deletion, and clear errors."""

from __future__ import annotations

import os

import pytest
from pydantic import SecretStr

from engine.playground.objectstore import S3Server
from engine.replicator.retry import storage_cause
from engine.storage import (
    LocalStorage,
    ObjectStorage,
    S3Settings,
    Storage,
    StorageError,
    StoreUnavailable,
    is_object_url,
    split_url,
)
from tests.s3_support import race, s3_settings


def test_write_read_list_delete(store: Storage) -> None:
    assert store.head("t/.hoodie/hoodie.properties") is None
    with pytest.raises(FileNotFoundError):
        store.read("t/.hoodie/hoodie.properties")
    info = store.write("t/.hoodie/hoodie.properties", b"hoodie.table.name=t\n")
    assert info.size == 20 and info.version
    store.write("t/a.parquet", b"PAR1")
    store.write("u/b.parquet", b"PAR1PAR1")
    assert store.read("t/.hoodie/hoodie.properties") == b"hoodie.table.name=t\n"
    assert [o.path for o in store.list()] == [
        "t/.hoodie/hoodie.properties",
        "t/a.parquet",
        "u/b.parquet",
    ]
    assert [(o.path, o.size) for o in store.list("t")] == [
        ("t/.hoodie/hoodie.properties", 20),
        ("t/a.parquet", 4),
    ]
    head = store.head("u/b.parquet")
    assert head is not None and head.size == 8
    store.write("u/b.parquet", b"x")
    assert store.read("u/b.parquet") == b"x"
    store.delete("u/b.parquet")
    store.delete("u/b.parquet")  # twice: nothing to delete is not an error
    assert store.head("u/b.parquet") is None
    assert [o.path for o in store.list("u")] == []


def test_create_only_if_absent(store: Storage) -> None:
    first = store.create("t/.hoodie/001.commit", b"first")
    assert first is not None and first.size == 5
    assert store.create("t/.hoodie/001.commit", b"second") is None
    assert store.read("t/.hoodie/001.commit") == b"first"
    # No temporary file is left beside it, on either store (a folder's listing hides
    # its own temporary names, so that one is looked at directly).
    assert [o.path for o in store.list("t")] == ["t/.hoodie/001.commit"]
    if isinstance(store, LocalStorage):
        assert sorted(p.name for p in (store.root / "t/.hoodie").iterdir()) == ["001.commit"]


def test_concurrent_creators_one_wins(store: Storage) -> None:
    results = race(8, lambda i: store.create("t/.hoodie/002.commit", f"writer {i}".encode()))
    winners = [i for i, r in results.items() if r is not None]
    assert len(winners) == 1, results
    assert store.read("t/.hoodie/002.commit") == f"writer {winners[0]}".encode()


def test_replace_compares_versions(store: Storage) -> None:
    first = store.write("lease", b"epoch 1")
    second = store.replace("lease", b"epoch 2", first.version)
    assert second is not None and store.read("lease") == b"epoch 2"
    # The holder of the first version lost: its replace is refused, nothing changes.
    assert store.replace("lease", b"epoch 1 again", first.version) is None
    assert store.read("lease") == b"epoch 2"
    head = store.head("lease")
    assert head is not None
    third = store.replace("lease", b"epoch 3", head.version)
    assert third is not None and store.read("lease") == b"epoch 3"
    store.delete("lease")
    assert store.replace("lease", b"epoch 4", head.version) is None
    assert store.head("lease") is None


def test_concurrent_replacers_one_wins(store: Storage) -> None:
    base = store.write("lease", b"free")
    results = race(6, lambda i: store.replace("lease", f"taken by {i}".encode(), base.version))
    winners = [i for i, r in results.items() if r is not None]
    assert len(winners) == 1, results
    assert store.read("lease") == f"taken by {winners[0]}".encode()


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b"])
def test_paths_stay_inside(store: Storage, path: str) -> None:
    with pytest.raises(ValueError, match="inside the target"):
        store.write(path, b"x")


def test_urls() -> None:
    assert is_object_url("s3://lake/x") and is_object_url("S3://lake")
    assert not is_object_url("lake") and not is_object_url("/data/s3://x")
    assert split_url("s3://lake/some/prefix/") == ("lake", "some/prefix")
    assert split_url("s3://lake") == ("lake", "")
    for bad in ("s3:///x", "s3://lake/a/../b", "s3://lake/x?y=1", "gs://lake/x"):
        with pytest.raises(ValueError):
            split_url(bad)


def test_missing_bucket_is_a_clear_error(s3: S3Server) -> None:
    store = ObjectStorage(s3_settings(s3, "s3://no-such-bucket/x"), patient=False)
    for call in (lambda: store.list(), lambda: store.write("a", b"1"), lambda: store.read("a")):
        with pytest.raises(StorageError, match="bucket no-such-bucket does not exist") as err:
            call()
        assert "create the bucket" in err.value.hint
        # Someone must act: not an I/O error the replicator would retry.
        assert not isinstance(err.value, OSError)


def test_unreachable_endpoint_is_a_clear_error(s3: S3Server) -> None:
    dead = S3Settings(
        "s3://lake/x",
        endpoint="http://127.0.0.1:9",
        region="us-east-1",
        path_style=True,
        access_key_id=SecretStr("cdcctl-test"),
        secret_access_key=SecretStr("cdcctl-test-secret"),
    )
    with pytest.raises(StorageError, match=r"listing s3://lake/x") as err:
        ObjectStorage(dead, patient=False).list()
    assert "cdcctl-test-secret" not in str(err.value)
    assert "target.s3.endpoint" in err.value.hint
    # Unreachable is transient: an I/O error, which the replicator retries with backoff
    # (Recovery.table_trouble), saying what failed.
    assert isinstance(err.value, StoreUnavailable) and isinstance(err.value, OSError)
    assert storage_cause(err.value).startswith("storage error: listing s3://lake/x")


def test_entries_and_ranges(store: Storage) -> None:
    for path in ("t/.hoodie/a.commit", "t/.hoodie/b.commit", "t/.hoodie/archived/x", "t/f"):
        store.write(path, b"0123456789")
    assert [o.path for o in store.entries("t/.hoodie")] == [
        "t/.hoodie/a.commit",
        "t/.hoodie/b.commit",
    ]
    assert [(o.path, o.size) for o in store.entries("t")] == [("t/f", 10)]
    assert store.entries("nothing/here") == []
    assert store.read_range("t/f", 2, 3) == b"234"
    assert store.read_range("t/f", 8, 10) == b"89"
    assert store.read_range("t/f", 10, 4) == b""  # at the end: S3 refuses it (416)
    assert store.read_range("t/f", 12, 4) == b""
    store.write("t/empty", b"")
    assert store.read_range("t/empty", 0, 4) == b""
    with pytest.raises(FileNotFoundError):
        store.read_range("t/missing", 0, 4)


def test_under_a_folder(store: Storage) -> None:
    store.write("t/.hoodie/hoodie.properties", b"p")
    table = store.under("t")
    assert table.url == f"{store.url}/t"
    assert table.read(".hoodie/hoodie.properties") == b"p"
    assert [o.path for o in table.entries(".hoodie")] == [".hoodie/hoodie.properties"]
    with pytest.raises(ValueError, match="inside the target"):
        store.under("../elsewhere")


def test_a_written_objects_version_is_what_a_listing_says(store: Storage) -> None:
    """The merge workers cache an object they wrote by the version its write returned and
    find it by the version the driver's listing gave: the two must be the same (bytes
    put in one request, and a file the writer streamed, uploaded in parts when large)."""
    small = store.write("v/small", b"x" * 10)
    big = store.write("v/big", lambda path: path.write_bytes(os.urandom(12 << 20)))
    listed = {o.path: o.version for o in store.entries("v")}
    assert listed == {"v/big": big.version, "v/small": small.version}
    assert all(listed.values()) and big.size == 12 << 20
