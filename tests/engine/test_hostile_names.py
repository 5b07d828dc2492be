"""Hostile table and column names driven through the real replicator (Spark, the Hudi
writer, hudi-rs) and the real ``cdcctl query``: nothing escapes the target, nothing
collides silently, nothing is read as SQL.

Kafka topic names hold only ``[a-zA-Z0-9._-]``, so the hostile topic names are case-only
differences and names cut to one length; the naming function itself is driven with
``..``, NUL, look-alikes and normal forms in tests/engine/test_naming.py. Column names
come from the Debezium schema and payload, where anything goes.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql as pgsql

from engine.config import config_from_dict
from engine.replicator import Replicator
from tests.engine.test_properties import Msg
from tests.integration.replicas import config_text, read_replica, run_cli


def _config(tmp_path: Path):
    return config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 1, "table_type": "MERGE_ON_READ"},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )


def _message(
    topic: str, offset: int, i: int, columns: list[str], source: dict[str, str] | None = None
) -> Msg:
    """An insert of row ``i`` with an int64 ``id`` key and string ``columns`` (``source``:
    more string members of the source block, e.g. its schema and table)."""
    source = source or {}
    id_field = {"type": "int64", "optional": False, "field": "id"}
    fields = [id_field] + [{"type": "string", "optional": True, "field": c} for c in columns]
    row = {"type": "struct", "optional": True, "name": "V", "fields": fields}
    schema = {
        "type": "struct",
        "name": "Envelope",
        "optional": False,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "optional": False,
                "name": "S",
                "field": "source",
                "fields": [
                    {"type": "int64", "optional": True, "field": "lsn"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                    *({"type": "string", "optional": True, "field": f} for f in source),
                ],
            },
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    after = {"id": i, **{c: f"{c}={i}" for c in columns}}
    payload = {
        "before": None,
        "after": after,
        "source": {"lsn": 100 + offset, "ts_ms": 1_700_000_000_000 + offset, **source},
        "op": "c",
    }
    key = {"schema": {"type": "struct", "name": "K", "fields": [id_field]}, "payload": {"id": i}}
    value = {"schema": schema, "payload": payload}
    return Msg(topic, json.dumps(key).encode(), json.dumps(value).encode(), offset)


def _batch(topic: str, columns: list[str], rows: int = 2) -> list[Msg]:
    return [_message(topic, n, n, columns) for n in range(rows)]


def _errors(replicator: Replicator) -> dict[str, str]:
    return {s.topic: s.error or "" for s in replicator.failing()}


def test_topics_equal_but_for_case_never_share_a_table(spark, tmp_path: Path) -> None:
    replicator = Replicator(_config(tmp_path), spark=spark)
    replicator.apply(_batch("srv.inv.Orders", ["a"]) + _batch("srv.inv.orders", ["a"]))
    [(loser, error)] = _errors(replicator).items()  # whichever was opened second
    winner = ({"srv.inv.Orders", "srv.inv.orders"} - {loser}).pop()
    assert f"is already used by topic {winner!r}" in error
    (folder,) = (tmp_path / "lake").iterdir()
    assert folder.name == "inv_" + winner.split(".")[-1]
    assert sorted(read_replica(folder)) == ["0", "1"]


def test_a_later_run_never_writes_another_topics_table(spark, tmp_path: Path) -> None:
    first = Replicator(_config(tmp_path), spark=spark)
    first.apply(_batch("a.inv.orders", ["a"]))
    assert not first.failing()
    # Another run, where only other topics with the same table name (or the same but
    # for case) are seen: both refused, the replica untouched.
    later = Replicator(_config(tmp_path), spark=spark)
    later.apply([_message("b.inv.orders", 0, 7, ["a"]), _message("c.inv.ORDERS", 0, 8, ["a"])])
    errors = _errors(later)
    assert "holds the replica of topic 'a.inv.orders'" in errors["b.inv.orders"]
    assert "differs only in case" in errors["c.inv.ORDERS"]
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == ["inv_orders"]
    assert sorted(read_replica(tmp_path / "lake" / "inv_orders")) == ["0", "1"]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (["Name", "name"], "columns 'Name' and 'name' differ only in case"),
        (["ID"], "columns 'id' and 'ID' differ only in case"),
        (["_hoodie_commit_time"], "column '_hoodie_commit_time' appears twice"),
        (["_HOODIE_FILE_NAME"], "'_hoodie_file_name' and '_HOODIE_FILE_NAME' differ only"),
        (["_CDC_OP"], "columns '_CDC_OP' and '_cdc_op' differ only in case"),  # a cdc column
        (["order-id"], "column 'order-id' is not a valid Avro name"),
        (["名前"], "'名前' is not a valid Avro name"),
        (['a"b'], "'a\"b' is not a valid Avro name"),
        (['x"; DROP VIEW app_t; --'], "is not a valid Avro name"),
    ],
)
def test_columns_a_table_cannot_hold_fail_that_table_alone(
    spark, tmp_path: Path, columns: list[str], message: str
) -> None:
    replicator = Replicator(_config(tmp_path), spark=spark)
    replicator.apply(_batch("srv.app.t", columns) + _batch("srv.app.good", ["v"]))
    errors = _errors(replicator)
    assert list(errors) == ["srv.app.t"], errors
    assert message in errors["srv.app.t"]
    assert not (tmp_path / "lake" / "app_t").exists()  # refused before anything is written
    assert sorted(read_replica(tmp_path / "lake" / "app_good")) == ["0", "1"]


def test_a_column_equal_but_for_case_added_later_fails_the_table(spark, tmp_path: Path) -> None:
    replicator = Replicator(_config(tmp_path), spark=spark)
    replicator.apply(_batch("srv.app.t", ["name"]))
    assert not replicator.failing()
    replicator.apply([_message("srv.app.t", 2, 9, ["name", "NAME"])])
    assert "columns 'name' and 'NAME' differ only in case" in _errors(replicator)["srv.app.t"]
    assert sorted(read_replica(tmp_path / "lake" / "app_t")) == ["0", "1"]


def test_query_over_reserved_words_and_hostile_folder_names(spark, tmp_path: Path) -> None:
    words = ["select", "order", "table", "from"]
    replicator = Replicator(_config(tmp_path), spark=spark)
    replicator.apply(_batch("srv.app.select", words) + _batch("srv.app.Other", ["v"]))
    assert not replicator.failing()
    lake = tmp_path / "lake"
    # Folders cdcctl never makes, put there by hand: a copy under a name that is SQL,
    # and one equal to another but for case.
    hostile = 'x"; DROP VIEW app_select; --'
    shutil.copytree(lake / "app_select", lake / hostile)
    shutil.copytree(lake / "app_Other", lake / "app_other")

    config = _write_config(tmp_path)

    sql = 'SELECT "select", "order", "table", "from" FROM app_select ORDER BY id'
    done = run_cli("query", "--config", str(config), "--json", sql)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows == [{w: f"{w}={i}" for w in words} for i in range(2)]

    quoted = '"' + hostile.replace('"', '""') + '"'
    both = f"SELECT (SELECT count(*) FROM {quoted}) + (SELECT count(*) FROM app_select) AS n"
    done = run_cli("query", "--config", str(config), "--json", both)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"n": 4}]

    done = run_cli("query", "--config", str(config), "SELECT * FROM app_other")
    assert done.returncode == 1
    assert "differ only in case" in done.stderr and "Traceback" not in done.stderr


# ------------------------------------------------- source database names (PostgreSQL)
# The session's scratch PostgreSQL; a schema made and dropped by the test. Its names are
# made with psycopg's own quoting, not cdcctl's.

HOSTILE_TABLE = 'Mixed"Case%b; DROP TABLE x; --'


@pytest.fixture
def pg_schema(scratch_postgres):
    """(connection, schema name, DSN) of a hostile-named schema, dropped after."""
    conn = psycopg.connect(scratch_postgres.dsn, autocommit=True)
    schema = f'cdc"Names %s {uuid.uuid4().hex[:8]}'
    conn.execute(pgsql.SQL("CREATE SCHEMA {}").format(pgsql.Identifier(schema)))
    try:
        yield conn, schema, scratch_postgres.dsn
    finally:
        conn.execute(pgsql.SQL("DROP SCHEMA {} CASCADE").format(pgsql.Identifier(schema)))
        conn.close()


def _write_config(tmp_path: Path) -> Path:
    config = tmp_path / "cdcctl.toml"
    config.write_text(config_text(topics=".", target=tmp_path / "lake", work_dir=tmp_path / "work"))
    return config


def test_validate_quotes_source_names(spark, tmp_path: Path, pg_schema) -> None:
    conn, schema, dsn = pg_schema
    words = ["select", "Order", "table"]
    table = pgsql.Identifier(schema, HOSTILE_TABLE)
    conn.execute(
        pgsql.SQL(
            'CREATE TABLE {} (id bigint PRIMARY KEY, "select" text, "Order" text, "table" text)'
        ).format(table)
    )
    conn.execute(
        pgsql.SQL(
            "INSERT INTO {} SELECT g, 'select=' || g, 'Order=' || g, 'table=' || g "
            "FROM generate_series(0, 1) g"
        ).format(table)
    )
    source = {"connector": "postgresql", "db": "postgres", "schema": schema}
    source["table"] = HOSTILE_TABLE
    replicator = Replicator(_config(tmp_path), spark=spark)
    replicator.apply([_message("srv.names.t", n, n, words, source) for n in range(2)])
    assert not replicator.failing()
    config = _write_config(tmp_path)

    def validate() -> tuple[int, dict]:
        run = run_cli("validate", "--config", str(config), "--source", dsn, "--json")
        assert run.returncode in (0, 1), run.stderr[-3000:]
        (report,) = json.loads(run.stdout)
        return run.returncode, report

    code, report = validate()
    assert code == 0 and report["status"] == "equal", report
    assert report["source_rows"] == 2 and report["identity"] == "commit"
    # Not vacuous: a changed value in a mixed-case, reserved-word column is found.
    conn.execute(pgsql.SQL("""UPDATE {} SET "Order" = 'changed' WHERE id = 1""").format(table))
    code, report = validate()
    assert code == 1 and report["status"] != "equal", report
    # The hostile table is still there: nothing in its name ran as SQL.
    assert conn.execute(pgsql.SQL("SELECT count(*) FROM {}").format(table)).fetchone() == (2,)


def test_test_connection_finds_and_quotes_source_names(pg_schema, tmp_path: Path) -> None:
    conn, schema, dsn = pg_schema
    keyed, bare = pgsql.Identifier(schema, "Select"), pgsql.Identifier(schema, HOSTILE_TABLE)
    conn.execute(pgsql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY)").format(keyed))
    conn.execute(pgsql.SQL("CREATE TABLE {} (id bigint)").format(bare))
    from engine.checks.database import database_checks
    from engine.config import config_from_dict
    from engine.naming import table_name_for_topic

    prefix = table_name_for_topic(f"srv.{schema}.x")[: -len("_x")]
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": "^srv\\.",
                "include_tables": [f"{prefix}_*"],
            },
            "target": {"path": str(tmp_path / "lake")},  # not written to
        }
    )
    # No topic yet: the database's own tables are checked, names and all.
    checks = {c.name: c for c in database_checks(cfg, dsn, lambda: None)}
    tables = [c for name, c in checks.items() if name.startswith("postgres.table")]
    text = "\n".join(f"{c.name} {c.status} {c.detail} {c.fix}" for c in tables)
    quoted = '"' + schema.replace('"', '""') + '"."' + HOSTILE_TABLE.replace('"', '""') + '"'
    assert f"ALTER TABLE {quoted} ADD PRIMARY KEY" in text, text
    assert "Select" in text and "no table" not in text, text


def test_validate_quotes_mysql_source_names(spark, tmp_path: Path, scratch_mariadb) -> None:
    conn = scratch_mariadb.connect()
    db = f"cdc`Names %s {uuid.uuid4().hex[:8]}"
    qdb, qtable = "`" + db.replace("`", "``") + "`", "`" + HOSTILE_TABLE.replace("`", "``") + "`"
    # No parameters in these statements: PyMySQL leaves a % alone then.
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {qdb}")
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {qdb}.{qtable} (id bigint PRIMARY KEY, `select` text, "
                "`Order` text, `table` text)"
            )
            cur.execute(
                f"INSERT INTO {qdb}.{qtable} VALUES (0, 'select=0', 'Order=0', 'table=0'), "
                "(1, 'select=1', 'Order=1', 'table=1')"
            )
        source = {"connector": "mysql", "db": db, "table": HOSTILE_TABLE}
        replicator = Replicator(_config(tmp_path), spark=spark)
        words = ["select", "Order", "table"]
        replicator.apply([_message("srv.names.t", n, n, words, source) for n in range(2)])
        assert not replicator.failing()
        config = _write_config(tmp_path)

        def validate() -> tuple[int, dict]:
            dsn = scratch_mariadb.dsn
            run = run_cli("validate", "--config", str(config), "--source", dsn, "--json")
            assert run.returncode in (0, 1), run.stderr[-3000:]
            (report,) = json.loads(run.stdout)
            return run.returncode, report

        code, report = validate()
        assert code == 0 and report["status"] == "equal", report
        assert report["source_rows"] == 2 and report["identity"] == "commit"
        with conn.cursor() as cur:
            cur.execute(f"UPDATE {qdb}.{qtable} SET `Order` = 'changed' WHERE id = 1")
        code, report = validate()
        assert code == 1 and report["status"] != "equal", report
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {qdb}")
        conn.close()
