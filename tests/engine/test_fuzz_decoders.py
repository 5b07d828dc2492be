"""Fuzzing every decoder (issue 15): hostile messages never crash, hang or get lost.

Each format of ``engine.decode.FORMATS`` has an entry in tests/fuzz/registry.py (a config
fragment and seed messages). For every entry, hypothesis feeds the decoder the replicator
builds (limits included) with mutated seed batches (tests/fuzz/mutations.py: truncated,
oversized, wrongly typed, deeply nested, non-UTF-8, duplicate-member and adversarial
messages), arbitrary bytes and arbitrary JSON, and tests/fuzz/harness.py checks the
contract on each: every record is a batch row, bad with its coordinates, or ignored,
exactly once; nothing raises; each call ends within a time bound.

Runs are deterministic (``derandomize``, no example database). The long coverage-guided run
is ``python -m tests.fuzz --minutes 10`` (docs/guide/development.md, "Fuzzing").
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import config_from_dict
from engine.decode import FORMATS, RecordBatch, decoder_for
from engine.decode.limits import DECODER_FAILED, guarded, nesting_depth, too_deep
from engine.decode.result import DecodeResult
from tests.fuzz.harness import ContractBroken, check, decode_checked
from tests.fuzz.mutations import mutated_batch
from tests.fuzz.registry import FUZZ_TARGETS, seeds, target_config

FUZZED = sorted(FUZZ_TARGETS)

DETERMINISTIC = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class HypothesisChooser:
    """Mutation choices drawn from hypothesis (so a failing batch shrinks)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def raw(self, max_size: int) -> bytes:
        return self.data.draw(st.binary(max_size=max_size))


def test_every_format_is_fuzzed() -> None:
    missing = sorted(set(FORMATS) - set(FUZZ_TARGETS))
    assert not missing, (
        f"formats without a fuzz entry: {missing}; add one to FUZZ_TARGETS in "
        "tests/fuzz/registry.py (a config fragment and a seed file in tests/fuzz/seeds/)"
    )
    for fmt, target in FUZZ_TARGETS.items():
        assert fmt in FORMATS, f"fuzz entry {fmt!r} names no format of engine.decode.FORMATS"
        assert config_from_dict(target_config(fmt)).source.format == fmt
        if target.apply_topic is not None:
            on_topic = [s for s in seeds(fmt) if s.topic == target.apply_topic]
            assert any(s.expect == "row" for s in on_topic), (fmt, target.apply_topic)


@pytest.mark.parametrize("fmt", FUZZED)
def test_seeds_decode_as_declared(fmt: str) -> None:
    """Each seed alone decodes to what its ``expect`` says, and all together too."""
    all_seeds = seeds(fmt)
    assert {s.expect for s in all_seeds} <= {"row", "ignored", "bad"}
    assert any(s.expect == "row" for s in all_seeds)
    for s in all_seeds:
        result = decode_checked(fmt, s.topic, [(s.key, s.value)])
        got = "row" if result.batch is not None else "ignored" if result.ignored else "bad"
        assert got == s.expect, (s.name, [b.reason for b in result.bad])
    # One batch per topic, as the replicator decodes them: the bulk paths see them together.
    by_topic: dict[str, list] = {}
    for s in all_seeds:
        by_topic.setdefault(s.topic, []).append(s)
    for topic, group in by_topic.items():
        result = decode_checked(fmt, topic, [(s.key, s.value) for s in group])
        rows = 0 if result.batch is None else result.batch.num_rows
        assert rows == sum(s.expect == "row" for s in group), topic
        assert len(result.bad) == sum(s.expect == "bad" for s in group), topic


@pytest.mark.parametrize("fmt", FUZZED)
@settings(DETERMINISTIC, max_examples=250)
@given(data=st.data())
def test_mutated_seed_batches(fmt: str, data: st.DataObject) -> None:
    topic, records = mutated_batch(seeds(fmt), HypothesisChooser(data))
    decode_checked(fmt, topic, records)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


def _json_bytes(value: object) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


PART = st.one_of(
    st.none(),
    st.binary(max_size=64),
    JSON_VALUES.map(_json_bytes),
    st.dictionaries(st.sampled_from(["op", "before", "after", "source", "schema", "payload",
                                     "ts_ms", "transaction", "id", "status", "ddl"]),
                    JSON_VALUES, max_size=6).map(_json_bytes),
)  # fmt: skip


@pytest.mark.parametrize("fmt", FUZZED)
@settings(DETERMINISTIC, max_examples=100)
@given(
    topic=st.sampled_from(["srv.app.t", "__debezium-heartbeat.srv", "srv.transaction", "srv"]),
    records=st.lists(st.tuples(PART, PART), min_size=1, max_size=6),
)
def test_arbitrary_bytes_and_json(fmt: str, topic: str, records: list) -> None:
    decode_checked(fmt, topic, records)


# -- limits --------------------------------------------------------------------------------


def _depth_oracle(value: object) -> int:
    """Nesting depth by walking the parsed value (independent of the byte scan)."""
    if isinstance(value, dict):
        return 1 + max((_depth_oracle(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth_oracle(v) for v in value), default=0)
    return 0


@settings(DETERMINISTIC, max_examples=200)
@given(
    JSON_VALUES
    | st.recursive(st.text(alphabet='[]{}"\\:,', max_size=6), lambda c: st.lists(c, max_size=2))
)
def test_nesting_depth_matches_a_parse(value: object) -> None:
    text = json.dumps(value).encode("utf-8", "surrogatepass")
    assert nesting_depth(text) == _depth_oracle(value)
    assert (too_deep(text, 3) is not None) == (_depth_oracle(value) > 3)


TRICKY_TEXT = st.lists(
    st.sampled_from(["[", "]", "{", "}", '"', "\\", ',"payload":', "a"]), max_size=6
).map("".join)
TRICKY_JSON = st.recursive(
    st.none() | st.integers() | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY_TEXT, inner, max_size=3),
    max_leaves=12,
)


@settings(DETERMINISTIC, max_examples=200)
@given(schema=TRICKY_JSON, payload=TRICKY_JSON, limit=st.integers(1, 8))
def test_nesting_depth_of_wrapped_records(schema: object, payload: object, limit: int) -> None:
    """JsonConverter records are checked with the schema part scanned once per prefix;
    the result must equal a parse, also when the payload separator or brackets appear
    inside strings of the schema."""
    text = json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"))
    data = text.encode("utf-8", "surrogatepass")
    want = _depth_oracle({"schema": schema, "payload": payload})
    for _ in range(2):  # the second time from the prefix cache
        assert too_deep(data, limit) == (want if want > limit else None)


def _decoder(**source: object):
    return decoder_for(config_from_dict(target_config("debezium-json", source=source)))


def _schemaless(after: object) -> bytes:
    return json.dumps(
        {"op": "c", "after": after, "source": {"connector": "postgresql", "lsn": 1}}
    ).encode()


def _nested(depth: int) -> object:
    node: object = 1
    for i in range(depth):
        node = {"a": node} if i % 2 else [node]
    return node


def test_nesting_limit_refuses_deep_records_and_keeps_the_rest() -> None:
    decode = _decoder(max_nesting_depth=16)
    # Envelope (1) + after (1) + 14 levels = 16: at the limit. One more level: refused.
    at_limit = _schemaless({"id": 1, "deep": _nested(14)})
    over = _schemaless({"id": 2, "deep": _nested(15)})
    bracket_text = _schemaless({"id": 3, "text": "[" * 1000 + "{" * 1000})
    deep_key = json.dumps({"id": _nested(40)}).encode()
    records = [(b'{"id":1}', at_limit), (b'{"id":2}', over), (b'{"id":3}', bracket_text),
               (deep_key, at_limit)]  # fmt: skip
    result = decode(RecordBatch("srv.app.t", [k for k, _ in records], [v for _, v in records],
                    [0] * 4, [10, 11, 12, 13]))  # fmt: skip
    check("srv.app.t", records, [0] * 4, [10, 11, 12, 13], result)
    assert result.batch is not None and result.batch.column("_cdc_offset").to_pylist() == [10, 12]
    reasons = {b.offset: b.reason for b in result.bad}
    assert set(reasons) == {11, 13}
    assert "value nested 17 levels deep" in reasons[11]
    assert "source.max_nesting_depth = 16" in reasons[11]
    assert reasons[13].startswith("key nested 41 levels deep")


def test_size_limit_counts_key_plus_value() -> None:
    value = _schemaless({"id": 1, "pad": "x" * 100})
    key = b'{"id":1}'
    decode = _decoder(max_message_bytes=len(key) + len(value))
    result = decode(RecordBatch("srv.app.t", [key, key + b" "], [value, value], [0, 0], [1, 2]))
    assert result.batch is not None and result.batch.column("_cdc_offset").to_pylist() == [1]
    assert [b.offset for b in result.bad] == [2]
    assert "larger than source.max_message_bytes" in result.bad[0].reason


@pytest.mark.parametrize("depth", [7, 257, "deep"])
def test_nesting_limit_is_validated(depth: object) -> None:
    with pytest.raises(Exception) as info:
        config_from_dict(target_config("debezium-json", source={"max_nesting_depth": depth}))
    assert "max_nesting_depth" in str(info.value)


def test_a_decoder_exception_quarantines_only_its_record() -> None:
    """The guard's last line of defence: should a decoder raise on some input, that record
    is bad (with the exception) and the rest of the batch decodes. The real decoder no
    longer raises on anything the fuzzing found, so the failure is injected by a wrapper
    around it that raises for one poison value (no real input is known to do it)."""
    real = FORMATS["debezium-json"](config_from_dict(target_config("debezium-json")))
    poison = _schemaless({"id": 2})

    def flaky(records: RecordBatch) -> DecodeResult:
        if poison in records.values:
            raise KeyError("injected failure")
        return real(records)

    decode = guarded(flaky, max_message_bytes=None, max_nesting_depth=64)
    values = [_schemaless({"id": i}) for i in range(1, 6)]
    keys = [json.dumps({"id": i}).encode() for i in range(1, 6)]
    result = decode(RecordBatch("srv.app.t", keys, values, [0] * 5, list(range(5))))
    assert result.batch is not None
    assert result.batch.column("_cdc_offset").to_pylist() == [0, 2, 3, 4]
    assert [b.offset for b in result.bad] == [1]
    assert result.bad[0].reason.startswith(DECODER_FAILED)
    assert "injected failure" in result.bad[0].reason and result.bad[0].value == poison


def test_the_engines_own_errors_pass_the_exception_net() -> None:
    """A registry that cannot be reached (transient, retried) or refuses the credentials
    (terminal) is about the system, not a record: never turned into bad messages."""
    from engine.decode.debezium_avro.registry import RegistryAuthError
    from engine.errors import SourceError

    for error in (SourceError("schema registry unreachable"), RegistryAuthError("refused")):

        def failing(records: RecordBatch, error=error) -> DecodeResult:
            raise error

        decode = guarded(failing, max_message_bytes=None, max_nesting_depth=64)
        with pytest.raises(type(error)):
            decode(
                RecordBatch(
                    "srv.app.t", [b"{}"] * 3, [_schemaless({"id": 1})] * 3, [0] * 3, [0, 1, 2]
                )
            )


def test_the_contract_check_catches_a_lost_record() -> None:
    """The harness must be able to fail: a result that loses a record is refused."""
    decode = _decoder()
    records = [(b'{"id":1}', _schemaless({"id": 1})), (b'{"id":2}', _schemaless({"id": 2}))]
    result = decode(
        RecordBatch("srv.app.t", [r[0] for r in records], [r[1] for r in records], [0, 0], [1, 2])
    )
    assert result.batch is not None
    result.batch = result.batch.slice(0, 1)
    with pytest.raises(ContractBroken, match="1 rows"):
        check("srv.app.t", records, [0, 0], [1, 2], result)


def test_nan_and_huge_numbers_do_not_escape() -> None:
    for after in ({"id": 1, "x": math.nan}, {"id": 1, "x": 10**400}, {"id": 1, "x": -math.inf}):
        text = json.dumps({"op": "c", "after": after, "source": {"lsn": 1}}).encode()
        decode_checked("debezium-json", "srv.app.t", [(b'{"id":1}', text)])


def test_duplicate_members_last_one_wins_on_both_paths() -> None:
    """As Kafka Connect's JsonConverter (Jackson) and Python read them. The schema with a
    map column sends every record through the per-record (Python) path."""
    row = {"field": "x", "type": "double", "optional": True}
    plain = {"type": "struct", "fields": [
        {"field": "after", "type": "struct", "optional": True,
         "fields": [{"field": "id", "type": "int32"}, row]},
        {"field": "op", "type": "string"}]}  # fmt: skip
    with_map = json.loads(json.dumps(plain))
    with_map["fields"][0]["fields"].append(
        {
            "field": "m",
            "type": "map",
            "optional": True,
            "keys": {"type": "string"},
            "values": {"type": "string"},
        }  # fmt: skip
    )
    for schema in (None, plain, with_map):
        payload = '{"op":"c","after":{"id":1,"x":1,"x":2},"op":"u"}'
        text = (
            payload if schema is None else f'{{"schema":{json.dumps(schema)},"payload":{payload}}}'
        )
        result = decode_checked("debezium-json", "srv.app.t", [(b'{"id":1,"id":7}', text.encode())])
        assert result.batch is not None, [b.reason for b in result.bad]
        assert result.batch.column("_cdc_op").to_pylist() == ["u"]
        assert result.batch.column("_cdc_key").to_pylist() == ["7"]
        assert result.batch.column("x").to_pylist() in ([2], [2.0])


def test_the_hang_bound_interrupts_a_runaway_call() -> None:
    """The harness's time bound must be able to fire (a decoder loop that never ends)."""
    from tests.fuzz.harness import Hang, time_bound

    with pytest.raises(Hang), time_bound(0.2):
        while True:
            pass


def test_only_json_that_opens_an_object_or_array_is_depth_checked() -> None:
    """Binary formats (Avro's wire format starts with a zero byte) hold arbitrary bytes,
    brackets included: never refused for nesting. JSON after blanks is checked."""
    assert too_deep(b"\x00\x00\x00\x00\x01" + b"[{" * 500, 64) is None
    assert too_deep(b'"' + b"[" * 500, 64) is None
    assert too_deep(b" \n\t" + b"[" * 100 + b"]" * 100, 64) == 100


@pytest.mark.parametrize("fmt", FUZZED)
def test_the_guard_keeps_the_formats_document_reader(fmt: str) -> None:
    """The replicator reads transaction, heartbeat and schema change records of a binary
    format through its decoder's ``documents``. Wrapping decoders in the guard once hid it
    (the replicator then read Avro transaction records as JSON, found no END, and every
    batch waited for one: tests/integration/test_avro_end_to_end.py stalled)."""
    decode = decoder_for(config_from_dict(target_config(fmt)))
    inner = getattr(FORMATS[fmt](config_from_dict(target_config(fmt))), "documents", None)
    assert (decode.documents is None) == (inner is None)
    assert (decode.documents is not None) == (fmt == "debezium-avro")
