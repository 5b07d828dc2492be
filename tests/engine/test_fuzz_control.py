"""Fuzzing the records the replicator reads itself (issue 15), not through a format's decoder.

Row topics go through ``decoder_for`` and are fuzzed in test_fuzz_decoders.py. A few kinds
of record are read by the replicator before or instead of a decoder: a new topic's first
records, to tell whether it is a table (:func:`engine.decode.control.topic_kind`); the
transaction-metadata topic (``TransactionTracker``); MySQL's schema change topic
(:func:`engine.decode.ddl.parse_schema_change`, then the DDL policy); logical decoding
messages kept as a table. Each is fed mutated seeds (tests/fuzz/control.py: the shared
Debezium samples, and DDL statements of every kind the policy handles): nothing may
raise out of them, a malformed schema change is a ``ValueError`` with a reason (a dead
letter), and a replicator given such batches goes on, quarantining each bad record with
its coordinates. The long run: ``python -m tests.fuzz --format control-records``.
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
from engine.decode.ddl import parse_schema_change
from engine.replicator import Replicator
from engine.source.transactions import TransactionTracker, json_documents
from tests.engine.test_fuzz_decoders import DETERMINISTIC, HypothesisChooser
from tests.engine.test_properties import Msg
from tests.fuzz.control import control_checked, ddl_seeds, mutated_values, parse_checked
from tests.fuzz.harness import HANG_SECONDS, time_bound
from tests.fuzz.mutations import choice, mutate_part
from tests.samples import debezium_samples

DDL_TOPIC = "mysql"
TABLE_TOPIC = "mysql.inventory.customers"


def _sample(name: str) -> dict[str, Any]:
    return json.loads((debezium_samples() / f"{name}.json").read_text())


@settings(DETERMINISTIC, max_examples=400)
@given(data=st.data())
def test_a_malformed_schema_change_is_a_value_error_with_a_reason(data: st.DataObject) -> None:
    chooser = HypothesisChooser(data)
    seeds = [v for _, v in ddl_seeds()]
    parsed = [json.loads(v) for v in seeds if v is not None]
    value = mutate_part(choice(chooser, seeds), chooser, parsed, rounds=3)
    with time_bound(HANG_SECONDS):
        parse_checked(value)


@settings(DETERMINISTIC, max_examples=300)
@given(data=st.data())
def test_recognising_topics_and_reading_transactions_never_raise(data: st.DataObject) -> None:
    control_checked(mutated_values(HypothesisChooser(data), max_records=6))


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


@pytest.mark.parametrize("op", [[], {}, ["c"], {"c": 1}])
def test_an_op_that_is_not_a_string_makes_no_kind(op: Any) -> None:
    """Found by ``python -m tests.fuzz --format control-records``: an ``op`` that is a list
    or an object raised TypeError (unhashable) out of topic recognition, which runs on a
    new topic's first records: the replicator stopped. Such a record says nothing about
    its topic (the decoder makes it a bad message)."""
    value = json.dumps({"op": op, "after": {"id": 1}}).encode()
    assert control.record_kind(value) == control.UNKNOWN
    assert control.topic_kind([value]) is None


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
    seeds = ddl_seeds()
    rep.apply([Msg(DDL_TOPIC, k, v, i) for i, (k, v) in enumerate(seeds[:2])])
    assert rep.control_topics()[DDL_TOPIC][0] == control.SCHEMA_CHANGE
    return rep


OFFSETS = [1000]


@settings(DETERMINISTIC, max_examples=150)
@given(data=st.data())
def test_hostile_schema_change_batches_never_stop_the_replicator(
    replicator: Replicator, data: st.DataObject
) -> None:
    seeds = ddl_seeds()
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
