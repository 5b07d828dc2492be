"""``engine.source.records``: a batch's records grouped per topic, and the offsets read
per partition, against plain Python folds of the same records."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.source.records import first_offsets, group_by_topic, next_offsets


@dataclass(frozen=True)
class _Record:
    """A stand-in with the Record protocol: the grouping reads nothing else of a
    message, and confluent-kafka's Message cannot be built outside librdkafka."""

    t: str
    k: bytes | None
    v: bytes | None
    p: int
    o: int

    def topic(self) -> str:
        return self.t

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o


_records = st.lists(
    st.builds(
        _Record,
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.integers(0, 3),
        st.integers(0, 10**12),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_records)
def test_records_are_grouped_per_topic_in_consumption_order(records: list[_Record]) -> None:
    grouped = group_by_topic(records)
    assert sorted(grouped) == sorted({r.t for r in records})
    for topic, (keys, values, parts, offs) in grouped.items():
        mine = [r for r in records if r.t == topic]
        assert keys == [r.k for r in mine]
        assert values == [r.v for r in mine]
        assert parts == [r.p for r in mine]
        assert offs == [r.o for r in mine]


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
