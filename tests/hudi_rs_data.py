"""Tables written by Apache Hudi itself, from the test data of hudi-rs's source release.

The ``hudi`` package's source distribution on PyPI (hudi-rs 0.5.0, Apache License 2.0)
carries the tables hudi-rs tests against, under ``crates/test/data/``: each a zip of a
table that Hudi's Spark writer made (the SQL that made it is in hudi-rs's repository).
``./bootstrap.sh test`` fetches that archive once into the cache folder
(``python -m tests.hudi_rs_data``), from the package index pip is configured with, and
checks it against the SHA-256 pinned here. Nothing of it is kept in this repository.

Tests call :func:`table_zip`; a missing archive fails the test with the command that
fetches it (it never skips).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

SDIST = "hudi-0.5.0.tar.gz"
SHA256 = "dc8e1f3405d262491b97e8f009bcae2cbd66279dd2a8300b738ecdc3d9cba51d"
PREFIX = "hudi-0.5.0/crates/test/data/"


def cache_dir() -> Path:
    """Where the test data is kept, in cdcctl's cache folder."""
    from engine.spark.archive import cache_dir as cdcctl_cache

    return cdcctl_cache() / "hudi-rs-test-data"


def archive_path() -> Path:
    """Where the fetched source archive lives."""
    return cache_dir() / SDIST


def table_zip(relative: str) -> Path:
    """The zip of one test table, e.g. ``sample_table/cow/v6_nonpartitioned.zip``.

    Extracted from the cached archive on first use. Raises ``FileNotFoundError`` with the
    fetch command when the archive is not there.
    """
    target = cache_dir() / "data" / relative
    if target.is_file():
        return target
    archive = archive_path()
    if not archive.is_file():
        raise FileNotFoundError(
            f"hudi-rs test tables not found ({archive}): run ./bootstrap.sh test, or "
            f"{sys.executable} -m tests.hudi_rs_data"
        )
    with tarfile.open(archive) as tar:
        member = tar.getmember(PREFIX + relative)
        data = tar.extractfile(member)
        if data is None:
            raise FileNotFoundError(f"{relative} is not a file in {archive}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        tmp.write_bytes(data.read())
        tmp.replace(target)
    return target


def _index_url() -> str:
    """The package index pip uses here (its configured ``index-url``, else its default)."""
    found = os.environ.get("PIP_INDEX_URL")
    if not found:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
            capture_output=True,
            text=True,
            check=False,
        )
        found = out.stdout.strip() if out.returncode == 0 else ""
    if not found:
        from pip._internal.models.index import PyPI

        found = PyPI.simple_url
    return found.rstrip("/")


def fetch() -> Path:
    """Download the source archive into the cache (once) and check its SHA-256."""
    path = archive_path()
    if path.is_file() and _sha256(path) == SHA256:
        return path
    print(f"bootstrap: fetching hudi-rs's test tables ({SDIST}, 9 MiB)", file=sys.stderr)
    page = urllib.request.urlopen(f"{_index_url()}/hudi/", timeout=60).read().decode()
    links = re.findall(r'href="([^"]*' + re.escape(SDIST) + r'[^"]*)"', page)
    if not links:
        raise SystemExit(f"{SDIST} is not listed by the package index")
    url = links[0].replace("&amp;", "&")
    if url.startswith("/") or "://" not in url:
        url = urllib.request.urljoin(f"{_index_url()}/hudi/", url)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with urllib.request.urlopen(url.split("#")[0], timeout=300) as response:
        tmp.write_bytes(response.read())
    if _sha256(tmp) != SHA256:
        tmp.unlink()
        raise SystemExit(f"{SDIST}: SHA-256 differs from the pinned {SHA256}")
    tmp.replace(path)
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


if __name__ == "__main__":
    fetch()
