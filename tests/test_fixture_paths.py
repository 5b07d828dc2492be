"""No committed test data names a folder of the machine that recorded it (issue 24 item 9).

Every file under ``tests/data`` (Hudi timelines and Avro plans included, read as bytes)
is searched for an absolute path under ``/tmp``, ``/work``, ``/root`` or ``/home``; and
the detail fixture's clean plans, which name the files they deleted relative to the
table, still work: a pending one run again deletes under the table only.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from engine.hudi import avro_models as am
from engine.hudi.writer import HudiWriter

DATA = Path(__file__).parent / "data"
#: An absolute path of one machine: a temporary, work, root or home folder at the root of
#: the file system, not preceded by a name (a placeholder folder such as ``DIR`` is fine).
MACHINE_PATH = re.compile(rb"(?<![\w.~$-])/(?:tmp|work|root|home)/[\w.-]+")


def test_the_scan_finds_what_it_looks_for() -> None:
    found = [MACHINE_PATH.search(t) for t in (b'"/tmp/cdcctl-detail/lake"', b"x /root/.cache")]
    assert all(found)
    assert not MACHINE_PATH.search(b"writes DIR/work/state.db, ~/.cache/cdcctl")


def test_no_file_under_tests_data_holds_a_machine_path() -> None:
    files = [p for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(files) > 20, "tests/data looks empty"
    hits = {}
    for path in files:
        found = MACHINE_PATH.search(path.read_bytes())
        if found:
            hits[str(path.relative_to(DATA))] = found.group().decode(errors="replace")
    assert hits == {}, f"machine paths in committed test data: {hits}"


def test_a_pending_clean_with_relative_paths_deletes_under_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "lake" / "app_items"
    shutil.copytree(DATA / "detail" / "lake" / "app_items", table)
    [done] = (table / ".hoodie").glob("*.clean")
    plan = am.deserialize_avro_metadata(
        done.with_name(done.name + ".requested").read_bytes(), am.CLEANER_PLAN
    )
    names = [i["filePath"] for v in plan["filePathsToBeDeletedPerPartition"].values() for i in v]
    assert names and not any(os.path.isabs(n) for n in names), names
    done.unlink()  # the clean is pending again, and one of its files is back
    (table / names[0]).write_bytes(b"stale")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    (elsewhere / names[0]).write_bytes(b"not the table's")
    monkeypatch.chdir(elsewhere)
    HudiWriter.open(table).recover()
    assert not (table / names[0]).exists()
    assert (elsewhere / names[0]).read_bytes() == b"not the table's"
    assert done.is_file()
