"""Tables another Hudi writer made or changed are refused, and not a byte is written.

Here without a JVM: tables cdcctl's writer made (``HudiTable``, as the replicator makes
them), then changed by hand the way a Hudi writer changes them — a ``.hoodie/metadata``
folder, ``hoodie.table.metadata.partitions`` set, a pending ``compaction``, a pending
clustering ``replacecommit`` with its plan, a commit without cdcctl's bookkeeping, table
version 8. The replicator's table opening (``Tables``), ``test-connection``, an offline
dead-letter replay, ``cdcctl resync`` (offline) and ``cdcctl delete --purge`` refuse each
with what was found and what to do, and every file of the folder is unchanged (no writer
lock file either). The same refusal for tables Apache Hudi's own Spark writer made is in
``tests/peers/test_foreign_tables.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.checks.result import FAIL
from engine.checks.target import check_table
from engine.config import Config, config_from_dict
from engine.decode.result import BadMessage
from engine.errors import ForeignTableError, TableNameError
from engine.hudi import options as o
from engine.hudi import ownership
from engine.hudi import timeline as tl
from engine.hudi.commit import format_checkpoint
from engine.hudi.table import HudiTable
from engine.lock import Locks
from engine.naming import table_path
from engine.replicator.deadletter import DeadLetters
from engine.replicator.loop import Replicator
from engine.replicator.reset import plan_delete, resync_offline
from engine.replicator.tables import Tables
from engine.state import TableState
from tests.engine.test_hudi_table import SCHEMA, Writer

TOPIC = "db.app.orders"


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder`` with the SHA-256 of each file."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "/"
        for p in sorted(folder.rglob("*"))
    }


def _config(tmp_path: Path) -> Config:
    return config_from_dict(
        {
            "source": {"bootstrap_servers": "localhost:9092", "topics": r"^db\."},
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )


def _our_table(cfg: Config, table_type: str = o.TABLE_TYPE_COW) -> tuple[Path, list[str]]:
    """A table as the replicator writes it, at the folder of ``TOPIC``: three commits
    with checkpoints, and cdcctl's own metadata folder."""
    name = cfg.table_name(TOPIC)
    path = table_path(cfg.target_path(), name)
    table = HudiTable.create(path, name, ["id"], "ts", 2, SCHEMA, table_type)
    w = Writer(table)
    instants = [
        w.upsert({i: (f"v{i}", i), i + 10: ("x", i)}, checkpoint=format_checkpoint(TOPIC, {0: i}))
        for i in range(1, 4)
    ]
    (path / ".hoodie" / ".cdcctl").mkdir()
    return path, instants


def _after(instants: list[str]) -> str:
    """An instant after the table's last (a pending one another writer could start)."""
    return tl.instant_plus_1ms(instants[-1])


def _metadata_folder(path: Path, instants: list[str]) -> str:
    (path / ".hoodie" / "metadata" / ".hoodie").mkdir(parents=True)
    (path / ".hoodie" / "metadata" / ".hoodie" / "hoodie.properties").write_text("x=y\n")
    return "a metadata table (.hoodie/metadata)"


def _metadata_partitions(path: Path, instants: list[str]) -> str:
    with (path / ".hoodie" / "hoodie.properties").open("a") as f:
        f.write("hoodie.table.metadata.partitions=files,column_stats\n")
    return "a metadata table (hoodie.table.metadata.partitions=files,column_stats)"


def _pending_compaction(path: Path, instants: list[str]) -> str:
    name = f"{_after(instants)}.compaction.requested"
    (path / ".hoodie" / name).write_bytes(b"Obj\x01 a plan Hudi wrote")
    return f"a pending compaction ({name})"


def _pending_clustering(path: Path, instants: list[str]) -> str:
    name = f"{_after(instants)}.replacecommit.requested"
    (path / ".hoodie" / name).write_bytes(b"Obj\x01 HoodieRequestedReplaceMetadata CLUSTER")
    return f"a pending clustering ({name})"


def _foreign_commit(path: Path, instants: list[str]) -> str:
    commit = path / ".hoodie" / f"{instants[1]}.commit"
    meta = json.loads(commit.read_bytes())
    meta["extraMetadata"] = {"schema": meta["extraMetadata"]["schema"]}  # what Spark writes
    commit.write_text(json.dumps(meta))
    return f"a commit without cdcctl's bookkeeping ({instants[1]}.commit)"


def _version_8(path: Path, instants: list[str]) -> str:
    props = path / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=6", "hoodie.table.version=8"))
    return "table version 8 (cdcctl writes version 6)"


CHANGES: dict[str, Callable[[Path, list[str]], str]] = {
    "metadata folder": _metadata_folder,
    "metadata partitions": _metadata_partitions,
    "pending compaction": _pending_compaction,
    "pending clustering": _pending_clustering,
    "commit without bookkeeping": _foreign_commit,
    "table version 8": _version_8,
}


def test_our_own_tables_show_nothing_foreign(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    path, instants = _our_table(cfg, o.TABLE_TYPE_MOR)
    assert ownership.findings(path) == []
    # Our own crashed truncate leaves an empty requested replacecommit: ours, rolled back.
    (path / ".hoodie" / f"{_after(instants)}.replacecommit.requested").write_bytes(b"")
    assert ownership.findings(path) == []
    # A folder without hoodie.properties is left to what opens it.
    assert ownership.findings(tmp_path / "nothing") == []
    # A commit on a Merge-on-Read table is Hudi's compaction: cdcctl writes delta commits.
    delta = path / ".hoodie" / f"{instants[0]}.deltacommit"
    (path / ".hoodie" / f"{instants[-1][:-3]}998.commit").write_bytes(delta.read_bytes())
    assert ownership.findings(path) == [
        f"a compaction ({instants[-1][:-3]}998.commit on a Merge-on-Read table)"
    ]


@pytest.mark.parametrize("what", CHANGES)
def test_a_table_another_writer_changed_is_refused_and_not_written(
    tmp_path: Path, what: str
) -> None:
    cfg = _config(tmp_path)
    path, instants = _our_table(cfg)
    name = path.name
    expected = CHANGES[what](path, instants)
    assert ownership.findings(path) == [expected]
    before = fingerprint(path)

    # The replicator's opening of the table: FAILED, with what was found and what to do.
    tables = Tables(cfg, tmp_path / "work" / "staging")
    tables.locks = Locks()
    try:
        rt = tables.get(TOPIC)
    finally:
        tables.locks.release_all()
    assert rt is not None and rt.state is TableState.FAILED and rt.writer is None
    assert f"table {name}: {path} holds a table another Hudi writer made or changed" in rt.error
    assert expected in rt.error
    assert "move the folder out of target.path" in rt.error
    assert fingerprint(path) == before  # not even the writer lock file

    # test-connection says so too.
    if what != "table version 8":  # not readable as a version-6 table: its own failure
        check = check_table(cfg, path)
        assert check.status == FAIL and expected in check.detail, check
        assert "move the folder out of target.path" in check.fix

    # A dead-letter replay (offline) finds the table FAILED and applies nothing.
    letters = DeadLetters(cfg.work_path() / "deadletter")
    letters.quarantine(name, [BadMessage(TOPIC, 0, 7, b"{}", b"not json", "bad json")])
    with pytest.raises(TableNameError) as refused:
        Replicator(cfg).replay(name)
    assert f"table {name} is FAILED" in refused.value.message and expected in refused.value.message
    assert fingerprint(path) == before

    # Offline resync removes nothing of it; delete --purge neither.
    with pytest.raises(ForeignTableError) as caught:
        resync_offline(cfg, name)
    assert expected in caught.value.message
    if what == "table version 8":
        # Not a table cdcctl can read, so not one it purges (it stays where it is).
        assert plan_delete(cfg, purge=True).tables == {}
    else:
        with pytest.raises(ForeignTableError) as caught:
            plan_delete(cfg, purge=True)
        assert expected in caught.value.message
        assert "`cdcctl delete` without --purge" in caught.value.hint
    assert fingerprint(path) == before


def test_the_same_table_unchanged_opens_for_writing(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    path, _ = _our_table(cfg)
    tables = Tables(cfg, tmp_path / "work" / "staging")
    tables.locks = Locks()
    try:
        rt = tables.get(TOPIC)
        assert rt is not None and rt.writer is not None, rt and rt.error
        assert rt.state is not TableState.FAILED
    finally:
        tables.locks.release_all()
    tables = plan_delete(cfg, purge=True).tables
    assert {n: t.url for n, t in tables.items()} == {path.name: str(path)}
