"""``engine.source.records``: a batch's records grouped per topic, and the offsets read
per partition, against plain Python folds of the same records."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.source.records import first_offsets, group_by_topic, next_offsets
from tests.engine.test_properties import Msg

# Msg: the engine's Record protocol, since confluent-kafka's Message cannot be built
# outside librdkafka (topic, key, value, offset, partition).
_records = st.lists(
    st.builds(
        Msg,
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.integers(0, 10**12),
        st.integers(0, 3),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_records)
def test_records_are_grouped_per_topic_in_consumption_order(records: list[Msg]) -> None:
    grouped = group_by_topic(records)
    assert sorted(grouped) == sorted({r.topic() for r in records})
    for topic, (keys, values, parts, offs) in grouped.items():
        mine = [r for r in records if r.topic() == topic]
        assert keys == [r.key() for r in mine]
        assert values == [r.value() for r in mine]
        assert parts == [r.partition() for r in mine]
        assert offs == [r.offset() for r in mine]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**15)), min_size=1, max_size=60))
def test_first_and_next_offsets_per_partition(pairs: list[tuple[int, int]]) -> None:
    parts, offs = [p for p, _ in pairs], [o for _, o in pairs]
    folded_first: dict[int, int] = {}
    folded_last: dict[int, int] = {}
    for p, o in pairs:
        folded_first[p] = min(folded_first.get(p, o), o)
        folded_last[p] = max(folded_last.get(p, o), o)
    assert first_offsets(parts, offs) == folded_first
    assert next_offsets(parts, offs) == {p: o + 1 for p, o in folded_last.items()}
    assert all(type(o) is int for o in first_offsets(parts, offs).values())
