"""Schema changes seen in the events' own schemas (PostgreSQL has no DDL topic): what the
decoders report of each event's schema (JSON with schemas and Avro alike), and what
``evolve_table`` decides under each ``schema_changes`` / ``fill_defaults`` policy."""

from __future__ import annotations

import json
from decimal import Decimal

import pyarrow as pa
import pytest

from engine.config import config_from_dict
from engine.decode import RecordBatch, decode_debezium_json
from engine.decode.debezium_avro import AvroDecoder, RegistrySettings, SchemaCache
from engine.decode.row_schemas import newest_schema, rows_without
from engine.errors import SchemaEvolutionError
from engine.merge.evolution import CDC_FIELDS, evolve_table, fill_columns
from engine.playground.registry import SchemaRegistry
from tests.avro_support import JsonToAvro
from tests.schema_events import decimal_field, event, field

TOPIC = "srv.public.items"
OLD = [field("id", "int32", optional=False), field("a", "string"), field("b", "int64"),
       decimal_field("n", 10, 2)]  # fmt: skip
NEW = [field("id", "int32", optional=False), field("b", "int32"), decimal_field("n", 8, 2),
       field("d", "int32", default=42), field("e", "string", default="dflt"),
       decimal_field("g", 6, 2, default=Decimal("3.25"))]  # fmt: skip

MESSAGES = [
    event(TOPIC, OLD, "r", {"id": 1, "a": "x", "b": 10, "n": "AJY="}, 10),
    event(TOPIC, OLD, "u", {"id": 2, "a": "y", "b": 20, "n": "AJY="}, 20),
    event(TOPIC, NEW, "u", {"id": 1, "b": 11, "n": None, "d": 7, "e": "z", "g": None}, 30),
    event(TOPIC, NEW, "c", {"id": 3, "b": 30, "n": None, "d": 42, "e": "dflt", "g": "AUU="}, 40),
]


def _decode(messages, decoder=None):
    n = len(messages)
    keys = [k for _, k, _ in messages]
    values = [v for _, _, v in messages]
    if decoder is None:
        return decode_debezium_json(RecordBatch(TOPIC, keys, values, [0] * n, list(range(n))))
    return decoder(RecordBatch(TOPIC, keys, values, [0] * n, list(range(n))))


def _check_row_schemas(res) -> None:
    assert not res.bad
    old, new = sorted(res.row_schemas, key=lambda s: s.newest_offset())
    offsets = {p: o.to_pylist() for p, o in old.offsets.items()}
    assert old.columns == ("id", "a", "b", "n") and offsets == {0: [0, 1]}
    offsets = {p: o.to_pylist() for p, o in new.offsets.items()}
    assert new.columns == ("id", "b", "n", "d", "e", "g") and offsets == {0: [2, 3]}
    assert new.defaults == {"d": 42, "e": "dflt", "g": Decimal("3.25")}
    # The batch is the union of both schemas; the newest event's schema has no ``a``.
    assert "a" in res.batch.column_names
    assert newest_schema(res.row_schemas, res.batch) == (
        new,
        (res.batch["_cdc_pos"][3].as_py(), res.batch["_cdc_pos_sub"][3].as_py()),
    )
    # Cut before the changed events: the newest event in the batch is of the old schema.
    assert newest_schema(res.row_schemas, res.batch.slice(0, 2))[0] is old
    assert rows_without(res.row_schemas, res.batch, "d").to_pylist() == [True, True, False, False]


def test_json_events_report_each_schema_with_its_columns_and_defaults() -> None:
    _check_row_schemas(_decode(MESSAGES))


def test_avro_events_report_the_same() -> None:
    with SchemaRegistry() as reg:
        convert = JsonToAvro(reg.url)
        avro = [convert.message(*m) for m in MESSAGES]
        res = _decode(avro, AvroDecoder(SchemaCache(RegistrySettings(reg.url))))
    # Avro schemas carry the defaults of plain types only (a bytes default is not base64).
    g = next(s for s in res.row_schemas if "g" in s.columns)
    assert g.defaults == {"d": 42, "e": "dflt"}
    g.defaults["g"] = Decimal("3.25")
    _check_row_schemas(res)


def test_schemaless_events_report_no_schema() -> None:
    raw = [(t, k, json.dumps(json.loads(v)["payload"]).encode()) for t, k, v in MESSAGES[:1]]
    res = _decode(raw)
    assert res.batch is not None and res.row_schemas == []
    assert newest_schema(res.row_schemas, res.batch) is None


def _table(**cols: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in cols.items()] + CDC_FIELDS)


def _batch(**cols: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in cols.items()])


CURRENT = _table(id=pa.int32(), a=pa.string(), b=pa.int64(), n=pa.decimal128(10, 2))
AFTER = _batch(id=pa.int32(), b=pa.int32(), n=pa.decimal128(8, 2), d=pa.int32())
SOURCE = {"id", "b", "n", "d"}


def _evolve(policy: str, fill: bool = False, **kw):
    keep_wider = policy != "fail"
    return evolve_table(
        CURRENT,
        kw.pop("batch", AFTER),
        policy=(policy, keep_wider, fill),
        source_columns=kw.pop("source", SOURCE),
        defaults=kw.pop("defaults", {"d": 42}),
        key_fields=["id"],
        **kw,
    )


def test_keep_keeps_the_dropped_column_and_the_wider_types() -> None:
    ev = _evolve("keep")
    assert ev.drop == [] and ev.kept == ["a"] and ev.fills == {}
    types = {f.name: f.type for f in ev.schema}
    assert types["a"] == pa.string() and types["b"] == pa.int64()
    assert types["n"] == pa.decimal128(10, 2) and types["d"] == pa.int32()
    text = "\n".join(ev.notes)
    assert "column(s) a no longer in the source: kept in the replica" in text
    assert "column b int64->int32 narrowed" in text and "column n decimal128(10, 2)->" in text
    assert "rows stored before it read NULL in the replica (the source shows 42)" in text
    # A drop already noted is not noted again (it stays kept).
    assert ev.narrowed == ["b int64->int32", "n decimal128(10, 2)->decimal128(8, 2)"]
    # A drop or narrowing already noted is not noted again (the column stays kept).
    again = _evolve("keep", kept_before=["a", *ev.narrowed])
    assert again.kept == ["a"] and again.narrowed == ev.narrowed
    assert not any("no longer" in n or "narrowed" in n for n in again.notes)


def test_apply_removes_the_dropped_column() -> None:
    ev = _evolve("apply")
    assert ev.drop == ["a"] and ev.kept == [] and "a" not in ev.schema.names
    assert ev.schema.field("b").type == pa.int64()


def test_fail_refuses_drops_and_narrowings_naming_the_setting() -> None:
    same_types = _batch(id=pa.int32(), b=pa.int64(), n=pa.decimal128(10, 2), d=pa.int32())
    with pytest.raises(SchemaEvolutionError, match="a no longer in the source") as exc:
        _evolve("fail", batch=same_types)
    assert 'schema_changes = "keep"' in exc.value.hint
    with pytest.raises(SchemaEvolutionError, match="'b' narrowed from int64 to int32") as exc:
        _evolve("fail", source={"id", "a", "b", "n", "d"})
    assert 'schema_changes = "keep"' in exc.value.hint


@pytest.mark.parametrize("policy", ["keep", "apply", "fail"])
@pytest.mark.parametrize(
    ("column", "new_type"),
    [("b", pa.string()), ("n", pa.decimal128(10, 3)), ("a", pa.int64())],
)
def test_a_change_of_kind_stops_the_table_under_every_policy(policy, column, new_type) -> None:
    batch = _batch(id=pa.int32(), a=pa.string(), b=pa.int64(), n=pa.decimal128(10, 2))
    batch = batch.set(batch.get_field_index(column), pa.field(column, new_type))
    with pytest.raises(SchemaEvolutionError, match=f"column '{column}' changed from"):
        _evolve(policy, batch=batch, source=set(batch.names))


def test_the_key_and_unknown_sources_are_never_dropped() -> None:
    assert _evolve("apply", source={"b", "n", "d"}).drop == ["a"]  # not the key ``id``
    ev = _evolve("apply", source=None)  # schemaless: nothing is judged dropped
    assert ev.drop == [] and ev.kept == [] and "a" in ev.schema.names


def test_fill_defaults_fills_only_added_columns_with_a_known_default() -> None:
    ev = _evolve("keep", fill=True)
    assert ev.fills == {"d": 42}
    assert any("rows stored before it are set to it" in n for n in ev.notes)
    assert _evolve("keep", fill=True, defaults={}).fills == {}
    # Once the column exists in the table, nothing is filled again.
    assert evolve_table(
        _table(id=pa.int32(), d=pa.int32()), AFTER, policy=("keep", True, True),
        source_columns=SOURCE, defaults={"d": 42},
    ).fills == {}  # fmt: skip
    stored = pa.table({"id": [1, 2]})
    schema = _table(id=pa.int32(), d=pa.int32())
    assert fill_columns(stored, (("d", 42),), schema).column("d").to_pylist() == [42, 42]
    has = pa.table({"id": [1], "d": pa.array([None], pa.int32())})
    assert fill_columns(has, (("d", 42),), schema).column("d").to_pylist() == [None]


def test_config_policies_per_table_and_refused_values() -> None:
    base = {"source": {"bootstrap_servers": "k:9092", "topics": "x"}, "target": {"path": "t"}}
    cfg = config_from_dict(
        {
            **base,
            "source": {**base["source"], "schema_changes": "apply"},
            "tables": {
                "a": {"schema_changes": "fail", "fill_defaults": True},
                "b": {"ddl": "apply", "schema_changes": "fail"},
            },
        }
    )
    assert cfg.schema_policy("other") == ("apply", True, False)
    assert cfg.schema_policy("a") == ("fail", False, True)
    assert cfg.schema_policy("b") == ("fail", True, False)  # ddl = apply keeps it wider
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="schema_changes"):
        config_from_dict({**base, "source": {**base["source"], "schema_changes": "drop"}})
    with pytest.raises(ConfigError, match="fill_defaults"):
        config_from_dict({**base, "tables": {"a": {"fill_defaults": "maybe"}}})


def test_a_narrowing_is_judged_by_the_newest_schema_in_a_mixed_batch() -> None:
    from engine.replicator.schema_changes import _narrowed_in_source

    res = _decode(MESSAGES)
    assert res.batch.schema.field("b").type == pa.int64()  # old and new events: the wider
    newest, _ = newest_schema(res.row_schemas, res.batch)
    assert newest.types["b"] == pa.int32() and newest.types["n"] == pa.decimal128(8, 2)
    judged = _narrowed_in_source(res.batch.schema, CURRENT, newest)
    assert judged.field("b").type == pa.int32()
    assert judged.field("n").type == pa.decimal128(8, 2)
    assert judged.field("a").type == pa.string()  # in no newest schema: as it was
    # Against a table that already has the narrower type nothing changes.
    narrow = _table(id=pa.int32(), b=pa.int32(), n=pa.decimal128(8, 2))
    assert _narrowed_in_source(res.batch.schema, narrow, newest) == res.batch.schema
