"""``engine.decode.interleave.spread`` against Arrow's own ``take`` with null indices."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.decode.interleave import spread

_TYPES = {
    "string": (pa.string(), st.text(max_size=30)),
    "large_string": (pa.large_string(), st.text(max_size=30)),
    "binary": (pa.binary(), st.binary(max_size=30)),
    "large_binary": (pa.large_binary(), st.binary(max_size=30)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "struct": (pa.struct([("a", pa.string())]), st.builds(lambda s: {"a": s}, st.text(max_size=5))),
}


@st.composite
def _case(draw: st.DrawFn) -> tuple[pa.Array, np.ndarray, int]:
    typ, values = _TYPES[draw(st.sampled_from(sorted(_TYPES)))]
    items = draw(st.lists(st.one_of(st.none(), values), max_size=40))
    arr = pa.array(items, typ)
    # A slice, as a filtered or concatenated piece may be: offsets not starting at 0.
    start = draw(st.integers(0, len(items)))
    arr = arr.slice(start)
    total = len(arr) + draw(st.integers(0, 20))
    dest = np.sort(np.array(draw(st.permutations(range(total)))[: len(arr)], np.int64))
    return arr, dest, total


def _taken(arr: pa.Array, dest: np.ndarray, total: int) -> pa.Array:
    source = np.zeros(total, np.int64)
    source[dest] = np.arange(len(arr))
    missing = np.ones(total, np.bool_)
    missing[dest] = False
    return pc.take(arr, pa.array(source, mask=missing))


@settings(max_examples=300, deadline=None)
@given(_case())
def test_spread_equals_take_with_null_indices(case: tuple[pa.Array, np.ndarray, int]) -> None:
    arr, dest, total = case
    got = spread(arr, dest, total)
    got.validate(full=True)
    assert got.type == arr.type
    assert got.to_pylist() == _taken(arr, dest, total).to_pylist()
    # Chunked input gives the same.
    assert spread(pa.chunked_array([arr], arr.type), dest, total).to_pylist() == got.to_pylist()


def test_spread_shares_the_text() -> None:
    """The point of it: the data buffer of a string column is not copied."""
    arr = pa.array(["x" * 1000, None, "y" * 1000])
    got = spread(arr, np.array([1, 4, 5]), 7)
    assert got.buffers()[2].address == arr.buffers()[2].address
    assert got.to_pylist() == [None, "x" * 1000, None, None, None, "y" * 1000, None]


def test_spread_refuses_a_count_mismatch() -> None:
    with pytest.raises(ValueError, match="2 destinations for 3 values"):
        spread(pa.array(["a", "b", "c"]), np.array([0, 1]), 5)
