"""Decoded hostile batches can be applied (issue 15): decode -> Spark merge -> Hudi commit.

A few hypothesis examples per format: seed messages of one table topic with adversarial
row values (huge numbers, NaN, giant and odd-unicode strings, wrong types, nesting) and
some fully mutated records go through ``Replicator.apply`` with the real Spark session;
the replicas are read back by hudi-rs. Whatever the decoder let through must be
applicable or stop its table with a clear error (never an exception out of ``apply``),
the bad messages the replicator counts are the ones the decoder reports, and the replica
only holds keys of decoded rows.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.hudi.table import HudiTable
from engine.model import KEY
from engine.naming import table_name_for_topic
from engine.replicator import Replicator
from tests.engine.test_fuzz_decoders import HypothesisChooser
from tests.engine.test_properties import Msg
from tests.fuzz.harness import decode_checked
from tests.fuzz.mutations import adversarial_value, choice, mutate_part
from tests.fuzz.registry import FUZZ_TARGETS, seeds, target_config
from tests.integration.replicas import read_replica

pytestmark = [pytest.mark.spark]

SPARK: list = [None]


@pytest.fixture(autouse=True)
def _spark(spark: Any) -> None:
    SPARK[0] = spark


def _row_topic(fmt: str) -> str:
    """The target's apply topic, else the table topic with the most row seeds."""
    chosen = FUZZ_TARGETS[fmt].apply_topic
    if chosen is not None:
        return chosen
    counts: dict[str, int] = {}
    for s in seeds(fmt):
        if s.expect == "row" and not s.topic.startswith("__"):
            counts[s.topic] = counts.get(s.topic, 0) + 1
    return max(counts, key=lambda t: counts[t])


def _fresh(key: bytes | None, value: bytes | None, n: int) -> tuple[bytes | None, bytes | None]:
    """The seed as a new row: its integer key members and positions set from ``n``, so
    that records of one batch are distinct changes, not replays of one seed."""
    try:
        k = json.loads(key) if key is not None else None
        v = json.loads(value) if value is not None else None
    except ValueError:
        return key, value
    kp = k.get("payload", k) if isinstance(k, dict) and isinstance(k.get("payload"), dict) else k
    ints = [m for m, x in kp.items() if isinstance(x, int)] if isinstance(kp, dict) else []
    for m in ints:
        kp[m] = n
    envelope = (
        v.get("payload", v) if isinstance(v, dict) and isinstance(v.get("payload"), dict) else v
    )
    if isinstance(envelope, dict):
        for part in ("before", "after"):
            row = envelope.get(part)
            if isinstance(row, dict):
                row.update({m: n for m in ints if m in row})
        source = envelope.get("source")
        if isinstance(source, dict) and isinstance(source.get("lsn"), int):
            source["lsn"] = 10_000 + n
    return (
        None if k is None else json.dumps(k).encode(),
        None if v is None else json.dumps(v).encode(),
    )


def _with_adversarial_row_values(value: bytes | None, c: HypothesisChooser) -> bytes | None:
    """Replace some ``after`` members (wrapped or not) with adversarial values."""
    try:
        doc = json.loads(value) if value is not None else None
    except ValueError:
        return value
    if not isinstance(doc, dict):
        return value
    envelope = doc.get("payload", doc) if isinstance(doc.get("payload"), dict) else doc
    after = envelope.get("after")
    if not isinstance(after, dict) or not after:
        return value
    names = sorted(after)
    for _ in range(c.integer(1, 2)):
        after[choice(c, names[1:] or names)] = adversarial_value(c)
    return json.dumps(doc).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("fmt", sorted(FUZZ_TARGETS))
@settings(
    max_examples=4,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_decoded_hostile_batches_apply(fmt: str, data: st.DataObject) -> None:
    c = HypothesisChooser(data)
    topic = _row_topic(fmt)
    pool = [s for s in seeds(fmt) if s.topic == topic]
    assert pool, f"no seed of {fmt} on its apply_topic {topic!r} (tests/fuzz/registry.py)"
    records: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(c.integer(3, 10)):  # mostly fresh rows, some of them hostile
        seed = choice(c, pool)
        kind = c.integer(0, 5)
        key, value = _fresh(seed.key, seed.value, c.integer(1, 6) * 1000 + len(records))
        if kind <= 1:
            value = _with_adversarial_row_values(value, c)
        elif kind == 2:
            value = mutate_part(value, c, [], rounds=1)
        records.append((key, value))

    decoded = decode_checked(fmt, topic, records)
    decoded_keys = set() if decoded.batch is None else set(decoded.batch.column(KEY).to_pylist())

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = config_from_dict(
            target_config(
                fmt,
                target={"path": str(root / "lake")},
                hudi={"num_buckets": 2},
                replicator={"work_dir": str(root / "work")},
                errors={"tolerance": "all"},
            )
        )
        replicator = Replicator(cfg, spark=SPARK[0])
        report = replicator.apply([Msg(topic, k, v, i) for i, (k, v) in enumerate(records)])
        # Every bad message is in a dead-letter file (one JSON line each) and counted.
        letters = [
            line
            for f in sorted((root / "work" / "deadletter").glob("*.jsonl"))
            for line in f.read_text().splitlines()
        ]
        assert len(letters) == len(decoded.bad), [b.reason for b in decoded.bad]
        if report.tables:  # (no row at all: nothing committed, nothing reported)
            assert sum(c.get("bad", 0) for c in report.tables.values()) == len(decoded.bad)
        failed = {s.table: s.error or "" for s in replicator.failing()}
        for table, error in failed.items():
            assert error.strip() and "Traceback" not in error, (table, error)
        path = root / "lake" / table_name_for_topic(topic)
        if HudiTable.exists(path) and table_name_for_topic(topic) not in failed:
            replica = read_replica(path)
            assert set(replica) <= decoded_keys, (sorted(replica), sorted(map(str, decoded_keys)))
