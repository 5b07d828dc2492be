"""Transaction cuts: which events of a batch must wait for their transaction's END."""

from __future__ import annotations

import json

import pyarrow as pa

from engine.model import OFFSET, PARTITION, TX_ID
from engine.source.transactions import TransactionTracker, apply_cuts


def batch(tx_ids: list[str | None], partition: int = 0, first_offset: int = 100) -> pa.Table:
    return pa.table(
        {
            TX_ID: pa.array(tx_ids, pa.string()),
            PARTITION: pa.array([partition] * len(tx_ids), pa.int32()),
            OFFSET: pa.array(range(first_offset, first_offset + len(tx_ids)), pa.int64()),
        }
    )


def end(tx_id: str, **counts: int) -> bytes:
    collections = [{"data_collection": c, "event_count": n} for c, n in counts.items()]
    return json.dumps({"status": "END", "id": tx_id, "data_collections": collections}).encode()


def test_complete_transactions_are_not_cut() -> None:
    tracker = TransactionTracker()
    tracker.observe([end("7:1000", **{"app.a": 2}), end("8:1010", **{"app.a": 1})])
    cuts, warnings = tracker.cuts(batch(["7:1001", "7:1002", "8:1011"]), "app.a", 100)
    assert cuts == {} and warnings == []


def test_batch_is_cut_at_the_first_unfinished_transaction() -> None:
    tracker = TransactionTracker()
    tracker.observe([end("7:1000", **{"app.a": 2})])
    b = batch(["7:1001", "7:1002", "8:1011", None, "8:1012"])
    cuts, warnings = tracker.cuts(b, "app.a", 100)
    assert cuts == {0: 102} and warnings == []
    assert apply_cuts(b, cuts).column(OFFSET).to_pylist() == [100, 101]


def test_full_batch_of_several_unfinished_transactions_waits() -> None:
    """Their END records are simply not read yet: nothing is applied, nothing is split."""
    tracker = TransactionTracker()
    b = batch(["1:10", "1:11", "2:20", "2:21", "3:30"])
    cuts, warnings = tracker.cuts(b, "app.a", max_events=5)
    assert cuts == {0: 100} and warnings == []
    assert apply_cuts(b, cuts).num_rows == 0


def test_one_transaction_larger_than_a_batch_is_applied_in_parts() -> None:
    tracker = TransactionTracker()
    tracker.observe([end("9:90", **{"app.a": 12})])  # 12 events, batches of 5
    cuts, warnings = tracker.cuts(batch(["9:91"] * 5), "app.a", max_events=5)
    assert cuts == {} and len(warnings) == 1 and "larger than" in warnings[0]
    # Without its END record yet, a batch holding nothing but it is applied in parts too.
    cuts, _ = TransactionTracker().cuts(batch(["9:91"] * 5), "app.a", max_events=5)
    assert cuts == {}


def test_counts_are_per_data_collection() -> None:
    tracker = TransactionTracker()
    tracker.observe([end("5:50", **{"app.a": 1, "app.b": 3})])
    assert tracker.cuts(batch(["5:51"]), "app.a", 100)[0] == {}
    assert tracker.cuts(batch(["5:51", "5:52"]), "app.b", 100)[0] == {0: 100}


def begin(tx_id: str) -> bytes:
    return json.dumps(
        {"status": "BEGIN", "id": tx_id, "event_count": None, "data_collections": None}
    ).encode()


def test_a_mariadb_transaction_without_end_is_over_when_the_next_one_begins() -> None:
    # Debezium 3.5.0's MariaDB connector (tests/peers/test_debezium_mariadb.py): TRUNCATE
    # TABLE gets a BEGIN (GTID 0-1-7) and never an END, while its truncate event carries
    # that id; cdcctl waited for the END forever (--until-caught-up never returned).
    tracker = TransactionTracker()
    tracker.observe([begin("0-1-6"), end("0-1-6", **{"shop.t": 1}), begin("0-1-7")])
    b = batch(["0-1-6", "0-1-7", "0-1-8"])
    assert tracker.cuts(b, "shop.t", 100)[0] == {0: 101}  # 0-1-7 may still be going on
    tracker.observe([begin("0-1-8")])
    assert tracker.cuts(b, "shop.t", 100)[0] == {0: 102}  # 0-1-7 is over; 0-1-8 is not
    tracker.observe([end("0-1-8", **{"shop.t": 1})])
    assert tracker.cuts(b, "shop.t", 100)[0] == {}
    # The topic read again from its start (the main consumer after the read-ahead one)
    # closes nothing newer: 0-1-9 has begun and stays open.
    tracker.observe([begin("0-1-9")])
    tracker.observe([begin("0-1-6"), end("0-1-6", **{"shop.t": 1}), begin("0-1-7")])
    assert tracker.cuts(batch(["0-1-9"]), "shop.t", 100)[0] == {0: 100}
    # MySQL GTIDs (uuid:seq) the same; another origin's transaction closes nothing.
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    tracker.observe([begin(f"{uuid}:5"), begin("0-2-1")])
    assert tracker.cuts(batch([f"{uuid}:5"]), "shop.t", 100)[0] == {0: 100}
    tracker.observe([begin(f"{uuid}:6")])
    assert tracker.cuts(batch([f"{uuid}:5"]), "shop.t", 100)[0] == {}
    # Other ids (PostgreSQL's txId:lsn) are never inferred.
    tracker.observe([begin("7:1000"), begin("8:1010")])
    assert tracker.cuts(batch(["7:1001"]), "app.a", 100)[0] == {0: 100}
