"""Fuzzing the records the replicator reads itself, not through a format's decoder.

A new topic's first records (is it a table? :func:`engine.decode.control.topic_kind`),
the transaction-metadata topic (``TransactionTracker``) and MySQL's schema change topic
(:func:`engine.decode.ddl.parse_schema_change`) are read by the replicator before or
instead of a decoder. :func:`control_checked` runs all three over a batch of values and
checks their contract: nothing raises, except a malformed schema change, which is a
``ValueError`` with a reason (the replicator's dead letter); each call ends within the
harness's time bound. Seeds: the shared Debezium samples of those kinds, and the
documented schema change rewritten into every statement the DDL policy distinguishes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from engine.decode import control
from engine.decode.ddl import SchemaChange, parse_schema_change
from engine.source.transactions import TransactionTracker, json_documents
from tests.fuzz.harness import HANG_SECONDS, ContractBroken, time_bound
from tests.fuzz.mutations import Chooser, choice, mutate_part
from tests.fuzz.registry import CONTROL_TARGET
from tests.samples import debezium_samples

__all__ = ["CONTROL_TARGET", "control_checked", "ddl_seeds", "mutated_values", "parse_checked"]

Record = tuple[bytes | None, bytes | None]


def _sample(name: str) -> dict[str, Any]:
    return json.loads((debezium_samples() / f"{name}.json").read_text())


def _encoded(value: Any) -> bytes | None:
    return None if value is None else json.dumps(value).encode()


@cache
def ddl_seeds() -> tuple[Record, ...]:
    """Schema change records (key, value): the two real ones, and the documented one
    rewritten into every statement the DDL policy distinguishes (with what
    ``tableChanges`` says for each)."""
    docs, snapshot = _sample("mysql-schema-change-docs"), _sample("mysql-schema-change-snapshot")
    out = [(_encoded(s["key"]), _encoded(s["value"])) for s in (docs, snapshot)]
    columns = docs["value"]["payload"]["tableChanges"][0]["table"]["columns"]
    without_email = [c for c in columns if c["name"] != "email"]
    renamed = [{**c, "name": "mail"} if c["name"] == "email" else c for c in columns]
    narrowed = [{**c, "length": 10} if c["name"] == "email" else c for c in columns]
    variants = [
        ("ALTER TABLE customers DROP COLUMN email", "ALTER", without_email),
        ("ALTER TABLE customers RENAME COLUMN email TO mail", "ALTER", renamed),
        ("ALTER TABLE customers CHANGE email mail varchar(255)", "ALTER", renamed),
        ("ALTER TABLE customers MODIFY email varchar(10)", "ALTER", narrowed),
        ("TRUNCATE TABLE customers", None, None),
        ("RENAME TABLE customers TO clients", "ALTER", columns),
        ("ALTER TABLE `inventory`.`customers` RENAME TO `clients`", "ALTER", columns),
        ("DROP TABLE customers", "DROP", None),
    ]
    for pos, (ddl, kind, cols) in enumerate(variants, start=600):
        value = copy.deepcopy(docs["value"])
        payload = value["payload"]
        payload["ddl"], payload["source"]["pos"] = ddl, pos
        change = payload["tableChanges"][0]
        if kind is None:
            payload["tableChanges"] = []
        else:
            change["type"] = kind
            change["table"] = None if cols is None else {**change["table"], "columns": cols}
        out.append((_encoded(docs["key"]), _encoded(value)))
    return tuple(out)


@cache
def control_seeds() -> tuple[bytes | None, ...]:
    """Values of transaction markers, logical decoding messages, a heartbeat, and the
    schema change records."""
    names = [
        "mysql-transaction-begin-docs",
        "mysql-transaction-end-docs",
        "pg-transaction-begin-docs",
        "pg-transaction-end-docs",
        "pg-transaction-end",
        "pg-message-logical-decoding",
        "pg-message-transactional-docs",
    ]
    heartbeat = json.dumps({"ts_ms": 1700000000000}).encode()
    values = [_encoded(_sample(n)["value"]) for n in names] + [heartbeat]
    return tuple(values + [v for _, v in ddl_seeds()])


def mutated_values(c: Chooser, *, max_records: int = 8, rounds: int = 3) -> list[bytes | None]:
    """A batch of mutated control record values."""
    seeds = control_seeds()
    parsed = [json.loads(s) for s in seeds if s is not None]
    return [
        mutate_part(choice(c, seeds), c, parsed, rounds=rounds)
        for _ in range(c.integer(1, max_records))
    ]


def parse_checked(value: bytes | None) -> SchemaChange | None:
    """``parse_schema_change`` on one value: a change, or None when it refused the value
    with a ``ValueError`` that gives a reason; anything else raised is a finding."""
    if value is None:
        return None
    try:
        change = parse_schema_change(value)
    except ValueError as exc:
        if not str(exc).strip():
            raise ContractBroken("a schema change refused without a reason") from exc
        return None
    for tc in change.changes:
        if tc.kind not in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME"):
            raise ContractBroken(f"table change of kind {tc.kind!r}")
        if not all(isinstance(k, str) for k in tc.key_columns):
            raise ContractBroken(f"key columns {tc.key_columns!r} are not all names")
    return change


def control_checked(values: Sequence[bytes | None]) -> None:
    """Recognise, read as transaction records and parse as schema changes ``values``.

    Raises:
        ContractBroken: a result outside the contract.
        Hang: a call ran past the time bound.
        Exception: whatever the readers raised (a finding).
    """
    with time_bound(HANG_SECONDS):
        kind = control.topic_kind(values)
        docs = json_documents(values)
        TransactionTracker().observe(list(values))
        for value in values:
            parse_checked(value)
    if kind is not None and kind not in control.CONTROL_KINDS:
        raise ContractBroken(f"topic kind {kind!r}")
    if len(docs) != len(values):
        raise ContractBroken(f"{len(docs)} documents for {len(values)} values")
