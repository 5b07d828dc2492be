"""Schema change events parsed from the real samples, the policy decisions on them, and
topics recognised by content (engine/decode/ddl.py, engine/replicator/ddl.py,
engine/decode/control.py). The end-to-end behaviour is in tests/cases/mysql/ and
tests/integration/test_ddl_end_to_end.py."""

from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decode import control
from engine.decode.ddl import SchemaChange, TableChange, parse_schema_change
from engine.decode.positions import source_columns
from engine.model import OFFSET, PARTITION, STREAMED_BIT
from engine.replicator.batches import DdlItem
from engine.replicator.ddl import (
    DdlState,
    apply_column_ops,
    cut_batch,
    decide,
    record,
    type_change,
)
from tests.engine.test_properties import Msg
from tests.samples import debezium_samples


def _sample(name: str) -> dict:
    return json.loads((debezium_samples() / f"{name}.json").read_text())


def _value(name: str) -> bytes:
    return json.dumps(_sample(name)["value"]).encode()


def _docs_with(ddl: str, columns: list[str] | None = None, pos: int = 900) -> SchemaChange:
    value = copy.deepcopy(_sample("mysql-schema-change-docs")["value"])
    payload = value["payload"]
    payload["ddl"], payload["source"]["pos"] = ddl, pos
    if columns is None:
        payload["tableChanges"] = []
    else:
        by_name = {c["name"]: c for c in payload["tableChanges"][0]["table"]["columns"]}
        payload["tableChanges"][0]["table"]["columns"] = [
            by_name.get(n, by_name["email"]) | {"name": n} for n in columns
        ]
    return parse_schema_change(json.dumps(value).encode())


def test_documented_schema_change_is_parsed() -> None:
    change = parse_schema_change(_value("mysql-schema-change-docs"))
    assert change.database == "inventory"
    assert change.ddl.startswith("ALTER TABLE customers ADD middle_name")
    # mysql-bin.000003 pos 570 row 0, streamed: the encoding row events get.
    assert change.position == (STREAMED_BIT | 3 << 32 | 570, 0)
    (tc,) = change.changes
    assert (tc.kind, tc.database, tc.table, tc.key_columns) == (
        "ALTER",
        "inventory",
        "customers",
        ("id",),
    )
    assert [c.name for c in tc.columns or ()] == [
        "id",
        "first_name",
        "middle_name",
        "last_name",
        "email",
    ]
    assert tc.columns is not None and tc.columns[2].length == 255


def test_schema_change_position_matches_the_row_events_encoding() -> None:
    # The same source block through the row decoder's vectorised encoding.
    source = _sample("mysql-schema-change-docs")["value"]["payload"]["source"]
    cols = source_columns(pa.array([source]), 1, None)
    change = parse_schema_change(_value("mysql-schema-change-docs"))
    assert change.position == (cols.pos[0].as_py(), cols.pos_sub[0].as_py())


def test_snapshot_create_with_empty_table_changes_names_its_table() -> None:
    change = parse_schema_change(_value("mysql-schema-change-snapshot"))
    assert change.position == (3 << 32 | 154, 0)  # a snapshot: no STREAMED_BIT
    assert [(c.kind, c.database, c.table) for c in change.changes] == [
        ("CREATE", "inventory", "geom")
    ]


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("TRUNCATE TABLE customers", [("TRUNCATE", "inventory", "customers", None)]),
        ("truncate `shop`.`my``t`", [("TRUNCATE", "shop", "my`t", None)]),
        ("/* x */ TRUNCATE customers;", [("TRUNCATE", "inventory", "customers", None)]),
        (
            "RENAME TABLE customers TO clients, shop.a TO shop.b",
            [
                ("RENAME", "inventory", "customers", "clients"),
                ("RENAME", "shop", "a", "b"),
            ],
        ),
        (
            "ALTER TABLE customers RENAME TO clients",
            [("RENAME", "inventory", "customers", "clients")],
        ),
        ("ALTER TABLE customers RENAME AS `c2`", [("RENAME", "inventory", "customers", "c2")]),
        ("ALTER TABLE customers RENAME INDEX a TO b", [("ALTER", "inventory", "customers", None)]),
    ],
)
def test_statements_debezium_reports_without_table_changes(ddl: str, expected: list) -> None:
    change = _docs_with(ddl)
    assert [(c.kind, c.database, c.table, c.new_table) for c in change.changes] == expected


def test_column_renames_are_read_from_the_statement() -> None:
    for ddl in (
        "ALTER TABLE customers RENAME COLUMN email TO mail",
        "ALTER TABLE customers CHANGE COLUMN `email` `mail` varchar(255)",
        "ALTER TABLE customers CHANGE email mail varchar(255) NOT NULL",
    ):
        (tc,) = _docs_with(ddl, ["id", "first_name", "last_name", "mail"]).changes
        assert tc.column_renames == (("email", "mail"),), ddl


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (b"{not json", "Expecting"),
        (b'{"op": "c", "after": {}}', "not a schema change event"),
        (b'{"ddl": 5, "databaseName": "x"}', "ddl: expected a string"),
        (b'{"ddl": "x", "tableChanges": [{"type": "ALTER"}]}', "without an id"),
        (b'{"ddl": "x", "tableChanges": [{"type": "MERGE", "id": "a.b"}]}', "unknown type"),
        (
            b'{"ddl": "x", "source": {"file": "binlog", "pos": 5}, "tableChanges": []}',
            "not a binlog position",
        ),
    ],
)
def test_malformed_schema_changes_say_why(value: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_schema_change(value)


# ------------------------------------------------------------------ policy decisions
REPLICA = pa.schema(
    [
        ("id", pa.int32()),
        ("first_name", pa.string()),
        ("last_name", pa.string()),
        ("email", pa.string()),
        ("_cdc_op", pa.string()),
    ]
)
DROP = ("ALTER TABLE customers DROP COLUMN email", ["id", "first_name", "last_name"])
RENAME = (
    "ALTER TABLE customers RENAME COLUMN email TO mail",
    ["id", "first_name", "last_name", "mail"],
)
ADD = ("ALTER TABLE customers ADD middle_name varchar(255)", None)


def _decide(policy: str, ddl: str, columns: list[str] | None, state: DdlState | None = None):
    change = (
        parse_schema_change(_value("mysql-schema-change-docs"))
        if columns is None and "ADD" in ddl
        else _docs_with(ddl, columns)
    )
    return decide(
        policy, "inventory_customers", change.changes[0], change, state or DdlState(), REPLICA
    )


@pytest.mark.parametrize(
    ("policy", "case", "verdict", "drops", "renames"),
    [
        ("fail", ADD, "applied", [], {}),
        ("apply", ADD, "applied", [], {}),
        ("ignore", ADD, "ignored", [], {}),
        ("fail", DROP, "failed", [], {}),
        ("apply", DROP, "applied", ["email"], {}),
        ("ignore", DROP, "ignored", [], {}),
        ("fail", RENAME, "failed", [], {}),
        ("apply", RENAME, "applied", [], {"email": "mail"}),
        ("ignore", RENAME, "ignored", [], {}),
    ],
)
def test_policy_matrix(policy, case, verdict, drops, renames) -> None:
    outcome = _decide(policy, *case)
    assert (outcome.verdict, outcome.drop_columns, outcome.renames) == (verdict, drops, renames)
    if verdict == "failed":
        assert 'source.ddl = "apply"' in outcome.message
        assert "[tables.inventory_customers]" in outcome.message


@pytest.mark.parametrize(
    ("kind", "policy", "verdict", "truncate"),
    [
        ("TRUNCATE", "fail", "applied", True),
        ("TRUNCATE", "apply", "applied", True),
        ("TRUNCATE", "ignore", "ignored", False),
        ("DROP", "fail", "failed", False),
        ("DROP", "apply", "applied", True),
        ("DROP", "ignore", "ignored", False),
        ("RENAME", "fail", "failed", False),
        ("RENAME", "apply", "applied", False),
    ],
)
def test_table_level_changes(kind: str, policy: str, verdict: str, truncate: bool) -> None:
    change = _docs_with("x")
    tc = TableChange(kind, "inventory", "customers", new_table="clients")
    outcome = decide(policy, "inventory_customers", tc, change, DdlState(), REPLICA)
    assert (outcome.verdict, outcome.truncate) == (verdict, truncate)


def _mariadb_snapshot_record(ddl: str, kind: str, snapshot: str = "true") -> bytes:
    """A schema change record as Debezium 3.5.0.Final's MariaDB connector wrote it during
    its initial snapshot (tests/peers/test_debezium_mariadb.py; fields as seen there)."""
    columns = [
        {"name": "id", "jdbcType": 4, "typeName": "INT", "typeExpression": "INT",
         "charsetName": None, "length": 11, "position": 1, "optional": False,
         "autoIncremented": False, "generated": False, "comment": None},
        {"name": "old_col", "jdbcType": 12, "typeName": "VARCHAR", "typeExpression": "VARCHAR",
         "charsetName": "utf8mb4", "length": 20, "position": 2, "optional": True,
         "autoIncremented": False, "generated": False, "comment": None},
    ]  # fmt: skip
    table = {"defaultCharsetName": "utf8mb4", "primaryKeyColumnNames": ["id"], "columns": columns}
    source = {
        "version": "3.5.0.Final", "connector": "mariadb", "name": "mdb", "ts_ms": 1795784081087,
        "snapshot": snapshot, "db": "shop", "sequence": None, "table": "renamer",
        "server_id": 0, "gtid": None, "file": "mysql-bin.000001", "pos": 1230, "row": 0,
        "thread": None, "query": None,
    }  # fmt: skip
    value = {
        "source": source, "ts_ms": 1795784081250, "databaseName": "shop", "schemaName": None,
        "ddl": ddl,
        "tableChanges": [
            {"type": kind, "id": '"shop"."renamer"', "table": table if kind != "DROP" else None}
        ],
    }  # fmt: skip
    return json.dumps(value).encode()


@pytest.mark.parametrize("policy", ["fail", "apply"])
def test_the_snapshots_drop_and_create_are_no_drop_and_no_change(policy: str) -> None:
    # Debezium's MariaDB/MySQL snapshot writes DROP TABLE IF EXISTS, then CREATE TABLE, for
    # every captured table. Taken as a drop, it stopped every table under "fail" and
    # emptied the snapshot's rows under "apply" (found by the real connector).
    drop = parse_schema_change(
        _mariadb_snapshot_record("DROP TABLE IF EXISTS `shop`.`renamer`", "DROP")
    )
    assert drop.snapshot and drop.position == (1 << 32 | 1230, 0)
    (tc,) = drop.changes
    outcome = decide(policy, "shop_renamer", tc, drop, DdlState(), None)
    assert (outcome.verdict, outcome.truncate) == ("applied", False), outcome
    # The create is recorded, never compared: the batch's rows may already carry a column
    # a later ALTER renamed (new_col), which is no drop of it.
    create = parse_schema_change(_mariadb_snapshot_record("CREATE TABLE `renamer` (...)", "CREATE"))
    (tc,) = create.changes
    rows = pa.schema([("id", pa.int32()), ("new_col", pa.string())])
    outcome = decide(policy, "shop_renamer", tc, create, DdlState(), rows)
    assert outcome.verdict == "applied" and not outcome.drop_columns and not outcome.renames
    assert outcome.columns == {"id": ["INT", 11, None], "old_col": ["VARCHAR", 20, None]}
    # Streamed, the same drop is one.
    streamed = parse_schema_change(
        _mariadb_snapshot_record("DROP TABLE IF EXISTS `shop`.`renamer`", "DROP", "false")
    )
    assert not streamed.snapshot
    outcome = decide(policy, "shop_renamer", streamed.changes[0], streamed, DdlState(), None)
    assert outcome.verdict == ("failed" if policy == "fail" else "applied")
    assert outcome.truncate == (policy == "apply")


def test_narrowing_is_judged_against_the_previous_definition() -> None:
    state = DdlState()
    first = _decide("fail", *ADD, state=state)
    record(state, first)
    assert state.columns["email"] == ["VARCHAR", 255, None]
    value = copy.deepcopy(_sample("mysql-schema-change-docs")["value"])
    cols = value["payload"]["tableChanges"][0]["table"]["columns"]
    cols[4]["length"] = 100  # email VARCHAR(255) -> VARCHAR(100)
    cols[0]["typeName"] = "BIGINT"  # id INT -> BIGINT: a widening
    change = parse_schema_change(json.dumps(value).encode())
    outcome = decide("fail", "t", change.changes[0], change, state, REPLICA)
    assert outcome.verdict == "failed" and "narrowed email VARCHAR->VARCHAR" in outcome.message
    assert "id" not in outcome.message.split("narrowed", 1)[1]
    assert decide("apply", "t", change.changes[0], change, state, REPLICA).verdict == "applied"
    cols[4]["typeName"] = "INT"
    change = parse_schema_change(json.dumps(value).encode())
    retyped = decide("apply", "t", change.changes[0], change, state, REPLICA)
    assert retyped.verdict == "failed" and "cannot be applied in place" in retyped.message


@pytest.mark.parametrize(
    ("old", "new", "verdict"),
    [
        (["INT", None, None], "BIGINT", None),
        (["BIGINT", None, None], "INT", "narrowed"),
        (["INT UNSIGNED", None, None], "SMALLINT", "narrowed"),
        (["FLOAT", None, None], "DOUBLE", None),
        (["VARCHAR", 10, None], "TEXT", None),
        (["DECIMAL", 10, 2], "DECIMAL", None),
        (["INT", None, None], "VARCHAR", "retyped"),
    ],
)
def test_type_changes(old: list, new: str, verdict: str | None) -> None:
    from engine.decode.ddl import Column

    length = 12 if new == "DECIMAL" else None
    scale = 2 if new == "DECIMAL" else None
    assert type_change(old, Column("c", new, length, scale)) == verdict


def test_applied_column_operations_reshape_later_batches() -> None:
    state = DdlState(dropped=["email"], renamed={"first_name": "given"})
    batch = pa.table({"id": [1], "first_name": ["a"], "email": ["e"]})
    assert apply_column_ops(batch, state).column_names == ["id", "given"]
    # One batch with rows from before a rename and after it (the first batch of a table
    # whose snapshot and a later RENAME COLUMN are read together, as with the real MariaDB
    # connector): both names are one column; it failed with "column 'given' appears twice".
    mixed = pa.table({"id": [1, 2, 3], "first_name": ["a", None, None], "given": [None, "b", None]})
    out = apply_column_ops(mixed, state)
    assert out.column_names == ["id", "given"]
    assert out.column("given").to_pylist() == ["a", "b", None]
    # Bookkeeping survives a commit (it is the commit's extra metadata).
    state.mark("mysql", 0, 7)
    again = DdlState.load(state.dump())
    assert again == state and again.seen("mysql", 0, 7) and not again.seen("mysql", 0, 8)


# ------------------------------------------------------------------ content recognition
@pytest.mark.parametrize(
    ("samples", "kind"),
    [
        (["mysql-schema-change-docs", "mysql-schema-change-snapshot"], control.SCHEMA_CHANGE),
        (["pg-transaction-begin-docs", "pg-transaction-end-docs"], control.TRANSACTION),
        (["mysql-transaction-begin-docs", "mysql-transaction-end-docs"], control.TRANSACTION),
        (["pg-transaction-end"], control.TRANSACTION),
        (["pg-message-logical-decoding", "pg-message-transactional-docs"], control.MESSAGE),
        (["pg-create", "pg-truncate-docs"], None),
        (["mysql-update", "mysql-delete"], None),
        (["pg-tombstone", "mysql-tombstone-docs"], None),
    ],
)
def test_topics_are_recognised_by_content(samples: list[str], kind: str | None) -> None:
    values = [None if _sample(s)["value"] is None else _value(s) for s in samples]
    assert control.topic_kind(values) == kind


def test_heartbeat_history_and_mixed_topics() -> None:
    beat = json.dumps({"schema": {"type": "struct"}, "payload": {"ts_ms": 1}}).encode()
    assert control.topic_kind([beat, None, beat]) == control.HEARTBEAT
    history = json.dumps(
        {"source": {"server": "m"}, "position": {"pos": 1}, "ddl": "CREATE TABLE t (a int)"}
    ).encode()
    assert control.topic_kind([history]) == control.SCHEMA_HISTORY
    # One row change makes a topic a table, wherever it is in the sample.
    assert control.topic_kind([_value("pg-transaction-begin-docs"), _value("pg-create")]) is None
    # Nothing recognisable: left to the decoder (which quarantines bad records).
    assert control.topic_kind([b"garbage", b"{}"]) is None


# ------------------------------------------------------------------ the replicator's side
def _replicator(tmp_path, **source):
    from engine.config import config_from_dict
    from engine.replicator import Replicator

    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ".", **source},
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    # No Spark: these batches hold no row of a table, so no merge job runs.
    return Replicator(cfg, spark=None)


def test_undecodable_schema_changes_are_quarantined_with_coordinates(tmp_path, caplog) -> None:

    replicator = _replicator(tmp_path)
    good = _value("mysql-schema-change-docs")
    records = [Msg("mysql", b"{}", good, 0), Msg("mysql", None, b"{broken", 1)]
    records.append(Msg("mysql", None, b'{"ddl": 5, "databaseName": "inventory"}', 2))
    with caplog.at_level("ERROR", logger="cdcctl.replicator"):
        replicator.apply(records)
    assert replicator.control_topics() == {"mysql": ("schema change", 1)}  # 1 skipped
    lines = [json.loads(x) for x in (tmp_path / "work" / "deadletter" / "mysql.jsonl").open()]
    assert [(d["topic"], d["partition"], d["offset"]) for d in lines] == [
        ("mysql", 0, 1),
        ("mysql", 0, 2),
    ]
    assert "invalid JSON" in lines[0]["error"] or "Expecting" in lines[0]["error"]
    assert "ddl: expected a string" in lines[1]["error"]
    assert "schema change topic mysql[0] offset 2: not a usable schema change event" in caplog.text
    # The good one names a table whose topic is unknown: no table is made of it.
    assert replicator.status() == []
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").iterdir())


def test_a_reopened_table_handles_its_uncommitted_schema_changes_again(tmp_path) -> None:
    replicator = _replicator(tmp_path)
    rt = replicator.tables.get("mysql.inventory.customers")
    assert rt is not None
    change = parse_schema_change(_value("mysql-schema-change-docs"))
    item = DdlItem("mysql", change, change.changes[0], 0, 7)
    rt.uncommitted_ddl, rt.pending_ddl = [item], []
    rt.progress.ddl.mark("mysql", 0, 7)
    replicator.tables.reopen(rt)  # a dropped batch: progress back to the last commit
    assert rt.pending_ddl == [item] and rt.uncommitted_ddl == []
    assert not rt.progress.ddl.seen("mysql", 0, 7)


@pytest.mark.spark
def test_a_messages_table_goes_on_after_a_restart(spark, tmp_path) -> None:
    """With source.logical_messages = "table", a new replicator (a restart) still reads
    the message topic as messages, though its table now exists."""
    from engine.config import config_from_dict
    from engine.replicator import Replicator
    from tests.integration.replicas import read_replica

    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "logical_messages": "table",
            },
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 1},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    topic = "connector-name.message"
    first = Msg(topic, b'{"prefix":"a"}', _value("pg-message-logical-decoding"), 0)
    second = Msg(topic, b'{"prefix":"foo"}', _value("pg-message-transactional-docs"), 1)
    Replicator(cfg, spark=spark).apply([first])
    Replicator(cfg, spark=spark).apply([second])
    rows = read_replica(tmp_path / "lake" / "connector_name_message")
    assert {k: r["prefix"] for k, r in rows.items()} == {"0:0": "test-prefix", "0:1": "foo"}
    assert rows["0:1"]["content"] == bytes([0x62, 0x67, 0xF2])


def test_policy_keys_are_validated_naming_the_key(tmp_path) -> None:
    from engine.config import config_from_dict
    from engine.errors import ConfigError

    data = {
        "source": {
            "bootstrap_servers": "127.0.0.1:1",
            "topics": ".",
            "ddl": "drop",
            "logical_messages": "keep",
        },
        "target": {"path": str(tmp_path / "lake")},
        "tables": {"inventory_orders": {"ddl": "yes"}},
    }
    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    problems = {key: message for key, message, _ in err.value.problems}
    assert set(problems) == {"source.ddl", "source.logical_messages", "tables.inventory_orders.ddl"}
    assert "'fail', 'apply' or 'ignore'" in problems["source.ddl"]
    data["source"].update(ddl="ignore", logical_messages="table")
    data["tables"]["inventory_orders"]["ddl"] = "apply"
    cfg = config_from_dict(data)
    assert cfg.ddl_policy("inventory_orders") == "apply"
    assert cfg.ddl_policy("inventory_customers") == "ignore"


@pytest.mark.spark
def test_a_schema_change_held_while_paused_lands_with_the_tables_next_batch(
    spark, tmp_path
) -> None:
    """A change read while its table was not live (paused, held) is handled with the
    table's next batch, in the same instant as that batch's rows."""
    from engine.config import config_from_dict
    from engine.replicator import Replicator
    from tests.cases.mysql.make_cases import customer, ddl, row
    from tests.integration.replicas import read_replica

    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 1},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )

    def msg(m: dict, offset: int) -> Msg:
        return Msg(
            m["topic"], json.dumps(m["key"]).encode(), json.dumps(m["value"]).encode(), offset
        )

    replicator = Replicator(cfg, spark=spark)
    replicator.apply([msg(row("c", customer(1, "a"), 154), 0)])
    rt = replicator.tables.get("mysql.inventory.customers")
    assert rt is not None and rt.writer is not None
    truncate = parse_schema_change(
        json.dumps(ddl("TRUNCATE TABLE customers", 570, changes=False)["value"]).encode()
    )
    rt.pending_ddl = [DdlItem("mysql", truncate, truncate.changes[0], 0, 0)]
    before = len(rt.writer.completed_instants())
    report = replicator.apply([msg(row("c", customer(2, "b"), 700), 1)])
    assert set(read_replica(tmp_path / "lake" / "inventory_customers")) == {"2"}
    assert len(rt.writer.completed_instants()) == before + 1  # one instant for both
    assert report.tables["inventory_customers"]["ddl"] == 1
    assert rt.pending_ddl == [] and rt.uncommitted_ddl == []


@pytest.mark.spark
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.text("abc", min_size=1, max_size=3)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 12),
    st.integers(1, 4),
    st.data(),
)
def test_a_ddl_truncate_is_placed_by_position_however_the_topics_interleave(
    spark, events, truncate_after, batches, data
) -> None:
    """A DDL TRUNCATE on the schema change topic against its table's rows, both cut into
    batches at random (the DDL in any batch): the replica equals a plain fold of the
    rows in binlog order, emptied at the truncate's position."""

    from tests.cases.mysql.make_cases import customer, ddl, row

    positions = [1000 + 10 * i for i in range(len(events))]
    cut = min(truncate_after, len(events))
    t_pos = 1000 + 10 * cut - 5  # between the rows
    expected: dict[str, str] = {}
    for (key, name), pos in zip(events, positions, strict=True):
        if pos > t_pos:
            expected[str(key)] = name
        else:
            expected.pop(str(key), None)  # updated, then gone with the truncate
    # Older rows that the truncate removes are exactly the keys last written before it.
    rows = [
        row("c" if i == 0 else "u", customer(k, n), pos)
        for i, ((k, n), pos) in enumerate(zip(events, positions, strict=True))
    ]
    bounds = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=batches - 1)))
    chunks = [rows[a:b] for a, b in zip([0, *bounds], [*bounds, len(rows)], strict=True)]
    # In a real run both topics are known from the start; here a topic is known from its
    # first message, and a schema change for a table not known yet is skipped (docs/guide/
    # limits.md): the DDL comes with or after the table's first rows.
    first = next(i for i, c in enumerate(chunks) if c)
    ddl_batch = data.draw(st.integers(first, len(chunks) - 1))
    trunc = ddl("TRUNCATE TABLE customers", t_pos, changes=False)
    replica, _ = _replicate_chunks(spark, chunks, ddl_batch, trunc)
    got = {k: r["first_name"] for k, r in replica.items()}
    assert got == expected


@pytest.mark.spark
@pytest.mark.parametrize("policy", ["apply", "ignore", "fail"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(
        st.tuples(st.integers(1, 4), st.text("abc", min_size=1, max_size=3)),
        min_size=2,
        max_size=10,
    ),
    rename_after=st.integers(1, 9),
    data=st.data(),
)
def test_a_column_rename_is_placed_by_position_when_it_comes_first(
    spark, policy, events, rename_after, data
) -> None:
    """A column rename (email -> mail) on the schema change topic and its table's rows,
    cut into batches at random, the rename read no later than the first row written
    after it (what the replicator's schema-change barrier guarantees in a live run) and
    any earlier rows before or after it: the replica equals a plain fold of the rows in
    binlog order under each policy (apply: one column of both; ignore: the old column
    keeps what was written before, the new one what came after; fail: the rows before the
    rename up to its batch, and the table stops)."""

    from tests.cases.mysql.make_cases import customer, ddl, row

    cut = min(rename_after, len(events) - 1)
    positions = [1000 + 10 * i for i in range(len(events))]
    r_pos = 1000 + 10 * cut - 5
    rows, seen = [], set()
    for (key, value), pos in zip(events, positions, strict=True):
        op = "u" if key in seen else "c"
        seen.add(key)
        if pos < r_pos:
            after = customer(key, "f", value)
        else:
            after = {"id": key, "first_name": "f", "last_name": "Thomas", "mail": value}
        rows.append(row(op, after, pos))
    expected: dict[str, dict] = {}
    for (key, value), pos in zip(events, positions, strict=True):
        before = pos < r_pos
        if policy == "apply":
            expected[str(key)] = {"mail": value}
        elif policy == "ignore":
            expected[str(key)] = {
                "email": value if before else None,
                "mail": None if before else value,
            }
    bounds = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=3)))
    chunks = [rows[a:b] for a, b in zip([0, *bounds], [*bounds, len(rows)], strict=True)]
    # The rename comes in a batch with or after the table's first rows (a topic is known
    # from its first message here) and no later than the batch of the first row after it.
    first = next(i for i, c in enumerate(chunks) if c)
    first_after = next(
        i for i, c in enumerate(chunks) if any(m["value"]["source"]["pos"] > r_pos for m in c)
    )
    ddl_batch = data.draw(st.integers(first, max(first, first_after)))
    rename = ddl(
        "ALTER TABLE customers RENAME COLUMN email TO mail",
        r_pos,
        columns=["id", "first_name", "last_name", "mail"],
        renamed={"mail": "email"},
    )
    got, stopped = _replicate_chunks(spark, chunks, ddl_batch, rename, ddl=policy)
    if policy == "fail":
        # The table stops with the batch of the rename: its rows before it up to there
        # are applied; the rest is read again from the checkpoint after a restart.
        applied = sum(len(c) for c in chunks[: ddl_batch + 1])
        for (key, value), pos in list(zip(events, positions, strict=True))[:applied]:
            if pos < r_pos:
                expected[str(key)] = {"email": value}
        assert stopped
    columns = {"apply": ["mail"], "ignore": ["email", "mail"], "fail": ["email"]}[policy]
    assert {k: {c: r.get(c) for c in columns} for k, r in got.items()} == expected
    if policy == "apply":
        assert all("email" not in r for r in got.values())


def _replicate_chunks(
    spark, chunks: list[list[dict]], ddl_batch: int, change: dict, **source
) -> tuple[dict[str, dict], bool]:
    """Apply MySQL row events (``tests.cases.mysql.make_cases.row``) batch by batch, the
    schema change ``change`` with batch ``ddl_batch``, into a fresh replica (stopping
    when its table stops); the replica as hudi-rs reads it and whether the table stopped."""
    import tempfile
    from pathlib import Path

    from engine.config import config_from_dict
    from engine.replicator import Replicator
    from tests.integration.replicas import read_replica

    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_from_dict(
            {
                "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ".", **source},
                "target": {"path": f"{tmp}/lake"},
                "hudi": {"num_buckets": 2},
                "replicator": {"work_dir": f"{tmp}/work"},
            }
        )
        replicator = Replicator(cfg, spark=spark)
        offset, rt = 0, None
        for i, chunk in enumerate(chunks):
            msgs = []
            for m in chunk:
                value = json.dumps(m["value"]).encode()
                msgs.append(Msg(m["topic"], json.dumps(m["key"]).encode(), value, offset))
                offset += 1
            if i == ddl_batch:
                msgs.append(Msg("mysql", b"{}", json.dumps(change["value"]).encode(), 0))
            rt = replicator.tables.get("mysql.inventory.customers")
            if rt is not None and rt.state.stopped:
                break
            if msgs:
                replicator.apply(msgs)
        path = Path(tmp) / "lake" / "inventory_customers"
        return (read_replica(path) if path.exists() else {}), bool(rt and rt.state.stopped)


def test_a_cut_batch_keeps_no_column_only_its_cut_rows_had() -> None:
    """Rows past a cut are read again later and bring their columns then: a column only
    they gave a value (all null in the rows kept) leaves the batch unless the replica has
    it; a column null in every row, and the rows kept, stay as they were."""
    batch = pa.table(
        {
            PARTITION: pa.array([0, 0, 1, 0], pa.int32()),
            OFFSET: pa.array([5, 6, 9, 7], pa.int64()),
            "id": [1, 2, 3, 4],
            "email": ["a", "b", "c", None],
            "mail": [None, None, None, "d"],  # the row past the cut: a renamed column
            "stored": [None, None, None, "e"],  # the same, but the replica has it
            "never": pa.array([None, None, None, None], pa.string()),
        }
    )
    replica = pa.schema([("id", pa.int64()), ("email", pa.string()), ("stored", pa.string())])
    got = cut_batch(batch, {0: 7}, replica)
    assert got.column_names == [PARTITION, OFFSET, "id", "email", "stored", "never"]
    assert got.column("id").to_pylist() == [1, 2, 3]
    # Nothing cut: the batch as it is; without a replica the rule is the same.
    assert cut_batch(batch, {0: 8}, replica).equals(batch)
    assert "mail" not in cut_batch(batch, {0: 7}, None).column_names
    assert "stored" not in cut_batch(batch, {0: 7}, None).column_names


@pytest.mark.spark
def test_a_failing_change_cuts_rows_in_gtid_order(spark) -> None:
    """Under ``source.mysql_gtid_ordering`` rows carry positions re-encoded from their
    GTIDs: a failing change's position is compared in that encoding too (compared raw,
    the rows from after the rename of the same batch were taken for rows before it, or
    the rows before it for rows after). The table stops with the rows before it."""
    from tests.cases.mysql.make_cases import customer, ddl, row

    gtid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    rows = [
        row("c", customer(1, "a", "a@x"), 154, gtid=f"{gtid}:1"),
        row("c", customer(2, "b", "b@x"), 160, gtid=f"{gtid}:2"),
        row("u", customer(1, "a", "a2@x"), 170, gtid=f"{gtid}:3"),
        row(
            "u",
            {"id": 2, "first_name": "b", "last_name": "T", "mail": "b2@x"},
            600,
            gtid=f"{gtid}:5",
        ),  # fmt: skip
        row(
            "c",
            {"id": 3, "first_name": "c", "last_name": "T", "mail": "c@x"},
            610,
            gtid=f"{gtid}:6",
        ),  # fmt: skip
    ]
    rename = ddl(
        "ALTER TABLE customers RENAME COLUMN email TO mail",
        500,
        columns=["id", "first_name", "last_name", "mail"],
        renamed={"mail": "email"},
        gtid=f"{gtid}:4",
    )
    got, stopped = _replicate_chunks(spark, [rows], 0, rename, ddl="fail", mysql_gtid_ordering=True)
    assert stopped
    assert {k: r["email"] for k, r in got.items()} == {"1": "a2@x", "2": "b@x"}
