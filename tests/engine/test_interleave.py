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
def _case(draw: st.DrawFn) -> tuple[pa.Array, np.ndarray, int, list[int]]:
    typ, values = _TYPES[draw(st.sampled_from(sorted(_TYPES)))]
    items = draw(st.lists(st.one_of(st.none(), values), max_size=40))
    arr = pa.array(items, typ)
    # A slice, as a filtered or concatenated piece may be: offsets not starting at 0.
    start = draw(st.integers(0, len(items)))
    arr = arr.slice(start)
    total = len(arr) + draw(st.integers(0, 20))
    dest = np.sort(np.array(draw(st.permutations(range(total)))[: len(arr)], np.int64))
    # Where a chunked copy of ``arr`` is cut (empty chunks included, as readers give).
    cuts = sorted(draw(st.lists(st.integers(0, len(arr)), max_size=4)))
    return arr, dest, total, cuts


def _taken(arr: pa.Array, dest: np.ndarray, total: int) -> pa.Array:
    source = np.zeros(total, np.int64)
    source[dest] = np.arange(len(arr))
    missing = np.ones(total, np.bool_)
    missing[dest] = False
    return pc.take(arr, pa.array(source, mask=missing))


@settings(max_examples=300, deadline=None)
@given(_case())
def test_spread_equals_take_with_null_indices(
    case: tuple[pa.Array, np.ndarray, int, list[int]],
) -> None:
    arr, dest, total, cuts = case
    got = spread(arr, dest, total)
    got.validate(full=True)
    assert got.type == arr.type
    assert len(got) == total
    assert got.to_pylist() == _taken(arr, dest, total).to_pylist()
    # Chunked input gives the same, chunk by chunk.
    bounds = [0, *cuts, len(arr)]
    pieces = [arr[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    chunked = pa.chunked_array(pieces, arr.type)
    spread_chunked = spread(chunked, dest, total)
    spread_chunked.validate(full=True)
    assert spread_chunked.to_pylist() == got.to_pylist()


def test_spread_shares_the_text() -> None:
    """The point of it: the data buffer of a string column is not copied."""
    arr = pa.array(["x" * 1000, None, "y" * 1000])
    got = spread(arr, np.array([1, 4, 5]), 7)
    assert got.chunk(0).buffers()[2].address == arr.buffers()[2].address
    assert got.to_pylist() == [None, "x" * 1000, None, None, None, "y" * 1000, None]
    # Chunks (a reader's blocks) are not joined either: each keeps its own text.
    first, second = pa.array(["x" * 1000, None]), pa.array(["y" * 1000])
    got = spread(pa.chunked_array([first, second]), np.array([1, 4, 5]), 7)
    assert [c.buffers()[2].address for c in got.chunks] == [
        first.buffers()[2].address,
        second.buffers()[2].address,
    ]
    assert got.to_pylist() == [None, "x" * 1000, None, None, None, "y" * 1000, None]


def test_spread_refuses_a_count_mismatch() -> None:
    with pytest.raises(ValueError, match="2 destinations for 3 values"):
        spread(pa.array(["a", "b", "c"]), np.array([0, 1]), 5)
