"""The filter a repair hands Debezium, run by the real databases: on a scratch PostgreSQL
and a scratch MariaDB (under a backslash-literal ``sql_mode`` and under
``NO_BACKSLASH_ESCAPES``), it selects exactly the keys it was made from — keys with
quotes, backslashes, ``%``, non-ASCII text and composite keys included — and the source
position a repair orders its deletes by is read on both."""

from __future__ import annotations

import uuid

import pytest

from engine.repair.plan import key_ranges
from engine.validate.source import connect

KEYS = ["plain", "it's", "back\\slash", "50%", 'dq"', "é ü 漢", "", "a'b\\'c"]
WANTED = ["it's", "back\\slash", "50%", "é ü 漢", "", "a'b\\'c"]


def _selected(db, sql: str) -> list:
    return sorted(db.query(sql))


def test_the_filter_selects_exactly_its_keys_on_postgresql(scratch_postgres) -> None:
    name = f"rf_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    with scratch_postgres.connect(name) as conn:
        conn.execute('CREATE TABLE "we%ird" ("k%ey" text PRIMARY KEY, n int)')
        conn.execute("CREATE TABLE pairs (a int, b text, PRIMARY KEY (a, b))")
        for i, k in enumerate(KEYS):
            conn.execute('INSERT INTO "we%%ird" VALUES (%s, %s)', (k, i))
            conn.execute("INSERT INTO pairs VALUES (%s, %s)", (i, k))
    db = connect(f"{scratch_postgres.dsn.rsplit('/', 1)[0]}/{name}")
    try:
        assert db.begin_snapshot() is not None  # the LSN a repair's deletes are ordered by
        db.end_snapshot()
        ranges = key_ranges(["k%ey"], [[k] for k in WANTED], db.name, db.literal)
        got = db.query(f'SELECT "k%%ey" FROM "we%%ird" WHERE {ranges.filter.replace("%", "%%")}')
        assert sorted(r[0] for r in got) == sorted(WANTED), ranges.filter
        pairs = [[KEYS.index(k), k] for k in WANTED[:3]]
        ranges = key_ranges(["a", "b"], pairs, db.name, db.literal)
        got = db.query(f"SELECT a, b FROM pairs WHERE {ranges.filter.replace('%', '%%')}")
        assert sorted(list(r) for r in got) == sorted(pairs), ranges.filter
    finally:
        db.close()


@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"])
def test_the_filter_selects_exactly_its_keys_on_mariadb(scratch_mariadb, sql_mode: str) -> None:
    name = f"rf_{uuid.uuid4().hex[:8]}"
    conn = scratch_mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
            cur.execute(f"USE `{name}`")
            cur.execute("CREATE TABLE `we%ird` (`k%ey` VARCHAR(40) PRIMARY KEY, n INT)")
            cur.execute("CREATE TABLE ids (id BIGINT PRIMARY KEY)")
            for i, k in enumerate(KEYS):
                cur.execute("INSERT INTO `we%%ird` VALUES (%s, %s)", (k, i))
            cur.executemany("INSERT INTO ids VALUES (%s)", [(i,) for i in range(1, 30)])
    finally:
        conn.close()
    db = connect(f"{scratch_mariadb.dsn}/{name}")
    try:
        assert db.begin_snapshot() is not None  # the binlog position deletes are ordered by
        db.end_snapshot()
        db.execute(f"SET SESSION sql_mode = '{sql_mode}'")  # Debezium's session may differ
        ranges = key_ranges(["k%ey"], [[k] for k in WANTED], db.name, db.literal)
        got = db.query(f"SELECT `k%%ey` FROM `we%%ird` WHERE {ranges.filter.replace('%', '%%')}")
        assert sorted(r[0] for r in got) == sorted(WANTED), ranges.filter
        ids = [[i] for i in (2, 3, 4, 9, 20, 21)]
        ranges = key_ranges(["id"], ids, db.name, db.literal)
        assert ranges.filter == "`id` BETWEEN 2 AND 4 OR `id` = 9 OR `id` BETWEEN 20 AND 21"
        got = db.query(f"SELECT id FROM ids WHERE {ranges.filter}")
        assert sorted(r[0] for r in got) == [2, 3, 4, 9, 20, 21]
    finally:
        db.close()
