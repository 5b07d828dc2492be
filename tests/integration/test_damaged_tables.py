"""A damaged table is refused, FAILED with what to do, never written over; others go on.

Real replicators (the CLI in a child process) against the embedded broker write real
tables; the test then damages them the ways storage and people do — a corrupted commit
file, a deleted completed commit file, an instant whose files were all deleted, a
truncated base file, a truncated log file, a stray Parquet file, a deleted
``hoodie.properties``, a harmless stray file — and checks:

* each damage is found by the check a replicator makes when it opens a table
  (:meth:`HudiWriter.verify`), with a message naming the damage, on copies of the real
  tables (fast: no Spark);
* end to end, a replicator started on damaged tables marks each FAILED with that message
  and the fix (``cdcctl resync``), writes nothing into them (their files are unchanged),
  and replicates the undamaged tables to the end; after ``cdcctl resync`` of each damaged
  table, every replica equals the oracle (hudi-rs reads them);
* a table folder whose ``hoodie.properties`` was deleted is FAILED, not re-created;
* a deleted newest commit file makes its instant unfinished: rolled back like a crash
  before the commit, its events applied again (the replica still equals the oracle).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import HudiError
from engine.hudi import HudiWriter
from engine.hudi.log_file import LogFileName
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.oracle import fold

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _completed(table: Path) -> list[Path]:
    return sorted((table / ".hoodie").glob("*.deltacommit"))


def _logs(table: Path) -> list[Path]:
    return sorted(p for p in table.iterdir() if LogFileName.parse(p.name) is not None)


def _bases(table: Path) -> list[Path]:
    return sorted(table.glob("*.parquet"))


def _newest_log(table: Path) -> Path:
    return max(_logs(table), key=lambda p: p.stat().st_mtime_ns)


def _newest_base(table: Path) -> Path:
    return max(_bases(table), key=lambda p: p.name.rsplit("_", 1)[1])


def _truncate(path: Path, keep: float = 0.5) -> None:
    os.truncate(path, int(path.stat().st_size * keep))


def _corrupt_commit(t: Path) -> str:
    _completed(t)[-1].write_bytes(b'{"partitionToWriteStats": {"": [')  # cut short
    return r"unreadable commit file .*\.deltacommit"


def _garbage_commit(t: Path) -> str:
    _completed(t)[-1].write_text('["not", "commit", "metadata"]')
    return r"commit file \d+\.deltacommit is not commit metadata"


def _delete_middle_commit(t: Path) -> str:
    _completed(t)[-2].unlink()  # its requested and inflight files stay: it looks unfinished
    return r"instant \d+ is unfinished but the later instant \d+ completed"


def _delete_instant(t: Path) -> str:
    newest = _completed(t)[-1]
    instant = newest.name.split(".")[0]
    for f in (t / ".hoodie").glob(f"{instant}.*"):
        f.unlink()
    return rf"written by instant {instant}, which the timeline does not know"


def _truncate_base(t: Path) -> str:
    _truncate(_newest_base(t))
    return r"\.parquet is \d+ bytes but commit \d+ recorded \d+"


def _overwrite_base(t: Path) -> str:
    base = _newest_base(t)
    size = base.stat().st_size
    base.write_bytes(b"\0" * size)  # same size, wrong content
    return r"is not a complete Parquet file"


def _truncate_log(t: Path) -> str:
    _truncate(_newest_log(t), 0.6)
    return r"\.log\.\d+_[\d-]+ is \d+ bytes but commit \d+ recorded \d+"


def _truncate_log_to_nothing(t: Path) -> str:
    _truncate(_newest_log(t), 0.0)
    return r"log file .* is damaged"


def _delete_current_base(t: Path) -> str:
    _newest_base(t).unlink()
    return r"base file .* of the current slice of file group .* is missing"


def _stray_parquet(t: Path) -> str:
    shutil.copy(_newest_base(t), t / "copy of data.parquet")
    return r"is a Parquet file that is not a Hudi base file"


DAMAGES: dict[str, Callable[[Path], str]] = {
    "corrupted commit file": _corrupt_commit,
    "commit file of another shape": _garbage_commit,
    "deleted completed commit file": _delete_middle_commit,
    "instant with every file deleted": _delete_instant,
    "truncated base file": _truncate_base,
    "overwritten base file": _overwrite_base,
    "truncated log file": _truncate_log,
    "emptied log file": _truncate_log_to_nothing,
    "deleted current base file": _delete_current_base,
    "stray parquet file": _stray_parquet,
}


def _fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "writer.lock"
    }


def test_damaged_tables_are_refused_with_what_to_do_and_the_others_go_on(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    # Two rounds (two runs, small batches): several delta commits, base and log files.
    workload = InventoryWorkload(seed=23, prefix=topic_prefix, schemas=True)
    first = list(workload.events(1_500))
    target = tmp_path / "lake"
    pattern = f"^{re.escape(topic_prefix)}\\."
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        pattern,
        target,
        max_batch_events=200,
        max_batch_seconds=0.3,
    )
    produce_messages(broker.bootstrap_servers, first)
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    second = list(workload.stream(3_000))
    produce_messages(broker.bootstrap_servers, second)
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    tables = {t: target / table_name_for_topic(workload.topic(t)) for t in workload.topics}
    for path in tables.values():
        assert len(_completed(path)) >= 3 and _logs(path), path

    # Every damage, on a copy of a real table: the open-time check names it.
    source = tables["orders"]
    HudiWriter.open(source).verify()  # the undamaged table passes
    for what, damage in DAMAGES.items():
        copy = tmp_path / "copies" / what.replace(" ", "_") / source.name
        shutil.copytree(source, copy)
        expected = damage(copy)
        with pytest.raises(HudiError) as caught:
            HudiWriter.open(copy).verify()
        assert re.search(expected, caught.value.message), (what, caught.value.message)
        assert f"cdcctl resync {source.name}" in caught.value.hint or "move it out" in (
            caught.value.hint
        ), (what, caught.value.hint)
    # A stray file that is not data: readers skip it, so the table is only warned about.
    (source / "notes.txt").write_text("a person left this here")
    assert HudiWriter.open(source).verify() == ["notes.txt"]

    # End to end: two tables damaged, one only with the harmless stray file.
    damaged = {
        "customers": _delete_middle_commit(tables["customers"]),
        "products": _truncate_base(tables["products"]),
    }
    before = {t: _fingerprint(tables[t]) for t in damaged}
    # The newest commit file of another table deleted: its instant looks unfinished, as
    # after a crash before the commit, so it is rolled back and its events read again.
    newest = _completed(tables["orders"])[-1]
    newest.unlink()
    third = list(workload.stream(1_000))
    produce_messages(broker.bootstrap_servers, third)
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr
    for t, expected in damaged.items():
        name = tables[t].name
        assert re.search(rf"{name}: FAILED: table {name}: .*{expected}", run.stderr), run.stderr
        assert f"cdcctl resync {name}" in run.stderr
        assert _fingerprint(tables[t]) == before[t], f"{t} was written over"
    assert f"{tables['orders'].name}: notes.txt in the table folder is not a table file" in (
        run.stderr
    )
    rolled = newest.name.split(".")[0]
    assert re.search(
        rf"{tables['orders'].name}: rolled back unfinished instants .*{rolled}", (run.stderr)
    ), run.stderr
    status = run_cli("status", "--config", str(config))
    assert "FAILED" in status.stdout, status.stdout

    # What the message says to do works: resync each damaged table, run again.
    for t in damaged:
        out = run_cli("resync", tables[t].name, "--config", str(config))
        assert out.returncode == 0, out.stderr
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 0, run.stderr
    assert_replicas_match(target, fold(first + second + third))

    # A table folder that lost hoodie.properties is not re-created over its old files.
    orders = tables["orders"]
    (orders / ".hoodie" / "hoodie.properties").unlink()
    kept = _fingerprint(orders)
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=600)
    assert run.returncode == 3, run.stderr
    assert re.search(
        rf"{orders.name}: FAILED: table {orders.name}: .*hoodie.properties is missing but "
        r".* holds a timeline; the replicator will not create a new table over it",
        run.stderr,
    ), run.stderr
    assert _fingerprint(orders) == kept
