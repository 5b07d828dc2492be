"""Tests of the bulk Debezium JSON decoder (engine/decode/debezium_json/).

The conformance samples live in ``../shared/debezium-samples`` next to the repository
(override with ``CDC_DEBEZIUM_SAMPLES``); the suite fails, not skips, without them. Each
holds one record as ``topic``/``key``/``value``. The ``*-legacy.json`` recordings keep the
Connect schemas next to the data, so they are wrapped here the way the JsonConverter would
write them. Records are serialized compactly, like the JsonConverter does.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decode import BadMessage, DecodeResult, RecordBatch, decode_debezium_json
from engine.model import CONTROL_COLUMNS, STREAMED_BIT
from tests.samples import debezium_samples

SAMPLES = debezium_samples()
UTC = dt.UTC
BIT = STREAMED_BIT
MYSQL_FILE3 = 3 << 32  # mysql-bin.000003


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def wire(obj: Any) -> bytes | None:
    """JSON bytes as the JsonConverter writes them (compact); None stays None."""
    if obj is None:
        return None
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def wrap(schema: Any, payload: Any) -> dict:
    return {"schema": schema, "payload": payload}


def load(name: str) -> dict:
    path = SAMPLES / name
    if not path.exists():
        pytest.fail(f"sample {name} is classified in this file but missing from {SAMPLES}")
    return json.loads(path.read_text())


def sample_record(name: str) -> tuple[str, bytes | None, bytes | None]:
    sample = load(name)
    key, value = sample["key"], sample["value"]
    if "value_schema" in sample:
        value = wrap(sample["value_schema"], value)
        if key is not None and sample.get("key_schema") is not None:
            key = wrap(sample["key_schema"], key)
    return sample["topic"] or "unknown.topic", wire(key), wire(value)


def decode(
    keys: list[bytes | None], values: list[bytes | None], topic: str = "srv.public.t", **kwargs: Any
) -> DecodeResult:
    n = len(values)
    return decode_debezium_json(
        RecordBatch(topic, keys, values, [7] * n, list(range(100, 100 + n))), **kwargs
    )


def decode_sample(name: str) -> DecodeResult:
    topic, key, value = sample_record(name)
    return decode_debezium_json(RecordBatch(topic, [key], [value], [2], [41]))


def rows(result: DecodeResult) -> list[dict]:
    assert result.batch is not None
    return result.batch.to_pylist()


def only_row(result: DecodeResult) -> dict:
    assert not result.bad, result.bad
    out = rows(result)
    assert len(out) == 1
    return out[0]


def field_type(result: DecodeResult, name: str) -> pa.DataType:
    assert result.batch is not None
    return result.batch.schema.field(name).type


# --------------------------------------------------------------------------------------
# conformance samples
# --------------------------------------------------------------------------------------

# Every sample file must be classified here, so that new samples are not silently skipped.
ROW_SAMPLES = {
    "common-incremental-snapshot-read-docs.json",
    "mysql-bits-legacy.json",
    "mysql-create-docs.json",
    "mysql-decimal-legacy.json",
    "mysql-delete-docs.json",
    "mysql-delete.json",
    "mysql-enum-set-legacy.json",
    "mysql-json-legacy.json",
    "mysql-snapshot-as-create-1x.json",
    "mysql-snapshot-read-last-in-data-collection.json",
    "mysql-snapshot-read.json",
    "mysql-truncate-docs.json",
    "mysql-update-1x.json",
    "mysql-update-docs.json",
    "mysql-update.json",
    "mysql-zero-dates-legacy.json",
    "pg-create-docs.json",
    "pg-create-uuid-outbox-docs.json",
    "pg-create-with-transaction-block-docs.json",
    "pg-create.json",
    "pg-delete-full-before.json",
    "pg-delete-replica-identity-default-docs.json",
    "pg-snapshot-read.json",
    "pg-truncate-docs.json",
    "pg-update-full-before.json",
    "pg-update-replica-identity-default-docs.json",
    "pg-update-toast-microtimestamp.json",
    "pg-update-toast.json",
}
TOMBSTONE_SAMPLES = {"mysql-tombstone-docs.json", "pg-tombstone.json"}
IGNORED_SAMPLES = {
    "mysql-schema-change-docs.json",
    "mysql-schema-change-snapshot.json",
    "mysql-transaction-begin-docs.json",
    "mysql-transaction-end-docs.json",
    "pg-message-logical-decoding.json",
    "pg-message-transactional-docs.json",
    "pg-transaction-begin-docs.json",
    "pg-transaction-end-docs.json",
    "pg-transaction-end.json",
}
# Decision: quarantined as bad (they carry row data without a usable envelope).
BAD_SAMPLES = {
    "pg-delete-avro-rendered.json": "Avro JSON rendering",
    "common-unwrap-delete-rewrite-docs.json": "flattened row",
    "pg-unwrap-arrays.json": "flattened row",
    "pg-unwrap-snapshot-with-lsn.json": "flattened row",
}


def test_every_sample_is_classified() -> None:
    names = {p.name for p in SAMPLES.glob("*.json")}
    known = ROW_SAMPLES | TOMBSTONE_SAMPLES | IGNORED_SAMPLES | set(BAD_SAMPLES)
    assert names == known


@pytest.mark.parametrize("name", sorted(ROW_SAMPLES))
def test_row_samples_decode_to_one_row(name: str) -> None:
    result = decode_sample(name)
    row = only_row(result)
    assert result.ignored == 0
    assert result.batch is not None
    assert result.batch.column_names[: len(CONTROL_COLUMNS)] == list(CONTROL_COLUMNS)
    assert row["_cdc_op"] in {"c", "u", "d", "r", "t"}
    assert row["_cdc_partition"] == 2 and row["_cdc_offset"] == 41
    assert result.batch.schema.field("_cdc_partition").type == pa.int32()
    for column in ("_cdc_pos", "_cdc_pos_sub", "_cdc_source_ts_ms", "_cdc_offset"):
        assert result.batch.schema.field(column).type == pa.int64()
    assert "before" not in result.batch.column_names


@pytest.mark.parametrize("name", sorted(IGNORED_SAMPLES))
def test_non_row_samples_are_ignored(name: str) -> None:
    result = decode_sample(name)
    assert result.batch is None
    assert result.bad == []
    assert result.ignored == 1


@pytest.mark.parametrize("name", sorted(BAD_SAMPLES))
def test_avro_rendered_and_flattened_samples_are_bad(name: str) -> None:
    topic, key, value = sample_record(name)
    result = decode_debezium_json(RecordBatch(topic, [key], [value], [3], [9]))
    assert result.batch is None
    assert result.ignored == 0
    assert len(result.bad) == 1
    bad = result.bad[0]
    assert BAD_SAMPLES[name] in bad.reason
    assert (bad.topic, bad.partition, bad.offset, bad.key, bad.value) == (topic, 3, 9, key, value)


def test_pg_create_streamed_with_sequence() -> None:
    row = only_row(decode_sample("pg-create.json"))
    assert row["_cdc_op"] == "c"
    assert row["_cdc_pos"] == BIT | 34442256  # commit LSN = sequence[0]
    assert row["_cdc_pos_sub"] == 34466480  # the event's own LSN
    assert row["_cdc_source_ts_ms"] == 1733906311010
    assert row["_cdc_key"] is None and row["_cdc_tx_id"] is None
    assert (row["id"], row["first_name"], row["email"]) == (1005, "Bob", "bob@marley.com")


def test_pg_create_docs_with_schema_and_boolean_snapshot() -> None:
    result = decode_sample("pg-create-docs.json")
    row = only_row(result)
    # source.snapshot is the boolean true in the docs: a snapshot row, STREAMED_BIT clear.
    assert row["_cdc_pos"] == 24023119
    assert row["_cdc_pos_sub"] == 24023128
    assert field_type(result, "id") == pa.int32()
    assert field_type(result, "email") == pa.string()
    assert row["first_name"] == "Anne"


def test_pg_snapshot_read() -> None:
    result = decode_sample("pg-snapshot-read.json")
    row = only_row(result)
    assert row["_cdc_op"] == "r"
    assert row["_cdc_pos"] == 34078720  # snapshot: no STREAMED_BIT, no sequence -> lsn
    assert row["_cdc_pos_sub"] == 34078720
    assert row["weight"] == 3.14 and field_type(result, "weight") == pa.float64()
    assert field_type(result, "id") == pa.int64()  # schemaless: JSON integers


def test_pg_update_full_before_with_schema() -> None:
    result = decode_sample("pg-update-full-before.json")
    row = only_row(result)
    assert row["_cdc_op"] == "u"
    assert row["_cdc_pos"] == BIT | 34133584 and row["_cdc_pos_sub"] == 34133584
    assert row["_cdc_source_ts_ms"] == 1596010985627
    assert row["weight"] == 5.17  # after, not before (5.18)
    assert field_type(result, "weight") == pa.float64()
    assert field_type(result, "id") == pa.int32()


def test_pg_update_toast_placeholder_is_kept_verbatim() -> None:
    row = only_row(decode_sample("pg-update-toast.json"))
    assert row["biography"] == "__debezium_unavailable_value"
    assert row["_cdc_pos"] == BIT | 34650016


def test_pg_update_toast_microtimestamp_schemaless() -> None:
    result = decode_sample("pg-update-toast-microtimestamp.json")
    row = only_row(result)
    assert row["_cdc_key"] == "1001"
    assert result.key_fields == ["id"]
    # sequence "[null,...]": no commit LSN yet, so the major position is the LSN.
    assert row["_cdc_pos"] == BIT | 34415840 and row["_cdc_pos_sub"] == 34415840
    # Without a schema no logical type is known: the raw microseconds stay an int64.
    assert row["dob"] == -1257206400000000
    assert field_type(result, "dob") == pa.int64()


def test_pg_update_toast_microtimestamp_with_schema_decodes_pre_1970() -> None:
    sample = load("pg-update-toast-microtimestamp.json")
    value_schema = envelope_schema(
        [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": False, "field": "first_name"},
            {"type": "string", "optional": False, "field": "last_name"},
            {"type": "string", "optional": True, "field": "biography"},
            {
                "type": "int64",
                "optional": True,
                "name": "io.debezium.time.MicroTimestamp",
                "version": 1,
                "field": "dob",
            },
        ]
    )
    key = wrap(KEY_ID_SCHEMA, sample["key"])
    result = decode([wire(key)], [wire(wrap(value_schema, sample["value"]))])
    row = only_row(result)
    assert row["dob"] == dt.datetime(1930, 3, 1, 0, 0)
    assert field_type(result, "dob") == pa.timestamp("us")
    assert row["_cdc_key"] == "1001"
    assert row["_cdc_pos"] == BIT | 34415840


def test_pg_update_replica_identity_default_docs() -> None:
    row = only_row(decode_sample("pg-update-replica-identity-default-docs.json"))
    assert row["_cdc_pos"] == BIT | 24023128  # snapshot false (boolean): streamed
    assert row["first_name"] == "Anne Marie"


def test_pg_delete_full_before_without_key_has_null_row() -> None:
    row = only_row(decode_sample("pg-delete-full-before.json"))
    assert row["_cdc_op"] == "d"
    assert row["_cdc_pos"] == BIT | 34133800
    assert row["_cdc_key"] is None
    # The before image is never used: row columns are null without a record key.
    assert (row["id"], row["name"], row["weight"]) == (None, None, None)


def test_pg_delete_takes_key_fields_from_record_key() -> None:
    sample = load("pg-delete-replica-identity-default-docs.json")
    result = decode([wire({"id": 1})], [wire(sample["value"])])
    row = only_row(result)
    assert row["_cdc_op"] == "d" and row["_cdc_key"] == "1"
    assert row["id"] == 1
    assert row["_cdc_pos"] == BIT | 46523128


def test_pg_tombstone() -> None:
    result = decode_sample("pg-tombstone.json")
    row = only_row(result)
    assert row == {
        "_cdc_key": "3",
        "_cdc_op": "x",
        "_cdc_pos": None,
        "_cdc_pos_sub": None,
        "_cdc_source_ts_ms": None,
        "_cdc_partition": 2,
        "_cdc_offset": 41,
        "_cdc_tx_id": None,
        "_cdc_gtid": None,
    }
    assert result.key_fields == ["inc_id"]


def test_mysql_legacy_tombstone_shape() -> None:
    row = only_row(decode_sample("mysql-tombstone-docs.json"))
    assert (row["_cdc_op"], row["_cdc_key"], row["_cdc_pos"]) == ("x", "1004", None)


@pytest.mark.parametrize(
    ("name", "pos", "sub", "ts"),
    [
        ("pg-truncate-docs.json", BIT | 46523128, 46523128, 1559033904863),
        ("mysql-truncate-docs.json", BIT | MYSQL_FILE3 | 484, 0, 1465581029100),
    ],
)
def test_truncate(name: str, pos: int, sub: int, ts: int) -> None:
    result = decode_sample(name)
    row = only_row(result)
    assert row["_cdc_op"] == "t" and row["_cdc_key"] is None
    assert (row["_cdc_pos"], row["_cdc_pos_sub"], row["_cdc_source_ts_ms"]) == (pos, sub, ts)
    assert result.batch is not None and result.batch.num_columns == len(CONTROL_COLUMNS)


def test_pg_outbox_scalar_key_and_legacy_ts_usec() -> None:
    row = only_row(decode_sample("pg-create-uuid-outbox-docs.json"))
    assert row["_cdc_key"] == "406c07f3-26f0-4eea-a50c-109940064b8f"
    assert row["_cdc_source_ts_ms"] == 1556890294448  # from the 0.x ts_usec
    assert row["_cdc_pos"] == BIT | 24064704
    assert row["payload"].startswith('{"id": 1')  # JSON stored as text stays text


def test_pg_transaction_block_and_missing_source() -> None:
    row = only_row(decode_sample("pg-create-with-transaction-block-docs.json"))
    assert row["_cdc_tx_id"] == "571:53195832"
    assert row["_cdc_pos"] is None and row["_cdc_source_ts_ms"] is None


def test_incremental_snapshot_counts_as_streamed() -> None:
    row = only_row(decode_sample("common-incremental-snapshot-read-docs.json"))
    assert row["_cdc_op"] == "r" and row["_cdc_pos"] is None  # no LSN in the docs example
    envelope = mysql_envelope("r", {"id": 1}, pos=900, snapshot="incremental")
    row = only_row(decode([wire({"id": 1})], [wire(envelope)]))
    assert row["_cdc_pos"] == BIT | MYSQL_FILE3 | 900


def test_mysql_snapshot_read_at_the_initial_binlog_position_is_a_snapshot_read() -> None:
    """A snapshot read at the connector's initial position (file "", pos 0) sorts before
    every streamed change; a streamed change without a binlog index stays bad."""
    snap = mysql_envelope("r", {"id": 1, "name": "a"}, pos=0, snapshot="true", file="")
    streamed = mysql_envelope("u", {"id": 1, "name": "b"}, pos=900)
    result = decode([wire({"id": 1})] * 2, [wire(snap), wire(streamed)])
    assert result.bad == []
    rows = result.batch.to_pylist()
    assert rows[0]["_cdc_pos"] == 0 and rows[1]["_cdc_pos"] == BIT | MYSQL_FILE3 | 900
    no_index = mysql_envelope("u", {"id": 1, "name": "c"}, pos=900, file="")
    refused = decode([wire({"id": 1})], [wire(no_index)])
    assert [b.reason for b in refused.bad] == ["source.file has no numeric binlog index"]


def test_mysql_create_docs_with_schema() -> None:
    result = decode_sample("mysql-create-docs.json")
    row = only_row(result)
    assert row["_cdc_pos"] == BIT | MYSQL_FILE3 | 154 and row["_cdc_pos_sub"] == 0
    assert field_type(result, "id") == pa.int32()


@pytest.mark.parametrize(
    ("name", "pos", "weight"),
    [
        ("mysql-update.json", BIT | MYSQL_FILE3 | 1041, None),
        ("mysql-update-docs.json", BIT | MYSQL_FILE3 | 484, None),
        ("mysql-update-1x.json", BIT | MYSQL_FILE3 | 2090, 5.170000076293945),
    ],
)
def test_mysql_updates(name: str, pos: int, weight: float | None) -> None:
    row = only_row(decode_sample(name))
    assert row["_cdc_op"] == "u" and row["_cdc_pos"] == pos and row["_cdc_pos_sub"] == 0
    if weight is not None:
        assert row["weight"] == weight


def test_mysql_delete_with_key_schema() -> None:
    result = decode_sample("mysql-delete.json")
    row = only_row(result)
    assert row["_cdc_op"] == "d" and row["_cdc_key"] == "1004"
    assert row["id"] == 1004 and field_type(result, "id") == pa.int32()
    assert (row["first_name"], row["email"]) == (None, None)
    assert row["_cdc_pos"] == BIT | MYSQL_FILE3 | 632
    assert row["_cdc_source_ts_ms"] == 1718486007000
    assert result.key_fields == ["id"]


@pytest.mark.parametrize(
    ("name", "op", "pos"),
    [
        ("mysql-snapshot-read.json", "r", MYSQL_FILE3 | 797),
        ("mysql-snapshot-as-create-1x.json", "c", MYSQL_FILE3 | 154),  # pre-1.4 snapshot as c
        ("mysql-snapshot-read-last-in-data-collection.json", "r", MYSQL_FILE3 | 824),
    ],
)
def test_mysql_snapshot_rows_have_no_streamed_bit(name: str, op: str, pos: int) -> None:
    row = only_row(decode_sample(name))
    assert row["_cdc_op"] == op and row["_cdc_pos"] == pos


def test_mysql_snapshot_date_and_key() -> None:
    result = decode_sample("mysql-snapshot-read-last-in-data-collection.json")
    row = only_row(result)
    assert row["order_date"] == dt.date(2016, 2, 21)
    assert field_type(result, "order_date") == pa.date32()
    assert row["_cdc_key"] == "10004" and result.key_fields == ["order_number"]


def test_mysql_legacy_decimal() -> None:
    result = decode_sample("mysql-decimal-legacy.json")
    row = only_row(result)
    assert row["decimal_value"] == Decimal("12345.67")
    assert field_type(result, "decimal_value") == pa.decimal128(38, 2)  # no precision parameter
    assert row["_cdc_key"] == "1"
    assert row["_cdc_pos"] == MYSQL_FILE3 | 154  # 0.x boolean snapshot: true
    assert row["_cdc_source_ts_ms"] == 0  # from ts_sec


def test_mysql_legacy_bits_enum_json() -> None:
    row = only_row(decode_sample("mysql-bits-legacy.json"))
    assert (row["c1"], row["c2"], row["c3"]) == (True, b"\x02", b"\x40")
    assert row["c4"] == bytes.fromhex("db0e6e0100000000")
    row = only_row(decode_sample("mysql-enum-set-legacy.json"))
    assert (row["c1"], row["c2"], row["_cdc_key"]) == ("a", "a,b,c", None)
    row = only_row(decode_sample("mysql-json-legacy.json"))
    assert json.loads(row["json"]) == {
        "k1": "v1",
        "k2": {"k21": "v21", "k22": "v22"},
        "k3": ["a", "b", 1],
    }


def test_mysql_legacy_zero_dates() -> None:
    result = decode_sample("mysql-zero-dates-legacy.json")
    row = only_row(result)
    assert row["c1"] is None and field_type(result, "c1") == pa.date32()
    assert row["c2"] == dt.time(0, 0) and field_type(result, "c2") == pa.time64("us")
    assert row["c3"] is None and field_type(result, "c3") == pa.timestamp("us")
    assert row["c4"] == dt.datetime(1970, 1, 1, tzinfo=UTC)
    assert field_type(result, "c4") == pa.timestamp("us", "UTC")


# --------------------------------------------------------------------------------------
# synthetic events
# --------------------------------------------------------------------------------------

KEY_ID_SCHEMA = {
    "type": "struct",
    "name": "srv.public.t.Key",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}
PG_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "true,last,false,incremental"},
        "default": "false",
        "field": "snapshot",
    },
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
TX_BLOCK_SCHEMA = {
    "type": "struct",
    "optional": True,
    "name": "event.block",
    "field": "transaction",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
}


def envelope_schema(row_fields: list[dict], name: str = "srv.public.t") -> dict:
    value = {"type": "struct", "fields": row_fields, "optional": True, "name": f"{name}.Value"}
    return {
        "type": "struct",
        "name": f"{name}.Envelope",
        "optional": False,
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {
                "type": "struct",
                "fields": PG_SOURCE_FIELDS,
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            TX_BLOCK_SCHEMA,
        ],
    }


def pg_envelope(
    op: str,
    after: dict | None,
    lsn: int | None = 1000,
    commit: int | None = 900,
    snapshot: Any = "false",
    tx: str | None = None,
    before: dict | None = None,
) -> dict:
    sequence = (
        None
        if lsn is None and commit is None
        else json.dumps(
            [None if commit is None else str(commit), None if lsn is None else str(lsn)]
        )
    )
    return {
        "before": before,
        "after": after,
        "source": {
            "version": "2.7.0.Final",
            "connector": "postgresql",
            "name": "srv",
            "ts_ms": 1_700_000_000_000,
            "snapshot": snapshot,
            "db": "db",
            "sequence": sequence,
            "schema": "public",
            "table": "t",
            "txId": 77,
            "lsn": lsn,
            "xmin": None,
        },
        "op": op,
        "ts_ms": 1_700_000_000_100,
        "transaction": None
        if tx is None
        else {"id": tx, "total_order": 1, "data_collection_order": 1},
    }


def mysql_envelope(
    op: str,
    after: dict | None,
    pos: int = 154,
    row: int = 0,
    snapshot: Any = "false",
    file: str = "mysql-bin.000003",
) -> dict:
    return {
        "before": None,
        "after": after,
        "source": {
            "version": "2.7.0.Final",
            "connector": "mysql",
            "name": "srv",
            "ts_ms": 1_700_000_000_000,
            "snapshot": snapshot,
            "db": "db",
            "sequence": None,
            "table": "t",
            "server_id": 1,
            "gtid": None,
            "file": file,
            "pos": pos,
            "row": row,
            "thread": 3,
            "query": None,
        },
        "op": op,
        "ts_ms": 1_700_000_000_100,
        "transaction": None,
    }


ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
]


def test_empty_input() -> None:
    result = decode_debezium_json(RecordBatch("t", [], [], [], []))
    assert (result.batch, result.bad, result.ignored, result.key_fields) == (None, [], 0, [])


def test_length_mismatch_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        decode_debezium_json(RecordBatch("t", [None], [None, None], [0, 0], [1, 2]))
    with pytest.raises(ValueError):
        decode_debezium_json(RecordBatch("t", [None], [None], [0], [1]), connector_hint="oracle")


@pytest.mark.parametrize("schemas", [False, True])
def test_garbage_is_reported_with_coordinates_and_the_rest_decodes(schemas: bool) -> None:
    schema = envelope_schema(ROW_FIELDS)
    good = []
    for i in range(300):
        env = pg_envelope("u", {"id": i, "name": f"n{i}"}, lsn=10_000 + i, commit=9_000 + i)
        good.append(wire(wrap(schema, env) if schemas else env))
    keys = [wire(wrap(KEY_ID_SCHEMA, {"id": i}) if schemas else {"id": i}) for i in range(300)]
    garbage = {
        3: b"\x00\x01 not json",
        77: good[77][:-5],  # truncated record
        150: b"",  # empty record
        151: b"[1, 2, 3]",  # JSON, but not an object
        200: b'{"op": "u", "after": {"id": 1}} trailing',
        201: "caf\u00e9".encode("latin-1"),  # invalid UTF-8
        250: b'{"op":"c","after":{"id":250,"name":"raw\nnewline"}}',  # control char in string
        299: b'{"before":null,"after":{"id":"\xff\xfe"},"op":"c"}',  # invalid UTF-8 inside
    }
    values = [garbage.get(i, v) for i, v in enumerate(good)]
    result = decode(keys, values)
    assert [b.offset for b in result.bad] == [100 + i for i in sorted(garbage)]
    for bad in result.bad:
        i = bad.offset - 100
        assert isinstance(bad, BadMessage)
        assert (bad.topic, bad.partition, bad.key, bad.value) == (
            "srv.public.t",
            7,
            keys[i],
            values[i],
        )
        assert bad.reason
    out = rows(result)
    expected_ids = [i for i in range(300) if i not in garbage]
    assert [r["id"] for r in out] == expected_ids
    assert [r["_cdc_offset"] for r in out] == [100 + i for i in expected_ids]
    assert [r["_cdc_key"] for r in out] == [str(i) for i in expected_ids]
    assert [r["_cdc_pos"] for r in out] == [BIT | (9_000 + i) for i in expected_ids]


def test_bad_key_quarantines_the_row() -> None:
    values = [wire(pg_envelope("c", {"id": i})) for i in range(3)]
    keys = [wire({"id": 0}), b"{broken", wire({"id": 2})]
    result = decode(keys, values)
    assert [b.offset for b in result.bad] == [101]
    assert "invalid JSON" in result.bad[0].reason
    assert [r["_cdc_key"] for r in rows(result)] == ["0", "2"]


def control(result: DecodeResult) -> list[tuple]:
    return [
        (
            r["_cdc_key"],
            r["_cdc_op"],
            r["_cdc_pos"],
            r["_cdc_pos_sub"],
            r["_cdc_source_ts_ms"],
            r["_cdc_tx_id"],
            r["_cdc_partition"],
            r["_cdc_offset"],
        )
        for r in rows(result)
    ]


def mixed_events() -> list[tuple[dict | None, dict | None]]:
    events: list[tuple[dict | None, dict | None]] = []
    for i in range(40):
        key = {"id": i % 7}
        if i % 10 == 9:
            events.append((key, None))  # tombstone
        elif i % 5 == 3:
            events.append(
                (key, pg_envelope("d", None, lsn=5000 + i, commit=4000 + i, before={"id": i % 7}))
            )
        elif i % 13 == 0:
            events.append(
                (
                    key,
                    pg_envelope(
                        "r", {"id": i % 7, "name": None}, lsn=100, commit=None, snapshot="last"
                    ),
                )
            )
        else:
            events.append(
                (
                    key,
                    pg_envelope(
                        "u",
                        {"id": i % 7, "name": f"v{i}"},
                        lsn=5000 + i,
                        commit=4000 + i,
                        tx=f"77:{i}",
                    ),
                )
            )
    events.append(
        (None, {k: v for k, v in pg_envelope("t", None).items() if k not in ("before", "after")})
    )
    return events


def test_schemas_enable_true_and_false_give_identical_results() -> None:
    schema = envelope_schema(ROW_FIELDS)
    events = mixed_events()
    plain = decode([wire(k) for k, _ in events], [wire(v) for _, v in events])
    wrapped = decode(
        [None if k is None else wire(wrap(KEY_ID_SCHEMA, k)) for k, _ in events],
        [None if v is None else wire(wrap(schema, v)) for _, v in events],
    )
    assert not plain.bad and not wrapped.bad
    assert control(plain) == control(wrapped)
    assert [(r["id"], r["name"]) for r in rows(plain)] == [
        (r["id"], r["name"]) for r in rows(wrapped)
    ]
    assert plain.key_fields == wrapped.key_fields == ["id"]
    ops = [r["_cdc_op"] for r in rows(plain)]
    assert ops.count("x") == 4 and ops.count("d") == 8 and ops[-1] == "t"
    deletes = [r for r in rows(wrapped) if r["_cdc_op"] == "d"]
    assert all(r["id"] is not None and r["name"] is None for r in deletes)
    assert field_type(wrapped, "id") == pa.int32() and field_type(plain, "id") == pa.int64()


def test_wrapper_layouts_other_than_compact_decode_the_same() -> None:
    schema = envelope_schema(ROW_FIELDS)
    env = pg_envelope("c", {"id": 5, "name": "x"}, tx="9:1")
    compact = wire(wrap(schema, env))
    pretty = json.dumps(wrap(schema, env), indent=2).encode()
    reversed_members = json.dumps({"payload": env, "schema": schema}).encode()
    spaced_schemaless = json.dumps(env, indent=1).encode()
    result = decode([wire({"id": 5})] * 4, [compact, pretty, reversed_members, spaced_schemaless])
    assert not result.bad
    out = rows(result)
    assert len(out) == 4
    assert {(r["_cdc_pos"], r["_cdc_tx_id"], r["id"], r["name"]) for r in out} == {
        (BIT | 900, "9:1", 5, "x")
    }


def test_wrapped_record_inside_a_schemaless_batch_is_rerouted() -> None:
    schema = envelope_schema(ROW_FIELDS)
    values = [wire(pg_envelope("c", {"id": i, "name": "a"})) for i in range(5)]
    values[2] = wire(wrap(schema, pg_envelope("c", {"id": 2, "name": "b"})))
    result = decode([wire({"id": i}) for i in range(5)], values)
    assert not result.bad
    assert [(r["id"], r["name"]) for r in rows(result)] == [
        (0, "a"),
        (1, "a"),
        (2, "b"),
        (3, "a"),
        (4, "a"),
    ]


def test_json_null_value_is_a_tombstone() -> None:
    result = decode(
        [wire({"id": 1}), wire({"id": 2})], [wire(pg_envelope("c", {"id": 1})), b"null"]
    )
    assert [r["_cdc_op"] for r in rows(result)] == ["c", "x"]
    assert rows(result)[1]["_cdc_key"] == "2"


def test_two_schema_versions_in_one_batch() -> None:
    v1 = envelope_schema(ROW_FIELDS)
    v2 = envelope_schema([*ROW_FIELDS, {"type": "string", "optional": True, "field": "email"}])
    values, keys = [], []
    for i in range(10):
        after = {"id": i, "name": f"n{i}"}
        schema = v1 if i < 4 or i == 7 else v2
        if schema is v2:
            after["email"] = f"{i}@x"
        values.append(wire(wrap(schema, pg_envelope("u", after, lsn=100 + i))))
        keys.append(wire(wrap(KEY_ID_SCHEMA, {"id": i})))
    result = decode(keys, values)
    assert not result.bad
    out = rows(result)
    assert [r["id"] for r in out] == list(range(10))
    assert [r["email"] for r in out] == [
        None,
        None,
        None,
        None,
        "4@x",
        "5@x",
        "6@x",
        None,
        "8@x",
        "9@x",
    ]
    assert [r["_cdc_pos_sub"] for r in out] == [100 + i for i in range(10)]
    assert len(result.value_schema_fingerprints) == 2
    assert result.batch is not None and result.batch.column_names[-3:] == ["id", "name", "email"]


def test_schemaless_column_with_varying_json_types_becomes_text() -> None:
    values = [
        wire(pg_envelope("c", {"id": i, "v": v})) for i, v in enumerate([1, 2, "three", None, 4.5])
    ]
    result = decode([wire({"id": i}) for i in range(5)], values)
    assert not result.bad
    assert [r["v"] for r in rows(result)] == ["1", "2", "three", None, "4.5"]
    assert any("'v'" in note for note in result.notes)


def test_schemaless_iso_strings_stay_strings() -> None:
    values = [wire(pg_envelope("c", {"id": 1, "at": "2024-01-15T08:30:00Z", "d": "2024-01-15"}))]
    result = decode([wire({"id": 1})], values)
    row = only_row(result)
    assert row["at"] == "2024-01-15T08:30:00Z" and row["d"] == "2024-01-15"
    assert field_type(result, "at") == pa.string()


def test_schemaless_before_first_seen_after_many_nulls_stays_on_the_bulk_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inserts (before = null) filling the first reader blocks, then updates with a
    before image: pyarrow 26's inference fails on that buffer ("JSON conversion to
    struct<... timestamp[s] ...>"), which used to send the whole group down the
    per-record scan. It must decode in bulk, with the same rows."""
    from engine.decode.debezium_json.reader import BulkReader

    def no_scan(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("fell back to the per-record scan")

    inserts, updates = 30_000, 2_000  # > 2 blocks of 4 MiB of inserts
    row = lambda i, v: {"id": i, "name": f"customer number {i}", "note": v}  # noqa: E731
    values = [wire(pg_envelope("c", row(i, "a"), lsn=1000 + i)) for i in range(inserts)]
    values += [
        wire(pg_envelope("u", row(i, "b"), lsn=90_000 + i, before=row(i, "a")))
        for i in range(updates)
    ]
    keys = [wire({"id": i}) for i in range(inserts)] + [wire({"id": i}) for i in range(updates)]
    assert sum(map(len, values[:inserts])) > 2 * (4 << 20)
    monkeypatch.setattr(BulkReader, "_scan", no_scan)
    result = decode(keys, values)
    assert not result.bad
    out = rows(result)
    assert len(out) == inserts + updates
    assert [r["note"] for r in out[inserts - 2 : inserts + 2]] == ["a", "a", "b", "b"]
    assert field_type(result, "name") == pa.string()
    assert out[-1]["name"] == f"customer number {updates - 1}"


def test_composite_keys() -> None:
    key_schema = {
        "type": "struct",
        "name": "srv.public.t.Key",
        "fields": [
            {"type": "int64", "optional": False, "field": "tenant"},
            {"type": "string", "optional": False, "field": "code"},
        ],
    }
    keys = [{"tenant": 1, "code": "a"}, {"tenant": 2, "code": ""}, {"tenant": None, "code": "c"}]
    values = [
        pg_envelope("c", {"tenant": k["tenant"], "code": k["code"], "x": i})
        for i, k in enumerate(keys)
    ]
    values[1] = pg_envelope("d", None)
    for schemas in (False, True):
        result = decode(
            [wire(wrap(key_schema, k) if schemas else k) for k in keys],
            [wire(v) for v in values],
        )
        assert [r["_cdc_key"] for r in rows(result)] == [
            "tenant:1,code:a",
            "tenant:2,code:__empty__",
            "tenant:__null__,code:c",
        ]
        assert result.key_fields == ["tenant", "code"]
        deleted = rows(result)[1]
        assert (deleted["tenant"], deleted["code"], deleted["x"]) == (2, "", None)


def test_position_edge_cases() -> None:
    events = [
        pg_envelope("u", {"id": 1}, lsn=500, commit=None),  # [null, "500"]
        pg_envelope("u", {"id": 2}, lsn=None, commit=None),  # no position at all
        pg_envelope("u", {"id": 3}, lsn=700, commit=650, snapshot="true"),
        pg_envelope("u", {"id": 4}, lsn=800, commit=750, snapshot="first_in_data_collection"),
        pg_envelope("u", {"id": 5}, lsn=900, commit=850, snapshot=None),
        mysql_envelope("u", {"id": 6}, pos=2090, row=3, file="mysql-bin.000123"),
        mysql_envelope("r", {"id": 7}, pos=5, snapshot="true"),
    ]
    bad_sequence = pg_envelope("u", {"id": 8})
    bad_sequence["source"]["sequence"] = "not a list"
    bad_file = mysql_envelope("u", {"id": 9}, file="binlog")
    events += [bad_sequence, bad_file]
    result = decode([wire({"id": i + 1}) for i in range(len(events))], [wire(e) for e in events])
    got = [(r["id"], r["_cdc_pos"], r["_cdc_pos_sub"]) for r in rows(result)]
    assert got == [
        (1, BIT | 500, 500),
        (2, None, None),
        (3, 650, 700),
        (4, 750, 800),
        (5, BIT | 850, 900),
        (6, BIT | (123 << 32) | 2090, 3),
        (7, MYSQL_FILE3 | 5, 0),
    ]
    reasons = {b.offset - 100: b.reason for b in result.bad}
    assert set(reasons) == {7, 8}
    assert "sequence" in reasons[7] and "source.file" in reasons[8]


def test_mariadb_events_order_by_binlog_file_position_and_row() -> None:
    # Debezium's MariaDB connector (2.5+) names itself "mariadb" and writes MySQL's
    # binlog coordinates; its GTIDs are domain-server-sequence. Shuffled on purpose:
    # the positions must sort as (file index, position, row), across a file rollover.
    coordinates = [
        ("mariadb-bin.000010", 4, 0),
        ("mariadb-bin.000009", 99_999, 2),
        ("mariadb-bin.000010", 4, 1),
        ("mariadb-bin.000009", 99_999, 0),
        ("mariadb-bin.000010", 1_200, 0),
        ("mariadb-bin.000009", 120, 0),
    ]
    events = []
    for i, (file, pos, row) in enumerate(coordinates):
        event = mysql_envelope("u", {"id": 1, "v": i}, pos=pos, row=row, file=file)
        event["source"].update(connector="mariadb", gtid=f"0-1-{100 + i}")
        events.append(event)
    result = decode([wire({"id": 1})] * len(events), [wire(e) for e in events])
    assert not result.bad, result.bad
    got = [(r["v"], r["_cdc_pos"], r["_cdc_pos_sub"]) for r in rows(result)]
    assert [(p, s) for _, p, s in got] == [
        (BIT | (int(f[-6:]) << 32) | pos, row) for f, pos, row in coordinates
    ]
    by_position = [v for v, _, _ in sorted(got, key=lambda g: (g[1], g[2]))]
    by_coordinates = sorted(range(len(coordinates)), key=lambda i: (
        int(coordinates[i][0][-6:]), coordinates[i][1], coordinates[i][2]))  # fmt: skip
    assert by_position == by_coordinates == [5, 3, 1, 0, 2, 4]


def test_connector_hint_forces_the_encoding() -> None:
    legacy = mysql_envelope("u", {"id": 1}, pos=10)
    del legacy["source"]["connector"]  # 0.x records have no connector
    assert only_row(decode([None], [wire(legacy)]))["_cdc_pos"] == BIT | MYSQL_FILE3 | 10
    pg = pg_envelope("u", {"id": 1}, lsn=42, commit=None)
    del pg["source"]["connector"]
    assert only_row(decode([None], [wire(pg)], connector_hint="postgresql"))["_cdc_pos"] == BIT | 42


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unscaled(n: int) -> str:
    return b64(n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True))


LOGICAL_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "field": "price",
    },
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "4"},
        "field": "rate",
    },
    {
        "type": "struct",
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "version": 1,
        "fields": [
            {"type": "int32", "optional": False, "field": "scale"},
            {"type": "bytes", "optional": False, "field": "value"},
        ],
        "field": "amount",
    },
    {
        "type": "int32",
        "optional": True,
        "name": "io.debezium.time.Date",
        "version": 1,
        "field": "day",
    },
    {
        "type": "int32",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Date",
        "version": 1,
        "field": "cday",
    },
    {
        "type": "int32",
        "optional": True,
        "name": "io.debezium.time.Time",
        "version": 1,
        "field": "t_ms",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTime",
        "version": 1,
        "field": "t_us",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.NanoTime",
        "version": 1,
        "field": "t_ns",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.Timestamp",
        "version": 1,
        "field": "ts_ms",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Timestamp",
        "version": 1,
        "field": "cts",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "version": 1,
        "field": "ts_us",
    },
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.NanoTimestamp",
        "version": 1,
        "field": "ts_ns",
    },
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.time.ZonedTimestamp",
        "version": 1,
        "field": "zts",
    },
    {"type": "int8", "optional": True, "field": "tiny"},
    {"type": "int16", "optional": True, "field": "small"},
    {"type": "int64", "optional": True, "field": "big"},
    {"type": "float", "optional": True, "field": "f32"},
    {"type": "double", "optional": True, "field": "f64"},
    {"type": "boolean", "optional": True, "field": "flag"},
    {"type": "bytes", "optional": True, "field": "blob"},
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Json",
        "version": 1,
        "field": "doc",
    },
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Uuid",
        "version": 1,
        "field": "uid",
    },
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "a,b"},
        "field": "kind",
    },
    {
        "type": "array",
        "optional": True,
        "items": {"type": "int32", "optional": True},
        "field": "ints",
    },
    {
        "type": "array",
        "optional": True,
        "items": {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "1"},
        },
        "field": "decs",
    },
    {
        "type": "struct",
        "optional": True,
        "name": "io.debezium.data.geometry.Point",
        "version": 1,
        "fields": [
            {"type": "double", "optional": False, "field": "x"},
            {"type": "double", "optional": False, "field": "y"},
            {"type": "bytes", "optional": True, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
        "field": "point",
    },
]

LOGICAL_ROW = {
    "id": 1,
    "price": "AeJA",  # 123456 -> 1234.56
    "rate": "/w==",  # -1 -> -0.0001
    "amount": {"scale": 3, "value": unscaled(-1234567)},
    "day": 19737,
    "cday": -1,
    "t_ms": 3_723_004,
    "t_us": 45_296_789_012,
    "t_ns": 45_296_789_012_345,
    "ts_ms": 1_529_507_596_945,
    "cts": -1000,
    "ts_us": -86_400_000_000,
    "ts_ns": -1_500,
    "zts": "2024-01-15T08:30:00.123456Z",
    "tiny": -5,
    "small": 300,
    "big": 2**62,
    "f32": 0.5,
    "f64": 0.1,
    "flag": True,
    "blob": b64(b"\x00\xffbin"),
    "doc": '{"a": [1, 2]}',
    "uid": "406c07f3-26f0-4eea-a50c-109940064b8f",
    "kind": "b",
    "ints": [1, None, 3],
    "decs": ["AQ==", None, "/w=="],
    "point": {"x": 1.5, "y": -2.0, "wkb": b64(b"\x01\x02"), "srid": 4326},
}

LOGICAL_EXPECTED = {
    "id": 1,
    "price": Decimal("1234.56"),
    "rate": Decimal("-0.0001"),
    "amount": "-1234.567",
    "day": dt.date(2024, 1, 15),
    "cday": dt.date(1969, 12, 31),
    "t_ms": dt.time(1, 2, 3, 4000),
    "t_us": dt.time(12, 34, 56, 789012),
    "t_ns": dt.time(12, 34, 56, 789012),
    "ts_ms": dt.datetime(2018, 6, 20, 15, 13, 16, 945000),
    "cts": dt.datetime(1969, 12, 31, 23, 59, 59),
    "ts_us": dt.datetime(1969, 12, 31, 0, 0),
    "ts_ns": dt.datetime(1969, 12, 31, 23, 59, 59, 999998),  # floor, not truncation
    "zts": dt.datetime(2024, 1, 15, 8, 30, 0, 123456, tzinfo=UTC),
    "tiny": -5,
    "small": 300,
    "big": 2**62,
    "f32": 0.5,
    "f64": 0.1,
    "flag": True,
    "blob": b"\x00\xffbin",
    "doc": '{"a": [1, 2]}',
    "uid": "406c07f3-26f0-4eea-a50c-109940064b8f",
    "kind": "b",
    "ints": [1, None, 3],
    "decs": [Decimal("0.1"), None, Decimal("-0.1")],
    "point": {"x": 1.5, "y": -2.0, "wkb": b"\x01\x02", "srid": 4326},
}

LOGICAL_TYPES = {
    "id": pa.int32(),
    "price": pa.decimal128(10, 2),
    "rate": pa.decimal128(38, 4),
    "amount": pa.string(),
    "day": pa.date32(),
    "cday": pa.date32(),
    "t_ms": pa.time64("us"),
    "t_us": pa.time64("us"),
    "t_ns": pa.time64("us"),
    "ts_ms": pa.timestamp("us"),
    "cts": pa.timestamp("us"),
    "ts_us": pa.timestamp("us"),
    "ts_ns": pa.timestamp("us"),
    "zts": pa.timestamp("us", "UTC"),
    "tiny": pa.int32(),
    "small": pa.int32(),
    "big": pa.int64(),
    "f32": pa.float32(),
    "f64": pa.float64(),
    "flag": pa.bool_(),
    "blob": pa.binary(),
    "doc": pa.string(),
    "uid": pa.string(),
    "kind": pa.string(),
    "ints": pa.list_(pa.int32()),
    "decs": pa.list_(pa.decimal128(38, 1)),
    "point": pa.struct(
        [("x", pa.float64()), ("y", pa.float64()), ("wkb", pa.binary()), ("srid", pa.int32())]
    ),
}


def logical_batch(rows_: list[dict]) -> DecodeResult:
    schema = envelope_schema(LOGICAL_FIELDS)
    values = [wire(wrap(schema, pg_envelope("c", r, lsn=1000 + i))) for i, r in enumerate(rows_)]
    return decode([wire(wrap(KEY_ID_SCHEMA, {"id": r["id"]})) for r in rows_], values)


def test_logical_types_with_schema() -> None:
    empty = {k: None for k in LOGICAL_ROW} | {"id": 2}
    result = logical_batch([LOGICAL_ROW, empty])
    assert not result.bad, result.bad
    out = rows(result)
    assert {k: out[0][k] for k in LOGICAL_EXPECTED} == LOGICAL_EXPECTED
    assert all(out[1][k] is None for k in LOGICAL_EXPECTED if k != "id")
    assert result.batch is not None
    assert {k: result.batch.schema.field(k).type for k in LOGICAL_TYPES} == LOGICAL_TYPES


def test_decimal_format_numeric() -> None:
    numeric = dict(LOGICAL_ROW, price=1234.56, rate=-0.0001, decs=[0.1, None, -0.1])
    result = logical_batch([numeric, dict(numeric, id=2, price=-0.01)])
    assert not result.bad, result.bad
    out = rows(result)
    assert [r["price"] for r in out] == [Decimal("1234.56"), Decimal("-0.01")]
    assert out[0]["rate"] == Decimal("-0.0001")
    assert out[0]["decs"] == [Decimal("0.1"), None, Decimal("-0.1")]
    assert field_type(result, "price") == pa.decimal128(10, 2)


def test_decimal_format_numeric_exact_beyond_float_precision() -> None:
    schema = envelope_schema(
        [
            {"type": "int32", "optional": False, "field": "id"},
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "10", "connect.decimal.precision": "30"},
                "field": "d",
            },
        ]
    )
    text = '{"id":1,"d":12345678901234567890.0123456789}'
    envelope = wire(pg_envelope("c", {"id": 1, "d": 0}))
    assert envelope is not None
    value = (
        b'{"schema":'
        + wire(schema)
        + b',"payload":'
        + envelope.replace(b'{"id":1,"d":0}', text.encode())
        + b"}"
    )
    row = only_row(decode([None], [value]))
    assert row["d"] == Decimal("12345678901234567890.0123456789")


def test_decimal_boundaries_and_wide_precision() -> None:
    schema = envelope_schema(
        [
            {"type": "int32", "optional": False, "field": "id"},
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "0", "connect.decimal.precision": "38"},
                "field": "d38",
            },
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "5", "connect.decimal.precision": "65"},
                "field": "d65",
            },
            {
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "3", "connect.decimal.precision": "100"},
                "field": "d100",
            },
        ]
    )
    cases = [10**38 - 1, -(10**38) + 1, 0, 127, 128, -128, -129, 2**63, -(2**63)]
    values = []
    for i, n in enumerate(cases):
        after = {
            "id": i,
            "d38": unscaled(n),
            "d65": unscaled(n * 10**20),
            "d100": unscaled(n * 10**50),
        }
        values.append(wire(wrap(schema, pg_envelope("c", after))))
    result = decode([None] * len(values), values)
    assert not result.bad
    out = rows(result)
    assert [r["d38"] for r in out] == [Decimal(n) for n in cases]
    assert [r["d65"] for r in out] == [Decimal(f"{n * 10**20}E-5") for n in cases]
    assert field_type(result, "d65") == pa.decimal256(65, 5)
    assert out[4]["d100"] == "128" + "0" * 47 + ".000"  # exact text beyond decimal256
    assert out[5]["d100"] == "-128" + "0" * 47 + ".000"
    assert field_type(result, "d100") == pa.string()


def test_undecodable_fields_quarantine_only_their_record() -> None:
    broken = [
        dict(LOGICAL_ROW, id=2, price="not base64!"),
        dict(LOGICAL_ROW, id=3, t_us=86_400_000_000),  # 24:00:00 is outside time64
        dict(LOGICAL_ROW, id=4, price=unscaled(10**10)),  # exceeds precision 10
        dict(LOGICAL_ROW, id=5, zts="yesterday"),
        dict(LOGICAL_ROW, id=6, tiny="five"),  # wrong JSON type
    ]
    result = logical_batch([LOGICAL_ROW, *broken, dict(LOGICAL_ROW, id=7)])
    assert [r["id"] for r in rows(result)] == [1, 7]
    reasons = {b.offset - 100: b.reason for b in result.bad}
    assert sorted(reasons) == [1, 2, 3, 4, 5]
    assert "price" in reasons[1] and "t_us" in reasons[2] and "price" in reasons[3]
    assert "zts" in reasons[4] and "tiny" in reasons[5]


def test_special_values() -> None:
    infinity = dict(LOGICAL_ROW, ts_us=9223372036825200000, ts_ms=-9223372036832400000, f64="NaN")
    result = logical_batch([infinity])
    row = only_row(result)
    assert row["ts_us"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    assert row["ts_ms"] == dt.datetime(1, 1, 1)
    assert row["f64"] != row["f64"]  # NaN (quoted by Jackson) survives


def test_map_fields_use_the_python_path() -> None:
    schema = envelope_schema(
        [
            {"type": "int32", "optional": False, "field": "id"},
            {
                "type": "map",
                "optional": True,
                "keys": {"type": "string", "optional": False},
                "values": {"type": "string", "optional": True},
                "field": "attrs",
            },
        ]
    )
    values = [
        wire(wrap(schema, pg_envelope("c", {"id": 1, "attrs": {"a": "1", "b": None}}))),
        wire(wrap(schema, pg_envelope("c", {"id": 2, "attrs": None}))),
        b"garbage",
    ]
    result = decode([None] * 3, values)
    assert [b.offset for b in result.bad] == [102]
    assert [r["attrs"] for r in rows(result)] == [[("a", "1"), ("b", None)], None]
    assert field_type(result, "attrs") == pa.map_(pa.string(), pa.string())


def test_flattened_and_non_row_schemas() -> None:
    flattened = {
        "type": "struct",
        "name": "srv.public.t.Value",
        "fields": [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "__op"},
        ],
    }
    heartbeat = {
        "type": "struct",
        "name": "io.debezium.connector.common.Heartbeat",
        "fields": [{"type": "int64", "optional": False, "field": "ts_ms"}],
    }
    values = [
        wire(wrap(flattened, {"id": 1, "__op": "c"})),
        wire(wrap(heartbeat, {"ts_ms": 5})),
        wire({"ts_ms": 6}),
        wire({"id": 3, "name": "plain flattened row"}),
    ]
    result = decode([None] * 4, values)
    assert result.batch is None
    assert result.ignored == 2
    assert [b.offset for b in result.bad] == [100, 103]
    assert "flattened" in result.bad[0].reason and "no op" in result.bad[1].reason


def test_unknown_op_is_bad() -> None:
    result = decode(
        [None, None], [wire(pg_envelope("c", {"id": 1})), wire(pg_envelope("z", {"id": 2}))]
    )
    assert [r["id"] for r in rows(result)] == [1]
    assert "unknown op" in result.bad[0].reason


def test_key_change_is_reported() -> None:
    values = [
        wire(pg_envelope("u", {"id": 1, "k2": "a"})),
        wire(pg_envelope("u", {"id": 1, "k2": "a"})),
    ]
    result = decode([wire({"id": 1}), wire({"id": 1, "k2": "a"})], values)
    assert result.key_field_sets == [("id",), ("id", "k2")]
    assert [r["_cdc_key"] for r in rows(result)] == ["1", "id:1,k2:a"]


# --------------------------------------------------------------------------------------
# property test: bulk decoding equals a per-message json.loads reference
# --------------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
COLUMN_STRATEGIES = {
    "i": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    "s": st.one_of(st.none(), TEXT),
    "f": st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64)),
    "b": st.one_of(st.none(), st.booleans()),
}
EVENT = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["c", "u", "d", "r", "t", "x", "m", "garbage"]),
        "key": st.integers(-(2**31), 2**31 - 1),
        "lsn": st.one_of(st.none(), st.integers(0, 2**40)),
        "commit": st.one_of(st.none(), st.integers(0, 2**40)),
        "snapshot": st.sampled_from(["false", "true", "last", "incremental", False, True, None]),
        "tx": st.one_of(st.none(), TEXT),
        "row": st.fixed_dictionaries(
            {}, optional={name: s for name, s in COLUMN_STRATEGIES.items()}
        ),
        "compact": st.booleans(),
    }
)
PROPERTY_SCHEMA = envelope_schema(
    [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "i"},
        {"type": "string", "optional": True, "field": "s"},
        {"type": "double", "optional": True, "field": "f"},
        {"type": "boolean", "optional": True, "field": "b"},
    ]
)


def reference(key: bytes | None, value: bytes | None) -> dict | str | None:
    """Expected decoding of one record, computed the slow, obvious way."""
    if value is None:
        key_obj = json.loads(key) if key else None
        key_obj = (
            key_obj["payload"] if isinstance(key_obj, dict) and "schema" in key_obj else key_obj
        )
        return {
            "_cdc_key": None if key_obj is None else str(key_obj["id"]),
            "_cdc_op": "x",
            "_cdc_pos": None,
            "_cdc_pos_sub": None,
            "_cdc_source_ts_ms": None,
            "_cdc_tx_id": None,
            "_cdc_gtid": None,
            "row": {},
        }
    try:
        env = json.loads(value)
    except ValueError:
        return "bad"
    if "schema" in env:
        env = env["payload"]
    if env["op"] == "m":
        return None
    key_obj = json.loads(key) if key else None
    key_obj = key_obj["payload"] if isinstance(key_obj, dict) and "schema" in key_obj else key_obj
    src = env["source"]
    seq = json.loads(src["sequence"]) if src["sequence"] else [None, None]
    lsn = src["lsn"] if src["lsn"] is not None else (int(seq[1]) if seq[1] is not None else None)
    major = None if lsn is None else (int(seq[0]) if seq[0] is not None else lsn)
    snapshot = src["snapshot"] not in (False, "false", None, "incremental")
    if major is not None and not snapshot:
        major |= STREAMED_BIT
    if env["op"] == "d":
        row = {"id": key_obj["id"]}
    else:
        row = env.get("after") or {}
    return {
        "_cdc_key": None if env["op"] == "t" else str(key_obj["id"]),
        "_cdc_op": env["op"],
        "_cdc_pos": major,
        "_cdc_pos_sub": lsn,
        "_cdc_source_ts_ms": src["ts_ms"],
        "_cdc_tx_id": (env.get("transaction") or {}).get("id"),
        "row": row,
    }


def build_record(event: dict, schemas: bool) -> tuple[bytes | None, bytes | None]:
    kind = event["kind"]
    if schemas and isinstance(event["snapshot"], bool):
        # With a schema, snapshot is the Enum string; booleans only exist schemaless (0.x).
        event = dict(event, snapshot=str(event["snapshot"]).lower())
    key = None if kind == "t" else {"id": event["key"]}
    key_bytes = wire(wrap(KEY_ID_SCHEMA, key) if schemas and key else key)
    if kind == "x":
        return key_bytes, None
    if kind == "garbage":
        return key_bytes, b'{"op": "c", "after": {"id": 1' + b"\xff"
    after = None if kind in ("d", "t", "m") else {"id": event["key"], **event["row"]}
    env = pg_envelope(
        kind,
        after,
        lsn=event["lsn"],
        commit=event["commit"],
        snapshot=event["snapshot"],
        tx=event["tx"],
    )
    if kind == "t":
        env = {k: v for k, v in env.items() if k not in ("before", "after")}
    if kind == "m":
        env = {k: v for k, v in env.items() if k not in ("before", "after")}
        env["message"] = {"prefix": "p", "content": "Ymfy"}
    value = wrap(PROPERTY_SCHEMA, env) if schemas else env
    # Non-compact layouts (spaces after separators) take the per-record unwrapping path.
    return key_bytes, wire(value) if event["compact"] else json.dumps(value).encode()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENT, min_size=1, max_size=40), schemas=st.booleans())
def test_bulk_decoder_matches_per_message_reference(events: list[dict], schemas: bool) -> None:
    records = [build_record(e, schemas) for e in events]
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    result = decode(keys, values)

    expected_rows, expected_bad, expected_ignored = [], [], 0
    for i, (k, v) in enumerate(records):
        ref = reference(k, v)
        if ref == "bad":
            expected_bad.append(100 + i)
        elif ref is None:
            expected_ignored += 1
        else:
            assert isinstance(ref, dict)
            expected_rows.append((100 + i, ref))

    assert [b.offset for b in result.bad] == expected_bad
    assert result.ignored == expected_ignored
    got = rows(result) if expected_rows else []
    if not expected_rows:
        assert result.batch is None
    assert len(got) == len(expected_rows)
    for row, (offset, ref) in zip(got, expected_rows, strict=True):
        assert row["_cdc_offset"] == offset and row["_cdc_partition"] == 7
        for column in (
            "_cdc_key",
            "_cdc_op",
            "_cdc_pos",
            "_cdc_pos_sub",
            "_cdc_source_ts_ms",
            "_cdc_tx_id",
        ):
            assert row[column] == ref[column], (column, row, ref)
        for name in ("id", "i", "s", "f", "b"):
            assert row.get(name) == ref["row"].get(name), (name, row, ref)


PROPERTY_LOGICAL_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "3", "connect.decimal.precision": "20"},
        "field": "price",
    },
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "day"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "ts_ms"},
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "field": "ts_us",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp", "field": "ts_ns"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "t_us"},
]
EPOCH = dt.datetime(1970, 1, 1)
MIN_US = int((dt.datetime(1, 1, 1) - EPOCH).total_seconds()) * 10**6
MAX_US = int((dt.datetime(9999, 12, 31, 23, 59, 59) - EPOCH).total_seconds()) * 10**6
LOGICAL_ROW_STRATEGY = st.fixed_dictionaries(
    {
        "price": st.one_of(st.none(), st.integers(-(10**20) + 1, 10**20 - 1)),
        "day": st.one_of(st.none(), st.integers(-719162, 2932896)),
        "ts_ms": st.one_of(st.none(), st.integers(MIN_US // 1000, MAX_US // 1000)),
        "ts_us": st.one_of(st.none(), st.integers(MIN_US, MAX_US)),
        "ts_ns": st.one_of(st.none(), st.integers(-(2**62), 2**62)),  # clear of the sentinels
        "t_us": st.one_of(st.none(), st.integers(0, 86_400_000_000 - 1)),
    }
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(LOGICAL_ROW_STRATEGY, min_size=1, max_size=30), numeric=st.booleans())
def test_logical_types_match_python_reference(values: list[dict], numeric: bool) -> None:
    schema = envelope_schema(PROPERTY_LOGICAL_FIELDS)
    records = []
    for i, v in enumerate(values):
        after = dict(v, id=i)
        if v["price"] is not None:
            after["price"] = unscaled(v["price"]) if not numeric else 0  # replaced below
        payload = wire(wrap(schema, pg_envelope("c", after)))
        assert payload is not None
        if numeric and v["price"] is not None:
            # decimal.format=NUMERIC writes the exact decimal as a JSON number.
            exact = format(Decimal(f"{v['price']}E-3"), "f")
            payload = payload.replace(b'"price":0', b'"price":' + exact.encode())
        records.append(payload)
    result = decode([None] * len(records), records)
    assert not result.bad, result.bad
    for row, v in zip(rows(result), values, strict=True):
        assert row["price"] == (None if v["price"] is None else Decimal(f"{v['price']}E-3"))
        assert row["day"] == (
            None if v["day"] is None else dt.date(1970, 1, 1) + dt.timedelta(days=v["day"])
        )
        assert row["ts_ms"] == (
            None if v["ts_ms"] is None else EPOCH + dt.timedelta(milliseconds=v["ts_ms"])
        )
        assert row["ts_us"] == (
            None if v["ts_us"] is None else EPOCH + dt.timedelta(microseconds=v["ts_us"])
        )
        t_us = v["t_us"]
        assert row["t_us"] == (
            None if t_us is None else (dt.datetime.min + dt.timedelta(microseconds=t_us)).time()
        )
    # Nanoseconds are floored to microseconds (also before 1970).
    assert result.batch is not None
    ns = result.batch.column("ts_ns").cast(pa.int64()).to_pylist()
    assert ns == [None if v["ts_ns"] is None else v["ts_ns"] // 1000 for v in values]


def test_wrapped_tombstones_next_to_compact_records() -> None:
    # Regression: a payload of JSON null must never reach the Arrow reader (pyarrow 26
    # crashes the process on a block that starts with a top-level null).
    schema = envelope_schema(ROW_FIELDS)
    values = [
        wire(wrap(schema, pg_envelope("c", {"id": 1}))),
        wire(wrap(schema, None)),
        b'{"schema":' + (wire(schema) or b"") + b',"payload": null}',
        wire(wrap(schema, pg_envelope("u", {"id": 1}))),
    ]
    result = decode([wire({"id": 1})] * 4, values)
    assert not result.bad
    assert [r["_cdc_op"] for r in rows(result)] == ["c", "x", "x", "u"]


MUTATION_TOKENS = [
    b"null",
    b" null",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b",",
    b":",
    b"\n",
    b"\r",
    b"\xff",
    b"\x00",
    b"1e400",
    b"NaN",
    b'{"":null}',
    b" ",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mutations=st.lists(
        st.tuples(
            st.sampled_from(["plain", "wrapped", "logical"]),
            st.lists(
                st.tuples(st.integers(0, 10_000), st.sampled_from(MUTATION_TOKENS), st.booleans()),
                max_size=3,
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_every_record_is_a_row_bad_or_ignored(mutations: list[tuple[str, list]]) -> None:
    """Damaged records never crash the decoder nor vanish: rows + bad + ignored == input."""
    plain_schema = envelope_schema(ROW_FIELDS)
    logical_schema = envelope_schema(LOGICAL_FIELDS)
    keys, values = [], []
    for i, (mode, edits) in enumerate(mutations):
        if mode == "plain":
            value = wire(pg_envelope("u", {"id": i, "name": "x"}))
        elif mode == "wrapped":
            value = wire(wrap(plain_schema, pg_envelope("u", {"id": i, "name": "x"})))
        else:
            value = wire(wrap(logical_schema, pg_envelope("c", dict(LOGICAL_ROW, id=i))))
        assert value is not None
        data = bytearray(value)
        for at, token, delete in edits:
            at %= len(data) + 1
            if delete:
                del data[at : at + len(token)]
            else:
                data[at:at] = token
        keys.append(wire({"id": i}))
        values.append(bytes(data))
    result = decode(keys, values)
    n_rows = 0 if result.batch is None else result.batch.num_rows
    assert n_rows + len(result.bad) + result.ignored == len(values)
    if result.batch is not None:
        offsets = result.batch.column("_cdc_offset").to_pylist()
        assert offsets == sorted(offsets)
        assert not set(offsets) & {b.offset for b in result.bad}


def test_base64_decimal_that_looks_numeric_is_not_read_as_a_number() -> None:
    # "1234" is valid base64 (bytes d7 6d f8) and also a decimal literal; next to a
    # decimal.format=NUMERIC record it must still be decoded as base64.
    schema = envelope_schema(
        [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
             "parameters": {"scale": "2"}, "field": "price"},
        ]
    )  # fmt: skip
    afters = [{"id": 1, "price": 12.5}, {"id": 2, "price": "1234"}, {"id": 3, "price": 7}]
    values = [wire(wrap(schema, pg_envelope("c", a))) for a in afters]
    result = decode([None] * 3, values)
    assert not result.bad, result.bad
    expected = Decimal(int.from_bytes(base64.b64decode("1234"), "big", signed=True)).scaleb(-2)
    assert [r["price"] for r in rows(result)] == [Decimal("12.50"), expected, Decimal("7.00")]


def test_envelope_retry_schema_mirrors_after_and_declines_what_it_cannot_read() -> None:
    from engine.decode.debezium_json.reader import envelope_retry_schema

    line = wire(pg_envelope("c", {"id": 1, "at": "2024-01-15T08:30:00Z"}))
    schema = envelope_retry_schema(b"\n".join([line] * 3))
    assert schema is not None and schema.names == ["before", "after"]
    assert schema.field("before").type == schema.field("after").type
    assert schema.field("after").type.field("at").type == pa.string()  # never a guessed timestamp
    assert envelope_retry_schema(b'{"op":"c"}') is None  # no row image to copy
    huge = wire(pg_envelope("c", {"id": 1, "blob": "x" * (2 << 20)}))
    assert envelope_retry_schema(huge + b"\n" + line) is None  # no whole record in the sample
