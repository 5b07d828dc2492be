"""``cdcctl init --source DSN``: the source database's catalog types schemaless columns."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.integration.replicas import run_cli

FLAGS = ("--bootstrap-servers", "127.0.0.1:9092", "--topics", r"^pg\.", "--target", "./lake")


def test_init_with_a_source_reads_its_catalog_and_turns_catalog_types_on(
    tmp_path: Path, scratch_postgres
) -> None:
    out = tmp_path / "cdcctl.toml"
    dsn = scratch_postgres.dsn
    r = run_cli("init", *FLAGS, "--output", str(out), "--source", dsn)
    assert r.returncode == 0, r.stderr
    assert "read the column types of" in r.stderr
    source = tomllib.loads(out.read_text())["source"]
    assert source["database_dsn"] == dsn and source["catalog_types"] is True


def test_init_with_an_unreachable_source_says_why_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "cdcctl.toml"
    r = run_cli("init", *FLAGS, "--output", str(out), "--source", "mysql://root@127.0.0.1:9")
    assert r.returncode == 2
    assert "cannot read the column types of mysql://root@127.0.0.1:9" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
