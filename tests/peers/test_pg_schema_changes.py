"""PostgreSQL schema changes beyond add and widen, with the real Debezium PostgreSQL
connector (3.6.1, pgoutput, JSON with schemas) and a real Kafka: ``ALTER TABLE ... DROP
COLUMN``, ``ALTER COLUMN ... TYPE`` (a narrowing int8 -> int4, a change of kind int ->
text) and ``ADD COLUMN ... DEFAULT`` over existing rows, one table per policy
(``[tables.<name>] schema_changes`` / ``fill_defaults``), replicated by ``cdcctl start``
in a child process and judged by ``cdcctl validate`` and by direct SQL against hudi-rs's
read of the replicas.

What the connector was seen to write (and the engine relies on): a dropped column
leaves the ``after`` schema (and ``before``'s, with REPLICA IDENTITY FULL); a narrowed
column's Connect type narrows (``int64`` -> ``int32``); an added column with a literal
DEFAULT carries it as the field's ``default``.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from engine.hudi.table import HudiTable
from tests.integration.replicas import (
    read_replica,
    run_cli,
    status_tables,
    validate_tables,
    write_config,
)
from tests.peers.connect import (
    ConnectStandalone,
    consume_all,
    payload,
    wait_for_record,
    wait_snapshot_done,
)
from tests.peers.test_debezium_postgres import connector_props

pytestmark = [pytest.mark.peers, pytest.mark.xdist_group("pg_schema_changes")]

#: Table -> its [tables.<name>] settings.
TABLES = {
    "t_keep": "",  # the default: schema_changes = "keep"
    "t_full": "",  # the same under REPLICA IDENTITY FULL
    "t_apply": 'schema_changes = "apply"',
    "t_fail": 'schema_changes = "fail"',
    "t_kind": "",
    "t_nofill": "",
    "t_fill": "fill_defaults = true",
}

ROWS = 20


def _settings() -> str:
    return "".join(f"[tables.public_{t}]\n{s}\n" for t, s in TABLES.items() if s)


def _source_rows(conn, table: str) -> dict[str, dict]:
    cur = conn.execute(f"SELECT * FROM public.{table} ORDER BY id")
    names = [d.name for d in cur.description]
    return {str(r[0]): dict(zip(names, r, strict=True)) for r in cur.fetchall()}


@pytest.fixture(scope="module")
def schema_run(scratch_postgres, kafka_broker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pg_schema_changes")
    dbname = f"sc_{uuid.uuid4().hex[:8]}"
    with scratch_postgres.connect() as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    conn = scratch_postgres.connect(dbname)
    for t in TABLES:
        conn.execute(
            f"CREATE TABLE public.{t} (id integer PRIMARY KEY, a text, b bigint, k integer, "
            "n numeric(10, 2))"
        )
        conn.execute(
            f"INSERT INTO public.{t} SELECT g, 'a' || g, g * 10, g, g * 1.5 "
            f"FROM generate_series(1, {ROWS}) g"
        )
    conn.execute("ALTER TABLE public.t_full REPLICA IDENTITY FULL")
    conn.execute("CREATE TABLE public.marker (id integer PRIMARY KEY)")
    tag = uuid.uuid4().hex[:6]
    prefix = f"sc{tag}"
    connect = ConnectStandalone(
        tmp / "connect",
        kafka_broker,
        {"pg": connector_props(scratch_postgres, dbname, prefix, f"sc_{tag}")},
        schemas=True,
    )
    connect.start()
    wait_snapshot_done(kafka_broker, [f"{prefix}.public.{t}" for t in TABLES], connect, timeout=180)
    target = tmp / "lake"
    config = write_config(
        tmp / "cdcctl.toml", kafka_broker.bootstrap_servers, f"^{prefix}\\.", target
    )
    config.write_text(config.read_text() + _settings())
    first = run_cli("start", "--config", str(config), "--until-caught-up", timeout=900)
    assert first.returncode == 0, first.stderr[-4000:]

    # From here Connect flushes no offsets: after the kill below it sends everything
    # again, the change from before the ALTERs with its old schema after the new events.
    connect.stop()
    connect.extra_worker["offset.flush.interval.ms"] = "600000"
    connect.start()
    for t in TABLES:
        conn.execute(f"UPDATE public.{t} SET k = k + 1000 WHERE id = 8")
    # The schema changes, then changes of some rows (others keep their old image).
    for t in ("t_keep", "t_full", "t_apply", "t_fail"):
        conn.execute(f"ALTER TABLE public.{t} DROP COLUMN a")
        conn.execute(f"ALTER TABLE public.{t} ALTER COLUMN b TYPE integer")
        conn.execute(f"ALTER TABLE public.{t} ALTER COLUMN n TYPE numeric(8, 2)")
        conn.execute(f"UPDATE public.{t} SET b = b + 1 WHERE id <= 5")
        conn.execute(f"DELETE FROM public.{t} WHERE id = 6")
        conn.execute(f"INSERT INTO public.{t} (id, b, k, n) VALUES (100, 7, 7, 7.25)")
    conn.execute("ALTER TABLE public.t_kind ALTER COLUMN k TYPE text")
    conn.execute("UPDATE public.t_kind SET k = 'seven' WHERE id = 7")
    for t in ("t_nofill", "t_fill"):
        conn.execute(f"ALTER TABLE public.{t} ADD COLUMN d integer DEFAULT 42")
        conn.execute(f"ALTER TABLE public.{t} ADD COLUMN e text NOT NULL DEFAULT 'dflt'")
        conn.execute(f"UPDATE public.{t} SET d = 7, b = b + 1 WHERE id <= 5")
        conn.execute(f"INSERT INTO public.{t} (id, b) VALUES (100, 1)")
    for mark in (1, 2):
        conn.execute("INSERT INTO public.marker VALUES (%s)", (mark,))
        wait_for_record(
            kafka_broker, f"{prefix}.public.marker",
            lambda k, v, m=mark: ((v or {}).get("after") or {}).get("id") == m, connect=connect,
        )  # fmt: skip
        if mark == 1:
            connect.kill()  # at least once: the restart sends it all again
            connect.start()
    sent = consume_all(kafka_broker, [f"{prefix}.public.t_keep"])[f"{prefix}.public.t_keep"]
    again = [v for _, v in sent if ((payload(v) or {}).get("after") or {}).get("k") == 1008]
    assert len(again) == 2 and "a" in payload(again[1])["after"], again  # old schema, resent
    started = time.monotonic()
    second = run_cli("start", "--config", str(config), "--until-caught-up", timeout=900)
    took = time.monotonic() - started
    yield {
        "conn": conn,
        "config": config,
        "target": target,
        "dsn": f"postgresql://postgres@127.0.0.1:{scratch_postgres.port}/{dbname}",
        "second": second,
        "took": took,
    }
    connect.stop()


def test_policies_with_the_real_connector(schema_run) -> None:
    run = schema_run
    conn, target, config = run["conn"], run["target"], run["config"]
    second = run["second"]
    # t_fail and t_kind stop; the run says so (exit 3) and the other tables go on.
    assert second.returncode == 3, second.stderr[-4000:]
    status = status_tables(config)
    states = {t: status[f"public_{t}"]["state"] for t in TABLES}
    assert states == {
        **{t: "STOPPED" for t in TABLES},
        "t_fail": "FAILED",
        "t_kind": "FAILED",
    }, states
    assert "column(s) a no longer in the source's events" in status["public_t_fail"]["last_error"]
    assert "column 'k' changed from int32 to string" in status["public_t_kind"]["last_error"]

    reports = validate_tables(config, run["dsn"])
    (config.parent / "validate.json").write_text(json.dumps(reports, indent=1, default=str))
    for t in ("t_keep", "t_full", "t_apply", "t_fill"):
        r = reports[f"public_{t}"]
        assert r["status"] == "equal", (t, r["differing_rows"][:3], r["notes"], r["error"])
    for t in ("t_keep", "t_full"):
        assert any("kept in the replica" in n for n in reports[f"public_{t}"]["notes"])
    # Without fill_defaults the rows from before the ADD COLUMN read NULL in the replica
    # where the source shows the default: exactly those, in exactly d and e.
    r = reports["public_t_nofill"]
    assert r["status"] == "different" and r["missing"] == r["extra"] == 0
    assert r["differing"] == ROWS - 5, r  # ids 6..20; 1..5 were updated, 100 inserted
    examples = {d["key"]: sorted(c["column"] for c in d["columns"]) for d in r["differing_rows"]}
    assert examples and all(6 <= int(k) <= ROWS for k in examples), examples
    assert all(cols == ["d", "e"] for cols in examples.values()), examples

    # Direct SQL against the source, the replicas read by hudi-rs.
    for t in ("t_keep", "t_full"):
        replica, source = read_replica(target / f"public_{t}"), _source_rows(conn, t)
        assert set(replica) == set(source)
        for key, row in source.items():
            got = replica[key]
            assert {c: got[c] for c in row} == row, (t, key)
            # The dropped column: its last value for rows not changed since, null after.
            assert got["a"] == (f"a{key}" if 7 <= int(key) <= ROWS else None), (t, key, got)
        types = {f.name: str(f.type) for f in HudiTable.open(target / f"public_{t}").arrow_schema()}
        assert types["b"] == "int64" and types["n"] == "decimal128(10, 2)", types
    replica, source = read_replica(target / "public_t_apply"), _source_rows(conn, "t_apply")
    assert replica == source
    replica, source = read_replica(target / "public_t_fill"), _source_rows(conn, "t_fill")
    assert replica == source and replica["10"]["d"] == 42 and replica["10"]["e"] == "dflt"
    replica = read_replica(target / "public_t_nofill")
    assert replica["10"]["d"] is None and replica["1"]["d"] == 7 and replica["100"]["d"] == 42
    # The failed tables hold what they had before the batch that held the change.
    assert read_replica(target / "public_t_fail") == {
        str(i): {"id": i, "a": f"a{i}", "b": i * 10, "k": i, "n": pytest.approx(i * 1.5)}
        for i in range(1, ROWS + 1)
    }
    log = (target.parent / "work" / "cdcctl.log").read_text()
    assert "column d added in the source with DEFAULT 42: rows stored before it read NULL" in log
    assert "column e added in the source with DEFAULT 'dflt'" in log
    assert "column b int64->int32 narrowed in the source" in log
    print(f"\nPostgreSQL schema changes with the real connector: second run {run['took']:.1f} s")
