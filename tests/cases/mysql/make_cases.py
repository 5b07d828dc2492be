"""Writes the MySQL case files of this folder from the Debezium samples (run it again
after changing it: ``python tests/cases/mysql/make_cases.py``).

Schema change messages are the real ones of ../shared/debezium-samples
(mysql-schema-change-docs.json: ALTER TABLE ... ADD; mysql-schema-change-snapshot.json:
a snapshot CREATE TABLE with empty tableChanges); drops, renames and truncates are that
same message with its ``ddl``, ``tableChanges`` and binlog position changed as the
connector writes them. Row events are mysql-update.json (Debezium 3.0.1, schemaless)
with their ``after`` image and binlog position changed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[2] / ".." / "shared" / "debezium-samples"
PREFIX = "mysql"  # the docs schema change message's topic (= topic.prefix)
CUSTOMERS = f"{PREFIX}.inventory.customers"
ORDERS = f"{PREFIX}.inventory.orders"


def sample(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text())


ROW = sample("mysql-update")["value"]
DDL = sample("mysql-schema-change-docs")
DDL_KEY = DDL["key"]["payload"]  # {"databaseName": "inventory"}
COLUMNS = {c["name"]: c for c in DDL["value"]["payload"]["tableChanges"][0]["table"]["columns"]}


def row(op: str, after: dict | None, pos: int, *, file: str = "mysql-bin.000003", r: int = 0,
        table: str = "customers", snapshot: str = "false", before: dict | None = None) -> dict:
    value = copy.deepcopy(ROW)
    value["op"] = op
    value["after"] = after
    value["before"] = before
    value["source"].update(name=PREFIX, file=file, pos=pos, row=r, table=table, snapshot=snapshot)
    key = {"id": (after or before)["id"]}
    return {"topic": f"{PREFIX}.inventory.{table}", "key": key, "value": value}


def customer(i: int, first: str, email: str | None = "x@acme.com", **extra) -> dict:
    return {"id": i, "first_name": first, "last_name": "Thomas", "email": email, **extra}


def ddl(statement: str, pos: int, table: str = "customers", columns: list[str] | None = None,
        kind: str = "ALTER", renamed: dict[str, str] | None = None, changes: bool = True) -> dict:
    value = copy.deepcopy(DDL["value"])  # {"schema": {}, "payload": {...}}
    payload = value["payload"]
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
                cols.append(col)
            change["table"]["columns"] = cols
    return {"topic": PREFIX, "key": DDL_KEY, "value": value}


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
            [row("c", customer(1001, "Sally"), 154),
             row("c", {"id": 1, "first_name": "o"}, 160, table="orders")],
            [ddl("ALTER TABLE customers DROP COLUMN email", 900, columns=DROPPED),
             row("c", {"id": 1002, "first_name": "George", "last_name": "B"}, 950),
             row("c", {"id": 2, "first_name": "p"}, 960, table="orders")],
        ],
        "expect": {
            "inventory_customers": {"rows": rows((1001, {"email": "x@acme.com"}))},
            "inventory_orders": {"rows": rows((1, {"first_name": "o"}), (2, {"first_name": "p"}))},
        },
        "failed": {"inventory_customers": 'dropped email. To apply drops, renames and narrowings, set source.ddl = "apply"'},
        "counters": {"inventory_customers": {"ddl": 1}},
    },
    "drop-column-apply": {
        "about": "a column drop with ddl = apply (per table, under [tables.<name>]): the "
        "column leaves the replica (every file group rewritten), also from a pre-drop row "
        "read after the drop; the other table keeps the default and fails on its own drop",
        "config": {"tables": {"inventory_customers": {"ddl": "apply"}}},
        "batches": [
            [row("c", customer(1001, "Sally"), 154), row("c", customer(1002, "George"), 200),
             row("c", {"id": 1, "first_name": "o", "email": "e"}, 160, table="orders")],
            [ddl("ALTER TABLE customers DROP COLUMN email", 900, columns=DROPPED),
             ddl("ALTER TABLE orders DROP COLUMN email", 910, table="orders",
                 columns=["id", "first_name"]),
             row("u", customer(1001, "Sal"), 850),
             row("c", {"id": 1003, "first_name": "Ann", "last_name": "K"}, 950)],
            [row("c", {"id": 1004, "first_name": "Bob", "last_name": "L"}, 990)],
        ],
        "expect": {
            "inventory_customers": {
                "rows": rows((1001, {"first_name": "Sal"}), (1002, {"first_name": "George"}),
                             (1003, {"first_name": "Ann"}), (1004, {"first_name": "Bob"})),
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
            [ddl("ALTER TABLE customers DROP COLUMN email", 900, columns=DROPPED),
             row("c", {"id": 1002, "first_name": "George", "last_name": "B"}, 950)],
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
            [ddl("ALTER TABLE customers CHANGE email mail varchar(255)", 900,
                 columns=["id", "first_name", "last_name", "mail"], renamed={"mail": "email"}),
             row("c", {"id": 1002, "first_name": "G", "last_name": "B", "mail": "g@acme.com"}, 950)],
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
            [ddl("ALTER TABLE customers RENAME COLUMN email TO mail", 900,
                 columns=["id", "first_name", "last_name", "mail"], renamed={"mail": "email"})],
        ],
        "expect": {"inventory_customers": {"rows": rows((1001, {"email": "s@acme.com"}))}},
        "failed": {"inventory_customers": "renamed email->mail"},
    },
    "rename-table": {
        "about": "RENAME TABLE customers TO clients: under the default the old replica stops "
        "(it holds the rows as of the rename); the new name's topic fills a new replica",
        "batches": [
            [row("c", customer(1001, "Sally"), 154)],
            [ddl("RENAME TABLE customers TO clients", 900, table="clients", columns=BASE4),
             row("c", customer(1002, "George"), 950, table="clients")],
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
            [ddl("ALTER TABLE customers RENAME TO clients", 900, table="clients", columns=BASE4),
             row("c", customer(1002, "George"), 950, table="clients")],
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
            [row("c", customer(1002, "George"), 300),
             ddl("TRUNCATE TABLE customers", 570, changes=False),
             row("c", customer(1003, "Ann"), 700)],
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
            [row("c", customer(1001, "Sally"), 154),
             row("c", {"id": 1, "first_name": "o"}, 160, table="orders")],
            [ddl("DROP TABLE customers", 900, kind="DROP"),
             ddl("DROP TABLE orders", 910, table="orders", kind="DROP"),
             row("c", {"id": 2, "first_name": "p"}, 990, table="orders")],
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
                {"topic": "testc", "key": None,
                 "value": sample("mysql-schema-change-snapshot")["value"]},
                {**row("r", {"id": 1, "first_name": "g"}, 154, table="geom", snapshot="true"),
                 "topic": "testc.inventory.geom"},
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
                "rows": rows((1, {"first_name": "file4"}), (2, {"first_name": "row1"}),
                             (3, {"first_name": "streamed"}))
            }
        },
    },
}


def main() -> None:
    for name, case in CASES.items():
        case.setdefault("config", {})
        (HERE / f"{name}.json").write_text(json.dumps(case, indent=1) + "\n")


if __name__ == "__main__":
    main()
