"""Rows of a table spread among null rows without copying their text.

A batch's change rows are decoded in consumption order, but a Kafka tombstone (a null
value after a delete) has no row image: it is decoded apart and must be put back
between the rows. ``Table.take`` would do it by copying every column, the long text of
wide rows included. :func:`spread` builds the same columns with the text where it is:
a string or binary column keeps its data buffer and only gets new offsets and a new
validity bitmap (an int per row); other columns are taken as usual.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["spread"]

#: Types whose data buffer is shared: (offset width in bytes).
_VARIABLE = {
    pa.string(): 4,
    pa.binary(): 4,
    pa.large_string(): 8,
    pa.large_binary(): 8,
}


def _spread_variable(arr: pa.Array, dest: np.ndarray, total: int, width: int) -> pa.Array:
    """``arr`` (n values) at rows ``dest`` (ascending) of ``total`` rows, nulls elsewhere."""
    dtype = np.int32 if width == 4 else np.int64
    offsets = np.frombuffer(arr.buffers()[1], dtype, len(arr) + 1, arr.offset * width)
    # A null row is empty: it ends where the row before it ends (offsets never fall).
    ends = np.full(total, offsets[0], dtype)
    ends[dest] = offsets[1:]
    np.maximum.accumulate(ends, out=ends)
    new_offsets = np.empty(total + 1, dtype)
    new_offsets[0] = offsets[0]
    new_offsets[1:] = ends
    valid = np.zeros(total, np.bool_)
    valid[dest] = arr.is_valid().to_numpy(zero_copy_only=False)
    bitmap = pa.array(valid, pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(
        arr.type, total, [bitmap, pa.py_buffer(new_offsets), arr.buffers()[2]]
    )


def spread(column: pa.Array | pa.ChunkedArray, dest: np.ndarray, total: int) -> pa.ChunkedArray:
    """The values of ``column`` at output rows ``dest`` (ascending, one per value) of
    ``total`` rows; the other rows are null. Equal to a ``take`` with null indices.

    A chunked column is spread chunk by chunk (each chunk gets the run of output rows
    from its first value to the next chunk's first), so its chunks are never joined: the
    reader gives a chunk per block, and joining them would copy all the text."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    count = sum(len(c) for c in chunks)
    if len(dest) != count:
        raise ValueError(f"{len(dest)} destinations for {count} values")
    chunks = [c for c in chunks if len(c)]
    if not chunks:
        return pa.chunked_array([pa.nulls(total, column.type)], column.type)
    out = []
    first = 0
    for k, chunk in enumerate(chunks):
        last = first + len(chunk)
        lo = 0 if k == 0 else int(dest[first])
        hi = total if k == len(chunks) - 1 else int(dest[last])
        out.append(_spread_array(chunk, dest[first:last] - lo, hi - lo))
        first = last
    return pa.chunked_array(out, column.type)


def _spread_array(arr: pa.Array, dest: np.ndarray, total: int) -> pa.Array:
    """One chunk's values at rows ``dest`` of ``total``."""
    width = _VARIABLE.get(arr.type)
    if width is not None:
        return _spread_variable(arr, dest, total, width)
    source = np.zeros(total, np.int64)
    source[dest] = np.arange(len(arr))
    missing = np.ones(total, np.bool_)
    missing[dest] = False
    return pc.take(arr, pa.array(source, pa.int64(), mask=missing))
