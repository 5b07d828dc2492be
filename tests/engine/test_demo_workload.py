"""Tests of the demo workload: Debezium fidelity, determinism and stream invariants."""

from __future__ import annotations

import base64
import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.playground.inventory import TABLES, decimal_base64
from engine.playground.workload import DEFAULT_MIX, InventoryWorkload

SOURCE_FIELDS = [
    "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
    "schema", "table", "txId", "lsn", "xmin",
]  # fmt: skip
ENVELOPE_FIELDS = ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
ROW_COLUMNS = {
    "customers": ["id", "first_name", "last_name", "email", "created_at", "vip"],
    "products": ["id", "name", "description", "price", "weight", "updated_at"],
    "orders": ["id", "customer_id", "product_id", "quantity", "order_date", "status"],
}
SEMANTIC = {
    ("customers", "created_at"): ("int64", "io.debezium.time.MicroTimestamp", None),
    ("products", "price"): (
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        {"scale": "2", "connect.decimal.precision": "10"},
    ),
    ("products", "updated_at"): ("string", "io.debezium.time.ZonedTimestamp", None),
    ("orders", "order_date"): ("int32", "io.debezium.time.Date", None),
    ("orders", "status"): (
        "string",
        "io.debezium.data.Enum",
        {"allowed": "NEW,PAID,SHIPPED,CANCELLED"},
    ),
}
SNAPSHOT_MARKERS = {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}


def _table(topic: str) -> str:
    return topic.rsplit(".", 1)[1]


def _parse(raw: bytes | None, schemas: bool) -> tuple[Any, Any]:
    """Return ``(schema, payload)``; checks the wrapping matches the ``schemas`` option."""
    if raw is None:
        return None, None
    doc = json.loads(raw)
    if schemas:
        assert set(doc) == {"schema", "payload"}
        return doc["schema"], doc["payload"]
    assert "schema" not in doc and "payload" not in doc
    return None, doc


@pytest.fixture(scope="module")
def sample() -> dict[bool, list[tuple[str, bytes, bytes | None]]]:
    """The same 20k-message workload in both JsonConverter shapes."""
    return {
        schemas: list(InventoryWorkload(seed=11, schemas=schemas).events(20_000))
        for schemas in (False, True)
    }


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    first = list(InventoryWorkload(seed=5).events(5_000))
    again = list(InventoryWorkload(seed=5).events(5_000))
    other = list(InventoryWorkload(seed=6).events(5_000))
    assert first == again
    assert first != other
    assert len(first) == len(other) == 5_000


def test_both_shapes_carry_the_same_payloads(sample) -> None:
    plain, wrapped = sample[False], sample[True]
    assert len(plain) == len(wrapped) == 20_000
    for (t1, k1, v1), (t2, k2, v2) in zip(plain, wrapped, strict=True):
        assert t1 == t2
        assert json.loads(k1) == json.loads(k2)["payload"]
        assert (v1 is None) == (v2 is None)
        if v1 is not None:
            assert json.loads(v1) == json.loads(v2)["payload"]


@pytest.mark.parametrize("schemas", [False, True], ids=["schemaless", "schemas"])
def test_every_message_is_a_well_formed_debezium_event(sample, schemas: bool) -> None:
    prefix = "dbserver1"
    ops = Counter()
    for topic, raw_key, raw_value in sample[schemas]:
        assert topic in {f"{prefix}.inventory.{t}" for t in TABLES}
        table = _table(topic)
        key_schema, key = _parse(raw_key, schemas)
        assert set(key) == {"id"} and isinstance(key["id"], int)
        if schemas:
            assert key_schema["name"] == f"{topic}.Key"
            assert key_schema["type"] == "struct" and key_schema["optional"] is False
            id_type = "int64" if table == "orders" else "int32"
            assert key_schema["fields"] == [{"type": id_type, "optional": False, "field": "id"}]
        value_schema, value = _parse(raw_value, schemas)
        if value is None:
            ops["tombstone"] += 1
            continue
        assert list(value) == ENVELOPE_FIELDS
        op = value["op"]
        ops[op] += 1
        source = value["source"]
        assert list(source) == SOURCE_FIELDS
        assert source["connector"] == "postgresql" and source["name"] == prefix
        assert source["db"] == "inventory" and source["schema"] == "inventory"
        assert source["table"] == table and source["xmin"] is None
        assert isinstance(source["txId"], int) and isinstance(source["lsn"], int)
        assert source["ts_us"] // 1000 == source["ts_ms"]
        assert source["ts_ns"] == source["ts_us"] * 1000
        sequence = json.loads(source["sequence"])
        assert len(sequence) == 2 and sequence[1] == str(source["lsn"])
        assert value["transaction"] is None
        assert 0 < value["ts_ms"] - source["ts_ms"] < 1000  # small connector lag
        assert value["ts_us"] // 1000 == value["ts_ms"]
        if op == "r":
            assert source["snapshot"] in SNAPSHOT_MARKERS and sequence[0] is None
        else:
            assert op in {"c", "u", "d"} and source["snapshot"] == "false"
            assert int(sequence[0]) < source["lsn"]
        if op == "d":
            assert value["after"] is None
            row = value["before"]
        else:
            assert value["before"] is None  # REPLICA IDENTITY DEFAULT
            row = value["after"]
        assert list(row) == ROW_COLUMNS[table]
        assert row["id"] == key["id"]
        if op == "d":
            # Key only; NOT NULL columns carry type zero values, nullable ones null.
            zero = {"customers": ["", "", "", 0, False], "orders": [0, 0, 0, 0, ""]}
            if table == "products":
                assert row == {
                    "id": key["id"], "name": "", "description": None, "price": "AA==",
                    "weight": None, "updated_at": "1970-01-01T00:00:00Z",
                }  # fmt: skip
            else:
                assert list(row.values())[1:] == zero[table]
        else:
            _check_row(table, row)
        if schemas:
            _check_value_schema(value_schema, topic)
    assert ops["r"] == 2_000  # snapshot_fraction 0.1
    assert ops["d"] == ops["tombstone"] > 0 and ops["c"] > 0 and ops["u"] > 0


def _check_row(table: str, row: dict[str, Any]) -> None:
    if table == "customers":
        assert all(isinstance(row[c], str) and row[c] for c in ("first_name", "last_name"))
        assert "@" in row["email"] and row["email"].isascii()
        assert isinstance(row["created_at"], int) and isinstance(row["vip"], bool)
    elif table == "products":
        assert isinstance(row["name"], str)
        assert row["description"] is None or isinstance(row["description"], str)
        unscaled = int.from_bytes(base64.b64decode(row["price"]), "big", signed=True)
        assert 0 < unscaled < 10**10  # precision 10
        assert row["weight"] is None or isinstance(row["weight"], float)
        assert row["updated_at"].endswith("Z")
        parsed = datetime.fromisoformat(row["updated_at"])
        assert parsed.tzinfo is not None and parsed.utcoffset().total_seconds() == 0
    else:
        assert row["status"] in {"NEW", "PAID", "SHIPPED", "CANCELLED"}
        assert row["quantity"] >= 1 and 18_000 < row["order_date"] < 20_000


def _check_value_schema(schema: dict[str, Any], topic: str) -> None:
    table = _table(topic)
    assert schema["name"] == f"{topic}.Envelope" and schema["type"] == "struct"
    fields = {f["field"]: f for f in schema["fields"]}
    assert list(fields) == ENVELOPE_FIELDS
    for image in ("before", "after"):
        assert fields[image]["name"] == f"{topic}.Value" and fields[image]["optional"] is True
        columns = {c["field"]: c for c in fields[image]["fields"]}
        assert list(columns) == ROW_COLUMNS[table]
        for (t, column), (type_, name, params) in SEMANTIC.items():
            if t == table:
                assert columns[column]["type"] == type_
                assert columns[column]["name"] == name
                assert columns[column].get("parameters") == params
        nullable = {c for c, s in columns.items() if s["optional"]}
        assert nullable == ({"description", "weight"} if table == "products" else set())
    source = fields["source"]
    assert source["name"] == "io.debezium.connector.postgresql.Source"
    assert [f["field"] for f in source["fields"]] == SOURCE_FIELDS
    assert fields["op"]["optional"] is False


def test_positions_and_clocks_move_forward(sample) -> None:
    last_lsn: dict[str, int] = {}
    previous_lsn = previous_commit = previous_ts = previous_tx = -1
    snapshot_lsns = set()
    for topic, _, raw in sample[False]:
        if raw is None:
            continue
        value = json.loads(raw)
        source = value["source"]
        lsn = source["lsn"]
        if value["op"] == "r":
            snapshot_lsns.add(lsn)
            continue
        # Streamed: LSNs strictly increase per topic and in source order overall.
        assert lsn > last_lsn.get(topic, -1)
        assert lsn > previous_lsn and lsn > max(snapshot_lsns)
        last_lsn[topic] = previous_lsn = lsn
        commit = int(json.loads(source["sequence"])[0])
        assert commit >= previous_commit
        assert source["ts_ms"] >= previous_ts and source["txId"] >= previous_tx
        # A new last-commit LSN starts a new transaction: new xid and later commit time.
        if commit > previous_commit:
            assert source["txId"] > previous_tx and source["ts_ms"] > previous_ts
        previous_commit, previous_ts, previous_tx = commit, source["ts_ms"], source["txId"]
    assert len(snapshot_lsns) == 1


def test_snapshot_markers() -> None:
    messages = list(InventoryWorkload(seed=2).snapshot(customers=3, products=1, orders=2))
    markers = [(_table(t), json.loads(v)["source"]["snapshot"]) for t, _, v in messages]
    assert markers == [
        ("customers", "first"),
        ("customers", "true"),
        ("customers", "last_in_data_collection"),
        ("products", "first_in_data_collection"),
        ("orders", "first_in_data_collection"),
        ("orders", "last"),
    ]


def test_deletes_are_followed_by_tombstones_and_only_live_rows_change() -> None:
    workload = InventoryWorkload(seed=3)
    messages = list(workload.events(100_000, hot_fraction=0.3))
    assert len(messages) == 100_000
    live: dict[str, set[int]] = defaultdict(set)
    ever_deleted: dict[str, set[int]] = defaultdict(set)
    reinserted = 0
    for i, (topic, raw_key, raw_value) in enumerate(messages):
        ident = json.loads(raw_key)["id"]
        if raw_value is None:
            # A tombstone comes right after the delete of the same key.
            previous = messages[i - 1]
            assert previous[0] == topic and previous[1] == raw_key
            assert json.loads(previous[2])["op"] == "d"
            continue
        op = json.loads(raw_value)["op"]
        if op in ("r", "c"):
            assert ident not in live[topic], f"insert of an existing key {topic} {ident}"
            reinserted += ident in ever_deleted[topic]
            live[topic].add(ident)
        else:
            assert ident in live[topic], f"{op} of a missing key {topic} {ident}"
            if op == "d":
                live[topic].discard(ident)
                ever_deleted[topic].add(ident)
                assert i + 1 < len(messages) and messages[i + 1][2] is None
    assert reinserted > 0  # deleted customers come back now and then
    for table in TABLES:
        assert sorted(live[workload.topic(table)]) == workload.live_ids(table)


def _op_fractions(messages) -> dict[tuple[str, str], float]:
    counts = Counter()
    for topic, _, raw in messages:
        if raw is not None:
            counts[(_table(topic), json.loads(raw)["op"])] += 1
    total = sum(counts.values())
    return {key: n / total for key, n in counts.items()}


def test_default_mix_is_respected() -> None:
    workload = InventoryWorkload(seed=4)
    list(workload.snapshot(customers=500, products=100, orders=2_000))
    fractions = _op_fractions(workload.stream(60_000))
    names = {"insert": "c", "update": "u", "delete": "d"}
    for table, ops in DEFAULT_MIX.items():
        for op, expected in ops.items():
            assert fractions.get((table, names[op]), 0.0) == pytest.approx(expected, abs=0.01)


def test_custom_mixes_are_respected() -> None:
    workload = InventoryWorkload(seed=4)
    list(workload.snapshot(customers=100, products=100, orders=100))
    mix = {"customers": {"update": 3}, "orders": {"insert": 1, "delete": 1}}
    fractions = _op_fractions(workload.stream(40_000, mix=mix))
    assert fractions[("customers", "u")] == pytest.approx(0.6, abs=0.02)
    assert fractions[("orders", "c")] == pytest.approx(0.2, abs=0.02)
    assert fractions[("orders", "d")] == pytest.approx(0.2, abs=0.02)
    assert not {k for k in fractions if k[0] == "products"}

    flat = _op_fractions(InventoryWorkload(seed=4).events(30_000, mix={"insert": 1, "update": 1}))
    assert not {k for k in flat if k[1] == "d"}
    inserts = sum(v for k, v in flat.items() if k[1] == "c")
    updates = sum(v for k, v in flat.items() if k[1] == "u")
    assert inserts == pytest.approx(updates, rel=0.15)


def test_updates_without_rows_become_inserts() -> None:
    messages = list(InventoryWorkload(seed=1).stream(200, mix={"update": 1}))
    ops = [json.loads(v)["op"] for _, _, v in messages]
    assert ops[0] == "c" and "u" in ops and len(messages) == 200


def test_hot_fraction_targets_the_newest_rows() -> None:
    def median_updated_id(hot: float | None) -> float:
        workload = InventoryWorkload(seed=8)
        list(workload.snapshot(customers=10, products=10, orders=20_000))
        ids = sorted(
            json.loads(k)["id"]
            for t, k, v in workload.stream(5_000, mix={"orders": {"update": 1}}, hot_fraction=hot)
        )
        return ids[len(ids) // 2]

    uniform, hot = median_updated_id(None), median_updated_id(1.0)
    assert uniform < 10_001 + 15_000
    assert hot >= 10_001 + 20_000 - 200 - 1  # the newest 1 % of 20k orders


def test_events_total_is_exact_and_tombstones_count() -> None:
    for total in (0, 1, 2, 3, 17, 1_001):
        messages = list(InventoryWorkload(seed=total).events(total))
        assert len(messages) == total
    # The last message may not be a delete without room for its tombstone.
    for seed in range(30):
        messages = list(InventoryWorkload(seed=seed).events(50, mix={"delete": 1, "insert": 1}))
        assert len(messages) == 50
        last = messages[-1][2]
        assert last is None or json.loads(last)["op"] != "d"


def test_other_prefix_and_validation() -> None:
    workload = InventoryWorkload(seed=0, prefix="shop", schemas=True)
    topic, key, value = next(iter(workload.events(100)))
    assert topic == "shop.inventory.customers"
    assert json.loads(value)["payload"]["source"]["name"] == "shop"
    assert json.loads(key)["schema"]["name"] == "shop.inventory.customers.Key"
    with pytest.raises(RuntimeError):
        workload.snapshot(1, 1, 1)
    with pytest.raises(ValueError):
        InventoryWorkload().stream(10, mix={"nope": {"insert": 1}})
    with pytest.raises(ValueError):
        InventoryWorkload().stream(10, mix={"orders": {"upsert": 1}})
    with pytest.raises(ValueError):
        InventoryWorkload().stream(10, mix={"insert": 0})
    with pytest.raises(ValueError):
        InventoryWorkload().stream(10, hot_fraction=2)


def test_decimal_encoding_matches_connect() -> None:
    # Examples from the format reference (scale 2): 1234.56 and -0.01.
    assert decimal_base64(123456) == "AeJA"
    assert decimal_base64(-1) == "/w=="
    assert decimal_base64(0) == "AA=="
    assert decimal_base64(128) == "AIA="  # a sign byte is needed above 127
    assert decimal_base64(-128) == "gA=="
    for n in (1, 127, 255, 256, 99_999, 2**31, -(2**31), -129):
        raw = base64.b64decode(decimal_base64(n))
        assert int.from_bytes(raw, "big", signed=True) == n
        # Minimal length, like Java's BigInteger.toByteArray().
        assert len(raw) == 1 or raw[0] not in (0x00, 0xFF) or (raw[0] ^ raw[1]) & 0x80


def test_zoned_timestamps_are_utc_instants(sample) -> None:
    seen_fractions = set()
    for topic, _, raw in sample[False]:
        if raw is None or not topic.endswith("products"):
            continue
        after = json.loads(raw)["after"]
        if after is None:
            continue
        text = after["updated_at"]
        stamp = datetime.fromisoformat(text)
        assert stamp.tzinfo is not None and stamp.astimezone(UTC) == stamp
        assert text.endswith("Z")
        seen_fractions.add(len(text[:-1].split(".")[1]) if "." in text else 0)
    # Like Java's ISO formatter: up to six digits, trailing zeros trimmed, none at all
    # for whole seconds.
    assert max(seen_fractions) == 6 and 0 in seen_fractions and len(seen_fractions) > 2


def test_an_abandoned_stream_does_not_break_the_lsn_order() -> None:
    for cut in range(101, 141):  # many stop points, most of them inside a transaction
        workload = InventoryWorkload(seed=12)
        first = workload.events(1_000)
        taken = [next(first) for _ in range(cut)]
        taken += list(workload.stream(100))
        lsns = [json.loads(v)["source"]["lsn"] for _, _, v in taken if v is not None]
        streamed = lsns[100:]  # after the 100 snapshot rows
        assert all(a < b for a, b in zip(streamed, streamed[1:], strict=False)), cut


def test_notes_make_wide_orders_and_leave_the_rest_alone() -> None:
    """``notes`` (bench/catchup.py --wide): orders carry a 200-2,000 character note that
    the schema declares; deletes null it; other tables and the default output unchanged."""
    mix = {"update": 0.6, "insert": 0.2, "delete": 0.1}
    wide = list(InventoryWorkload(seed=3, schemas=True, notes=True).events(6_000, mix=mix))
    narrow = list(InventoryWorkload(seed=3, schemas=True).events(6_000, mix=mix))
    assert len(wide) == len(narrow) == 6_000
    lengths, nulls, ops = [], 0, Counter()
    for topic, _key, value in wide:
        schema, payload = _parse(value, True)
        if payload is None:
            continue
        row = payload["after"] or payload["before"]
        if _table(topic) != "orders":
            assert "note" not in row
            continue
        ops[payload["op"]] += 1
        fields = [f["field"] for f in schema["fields"][1]["fields"]]
        assert fields == [*ROW_COLUMNS["orders"], "note"]
        assert list(row) == fields
        if payload["op"] == "d":
            assert row["note"] is None
        elif row["note"] is None:
            nulls += 1
        else:
            lengths.append(len(row["note"]))
    assert ops["r"] and ops["c"] and ops["u"] and ops["d"]
    assert 200 <= min(lengths) and max(lengths) <= 2000
    assert max(lengths) - min(lengths) > 1000  # spread over the range, not one length
    assert 0 < nulls < len(lengths) / 5
    assert list(InventoryWorkload(seed=3, schemas=True).events(6_000, mix=mix)) == narrow
    assert not any(b'"note"' in (v or b"") for _, _, v in narrow)
