"""An unknown table name is one error on every command that takes tables (issue 24 item 6).

The real CLI in child processes over a state store recorded by the engine's own
recorder (``tests/data/recorded_store.py``: five tables, two dead letters of
``shop_refunds``) and the detail fixture's replica (``tests/data/detail/lake``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.decode.result import BadMessage
from engine.replicator.deadletter import DeadLetters
from tests.data.recorded_store import TABLES, build
from tests.integration.replicas import config_text, run_cli

KNOWN = ", ".join(sorted(TABLES))
DETAIL_LAKE = Path(__file__).parents[1] / "data" / "detail" / "lake"


def _refused(run: subprocess.CompletedProcess, error: str, hint: str) -> None:
    """``run`` exited 2 with the one unknown-table error (its last two lines)."""
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr.splitlines()[-2:] == [f"error: {error}", f"  hint: {hint}"], run.stderr
    assert run.stdout == "" and "Traceback" not in run.stderr


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config whose work folder holds the recorded store and whose target holds a
    replica (``app_items``, a copy of the detail fixture's)."""
    folder = tmp_path_factory.mktemp("recorded")
    config = build(folder)
    shutil.copytree(DETAIL_LAKE, folder / "lake")
    return config


@pytest.mark.parametrize(
    "args",
    [
        ["pause", "nosuch"],
        ["resume", "inventory_customers", "nosuch"],
        ["resync", "nosuch"],
        ["resync", "nosuch", "--new-epoch"],
        ["deadletters", "nosuch"],
        ["deadletters", "replay", "nosuch"],
    ],
)
def test_an_unknown_table_is_one_usage_error_naming_the_known_ones(
    recorded: Path, args: list[str]
) -> None:
    r = run_cli(*args, "--config", str(recorded))
    assert len(r.stderr.splitlines()) == 2, r.stderr
    _refused(
        r,
        f"no table `nosuch`; known tables: app_items, {KNOWN}",
        "`cdcctl status` lists the tables",
    )


def test_a_table_name_one_typo_away_is_named(recorded: Path) -> None:
    r = run_cli("pause", "inventory_ordrs", "--config", str(recorded))
    _refused(
        r,
        f"no table `inventory_ordrs`; known tables: app_items, {KNOWN}",
        "did you mean `inventory_orders`?",
    )


def test_a_known_table_still_reaches_the_command(recorded: Path) -> None:
    # Known, with dead letters: listed, exit 0.
    letters = run_cli("deadletters", "shop_refunds", "--config", str(recorded))
    assert letters.returncode == 0, letters.stderr
    rows = [line for line in letters.stdout.splitlines() if line.startswith("shop_refunds ")]
    assert len(rows) == 2, letters.stdout
    # Known, with none: said so, exit 0.
    none = run_cli("deadletters", "inventory_orders", "--config", str(recorded))
    assert none.returncode == 0, none.stderr
    assert none.stdout.startswith("no dead letters for inventory_orders"), none.stdout
    # Known, but no replicator runs: the request cannot be carried out (exit 1).
    paused = run_cli("pause", "inventory_orders", "--config", str(recorded))
    assert paused.returncode == 1, paused.stderr
    assert "no replicator runs" in paused.stderr


def test_validate_and_query_name_the_replicas(recorded: Path) -> None:
    # Refused before any connection: the DSN's port has nothing listening.
    dsn = "postgresql://nobody@127.0.0.1:1/inventory"
    r = run_cli("validate", "--source", dsn, "--table", "app_itms", "--config", str(recorded))
    _refused(r, "no table `app_itms`; known tables: app_items", "did you mean `app_items`?")
    q = run_cli("query", "SELECT count(*) FROM nosuch", "--config", str(recorded))
    _refused(q, "no table `nosuch`; known tables: app_items", "`cdcctl status` lists the tables")
    # A quoted name with a space is named whole (not `My`).
    spaced = run_cli("query", 'SELECT * FROM "My Table"', "--config", str(recorded))
    _refused(
        spaced, "no table `My Table`; known tables: app_items", "`cdcctl status` lists the tables"
    )
    bad = run_cli("query", "SELEC 1", "--config", str(recorded))
    assert bad.returncode == 1 and bad.stderr.startswith("error: query failed"), bad.stderr


def test_no_table_known_yet_says_how_tables_come(tmp_path: Path) -> None:
    config = tmp_path / "cdcctl.toml"
    config.write_text(config_text(topics="^x\\."))
    r = run_cli("deadletters", "nosuch", "--config", str(config))
    _refused(
        r,
        "no table `nosuch`; no table is known yet",
        "`cdcctl start` makes the tables; `cdcctl status` lists them",
    )


@pytest.fixture(scope="module")
def three_kinds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded config with a table of each kind a table is known by alone: the
    replica ``app_items`` (no row in the store), the store's ``inventory_orders`` (no
    replica) and ``ghost`` (dead letters only)."""
    folder = tmp_path_factory.mktemp("three_kinds")
    config = build(folder)
    shutil.copytree(DETAIL_LAKE, folder / "lake")
    DeadLetters(folder / "work" / "deadletter").quarantine(
        "ghost", [BadMessage("cdc.ghost", 0, 3, b'{"id":1}', b"{not json", "bad JSON")]
    )
    return config


@pytest.fixture
def kinds(three_kinds: Path, tmp_path: Path) -> Path:
    """A fresh copy of :func:`three_kinds` (resync changes it)."""
    shutil.copytree(three_kinds.parent, tmp_path / "c")
    return tmp_path / "c" / three_kinds.name


def test_a_table_known_one_way_only_is_listed(kinds: Path) -> None:
    r = run_cli("resync", "nosuch", "--config", str(kinds))
    _refused(
        r,
        f"no table `nosuch`; known tables: {', '.join(sorted([*TABLES, 'app_items', 'ghost']))}",
        "`cdcctl status` lists the tables",
    )


@pytest.mark.parametrize("name", ["app_items", "inventory_orders", "ghost"])
def test_a_table_known_one_way_only_reaches_every_command(kinds: Path, name: str) -> None:
    letters = run_cli("deadletters", name, "--config", str(kinds))
    assert letters.returncode == 0, letters.stderr
    assert (name == "ghost") == (f"no dead letters for {name}" not in letters.stdout)
    paused = run_cli("pause", name, "--config", str(kinds))
    assert paused.returncode == 1 and "no replicator runs" in paused.stderr, paused.stderr
    lake = kinds.parent / "lake"
    # --force: no broker runs to check the topic against.
    resync = run_cli("resync", name, "--force", "--config", str(kinds))
    assert resync.returncode == 0, resync.stderr
    if name == "app_items":  # its replica dropped
        assert f"removed {lake.resolve() / name}" in resync.stdout, resync.stdout
        assert not (lake / name).exists()
    else:  # nothing to drop, said plainly; the other tables' replica stays
        assert f"resync {name}: no replica to drop" in resync.stdout, resync.stdout
        assert (lake / "app_items" / ".hoodie" / "hoodie.properties").is_file()
    assert (kinds.parent / "work" / "deadletter" / "ghost.jsonl").is_file()
    # Still known afterwards (ghost by its dead letters: no store row was made for it).
    again = run_cli("deadletters", name, "--config", str(kinds))
    assert again.returncode == 0, again.stderr
