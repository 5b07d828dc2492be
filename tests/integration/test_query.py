"""`cdcctl query` over replicas written by the real replicator: newest state, `--as-of`,
types, `--meta`, `--csv`, errors, and `engine.connect()` in process.

Two targets replicate the same topics in three `cdcctl start` runs (small batches, so
each table has many commits): Merge-on-Read keeping its log files (no compaction by
size) and its whole history, and Copy-on-Write cleaning and archiving early, so part of
its history is gone. Expected rows come from tests/oracle.py.
"""

from __future__ import annotations

import csv
import io
import json
import re
import uuid
from pathlib import Path

import pytest

import engine
from cdcctl.console import _json_value, csv_text
from engine.hudi import HudiView, instant_iso
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from engine.query import _open
from engine.replicator import Replicator
from tests.integration.replicas import META, run_cli, write_config
from tests.oracle import fold

#: One worker builds the module's replicas (about 50 s), not both (xdist_group).
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.xdist_group("query"),
]

TABLES = ("inventory_customers", "inventory_orders", "inventory_products")
HUDI = {
    "mor": {
        "table_type": "MERGE_ON_READ",
        "compaction_max_log_ratio": 1000.0,
        "clean_retain_commits": 100,
        "keep_min_commits": 110,
        "keep_max_commits": 120,
    },
    "cow": {
        "table_type": "COPY_ON_WRITE",
        "clean_retain_commits": 2,
        "keep_min_commits": 3,
        "keep_max_commits": 5,
    },
}


@pytest.fixture(scope="module")
def lakes(broker, spark, tmp_path_factory):
    """``(messages, {kind: (config, target)})`` after three replication runs: the first
    through ``cdcctl start`` (its warnings checked), the others in this process on the
    session's Spark (a child's Spark start is most of a run)."""
    root = tmp_path_factory.mktemp("query")
    prefix = f"t_query_{uuid.uuid4().hex[:8]}"
    messages = list(InventoryWorkload(seed=21, prefix=prefix, schemas=True).events(9000))
    broker.create_topics(sorted({t for t, _, _ in messages}))
    configs = {}
    for kind, hudi in HUDI.items():
        target = root / kind / "lake"
        target.parent.mkdir()
        cfg = write_config(
            root / f"{kind}.toml",
            broker.bootstrap_servers,
            f"^{re.escape(prefix)}\\.",
            target,
            hudi=hudi,
            max_batch_events=250,
        )
        configs[kind] = (cfg, target)
    for n, chunk in enumerate((messages[:3000], messages[3000:6000], messages[6000:])):
        produce_messages(broker.bootstrap_servers, chunk)
        for cfg, _ in configs.values():
            if n > 0:
                Replicator(engine.load_config(cfg), spark=spark).run(until_caught_up=True)
                continue
            run = run_cli("start", "--config", str(cfg), "--until-caught-up")
            assert run.returncode == 0, run.stderr
            # Count-based cleaning, kept for older configs, is warned about at each start.
            assert "cleaning keeps the newest" in run.stderr, run.stderr
            assert "remove it to retain by time (hudi.clean_retain_hours" in run.stderr
    return messages, configs


def _query(cfg: Path, sql: str, *options: str) -> list[dict]:
    r = run_cli("query", "--config", str(cfg), "--json", *options, sql)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _topic(messages, table: str) -> str:
    return next(t for t, _, _ in messages if t.endswith("." + table.split("_", 1)[1]))


def _rows_at(target: Path, table: str, as_of: str | None = None) -> dict[str, dict]:
    """A replica's rows through engine.connect, keyed by record key, as the oracle has
    them (no Hudi or cdc columns)."""
    con = engine.connect(target, as_of=as_of, meta=True)
    rows = {}
    for row in con.sql(f"SELECT * FROM {table}").to_arrow_table().to_pylist():
        key = row.pop("_hoodie_record_key")
        assert key not in rows
        rows[key] = {k: v for k, v in row.items() if k not in META and not k.startswith("_cdc_")}
    return rows


def _expected_at(messages, target: Path, table: str, instant: str) -> dict[str, dict]:
    """The oracle's table after the messages applied up to ``instant``'s checkpoint."""
    meta = HudiView.open(target / table).commit_metadata(instant)
    topic, offsets = meta["extraMetadata"]["deltastreamer.checkpoint.key"].split(",")
    upto = int(offsets.split(":")[1])
    return fold([m for m in messages if m[0] == topic][:upto])[topic]


@pytest.mark.parametrize("kind", ["mor", "cow"])
def test_newest_state_equals_the_oracle_and_deletes_never_show(lakes, kind: str) -> None:
    messages, configs = lakes
    cfg, target = configs[kind]
    expected = fold(messages)
    if kind == "mor":  # merged reads: the slices still carry log files
        assert any(".log." in p.name for p in (target / "inventory_orders").iterdir())
    for table in TABLES:
        topic = _topic(messages, table)
        assert _rows_at(target, table) == expected[topic], table
        # Keys that existed and were deleted: the query never shows them.
        seen = {json.loads(k)["payload"]["id"] for t, k, _ in messages if t == topic and k}
        live = {row["id"] for row in expected[topic].values()}
        deleted = sorted(seen - live)
        assert deleted, table
        ids = ",".join(map(str, deleted))
        shown = _query(cfg, f"SELECT count(*) AS n FROM {table} WHERE id IN ({ids})")
        assert shown == [{"n": 0}]


@pytest.mark.parametrize("kind", ["mor", "cow"])
def test_as_of_returns_the_older_state(lakes, kind: str) -> None:
    messages, configs = lakes
    cfg, target = configs[kind]
    firsts = 0
    for table in TABLES:
        hudi_table = HudiView.open(target / table)
        completed = hudi_table.completed_instants()
        oldest = hudi_table.oldest_readable()
        assert oldest is not None
        archived = any((target / table / ".hoodie" / "archived").iterdir())
        if oldest == completed[0] and not archived:
            firsts += 1  # nothing cleaned or archived: this is the table's first commit
        readable = [t for t in completed if t >= oldest]
        middle = readable[len(readable) // 2]
        for instant in (oldest, middle):
            expected = _expected_at(messages, target, table, instant)
            assert expected != _rows_at(target, table)  # an older state indeed
            assert _rows_at(target, table, as_of=instant) == expected, (table, instant)
        # An ISO time reads the newest commit at or before it.
        assert _rows_at(target, table, as_of=instant_iso(oldest)) == _expected_at(
            messages, target, table, oldest
        )
        # Through the CLI too: the same count.
        n = _query(cfg, f"SELECT count(*) AS n FROM {table}", "--as-of", oldest)
        assert n == [{"n": len(_expected_at(messages, target, table, oldest))}]
    if kind == "mor":
        assert firsts == len(TABLES), "a table lost its first commit"


def test_as_of_before_the_kept_history_is_refused(lakes) -> None:
    messages, configs = lakes
    cfg, target = configs["cow"]
    table = HudiView.open(target / "inventory_orders")
    oldest = table.oldest_readable()
    completed = table.completed_instants()
    assert oldest is not None and oldest > completed[0], "nothing was cleaned"
    assert any((target / "inventory_orders" / ".hoodie" / "archived").iterdir())
    older = [t for t in completed if t < oldest][-1]
    for as_of in (older, "2001-01-01T00:00:00Z"):
        r = run_cli(
            "query", "--config", str(cfg), "--as-of", as_of, "SELECT * FROM inventory_orders"
        )
        assert r.returncode == 1, r.stderr
        assert r.stdout == ""
        first = r.stderr.splitlines()[0]
        assert first.startswith("error: inventory_orders cannot be read as of"), r.stderr
        assert f"the oldest readable instant is {oldest}" in first
        assert "Traceback" not in r.stderr
    # Tables the query does not read are not refused (the others kept their history).
    ok = run_cli("query", "--config", str(cfg), "--as-of", oldest, "SELECT 1 AS one")
    assert ok.returncode == 0, ok.stderr
    # A malformed --as-of is bad usage.
    bad = run_cli("query", "--config", str(cfg), "--as-of", "yesterday", "SELECT 1")
    assert bad.returncode == 2 and "--as-of 'yesterday'" in bad.stderr


def test_columns_have_their_real_types(lakes) -> None:
    messages, configs = lakes
    cfg, target = configs["mor"]
    types = _query(
        cfg,
        "SELECT (SELECT typeof(price) FROM inventory_products LIMIT 1) AS price,"
        " (SELECT typeof(updated_at) FROM inventory_products LIMIT 1) AS updated_at,"
        " (SELECT typeof(created_at) FROM inventory_customers LIMIT 1) AS created_at,"
        " (SELECT typeof(order_date) FROM inventory_orders LIMIT 1) AS order_date,"
        " (SELECT typeof(id) FROM inventory_orders LIMIT 1) AS order_id",
    )
    assert types == [
        {
            "price": "DECIMAL(10,2)",
            "updated_at": "TIMESTAMP WITH TIME ZONE",
            "created_at": "TIMESTAMP",
            "order_date": "DATE",
            "order_id": "BIGINT",
        }
    ]
    # The JSON rendering: exact decimals, ISO times and dates, equal to the oracle.
    topic = _topic(messages, "inventory_products")
    expected = fold(messages)[topic]
    rows = _query(cfg, "SELECT id, price, updated_at FROM inventory_products")
    assert len(rows) == len(expected)
    for row in rows:
        want = next(v for k, v in expected.items() if v["id"] == row["id"])
        assert row["price"] == json.loads(json.dumps(want["price"], default=_json_value))
        assert row["updated_at"] == want["updated_at"].isoformat()
    orders = _query(cfg, "SELECT order_date FROM inventory_orders LIMIT 1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", orders[0]["order_date"])


def test_meta_shows_the_hoodie_columns(lakes) -> None:
    _, configs = lakes
    cfg, _ = configs["mor"]
    sql = "SELECT * FROM inventory_customers LIMIT 1"
    plain = _query(cfg, sql)[0]
    with_meta = _query(cfg, sql, "--meta")[0]
    hoodie = [c for c in with_meta if c.startswith("_hoodie_")]
    assert hoodie == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert not any(c.startswith("_hoodie_") for c in plain)
    assert list(with_meta)[5:] == list(plain)


def test_csv_parses_back_to_the_json_rows(lakes) -> None:
    _, configs = lakes
    cfg, _ = configs["cow"]
    # Products hold NULLs, text with newlines and commas, decimals and zoned times.
    sql = "SELECT * FROM inventory_products ORDER BY id"
    as_json = _query(cfg, sql)
    r = run_cli("query", "--config", str(cfg), "--csv", sql)
    assert r.returncode == 0, r.stderr
    lines = list(csv.reader(io.StringIO(r.stdout)))
    assert lines[0] == list(as_json[0])
    assert lines[1:] == [[csv_text(v) for v in row.values()] for row in as_json]
    assert any("\n" in field for line in lines for field in line)
    assert any(v is None for row in as_json for v in row.values())


@pytest.mark.parametrize(
    ("sql", "code", "first"),
    [
        # An unknown table is the one unknown-table error of every command (issue 24).
        ("SELECT * FROM inventory_nope", 2, "error: no table `inventory_nope`; known tables: "),
        ("SELEC 1", 1, "error: query failed: "),
    ],
)
def test_unknown_table_and_bad_sql_are_one_error_line(
    lakes, sql: str, code: int, first: str
) -> None:
    _, configs = lakes
    cfg, _ = configs["mor"]
    r = run_cli("query", "--config", str(cfg), sql)
    assert r.returncode == code, r.stderr
    assert r.stdout == ""
    errors = [line for line in r.stderr.splitlines() if not line.startswith("  hint: ")]
    assert len(errors) == 1 and errors[0].startswith(first), r.stderr
    if code == 1:
        assert "SELEC" in errors[0], r.stderr
    else:
        assert "inventory_customers" in errors[0] and "inventory_orders" in errors[0]


@pytest.mark.parametrize("kind", ["mor", "cow"])
def test_connect_in_process_answers_as_the_cli(lakes, kind: str) -> None:
    _, configs = lakes
    cfg, target = configs[kind]
    sql = (
        "SELECT c.id, c.email, c.created_at, o.status, sum(o.quantity * p.price) AS spent"
        " FROM inventory_customers c JOIN inventory_orders o ON o.customer_id = c.id"
        " JOIN inventory_products p ON p.id = o.product_id"
        " GROUP BY ALL ORDER BY spent DESC, c.id, o.status LIMIT 50"
    )
    oldest = max(HudiView.open(target / t).oldest_readable() or "" for t in TABLES)
    for options in ((), ("--as-of", oldest)):
        as_of = options[1] if options else None
        con = engine.connect(engine.load_config(cfg), as_of=as_of)
        rows = con.sql(sql).to_arrow_table().to_pylist()
        assert rows
        assert json.loads(json.dumps(rows, default=_json_value)) == _query(cfg, sql, *options)


def test_a_query_reads_only_the_replicas_it_names(lakes) -> None:
    _, configs = lakes
    _, target = configs["mor"]
    session = _open(target, None, False)
    session.connection.sql("SELECT count(*) FROM inventory_orders").fetchall()
    read = {name for name, r in session.replicas.items() if r._rows is not None}
    assert read == {"inventory_orders"}
