"""An ``s3://`` target through the real CLI in child processes, against a real S3 server
(moto's): ``test-connection`` probes the bucket (list, create-if-absent, compare-and-swap,
read, delete) and says what is wrong; a store that ignores conditional writes (moto
behind a proxy that drops the ``If-None-Match`` and ``If-Match`` headers) fails the
check; a query of a bucket without replicas yet (``cdcctl start`` writes it, and the
commands read and drop replicas there: tests/integration/test_object_storage_runs.py)."""

from __future__ import annotations

import json
from pathlib import Path

from engine.playground.objectstore import S3Proxy, S3Server
from tests.integration.replicas import checks_of, config_text, run_cli
from tests.s3_support import S3_ENV, S3_SECRET, s3_target_keys

SECRET, ENV = S3_SECRET, S3_ENV


def _config(tmp_path: Path, url: str, endpoint: str) -> Path:
    path = tmp_path / "cdcctl.toml"
    keys = s3_target_keys(endpoint)
    path.write_text(config_text("127.0.0.1:1", "x", url, target_keys=keys, work_dir=tmp_path / "w"))
    return path


def _checks(config: Path) -> dict[str, dict]:
    r = run_cli("test-connection", "--config", str(config), "--json", env=ENV, timeout=120)
    assert r.returncode == 1, r.stderr  # the broker at 127.0.0.1:1 is down, at least
    assert SECRET not in r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    return checks_of(r)


def test_bucket_probe_passes_and_names_what_is_not_there_yet(s3: S3Server, tmp_path: Path) -> None:
    checks = _checks(_config(tmp_path, "s3://lake/replicas", s3.endpoint))
    bucket = checks["target.bucket"]
    assert bucket["status"] == "pass", bucket
    assert "s3://lake/replicas: list, create, create-if-absent refused" in bucket["detail"]
    assert not any(name.startswith("target.table") for name in checks)  # none there yet
    # The folder checks do not run on a URL (no "folder" named s3: is created).
    assert "target.folder" not in checks and "target.free_space" not in checks
    assert not (tmp_path / "s3:").exists()


def test_missing_bucket(s3: S3Server, tmp_path: Path) -> None:
    checks = _checks(_config(tmp_path, "s3://no-such-bucket/replicas", s3.endpoint))
    bucket = checks["target.bucket"]
    assert bucket["status"] == "fail"
    assert "bucket no-such-bucket does not exist" in bucket["detail"]
    assert "create the bucket" in bucket["fix"]


def test_store_ignoring_conditional_writes_fails(s3: S3Server, tmp_path: Path) -> None:
    with S3Proxy(s3.endpoint, drop_headers=("If-None-Match", "If-Match")) as proxy:
        checks = _checks(_config(tmp_path, "s3://lake/unsafe", proxy.endpoint))
    assert any(cond for _, _, cond in proxy.requests), "no conditional request was made"
    bucket = checks["target.bucket"]
    assert bucket["status"] == "fail", bucket
    assert "ignores conditional writes" in bucket["detail"]
    assert "If-None-Match" in bucket["fix"]


def test_query_of_an_empty_bucket_names_where_it_looked(s3: S3Server, tmp_path: Path) -> None:
    config = _config(tmp_path, "s3://lake/empty-replicas", s3.endpoint)
    r = run_cli("query", "SELECT 42 AS n", "--config", str(config), "--json", env=ENV)
    assert r.returncode == 0 and json.loads(r.stdout) == [{"n": 42}], (r.stdout, r.stderr)
    r = run_cli("query", "SELECT * FROM orders", "--config", str(config), env=ENV)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "orders" in r.stderr and "Traceback" not in r.stderr
    assert SECRET not in r.stdout + r.stderr
