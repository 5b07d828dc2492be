"""Target stores for the tests: moto's S3 server (a child process) and the settings that
reach a bucket on it, beside a local folder, so a store test runs on both."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from engine.playground.objectstore import S3Server
from engine.storage import LocalStorage, S3Settings, Storage, open_storage

#: The credentials of the config files the CLI tests write (:func:`s3_target_keys`), as
#: their environment holds them: never printed.
S3_SECRET = "cdcctl-test-secret-never-shown"
S3_ENV = {"CDCCTL_TEST_S3_KEY": "cdcctl-test", "CDCCTL_TEST_S3_SECRET": S3_SECRET}


def s3_target_keys(endpoint: str) -> dict[str, object]:
    """The ``[target.s3]`` keys of a config reaching ``endpoint`` with :data:`S3_ENV`'s
    credentials by reference."""
    return {
        "s3": {
            "endpoint": endpoint,
            "region": "us-east-1",
            "path_style": True,
            "access_key_id": "${env:CDCCTL_TEST_S3_KEY}",
            "secret_access_key": "${env:CDCCTL_TEST_S3_SECRET}",
        }
    }


def s3_settings(server: S3Server, url: str) -> S3Settings:
    """``url`` (``s3://lake/...``) on ``server``, path-style, with dummy credentials."""
    return S3Settings(
        url,
        endpoint=server.endpoint,
        region="us-east-1",
        path_style=True,
        access_key_id=SecretStr("cdcctl-test"),
        secret_access_key=SecretStr("cdcctl-test-secret"),
    )


def hudi_rs_options(server: S3Server) -> dict[str, str]:
    """hudi-rs's storage options for a table on ``server`` (the settings above), as the
    engine's readers pass them."""
    return open_storage(s3_settings(server, "s3://lake")).reader_options()


def local_or_s3(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """The store of a test parametrized ``["local", "s3"]``: a folder, or a prefix of its
    own in the bucket ``lake`` of the module's ``s3`` fixture (an :class:`S3Server`)."""
    if request.param == "local":
        return LocalStorage(tmp_path / "target")
    server = request.getfixturevalue("s3")
    return open_storage(s3_settings(server, f"s3://lake/{tmp_path.name}/lake"))


def race(count: int, work: Callable[[int], object]) -> dict[int, object]:
    """``work(i)`` for ``i`` in ``range(count)``, in as many threads released at once;
    what each returned (or raised) by ``i``."""
    results: dict[int, object] = {}
    start = threading.Barrier(count)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - the caller looks at what each got
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@dataclass
class ReplicaTarget:
    """Where a replicator test's replicas go: a folder, or a prefix in moto's bucket.

    Attributes:
        path: What ``target.path`` says (a folder, or an ``s3://`` URL).
        keys: The ``[target]`` keys beside it (``[target.s3]`` for a bucket).
        store: The target, to read the replicas back (hudi-rs reads a bucket itself).
        env: What the CLI's environment needs (the bucket's credentials).
    """

    path: Path | str
    keys: dict[str, object]
    store: Storage
    env: dict[str, str]

    def config(self, path: Path, bootstrap: str, topics: str, **options: object) -> Path:
        """:func:`tests.integration.replicas.write_config` into this target, with the
        work folder in the test's own folder."""
        from tests.integration.replicas import write_config

        options.setdefault("work_dir", path.parent / "work")
        return write_config(path, bootstrap, topics, self.path, target_keys=self.keys, **options)


def replica_target(request: pytest.FixtureRequest, tmp_path: Path) -> ReplicaTarget:
    """The target of a test parametrized ``["folder", "s3"]``."""
    if request.param == "folder":
        folder = tmp_path / "lake"
        return ReplicaTarget(folder, {}, LocalStorage(folder), {})
    server = request.getfixturevalue("s3")
    url = f"s3://lake/{tmp_path.name}/lake"
    store = open_storage(s3_settings(server, url))
    return ReplicaTarget(url, s3_target_keys(server.endpoint), store, dict(S3_ENV))
