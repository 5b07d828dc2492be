"""The tests' own database servers (tests/scratch_postgres.py, tests/scratch_mariadb.py):
where the PostgreSQL programs are found, and that the MariaDB server is one a binlog
reader can stream from."""

from __future__ import annotations

import os
from pathlib import Path

import pymysql
import pytest

from tests.scratch_postgres import find_bindir


def _fake_install(root: Path, *versions: str) -> None:
    for version in versions:
        program = root / version / "bin" / "initdb"
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)


def test_postgres_programs_are_found_in_debians_highest_version(tmp_path: Path) -> None:
    debian = tmp_path / "usr-lib-postgresql"
    _fake_install(debian, "9.6", "15", "16")
    empty_path = str(tmp_path / "nothing-on-path")
    assert find_bindir(path=empty_path, debian_root=str(debian)) == debian / "16" / "bin"
    # initdb on PATH wins, and its real folder (a symlink's target) is the one used.
    on_path = tmp_path / "bin"
    on_path.mkdir()
    os.symlink(debian / "9.6" / "bin" / "initdb", on_path / "initdb")
    assert find_bindir(path=str(on_path), debian_root=str(debian)) == debian / "9.6" / "bin"


def test_missing_postgres_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"run \./bootstrap\.sh peers"):
        find_bindir(path=str(tmp_path), debian_root=str(tmp_path / "none"))


def test_scratch_postgres_runs_debians_server_with_logical_decoding(scratch_postgres) -> None:
    with scratch_postgres.connect() as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        assert conn.execute("SHOW port").fetchone() == (str(scratch_postgres.port),)


def test_scratch_mariadb_serves_a_row_binlog_to_a_replication_user(scratch_mariadb) -> None:
    with scratch_mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@server_id, @@port, "
            "@@socket, @@character_set_server"
        )
        log_bin, fmt, image, server_id, port, sock, charset = cur.fetchone()
    assert (log_bin, fmt, image) == (1, "ROW", "FULL")
    assert server_id == scratch_mariadb.server_id != 0
    assert port == scratch_mariadb.port and sock == str(scratch_mariadb.socket_path)
    assert charset == "utf8mb4"
    scratch_mariadb.create_replication_user("cdc_reader", "reader-pw")
    with scratch_mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS scratch_check")
        cur.execute("CREATE OR REPLACE TABLE scratch_check.t (id int PRIMARY KEY, v text)")
        cur.execute("INSERT INTO scratch_check.t VALUES (1, 'a')")
    reader = pymysql.connect(
        host="127.0.0.1", port=scratch_mariadb.port, user="cdc_reader", password="reader-pw"
    )
    with reader, reader.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        (binlog_file, position, *_) = cur.fetchone()
        assert binlog_file.startswith("mysql-bin.") and position > 4
        cur.execute(f"SHOW BINLOG EVENTS IN '{binlog_file}'")
        kinds = {row[2] for row in cur.fetchall()}
        assert {"Table_map", "Write_rows_v1"} <= kinds, kinds
        cur.execute("SELECT v FROM scratch_check.t")
        assert cur.fetchall() == (("a",),)
        with pytest.raises(pymysql.err.OperationalError, match="denied"):
            cur.execute("CREATE DATABASE scratch_denied")  # a reader, not an owner
