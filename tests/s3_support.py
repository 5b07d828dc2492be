"""Target stores for the tests: moto's S3 server (a child process) and the settings that
reach a bucket on it, beside a local folder, so a store test runs on both."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from engine.playground.objectstore import S3Server
from engine.storage import LocalStorage, S3Settings, Storage, open_storage


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


def local_or_s3(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """The store of a test parametrized ``["local", "s3"]``: a folder, or a prefix of its
    own in the bucket ``lake`` of the module's ``s3`` fixture (an :class:`S3Server`)."""
    if request.param == "local":
        return LocalStorage(tmp_path / "target")
    server = request.getfixturevalue("s3")
    return open_storage(s3_settings(server, f"s3://lake/{tmp_path.name}/lake"))
