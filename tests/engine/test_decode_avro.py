"""Tests of the Debezium Avro decoder (engine/decode/debezium_avro/) against a real HTTP
schema registry (engine/playground/registry.py) reached by confluent-kafka's client, with
messages serialized by confluent-kafka's own AvroSerializer."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.decode import RecordBatch, decode_debezium_json, decoder_for
from engine.decode.debezium_avro import AvroDecoder, RegistrySettings, SchemaCache
from engine.decode.debezium_avro.registry import RegistryAuthError
from engine.errors import ConfigError, SourceError
from engine.playground.registry import SchemaRegistry
from engine.redaction import redact
from engine.replicator.retry import transient_cause
from tests.avro_support import (
    DATE,
    INT16,
    JSON,
    MICRO_TIME,
    MICRO_TIMESTAMP,
    TIMESTAMP,
    UUID,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
    Serializer,
    connect_to_avro,
    decimal_type,
    envelope_schema,
    event,
    key_schema,
    payload_to_avro,
)

TOPIC = "srv.public.items"
DEC = "org.apache.kafka.connect.data.Decimal"


@pytest.fixture
def registry() -> Iterator[SchemaRegistry]:
    with SchemaRegistry() as reg:
        yield reg


def decoder(url: str) -> AvroDecoder:
    return AvroDecoder(SchemaCache(RegistrySettings(url)))


def run(dec: Any, keys: list, values: list) -> Any:
    n = len(values)
    return dec(RecordBatch(TOPIC, keys, values, [0] * n, list(range(n))))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unscaled(value: Decimal, scale: int) -> bytes:
    n = int(value.scaleb(scale))
    return n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)


# (name, Avro type as the AvroConverter writes it, the Connect schema JsonConverter writes,
#  Avro value, JsonConverter value): the same column on both paths.
COLUMNS: list[tuple[str, Any, dict, Any, Any]] = [
    (
        "amount",
        decimal_type(12, 2),
        {
            "type": "bytes",
            "name": DEC,
            "parameters": {"scale": "2", "connect.decimal.precision": "12"},
        },
        Decimal("-12.34"),
        b64(unscaled(Decimal("-12.34"), 2)),
    ),  # noqa: E501
    (
        "at",
        MICRO_TIMESTAMP,
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        -1_000_001,
        -1_000_001,
    ),  # noqa: E501
    (
        "at_ms",
        TIMESTAMP,
        {"type": "int64", "name": "io.debezium.time.Timestamp"},
        1_700_000_000_123,
        1_700_000_000_123,
    ),  # noqa: E501
    ("day", DATE, {"type": "int32", "name": "io.debezium.time.Date"}, 19_000, 19_000),
    (
        "cday",
        {
            "type": "int",
            "connect.version": 1,
            "connect.name": "org.apache.kafka.connect.data.Date",
            "logicalType": "date",
        },
        {"type": "int32", "name": "org.apache.kafka.connect.data.Date"},
        19_001,
        19_001,
    ),  # noqa: E501
    (
        "tod",
        MICRO_TIME,
        {"type": "int64", "name": "io.debezium.time.MicroTime"},
        3_600_000_001,
        3_600_000_001,
    ),  # noqa: E501
    (
        "zoned",
        ZONED_TIMESTAMP,
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        "2024-03-04T05:06:07.654321Z",
        "2024-03-04T05:06:07.654321Z",
    ),  # noqa: E501
    ("small", INT16, {"type": "int16"}, -3, -3),
    ("f32", "float", {"type": "float"}, 1.5, 1.5),
    ("f64", "double", {"type": "double"}, 2.25, 2.25),
    ("flag", "boolean", {"type": "boolean"}, True, True),
    ("raw", "bytes", {"type": "bytes"}, b"\x00\xff", b64(b"\x00\xff")),
    (
        "tags",
        {"type": "array", "items": "string"},
        {"type": "array", "items": {"type": "string"}},
        ["a", "b"],
        ["a", "b"],
    ),  # noqa: E501
    (
        "vsd",
        VARIABLE_SCALE_DECIMAL,
        {
            "type": "struct",
            "name": "io.debezium.data.VariableScaleDecimal",
            "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}],
        },
        {"scale": 3, "value": b"\x30\x39"},
        {"scale": 3, "value": b64(b"\x30\x39")},
    ),  # noqa: E501
    ("doc", JSON, {"type": "string", "name": "io.debezium.data.Json"}, '{"k":1}', '{"k":1}'),
    (
        "uid",
        UUID,
        {"type": "string", "name": "io.debezium.data.Uuid"},
        "0b1e3c4d-0000-4000-8000-000000000001",
        "0b1e3c4d-0000-4000-8000-000000000001",
    ),  # noqa: E501
    ("note", "string", {"type": "string"}, "x", "x"),
]


def _json_envelope(columns: list[tuple[str, Any, dict, Any, Any]]) -> dict:
    value = {
        "type": "struct",
        "name": f"{TOPIC}.Value",
        "optional": True,
        "fields": [{"field": "id", "type": "int32"}]
        + [{**c, "field": n, "optional": True} for n, _, c, _, _ in columns],
    }
    source = {
        "type": "struct",
        "name": "io.debezium.connector.postgresql.Source",
        "fields": [
            {"field": f, "type": t, "optional": o}
            for f, t, o in [
                ("version", "string", False),
                ("connector", "string", False),
                ("name", "string", False),
                ("ts_ms", "int64", False),
                ("snapshot", "string", True),
                ("db", "string", False),
                ("sequence", "string", True),
                ("schema", "string", False),
                ("table", "string", False),
                ("txId", "int64", True),
                ("lsn", "int64", True),
                ("xmin", "int64", True),
            ]
        ],  # fmt: skip
    }
    return {
        "type": "struct",
        "name": f"{TOPIC}.Envelope",
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            {**source, "field": "source"},
            {"field": "op", "type": "string"},
            {"field": "ts_ms", "type": "int64", "optional": True},
            {
                "field": "transaction",
                "type": "struct",
                "optional": True,
                "fields": [
                    {"field": "id", "type": "string"},
                    {"field": "total_order", "type": "int64"},
                    {"field": "data_collection_order", "type": "int64"},
                ],
            },
        ],
    }


def _events(count: int) -> list[tuple[str, int, bool]]:
    """(op, id, with values) per event: inserts, updates, a delete, a tombstone."""
    out = [("c", i, True) for i in range(count)]
    out += [("u", 1, True), ("u", 2, False), ("d", 3, False), ("x", 3, False)]
    return out


def test_avro_gives_the_same_change_batch_as_json(registry: SchemaRegistry) -> None:
    columns = COLUMNS
    avro_cols = [("id", "int", False)] + [(n, a, True) for n, a, _, _, _ in columns]
    ser = Serializer(
        registry.url, TOPIC, key_schema(TOPIC, [("id", "int")]), envelope_schema(TOPIC, avro_cols)
    )
    json_schema = _json_envelope(columns)
    key_json_schema = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}
    a_keys, a_vals, j_keys, j_vals = [], [], [], []
    for lsn, (op, i, full) in enumerate(_events(40), start=100):
        a_row = {"id": i, **{n: (a if full else None) for n, _, _, a, _ in columns}}
        j_row = {"id": i, **{n: (j if full else None) for n, _, _, _, j in columns}}
        a_keys.append(ser.key({"id": i}))
        j_keys.append(json.dumps({"schema": key_json_schema, "payload": {"id": i}}).encode())
        if op == "x":
            a_vals.append(None)
            j_vals.append(None)
            continue
        a_ev = event("items", op, None if op == "d" else a_row, lsn, before=a_row)
        j_ev = event("items", op, None if op == "d" else j_row, lsn, before=j_row)
        a_vals.append(ser.value(a_ev))
        j_vals.append(json.dumps({"schema": json_schema, "payload": j_ev}).encode())
    avro = run(decoder(registry.url), a_keys, a_vals)
    js = run(decode_debezium_json, j_keys, j_vals)
    assert not avro.bad and not js.bad, (avro.bad, js.bad)
    assert avro.batch is not None and js.batch is not None
    assert avro.batch.schema == js.batch.schema
    assert avro.batch.to_pylist() == js.batch.to_pylist()
    assert avro.batch.num_rows == 44
    assert avro.key_fields == js.key_fields == ["id"]
    assert avro.source_table == js.source_table
    row = avro.batch.to_pylist()[0]
    assert row["amount"] == Decimal("-12.34") and row["vsd"] == "12.345"
    assert avro.batch.schema.field("amount").type == pa.decimal128(12, 2)
    assert avro.batch.schema.field("at").type == pa.timestamp("us")
    assert avro.batch.schema.field("zoned").type == pa.timestamp("us", "UTC")


def test_maps_and_single_records_take_the_per_record_path(registry: SchemaRegistry) -> None:
    # Polars cannot read Avro maps: such schemas are decoded by fastavro record by record.
    cols = [("id", "int", False), ("attrs", {"type": "map", "values": "long"}, True)]
    ser = Serializer(registry.url, TOPIC, key_schema(TOPIC, [("id", "int")]),
                     envelope_schema(TOPIC, cols))  # fmt: skip
    vals = [ser.value(event("items", "c", {"id": i, "attrs": {"a": i}}, 10 + i)) for i in range(20)]
    keys = [ser.key({"id": i}) for i in range(20)]
    dec = decoder(registry.url)
    res = run(dec, keys, vals)
    assert not res.bad
    assert res.batch is not None
    assert res.batch.schema.field("attrs").type == pa.map_(pa.string(), pa.int64())
    assert res.batch.column("attrs").to_pylist()[5] == [("a", 5)]
    (reader,) = [p.reader for (role, _), p in dec._plans.items() if role == "value"]
    assert reader is not None and reader.bulk_records == 0 and reader.single_records == 20


def _rows(n: int, registry: SchemaRegistry) -> tuple[Serializer, list, list]:
    cols = [("id", "int", False), ("amount", decimal_type(10, 2), True), ("note", "string", True)]
    ser = Serializer(registry.url, TOPIC, key_schema(TOPIC, [("id", "int")]),
                     envelope_schema(TOPIC, cols))  # fmt: skip
    keys = [ser.key({"id": i}) for i in range(n)]
    vals = [
        ser.value(event("items", "c", {"id": i, "amount": Decimal(i) / 4, "note": "n" * i}, i + 1))
        for i in range(n)
    ]
    return ser, keys, vals


def test_bad_wire_bytes_are_quarantined_with_coordinates(registry: SchemaRegistry) -> None:
    _, keys, vals = _rows(100, registry)
    good = vals[10]
    assert good is not None
    schema_id = int.from_bytes(good[1:5], "big")
    vals[10] = b'{"op":"c"}'  # JSON, not Avro
    vals[20] = good[:3]  # too short for the header
    vals[30] = good[:-4]  # truncated body
    vals[40] = good + b"\x00\x00"  # trailing bytes: not a datum of this schema
    vals[50] = b"\x00" + (4242).to_bytes(4, "big") + good[5:]  # unknown schema id
    dec = decoder(registry.url)
    res = run(dec, keys, vals)
    reasons = {b.offset: b.reason for b in res.bad}
    assert sorted(reasons) == [10, 20, 30, 40, 50]
    assert "not the Confluent magic byte" in reasons[10]
    assert "too short" in reasons[20]
    assert f"schema id {schema_id}" in reasons[30] and "truncated or corrupt" in reasons[30]
    assert "bytes after the datum" in reasons[40]
    assert "schema id 4242 is not in the schema registry" in reasons[50]
    bad = {b.offset: b for b in res.bad}
    assert bad[30].topic == TOPIC and bad[30].partition == 0 and bad[30].value == vals[30]
    assert res.batch is not None and res.batch.num_rows == 95
    # The neighbours of the bad records are decoded exactly (bulk framing check).
    by_offset = {r["_cdc_offset"]: r for r in res.batch.to_pylist()}
    for i in (9, 11, 29, 31, 39, 41):
        assert by_offset[i]["id"] == i and by_offset[i]["note"] == "n" * i
        assert by_offset[i]["amount"] == Decimal(i) / 4
    # Most records went through the compiled block reader; bisection isolated the rest.
    reader = dec._plans[("value", schema_id)].reader
    assert reader is not None
    assert reader.bulk_records >= 30 and reader.single_records <= 64
    assert reader.bulk_records + reader.single_records == 97  # less JSON, short, unknown id


def test_schema_id_change_mid_batch(registry: SchemaRegistry) -> None:
    ser1, keys, vals = _rows(30, registry)
    cols2 = [("id", "int", False), ("amount", decimal_type(10, 2), True),
             ("note", "string", True), ("added", "long", True)]  # fmt: skip
    ser2 = Serializer(registry.url, TOPIC, key_schema(TOPIC, [("id", "int")]),
                      envelope_schema(TOPIC, cols2))  # fmt: skip
    row = {"id": 99, "amount": Decimal("1.50"), "note": "new", "added": 7}
    keys.append(ser2.key({"id": 99}))
    vals.append(ser2.value(event("items", "c", row, 500)))
    res = run(decoder(registry.url), keys, vals)
    assert not res.bad
    assert len(res.value_schema_fingerprints) == 2
    assert res.batch is not None
    last = res.batch.to_pylist()[-1]
    assert last["added"] == 7 and last["_cdc_offset"] == 30
    assert res.batch.to_pylist()[0]["added"] is None


def test_non_row_values_are_ignored(registry: SchemaRegistry) -> None:
    heartbeat = {"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
                 "fields": [{"name": "ts_ms", "type": "long"}],
                 "connect.name": "io.debezium.connector.common.Heartbeat"}  # fmt: skip
    ser = Serializer(registry.url, TOPIC, key_schema(TOPIC, [("id", "int")]), heartbeat)
    values = [ser.value({"ts_ms": 1}), ser.value({"ts_ms": 2})]
    res = run(decoder(registry.url), [None, None], values)
    assert res.ignored == 2 and res.batch is None and not res.bad


def test_unreachable_registry_is_transient() -> None:
    with SchemaRegistry() as reg:
        url = reg.url
        _, keys, vals = _rows(3, reg)
    with pytest.raises(SourceError) as caught:
        run(decoder(url), keys, vals)
    assert "cannot be reached" in str(caught.value)
    assert transient_cause(caught.value) is not None


def test_basic_auth_password_from_a_reference_and_redacted(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cret-registry-pw"
    with SchemaRegistry(user="cdc", password=secret) as reg:
        client_url = reg.url
        from confluent_kafka.schema_registry import SchemaRegistryClient

        authed = SchemaRegistryClient({"url": client_url, "basic.auth.user.info": f"cdc:{secret}"})
        vs = envelope_schema(TOPIC, [("id", "int", False)])
        from confluent_kafka.schema_registry import Schema

        sid = authed.register_schema(f"{TOPIC}-value", Schema(json.dumps(vs), "AVRO"))
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        value = AvroSerializer(authed, json.dumps(vs))(
            event("items", "c", {"id": 1}, 5), SerializationContext(TOPIC, MessageField.VALUE)
        )
        assert value is not None and int.from_bytes(value[1:5], "big") == sid

        base = {
            "source": {
                "bootstrap_servers": "127.0.0.1:1",
                "topics": ".",
                "format": "debezium-avro",
                "schema_registry": {
                    "url": client_url,
                    "basic_auth_user": "cdc",
                    "basic_auth_password": "${env:CDC_TEST_REGISTRY_PW}",
                },
            },
            "target": {"path": str(tmp_path / "lake")},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
        monkeypatch.setenv("CDC_TEST_REGISTRY_PW", secret)
        cfg = config_from_dict(base)
        assert redact(f"pw={secret}") == "pw=***"
        res = decoder_for(cfg)(RecordBatch(TOPIC, [None], [value], [0], [0]))
        assert res.batch is not None and res.batch.num_rows == 1

        monkeypatch.setenv("CDC_TEST_REGISTRY_PW", "wrong-password")
        with pytest.raises(RegistryAuthError):
            decoder_for(config_from_dict(base))(RecordBatch(TOPIC, [None], [value], [0], [0]))


def test_config_refuses_avro_without_registry_and_literal_passwords(tmp_path: Any) -> None:
    base: dict[str, Any] = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": ".", "format": "debezium-avro"},
        "target": {"path": str(tmp_path / "lake")},
        "replicator": {"work_dir": str(tmp_path / "work")},
    }
    with pytest.raises(ConfigError) as caught:
        config_from_dict(base)
    assert "schema_registry" in str(caught.value.problems)
    base["source"]["schema_registry"] = {
        "url": "http://r:8081",
        "basic_auth_user": "u",
        "basic_auth_password": "plain",
    }
    with pytest.raises(ConfigError) as caught:
        config_from_dict(base)
    assert "basic_auth_password" in str(caught.value.problems)
    base["source"]["schema_registry"] = {"url": "ftp://r"}
    with pytest.raises(ConfigError):
        config_from_dict(base)


def test_the_demo_workload_decodes_the_same_as_avro_and_json(registry: SchemaRegistry) -> None:
    # Every message of the demo workload (snapshot reads, inserts, updates, deletes,
    # tombstones, three tables) re-serialized by the AvroConverter's rules.
    from engine.playground.workload import InventoryWorkload
    from tests.avro_support import JsonToAvro

    messages = list(InventoryWorkload(seed=5, prefix="p", schemas=True).events(3000))
    convert = JsonToAvro(registry.url)
    avro = [convert.message(*m) for m in messages]
    dec = decoder(registry.url)
    for topic in sorted({t for t, _, _ in messages}):
        js = [m for m in messages if m[0] == topic]
        av = [m for m in avro if m[0] == topic]
        n = len(js)
        a = dec(RecordBatch(topic, [m[1] for m in av], [m[2] for m in av], [0] * n, list(range(n))))
        j = decode_debezium_json(
            RecordBatch(topic, [m[1] for m in js], [m[2] for m in js], [0] * n, list(range(n)))
        )
        assert not a.bad and a.batch is not None and j.batch is not None
        assert a.batch.schema == j.batch.schema
        assert a.batch.to_pylist() == j.batch.to_pylist()


def test_registry_check_of_test_connection(tmp_path: Any) -> None:
    from engine.checks.registry import registry_checks

    with SchemaRegistry() as reg:
        cfg = config_from_dict(
            {
                "source": {
                    "bootstrap_servers": "127.0.0.1:1",
                    "topics": ".",
                    "format": "debezium-avro",
                    "schema_registry": {"url": reg.url},
                },
                "target": {"path": str(tmp_path / "lake")},
                "replicator": {"work_dir": str(tmp_path / "work")},
            }
        )
        (ok,) = registry_checks(cfg)
        assert ok.status == "pass" and reg.url in ok.detail
    (down,) = registry_checks(cfg)
    assert down.status == "fail" and "cannot be reached" in down.detail and down.fix


_PROP_SCHEMA = {
    "type": "record",
    "name": "R",
    "fields": [
        {"name": "a", "type": "long"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "b", "type": ["null", "bytes"]},
        {"name": "xs", "type": {"type": "array", "items": "int"}},
    ],
}


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.none() | st.text(max_size=20),
            st.none() | st.binary(max_size=12),
            st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4),
        ),
        min_size=17,
        max_size=80,
    ),
    damage=st.lists(
        st.tuples(
            st.integers(0, 79), st.sampled_from(["cut", "extra", "flip"]), st.integers(0, 255)
        ),
        max_size=6,
    ),
)
def test_bulk_block_read_equals_fastavro_record_by_record(
    rows: list[tuple], damage: list[tuple[int, str, int]]
) -> None:
    """The compiled block read with its length trailers decodes exactly what fastavro
    decodes record by record, flags exactly the bodies fastavro cannot read whole when a
    body is cut or has extra bytes, and never lets a damaged body change its neighbours.

    A flipped byte inside a body can be read differently by the two (the compiled reader
    does not check union branch indexes: docs/guide/limits.md), so for those bodies only "a row
    or bad" is asserted.
    """
    import io

    import fastavro

    from engine.decode.debezium_avro.bulk import BodyReader
    from engine.decode.debezium_avro.schema import bulk_schema, wire_type

    parsed = fastavro.parse_schema(_PROP_SCHEMA)
    bodies = []
    for a, s, b, xs in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {"a": a, "s": s, "b": b, "xs": xs})
        bodies.append(out.getvalue())
    flipped: set[int] = set()
    damaged: set[int] = set()
    for i, kind, byte in damage:
        if i >= len(bodies):
            continue
        damaged.add(i)
        if kind == "flip":
            flipped.add(i)
        body = bodies[i]
        if kind == "cut" and body:
            bodies[i] = body[: byte % len(body)]
        elif kind == "extra":
            bodies[i] = body + bytes([byte])
        elif body:
            pos = byte % len(body)
            bodies[i] = body[:pos] + bytes([body[pos] ^ 0xFF]) + body[pos + 1 :]
    # The oracle: fastavro on each body alone, which must consume it whole.
    expected: dict[int, dict | None] = {}
    for i, body in enumerate(bodies):
        stream = io.BytesIO(body)
        try:
            datum = fastavro.schemaless_reader(stream, parsed, None)
            expected[i] = datum if stream.tell() == len(body) else None
        except Exception:  # noqa: BLE001 - any failure means a bad record
            expected[i] = None
    wire_s, bulk_ok = bulk_schema(_PROP_SCHEMA)
    assert bulk_ok
    reader = BodyReader(wire_s, wire_type(wire_s), True, ["a", "s", "b", "xs"])
    pieces, bad = reader.decode(pa.array(bodies, pa.large_binary()))
    got: dict[int, dict] = {}
    for piece in pieces:
        for p, row in zip(piece.positions.tolist(), piece.table.to_pylist(), strict=True):
            got[p] = row
    assert set(got) | set(bad) == set(range(len(bodies)))
    assert not set(got) & set(bad)
    checked = set(range(len(bodies))) - flipped
    assert sorted(set(bad) & checked) == sorted(i for i in checked if expected[i] is None)
    for i in checked - set(bad):
        assert got[i] == expected[i], i
    for i in set(range(len(bodies))) - damaged:
        assert got.get(i) == expected[i], i
    if not damage:
        assert reader.bulk_records == len(bodies)


def test_init_needs_the_registry_url_for_avro(tmp_path: Any) -> None:
    from tests.integration.replicas import run_cli

    common = ["init", "--bootstrap-servers", "127.0.0.1:9092", "--topics", "^a\\.",
              "--target", str(tmp_path / "lake"), "--format", "debezium-avro"]  # fmt: skip
    refused = run_cli(*common, "--output", str(tmp_path / "a.toml"))
    assert refused.returncode == 2, refused.stderr
    assert "--schema-registry-url" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "a.toml").exists()
    ok = run_cli(*common, "--schema-registry-url", "http://reg:8081", "--output",
                 str(tmp_path / "b.toml"))  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    text = (tmp_path / "b.toml").read_text()
    assert 'format = "debezium-avro"' in text and 'url = "http://reg:8081"' in text


def _with_schema(payload: dict, fields: list[dict], name: str) -> bytes:
    schema = {"type": "struct", "name": name, "optional": False, "fields": fields}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def test_control_topics_are_recognised_in_avro_too(registry: SchemaRegistry) -> None:
    # Transaction markers and schema changes written by the AvroConverter are told apart
    # from row topics by their content, like their JSON forms (engine.decode.control).
    from engine.decode import control
    from tests.avro_support import JsonToAvro
    from tests.samples import debezium_samples

    def load_sample(name: str) -> dict:
        return json.loads((debezium_samples() / name).read_text())

    convert = JsonToAvro(registry.url)
    tx_fields = [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ]
    begin = _with_schema(
        {"status": "BEGIN", "id": "571:53195832", "event_count": None, "ts_ms": 1},
        tx_fields,
        "io.debezium.connector.common.TransactionMetadataValue",
    )
    heartbeat = _with_schema(
        {"ts_ms": 5},
        [{"type": "int64", "optional": False, "field": "ts_ms"}],
        "io.debezium.connector.common.Heartbeat",
    )
    ddl = load_sample("mysql-schema-change-snapshot.json")
    row = load_sample("mysql-create-docs.json")
    cases = {
        "odd.tx.name": ([begin], control.TRANSACTION),
        "odd.beat": ([heartbeat], control.HEARTBEAT),
        "mysql": ([json.dumps(ddl["value"]).encode()], control.SCHEMA_CHANGE),
        "srv.inventory.customers": ([json.dumps(row["value"]).encode()], None),
    }
    dec = decoder(registry.url)
    for topic, (values, kind) in cases.items():
        assert control.topic_kind(values) == kind, topic  # the JSON form
        avro = [convert.message(topic, None, v)[2] for v in values]
        assert avro[0] is not None and avro[0][0] == 0  # Confluent framing
        assert control.topic_kind(avro) is None or kind is None  # JSON reading sees nothing
        assert control.topic_kind(avro, dec.documents) == kind, topic
    # A schema change read from Avro parses like its JSON form.
    from engine.decode.ddl import parse_schema_change

    avro_ddl = convert.message("mysql", None, json.dumps(ddl["value"]).encode())[2]
    (doc,) = dec.documents([avro_ddl])
    from_avro = parse_schema_change(doc)
    from_json = parse_schema_change(json.dumps(ddl["value"]).encode())
    assert from_avro.ddl == from_json.ddl and from_avro.position == from_json.position
    assert from_avro.changes == from_json.changes


@pytest.mark.parametrize("name", ["pg-every-type", "mysql-every-type"])
def test_the_types_corpus_decodes_the_same_as_avro_and_json(tmp_path: Any, name: str) -> None:
    """Every logical type under every Debezium mode (tests/cases/types/<name>.json) and its
    Avro twin (tests/cases/debezium-avro/types-<name>.json: the same events as the
    AvroConverter writes them) decode to identical change batches: same Arrow schema,
    same values, same bad messages; hints included. (test_cases then applies both and
    checks the replicas hudi-rs reads.)"""
    from pathlib import Path

    from tests.engine.test_cases import _merge, _payload

    cases = Path(__file__).resolve().parent.parent / "cases"
    as_json = json.loads((cases / "types" / f"{name}.json").read_text())
    as_avro = json.loads((cases / "debezium-avro" / f"types-{name}.json").read_text())
    base = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
        "target": {"path": str(tmp_path / "lake")},
    }
    with SchemaRegistry() as reg:
        for schema_id, schema in as_avro["registry"].items():
            reg.register(f"case-{schema_id}", schema, int(schema_id))
        url = {"source": {"schema_registry": {"url": reg.url}}}
        decode_json = decoder_for(config_from_dict(_merge(base, as_json["config"])))
        decode_avro = decoder_for(config_from_dict(_merge(_merge(base, url), as_avro["config"])))
        assert len(as_json["batches"]) == len(as_avro["batches"])
        compared = 0
        for js, av in zip(as_json["batches"], as_avro["batches"], strict=True):
            for topic in sorted({m["topic"] for m in js}):
                got = []
                for decode, batch in ((decode_json, js), (decode_avro, av)):
                    msgs = [m for m in batch if m["topic"] == topic]
                    n = len(msgs)
                    got.append(
                        decode(
                            RecordBatch(
                                topic,
                                [_payload(m, "key") for m in msgs],
                                [_payload(m, "value") for m in msgs],
                                [0] * n,
                                list(range(n)),
                            )
                        )
                    )
                j, a = got
                assert j.batch is not None and a.batch is not None
                assert a.batch.schema == j.batch.schema, topic
                # (as JSON text: NaN equals NaN there, unlike in Python)
                assert json.dumps(a.batch.to_pylist(), default=str) == json.dumps(
                    j.batch.to_pylist(), default=str
                ), topic
                assert [b.offset for b in a.bad] == [b.offset for b in j.bad], topic
                compared += j.batch.num_rows
    assert compared == 8 * len(as_json["expect"])  # every table's 8 events (4 a batch)


def _strip_logical(schema: Any) -> Any:
    """An Avro schema without decimal annotations (the same binary encoding)."""
    if isinstance(schema, list):
        return [_strip_logical(s) for s in schema]
    if isinstance(schema, dict):
        drop = ("logicalType", "precision", "scale")
        return {k: _strip_logical(v) for k, v in schema.items() if k not in drop}
    return schema


def test_a_decimal_with_a_negative_scale_reads_as_on_the_json_path(
    registry: SchemaRegistry,
) -> None:
    # PostgreSQL 15 numeric(3,-2): AvroData writes it with the legacy decimal annotation
    # (scale -2, which the Avro spec does not allow, so fastavro cannot serialize against
    # it: the body is written with the annotations stripped, the same bytes).
    import io

    import fastavro

    from tests.avro_support import connect_to_avro

    column = {"type": "bytes", "optional": True, "name": DEC, "version": 1,
              "parameters": {"scale": "-2", "connect.decimal.precision": "3"}}  # fmt: skip
    value = {"type": "struct", "optional": True, "name": f"{TOPIC}.Value",
             "fields": [{"type": "int32", "optional": False, "field": "id"},
                        {**column, "field": "n"}]}  # fmt: skip
    envelope = {"type": "struct", "optional": False, "name": f"{TOPIC}.Envelope",
                "fields": [{**value, "field": "before"}, {**value, "field": "after"},
                           {"type": "string", "optional": False, "field": "op"}]}  # fmt: skip
    key = {"type": "struct", "optional": False, "name": f"{TOPIC}.Key",
           "fields": [{"type": "int32", "optional": False, "field": "id"}]}  # fmt: skip
    avro_value, avro_key = connect_to_avro(envelope), connect_to_avro(key)
    registry.register("v", avro_value, 1)
    registry.register("k", avro_key, 2)

    def framed(schema_id: int, schema: Any, datum: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
        return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()

    rows = [(1, 123), (2, -5), (3, None)]  # unscaled: 12300, -500, null
    values = [
        framed(1, _strip_logical(avro_value), {"before": None, "op": "c", "after": {
            "id": i, "n": None if u is None else u.to_bytes(1, "big", signed=True)}})
        for i, u in rows
    ]  # fmt: skip
    keys = [framed(2, avro_key, {"id": i}) for i, _ in rows]
    got = run(decoder(registry.url), keys, values)
    as_json = [
        json.dumps({"schema": envelope, "payload": {"before": None, "op": "c", "after": {
            "id": i, "n": None if u is None else b64(u.to_bytes(1, "big", signed=True))}}}
        ).encode()
        for i, u in rows
    ]  # fmt: skip
    want = decode_debezium_json(
        RecordBatch(
            TOPIC, [json.dumps({"id": i}).encode() for i, _ in rows], as_json, [0] * 3, [0, 1, 2]
        )
    )
    assert not got.bad and got.batch is not None and want.batch is not None
    assert got.batch.column("n").to_pylist() == ["12300", "-500", None]
    assert got.batch.schema == want.batch.schema
    assert got.batch.to_pylist() == want.batch.to_pylist()


def test_a_map_with_integer_keys_is_the_same_list_of_entries_on_both_paths(
    registry: SchemaRegistry,
) -> None:
    # pgvector's sparsevec: a struct holding an int16 -> float64 map. JsonConverter writes
    # the map as [[key, value], ...], the AvroConverter as an array of MapEntry records; a
    # Hudi (Avro) map has string keys only, so both become the list of entries.
    sparse = {
        "type": "struct",
        "name": "io.debezium.data.SparseVector",
        "fields": [
            {"field": "dimensions", "type": "int16", "optional": False},
            {
                "field": "vector",
                "type": "map",
                "optional": False,
                "keys": {"type": "int16", "optional": False},
                "values": {"type": "double", "optional": False},
            },
        ],
    }
    values = [
        {"dimensions": 3000, "vector": [[9, 309.0], [1, 301.0]]},
        {"dimensions": 5, "vector": []},
        None,
    ]
    avro_type = connect_to_avro(sparse)
    assert avro_type["fields"][1]["type"]["items"]["name"] == "MapEntry"
    ser = Serializer(
        registry.url,
        TOPIC,
        key_schema(TOPIC, [("id", "int")]),
        envelope_schema(TOPIC, [("id", "int", False), ("sv", avro_type, True)]),
    )
    json_schema = _json_envelope([("sv", None, sparse, None, None)])
    key_json_schema = {"type": "struct", "fields": [{"field": "id", "type": "int32"}]}
    a_keys, a_vals, j_keys, j_vals = [], [], [], []
    for i, sv in enumerate(values):
        a_keys.append(ser.key({"id": i}))
        a_vals.append(
            ser.value(event("items", "c", {"id": i, "sv": payload_to_avro(sv, sparse)}, 10 + i))
        )
        j_keys.append(json.dumps({"schema": key_json_schema, "payload": {"id": i}}).encode())
        j_ev = event("items", "c", {"id": i, "sv": sv}, 10 + i)
        j_vals.append(json.dumps({"schema": json_schema, "payload": j_ev}).encode())
    avro = run(decoder(registry.url), a_keys, a_vals)
    js = run(decode_debezium_json, j_keys, j_vals)
    assert not avro.bad and not js.bad, (avro.bad, js.bad)
    assert avro.batch is not None and js.batch is not None
    entry = pa.struct([("key", pa.int32()), ("value", pa.float64())])
    want = pa.struct([("dimensions", pa.int32()), ("vector", pa.list_(entry))])
    assert js.batch.schema.field("sv").type == avro.batch.schema.field("sv").type == want
    assert js.batch.column("sv").to_pylist() == avro.batch.column("sv").to_pylist()
    assert js.batch.column("sv").to_pylist() == [
        {"dimensions": 3000, "vector": [{"key": 9, "value": 309.0}, {"key": 1, "value": 301.0}]},
        {"dimensions": 5, "vector": []},
        None,
    ]


@pytest.mark.parametrize("fmt", ["debezium-avro", "debezium-json"])
def test_a_null_key_is_refused_with_the_fix_the_format_allows(
    spark, registry: SchemaRegistry, tmp_path: Any, fmt: str
) -> None:
    # key_fields and keyless are JSON-only (config refuses them for Avro): the hint for
    # an Avro topic must name what does work there.
    from engine.replicator import Replicator
    from tests.engine.test_properties import Msg

    cols = [("id", "int", False), ("note", "string", True)]
    ser = Serializer(registry.url, TOPIC, key_schema(TOPIC, [("id", "int")]),
                     envelope_schema(TOPIC, cols))  # fmt: skip
    rows = [{"id": i, "note": f"n{i}"} for i in range(2)]
    if fmt == "debezium-avro":
        values = [ser.value(event("items", "c", row, 10 + i)) for i, row in enumerate(rows)]
    else:
        values = [
            json.dumps({"schema": _json_envelope([]), "payload": event("items", "c", row, 10 + i)})
            .encode()
            for i, row in enumerate(rows)
        ]  # fmt: skip
    source: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:1", "topics": ".", "format": fmt}
    if fmt == "debezium-avro":
        source["schema_registry"] = {"url": registry.url}
    cfg = config_from_dict(
        {
            "source": source,
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 2},
            "replicator": {"work_dir": str(tmp_path / "work")},
        }
    )
    replicator = Replicator(cfg, spark=spark)
    replicator.apply([Msg(TOPIC, None, v, i) for i, v in enumerate(values)])
    (failed,) = replicator.failing()
    error = failed.error or ""
    assert "2 row change(s) without a record key" in error, error
    assert "add a primary key to the source table" in error
    if fmt == "debezium-avro":
        assert "key_fields" not in error and "keyless" not in error, error
        assert "message.key.columns" in error, error
    else:
        assert "key_fields" in error and "keyless" in error, error
    assert not (tmp_path / "lake" / "public_items").exists()
