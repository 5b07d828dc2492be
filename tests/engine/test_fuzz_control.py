"""Fuzzing the records the replicator reads itself (issue 15), not through a format's decoder.

Row topics go through ``decoder_for`` and are fuzzed in test_fuzz_decoders.py. A few kinds
of record are read by the replicator before or instead of a decoder: a new topic's first
records, to tell whether it is a table (:func:`engine.decode.control.topic_kind`); the
transaction-metadata topic (``TransactionTracker``); MySQL's schema change topic
(:func:`engine.decode.ddl.parse_schema_change`, then the DDL policy); logical decoding
messages kept as a table. Each is fed mutated seeds (the shared Debezium samples, and
DDL statements of every kind the policy handles): nothing may raise out of them, a
malformed schema change is a ``ValueError`` with a reason (a dead letter), and a
replicator given such batches goes on, quarantining each bad record with its coordinates.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.decode import control
from engine.decode.ddl import SchemaChange, parse_schema_change
from engine.replicator import Replicator
from engine.source.transactions import TransactionTracker, json_documents
from tests.engine.test_fuzz_decoders import DETERMINISTIC, HypothesisChooser
from tests.engine.test_properties import Msg
from tests.fuzz.harness import HANG_SECONDS, time_bound
from tests.fuzz.mutations import mutate_part
from tests.samples import debezium_samples

DDL_TOPIC = "mysql"
TABLE_TOPIC = "mysql.inventory.customers"


def _sample(name: str) -> dict[str, Any]:
    return json.loads((debezium_samples() / f"{name}.json").read_text())


def _encoded(value: Any) -> bytes | None:
    return None if value is None else json.dumps(value).encode()


def _ddl_seeds() -> list[tuple[bytes | None, bytes | None]]:
    """The two real schema change records, and the documented one rewritten into every
    statement the DDL policy distinguishes (what ``tableChanges`` says for each)."""
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
    return out


def _control_seeds() -> list[bytes | None]:
    """Transaction markers, logical decoding messages and a heartbeat."""
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
    return [_encoded(_sample(n)["value"]) for n in names] + [heartbeat]


def _mutated(
    seeds: list[bytes | None], data: st.DataObject, *, max_records: int = 6
) -> list[bytes | None]:
    chooser = HypothesisChooser(data)
    parsed = [json.loads(s) for s in seeds if s is not None]
    n = data.draw(st.integers(1, max_records))
    return [
        mutate_part(seeds[data.draw(st.integers(0, len(seeds) - 1))], chooser, parsed, rounds=3)
        for _ in range(n)
    ]


@settings(DETERMINISTIC, max_examples=400)
@given(data=st.data())
def test_a_malformed_schema_change_is_a_value_error_with_a_reason(data: st.DataObject) -> None:
    values = _mutated([v for _, v in _ddl_seeds()], data, max_records=1)
    if values[0] is None:
        return
    with time_bound(HANG_SECONDS):
        try:
            change = parse_schema_change(values[0])
        except ValueError as exc:
            assert str(exc).strip()
            return
    assert isinstance(change, SchemaChange)
    for tc in change.changes:
        assert tc.kind in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME")
        assert all(isinstance(k, str) for k in tc.key_columns)


@settings(DETERMINISTIC, max_examples=300)
@given(data=st.data())
def test_recognising_topics_and_reading_transactions_never_raise(data: st.DataObject) -> None:
    seeds = _control_seeds() + [v for _, v in _ddl_seeds()]
    values = _mutated(seeds, data)
    with time_bound(HANG_SECONDS):
        kind = control.topic_kind(values)
        docs = json_documents(values)
        TransactionTracker().observe(values)
    assert kind is None or kind in control.CONTROL_KINDS
    assert len(docs) == len(values)


@pytest.mark.parametrize(
    "value",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    ],
    ids=["deep-array", "deep-object"],
)
def test_deeply_nested_control_candidates_are_read_as_unknown(value: bytes) -> None:
    """Found by this file's first run: a new topic whose first record nests beyond
    ``json``'s recursion limit raised RecursionError out of topic recognition (and of the
    transaction reader), before the decoder's nesting limit could refuse the record."""
    assert control.topic_kind([value]) is None
    assert json_documents([value]) == [None]
    assert TransactionTracker().observe([value]) >= 0


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda p: p["source"].__setitem__("row", [1]), "source.row"),
        (lambda p: p["source"].__setitem__("row", -1), "source.row"),
        (
            lambda p: p["tableChanges"][0]["table"].__setitem__("primaryKeyColumnNames", 5),
            "primaryKeyColumnNames",
        ),
        (
            lambda p: p["tableChanges"][0]["table"].__setitem__("primaryKeyColumnNames", [{}]),
            "primaryKeyColumnNames",
        ),
    ],
    ids=["row-a-list", "row-negative", "keys-a-number", "keys-an-object"],
)
def test_found_malformed_schema_changes_say_why(edit: Any, words: str) -> None:
    """Found in review: these raised TypeError, which escaped ``Replicator.apply`` and
    stopped the replicator; the schema change topic is read from its start on every
    start, so one such record stopped every start."""
    value = copy.deepcopy(_sample("mysql-schema-change-docs")["value"])
    edit(value["payload"])
    with pytest.raises(ValueError, match=words):
        parse_schema_change(json.dumps(value).encode())


# -- the replicator's side ------------------------------------------------------------------


@pytest.fixture(scope="module")
def replicator(tmp_path_factory: pytest.TempPathFactory) -> Replicator:
    """A replicator that knows the schema change topic and the table it names.

    No Spark: schema change records never become rows, and the table named holds none
    (no merge job runs)."""
    root = tmp_path_factory.mktemp("fuzz-ddl")
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "ddl": "apply",
                "max_message_bytes": 256 * 1024,
            },
            "target": {"path": str(root / "lake")},
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    rep = Replicator(cfg, spark=None)
    assert rep.tables.get(TABLE_TOPIC) is not None
    seeds = _ddl_seeds()
    rep.apply([Msg(DDL_TOPIC, k, v, i) for i, (k, v) in enumerate(seeds[:2])])
    assert rep.control_topics()[DDL_TOPIC][0] == control.SCHEMA_CHANGE
    return rep


OFFSETS = [1000]


@settings(DETERMINISTIC, max_examples=150)
@given(data=st.data())
def test_hostile_schema_change_batches_never_stop_the_replicator(
    replicator: Replicator, data: st.DataObject
) -> None:
    seeds = _ddl_seeds()
    chooser = HypothesisChooser(data)
    parsed = [json.loads(v) for _, v in seeds if v is not None]
    records = []
    for _ in range(data.draw(st.integers(1, 6))):
        key, value = seeds[data.draw(st.integers(0, len(seeds) - 1))]
        value = mutate_part(value, chooser, parsed, rounds=3)
        if data.draw(st.booleans()):
            key = mutate_part(key, chooser, [], rounds=1)
        records.append((key, value))
    first = OFFSETS[0]
    OFFSETS[0] += len(records)
    letters = replicator.dead_letters.path(DDL_TOPIC)
    before = letters.read_text().count("\n") if letters.exists() else 0
    with time_bound(HANG_SECONDS):
        replicator.apply([Msg(DDL_TOPIC, k, v, first + i) for i, (k, v) in enumerate(records)])
    # Every record parse_schema_change refuses is quarantined with its coordinates.
    expected = []
    for i, (_, value) in enumerate(records):
        if value is None:
            continue
        try:
            parse_schema_change(value)
        except ValueError:
            expected.append(first + i)
    lines = letters.read_text().splitlines()[before:] if letters.exists() else []
    quarantined = [json.loads(line) for line in lines]
    offsets = [q["offset"] for q in quarantined]
    assert all(q["topic"] == DDL_TOPIC and q["partition"] == 0 for q in quarantined)
    assert set(expected) <= set(offsets), (expected, offsets)
    assert set(offsets) <= set(range(first, first + len(records)))
