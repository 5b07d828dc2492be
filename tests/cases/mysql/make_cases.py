"""Writes the MySQL case files of this folder from the Debezium samples (run it again
after changing it: ``python tests/cases/mysql/make_cases.py``).

Schema change messages are the real ones of ../shared/debezium-samples
(mysql-schema-change-docs.json: ALTER TABLE ... ADD; mysql-schema-change-snapshot.json:
a snapshot CREATE TABLE with empty tableChanges); drops, renames and truncates are that
same message with its ``ddl``, ``tableChanges`` and binlog position changed as the
connector writes them. Row events are mysql-update.json (Debezium 3.0.1, schemaless)
with their ``after`` image and binlog position changed; typed rows (schemas enabled) are
mysql-create-docs.json with a ``qty`` column added. The control-topic cases use the
transaction, message and heartbeat samples as they are; the schema history record is
built after Debezium's documented layout (no sample of one exists).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # run as a script too

from tests.samples import debezium_samples  # noqa: E402

SAMPLES = debezium_samples()  # ../shared/debezium-samples or $CDC_DEBEZIUM_SAMPLES
PREFIX = "mysql"  # the docs schema change message's topic (= topic.prefix)
CUSTOMERS = f"{PREFIX}.inventory.customers"
ORDERS = f"{PREFIX}.inventory.orders"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text())


ROW = sample("mysql-update")["value"]
DDL = sample("mysql-schema-change-docs")
DDL_KEY = DDL["key"]["payload"]  # {"databaseName": "inventory"}
COLUMNS = {c["name"]: c for c in DDL["value"]["payload"]["tableChanges"][0]["table"]["columns"]}


def row(
    op: str,
    after: dict | None,
    pos: int,
    *,
    file: str = "mysql-bin.000003",
    r: int = 0,
    table: str = "customers",
    snapshot: str = "false",
    before: dict | None = None,
    prefix: str = PREFIX,
    gtid: str | None = None,
) -> dict:
    value = copy.deepcopy(ROW)
    value["source"]["gtid"] = gtid
    value["op"] = op
    value["after"] = after
    value["before"] = before
    value["source"].update(name=prefix, file=file, pos=pos, row=r, table=table, snapshot=snapshot)
    key = {"id": (after or before)["id"]}
    return {"topic": f"{prefix}.inventory.{table}", "key": key, "value": value}


def customer(i: int, first: str, email: str | None = "x@acme.com", **extra) -> dict:
    return {"id": i, "first_name": first, "last_name": "Thomas", "email": email, **extra}


def ddl(
    statement: str,
    pos: int,
    table: str = "customers",
    columns: list[str] | None = None,
    kind: str = "ALTER",
    renamed: dict[str, str] | None = None,
    changes: bool = True,
    prefix: str = PREFIX,
    types: dict[str, str] | None = None,
    gtid: str | None = None,
) -> dict:
    value = copy.deepcopy(DDL["value"])  # {"schema": {}, "payload": {...}}
    payload = value["payload"]
    payload["source"]["gtid"] = gtid
    payload["ddl"] = statement
    payload["source"].update(pos=pos, table=table)
    if not changes:
        payload["tableChanges"] = []
    else:
        change = payload["tableChanges"][0]
        change["type"] = kind
        change["id"] = f'"inventory"."{table}"'
        if columns is not None:
            cols = []
            for i, name in enumerate(columns, 1):
                old = (renamed or {}).get(name, name)
                col = copy.deepcopy(COLUMNS.get(old, COLUMNS["email"]))
                col["name"], col["position"] = name, i
                if name in (types or {}):
                    col["typeName"] = col["typeExpression"] = (types or {})[name]
                    col["length"], col["charsetName"] = None, None
                cols.append(col)
            change["table"]["columns"] = cols
    return {"topic": prefix, "key": DDL_KEY, "value": value}


BASE4 = ["id", "first_name", "last_name", "email"]
DROPPED = ["id", "first_name", "last_name"]
ADD = ddl  # the docs message itself is an ADD at pos 570


def docs_add() -> dict:
    return {"topic": PREFIX, "key": DDL_KEY, "value": DDL["value"]}


def rows(*items):
    return {str(i): cols for i, cols in items}


CASES = {
    "add-column": {
        "about": "the documented ALTER TABLE ... ADD middle_name (default policy): applied; "
        "the column arrives typed with the first row that carries it, older rows read null; "
        "the schema change topic is no table",
        "batches": [
            [row("c", customer(1001, "Sally"), 154), row("c", customer(1002, "George"), 300)],
            [docs_add(), row("u", customer(1002, "George", middle_name="M"), 700)],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows(
                    (1001, {"first_name": "Sally", "middle_name": None}),
                    (1002, {"first_name": "George", "middle_name": "M"}),
                ),
                "types": {"middle_name": "string"},
            }
        },
        "counters": {"inventory_customers": {"ddl": 1, "inserts": 2, "updates": 1}},
        "status_tables": ["inventory_customers"],
    },
    "drop-column-fail": {
        "about": "a column drop under the default policy (fail) stops that table before the "
        "rows after it, with the fix in its error; another table of the batch goes on",
        "batches": [
            [
                row("c", customer(1001, "Sally"), 154),
                row("c", {"id": 1, "first_name": "o"}, 160, table="orders"),
            ],
            [
                ddl("ALTER TABLE customers DROP COLUMN email", 900, columns=DROPPED),
                row("c", {"id": 1002, "first_name": "George", "last_name": "B"}, 950),
                row("c", {"id": 2, "first_name": "p"}, 960, table="orders"),
            ],
        ],
        "expect": {
            "inventory_customers": {"rows": rows((1001, {"email": "x@acme.com"}))},
            "inventory_orders": {"rows": rows((1, {"first_name": "o"}), (2, {"first_name": "p"}))},
        },
        "failed": {
            "inventory_customers": "dropped email. To apply drops, renames and narrowings, "
            'set source.ddl = "apply"'
        },
        "counters": {"inventory_customers": {"ddl": 1}},
    },
    "drop-column-apply": {
        "about": "a column drop with ddl = apply (per table, under [tables.<name>]): the "
        "column leaves the replica (every file group rewritten), also from a pre-drop row "
        "read after the drop; the other table keeps the default and fails on its own drop",
        "config": {"tables": {"inventory_customers": {"ddl": "apply"}}},
        "batches": [
            [
                row("c", customer(1001, "Sally"), 154),
                row("c", customer(1002, "George"), 200),
                row("c", {"id": 1, "first_name": "o", "email": "e"}, 160, table="orders"),
            ],
            [
                ddl("ALTER TABLE customers DROP COLUMN email", 900, columns=DROPPED),
                ddl(
                    "ALTER TABLE orders DROP COLUMN email",
                    910,
                    table="orders",
                    columns=["id", "first_name"],
                ),
                row("u", customer(1001, "Sal"), 850),
                row("c", {"id": 1003, "first_name": "Ann", "last_name": "K"}, 950),
            ],
            [row("c", {"id": 1004, "first_name": "Bob", "last_name": "L"}, 990)],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows(
                    (1001, {"first_name": "Sal"}),
                    (1002, {"first_name": "George"}),
                    (1003, {"first_name": "Ann"}),
                    (1004, {"first_name": "Bob"}),
                ),
                "absent": ["email"],
            },
            "inventory_orders": {"rows": rows((1, {"email": "e"}))},
        },
        "failed": {"inventory_orders": "dropped email"},
        "counters": {"inventory_customers": {"ddl": 1, "inserts": 4, "updates": 1}},
    },
    "drop-column-ignore": {
        "about": "a column drop with source.ddl = ignore: logged and counted only; the "
        "column stays and later rows leave it null",
        "config": {"source": {"ddl": "ignore"}},
        "batches": [
            [row("c", customer(1001, "Sally"), 154)],
            [
                ddl("ALTER TABLE customers DROP COLUMN email", 900, columns=DROPPED),
                row("c", {"id": 1002, "first_name": "George", "last_name": "B"}, 950),
            ],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows((1001, {"email": "x@acme.com"}), (1002, {"email": None})),
            }
        },
        "counters": {"inventory_customers": {"ddl": 1}},
    },
    "rename-column-apply": {
        "about": "CHANGE email mail with source.ddl = apply: the replica's column is renamed "
        "with its values; under the default the same change fails the table",
        "config": {"source": {"ddl": "apply"}},
        "batches": [
            [row("c", customer(1001, "Sally", "s@acme.com"), 154)],
            [
                ddl(
                    "ALTER TABLE customers CHANGE email mail varchar(255)",
                    900,
                    columns=["id", "first_name", "last_name", "mail"],
                    renamed={"mail": "email"},
                ),
                row(
                    "c",
                    {"id": 1002, "first_name": "G", "last_name": "B", "mail": "g@acme.com"},
                    950,
                ),
            ],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows((1001, {"mail": "s@acme.com"}), (1002, {"mail": "g@acme.com"})),
                "absent": ["email"],
            }
        },
        "counters": {"inventory_customers": {"ddl": 1}},
    },
    "rename-column-fail": {
        "about": "a column rename under the default policy stops the table",
        "batches": [
            [row("c", customer(1001, "Sally", "s@acme.com"), 154)],
            [
                ddl(
                    "ALTER TABLE customers RENAME COLUMN email TO mail",
                    900,
                    columns=["id", "first_name", "last_name", "mail"],
                    renamed={"mail": "email"},
                )
            ],
        ],
        "expect": {"inventory_customers": {"rows": rows((1001, {"email": "s@acme.com"}))}},
        "failed": {"inventory_customers": "renamed email->mail"},
    },
    "rename-table": {
        "about": "RENAME TABLE customers TO clients: under the default the old replica stops "
        "(it holds the rows as of the rename); the new name's topic fills a new replica",
        "batches": [
            [row("c", customer(1001, "Sally"), 154)],
            [
                ddl("RENAME TABLE customers TO clients", 900, table="clients", columns=BASE4),
                row("c", customer(1002, "George"), 950, table="clients"),
            ],
        ],
        "expect": {
            "inventory_customers": {"rows": rows((1001, {"first_name": "Sally"}))},
            "inventory_clients": {"rows": rows((1002, {"first_name": "George"}))},
        },
        "failed": {"inventory_customers": "renamed to 'clients' (replica inventory_clients)"},
    },
    "rename-table-apply": {
        "about": "RENAME TABLE with source.ddl = apply: logged and counted; the old replica "
        "stays as of the rename, the new one starts from the new topic",
        "config": {"source": {"ddl": "apply"}},
        "batches": [
            [row("c", customer(1001, "Sally"), 154)],
            [
                ddl("ALTER TABLE customers RENAME TO clients", 900, table="clients", columns=BASE4),
                row("c", customer(1002, "George"), 950, table="clients"),
            ],
        ],
        "expect": {
            "inventory_customers": {"rows": rows((1001, {"first_name": "Sally"}))},
            "inventory_clients": {"rows": rows((1002, {"first_name": "George"}))},
        },
        "counters": {"inventory_customers": {"ddl": 1}},
        "status_tables": ["inventory_customers", "inventory_clients"],
    },
    "truncate": {
        "about": "TRUNCATE TABLE on the schema change topic empties the replica as of its "
        "binlog position: in its batch rows before it go, rows after stay; a row applied in "
        "an earlier batch with a later position than the truncate survives it",
        "batches": [
            [row("c", customer(1001, "Sally"), 154), row("c", customer(1005, "Late"), 800)],
            [
                row("c", customer(1002, "George"), 300),
                ddl("TRUNCATE TABLE customers", 570, changes=False),
                row("c", customer(1003, "Ann"), 700),
            ],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows((1003, {"first_name": "Ann"}), (1005, {"first_name": "Late"}))
            }
        },
        "counters": {"inventory_customers": {"ddl": 1, "truncates": 1}},
    },
    "drop-table": {
        "about": "DROP TABLE: the default stops the replica; with apply it is emptied as of "
        "the drop and a re-created table's rows flow in",
        "config": {"tables": {"inventory_orders": {"ddl": "apply"}}},
        "batches": [
            [
                row("c", customer(1001, "Sally"), 154),
                row("c", {"id": 1, "first_name": "o"}, 160, table="orders"),
            ],
            [
                ddl("DROP TABLE customers", 900, kind="DROP"),
                ddl("DROP TABLE orders", 910, table="orders", kind="DROP"),
                row("c", {"id": 2, "first_name": "p"}, 990, table="orders"),
            ],
        ],
        "expect": {
            "inventory_customers": {"rows": rows((1001, {"first_name": "Sally"}))},
            "inventory_orders": {"rows": rows((2, {"first_name": "p"}))},
        },
        "failed": {"inventory_customers": "the source table was dropped"},
    },
    "snapshot-create": {
        "about": "the real snapshot schema change (CREATE TABLE geom, empty tableChanges, "
        "Debezium 1.7) is counted for its table from source.table; its topic is no table",
        "batches": [
            [
                {
                    "topic": "testc",
                    "key": None,
                    "value": sample("mysql-schema-change-snapshot")["value"],
                },
                {
                    **row("r", {"id": 1, "first_name": "g"}, 154, table="geom", snapshot="true"),
                    "topic": "testc.inventory.geom",
                },
            ]
        ],
        "expect": {"inventory_geom": {"rows": rows((1, {"first_name": "g"}))}},
        "counters": {"inventory_geom": {"ddl": 1, "snapshot_rows": 1}},
        "status_tables": ["inventory_geom"],
    },
    "binlog-order": {
        "about": "ordering by binlog file, position and row: a later file beats a larger "
        "position of an earlier file, row breaks ties within one position, a snapshot read "
        "loses to any streamed change, whatever the delivery order",
        "batches": [
            [
                row("u", customer(1, "file4"), 100, file="mysql-bin.000004"),
                row("u", customer(1, "file3"), 900_000),
                row("u", customer(2, "row1"), 500, r=1),
                row("u", customer(2, "row0"), 500, r=0),
                row("u", customer(3, "streamed"), 10),
                row("r", customer(3, "snapshot"), 99_999, file="mysql-bin.000009", snapshot="true"),
            ]
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows(
                    (1, {"first_name": "file4"}),
                    (2, {"first_name": "row1"}),
                    (3, {"first_name": "streamed"}),
                )
            }
        },
    },
}


PG_CREATE = sample("pg-create")["value"]["payload"]


def pg_row(topic: str, i: int, name: str, lsn: int) -> dict:
    value = copy.deepcopy(PG_CREATE)
    value["after"] = {**value["after"], "id": i, "first_name": name}
    value["source"].update(lsn=lsn, sequence=f'["{lsn}","{lsn}"]')
    return {"topic": topic, "key": {"id": i}, "value": value}


def keyed(name: str, topic: str, key: object = None) -> dict:
    return {"topic": topic, "key": key, "value": sample(name)["value"]}


HISTORY = {  # a record of Debezium's schema history topic (schema.history.internal)
    "source": {"server": "mysql"},
    "position": {"file": "mysql-bin.000003", "pos": 570, "ts_sec": 1651535750},
    "ts_ms": 1651535750218,
    "databaseName": "inventory",
    "ddl": "ALTER TABLE customers ADD middle_name varchar(255) AFTER first_name",
    "tableChanges": DDL["value"]["payload"]["tableChanges"],
}

CASES.update(
    {
        "control-topics": {
            "about": "topics of transaction BEGIN/END, heartbeats, schema history and logical "
            "decoding messages are recognised by content whatever their names and never "
            "become tables (messages skipped by default)",
            "config": {"source": {"exclude_topics": "^$"}},
            "batches": [
                [
                    pg_row("dbserver1.inventory.customers", 1, "Bob", 34466480),
                    keyed("pg-transaction-begin-docs", "txmeta", {"id": "571:53195829"}),
                    keyed("pg-transaction-end-docs", "txmeta", {"id": "571:53195829"}),
                    keyed("mysql-transaction-end-docs", "mysql_tx_topic"),
                    {
                        "topic": "beats",
                        "key": {"serverName": "dbserver1"},
                        "value": {
                            "schema": {
                                "type": "struct",
                                "name": "io.debezium.connector.common.Heartbeat",
                                "fields": [{"field": "ts_ms", "type": "int64", "optional": False}],
                            },
                            "payload": {"ts_ms": 1723115240065},
                        },
                    },
                    {"topic": "dbhistory.inventory", "key": None, "value": HISTORY},
                    keyed(
                        "pg-message-logical-decoding",
                        "connector-name.message",
                        {"prefix": "test-prefix"},
                    ),
                    keyed(
                        "pg-message-transactional-docs", "connector-name.message", {"prefix": "foo"}
                    ),
                ]
            ],
            "expect": {"inventory_customers": {"rows": rows((1, {"first_name": "Bob"}))}},
            "status_tables": ["inventory_customers"],
        },
        "logical-messages-table": {
            "about": "source.logical_messages = table: each op=m message is a row of an "
            "append-only table (content decoded from base64), one per Kafka record",
            "config": {"source": {"logical_messages": "table"}},
            "batches": [
                [
                    keyed(
                        "pg-message-logical-decoding",
                        "connector-name.message",
                        {"prefix": "test-prefix"},
                    )
                ],
                [
                    keyed(
                        "pg-message-transactional-docs", "connector-name.message", {"prefix": "foo"}
                    )
                ],
            ],
            "expect": {
                "connector_name_message": {
                    "rows": {
                        "0:0": {
                            "prefix": "test-prefix",
                            "lsn": 26997904,
                            "tx_id": 756,
                            "content": "0x"
                            + __import__("base64")
                            .b64decode(
                                "eyJpZCI6IDEsICJpdGVtIjogIkRlYmV6aXVtIGluIEFjdGlvbiIsICJzd"
                                "GF0dXMiOiAiRU5URVJFRCIsICJxdWFudGl0eSI6IDIsICJ0b3RhbFByaWNl"
                                "IjogMzkuOTh9"
                            )
                            .hex(),
                        },
                        "0:1": {
                            "prefix": "foo",
                            "content": "0x" + bytes([0x62, 0x67, 0xF2]).hex(),
                            "lsn": 46523128,
                        },
                    },
                    "types": {"content": "binary", "lsn": "int64"},
                }
            },
        },
        "naming-two-servers": {
            "about": "target.table_naming = prefix_schema_table: two servers' "
            "inventory.customers are two tables instead of a collision",
            "config": {"target": {"table_naming": "prefix_schema_table"}},
            "batches": [
                [
                    pg_row("srv1.inventory.customers", 1, "one", 100),
                    pg_row("srv2.inventory.customers", 1, "two", 100),
                ]
            ],
            "expect": {
                "srv1_inventory_customers": {"rows": rows((1, {"first_name": "one"}))},
                "srv2_inventory_customers": {"rows": rows((1, {"first_name": "two"}))},
            },
        },
        "naming-template": {
            "about": "a table_naming template: {table}_of_{prefix}; a schema change is routed "
            "to the table under the same naming",
            "config": {"target": {"table_naming": "{table}_of_{prefix}"}},
            "batches": [
                [
                    row("c", customer(1001, "Sally"), 154),
                    ddl("TRUNCATE TABLE customers", 570, changes=False),
                    row("c", customer(1002, "George"), 600),
                ]
            ],
            "expect": {"customers_of_mysql": {"rows": rows((1002, {"first_name": "George"}))}},
            "counters": {"customers_of_mysql": {"ddl": 1, "truncates": 1}},
        },
    }
)


TYPED = sample("mysql-create-docs")["value"]  # JsonConverter with schemas: int32 id


def typed_row(i: int, qty: int, qty_type: str, pos: int) -> dict:
    """mysql-create-docs (schemas enabled) with a ``qty`` column of a given Connect type."""
    value = copy.deepcopy(TYPED)
    for f in value["schema"]["fields"]:
        if f["field"] in ("before", "after"):
            f["fields"].append({"type": qty_type, "optional": True, "field": "qty"})
    payload = value["payload"]
    payload["after"] = {**payload["after"], "id": i, "qty": qty}
    payload["source"].update(name=PREFIX, pos=pos, row=0)
    key = {"id": i}
    return {"topic": CUSTOMERS, "key": key, "value": value}


QTY = [*BASE4, "qty"]


def narrowing(policy: str | None) -> dict:
    failed = policy is None
    return {
        "about": "a narrowing (qty BIGINT -> INT after a CREATE giving the definition): "
        + (
            "the default stops the table, naming the column and both types"
            if failed
            else "with ddl = apply the replica keeps the wider type and takes the narrower rows"
        ),
        "config": {} if failed else {"source": {"ddl": policy}},
        "batches": [
            [
                ddl(
                    "CREATE TABLE customers (...)",
                    100,
                    kind="CREATE",
                    columns=QTY,
                    types={"qty": "BIGINT"},
                ),
                typed_row(1, 5, "int64", 154),
            ],
            [
                ddl("ALTER TABLE customers MODIFY qty INT", 570, columns=QTY, types={"qty": "INT"}),
                typed_row(2, 7, "int32", 600),
            ],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows((1, {"qty": 5})) if failed else rows((1, {"qty": 5}), (2, {"qty": 7})),
                "types": {"qty": "int64"},
            }
        },
        **({"failed": {"inventory_customers": "narrowed qty BIGINT->INT"}} if failed else {}),
        "counters": {"inventory_customers": {"ddl": 2}},
    }


A, B = "0e4d5dcd-a33b-11ea-80f1-02010a22a99e", "4f0e3a41-b2c7-11ea-9d7a-0242ac110002"


def truncate_gtid(gtid_ordering: bool) -> dict:
    return {
        "about": "a DDL TRUNCATE "
        + (
            "under GTID ordering is placed by its GTID: a change after a fail-over to a new "
            "server (new GTID origin, binlog position below the truncate's) survives it"
            if gtid_ordering
            else "by binlog coordinates alone: the same post-fail-over change, with a smaller "
            "binlog position, is taken as older and truncated"
        ),
        "config": {"source": {"mysql_gtid_ordering": gtid_ordering}},
        "batches": [
            [
                row("c", customer(1001, "Sally"), 154, gtid=f"{A}:1"),
                ddl("TRUNCATE TABLE customers", 570, changes=False, gtid=f"{A}:2"),
                row("c", customer(1002, "George"), 50, file="mysql-bin.000001", gtid=f"{B}:1"),
            ]
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows((1002, {"first_name": "George"})) if gtid_ordering else {}
            }
        },
        "counters": {"inventory_customers": {"ddl": 1, "truncates": 1}},
    }


CASES["truncate-gtid-ordering"] = truncate_gtid(True)
CASES["truncate-binlog-ordering"] = truncate_gtid(False)
CASES["narrowing-fail"] = narrowing(None)
CASES["narrowing-apply"] = narrowing("apply")


def main() -> None:
    for name, case in CASES.items():
        case.setdefault("config", {})
        (HERE / f"{name}.json").write_text(json.dumps(case, indent=1) + "\n")


if __name__ == "__main__":
    main()
