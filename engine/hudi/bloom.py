"""The record-key metadata Hudi keeps in every base file's Parquet footer.

Hudi's writers put three things in a base file's footer key-value metadata, and its
bloom index reads them to find which files may hold an incoming key:

* ``org.apache.hudi.bloomfilter``: a bloom filter of the file's record keys, of type
  ``HoodieDynamicBoundedBloomFilter`` (``hoodie_bloom_filter_type_code`` =
  ``DYNAMIC_V0``), built with Hudi's defaults (``hoodie.index.bloom.num_entries``
  60000, ``hoodie.index.bloom.fpp`` 1e-9, ``hoodie.bloom.index.filter.dynamic.max.entries``
  100000, Murmur hashing);
* ``hoodie_min_record_key`` and ``hoodie_max_record_key``: the least and greatest key
  in Java ``String`` order (UTF-16 code units), written only when the file has rows.

The filter, as Hudi's ``InternalDynamicBloomFilter`` (Hadoop's ``DynamicBloomFilter``
with a bound) lays it out:

* Rows of ``vector_size`` bits, each a plain bloom filter with ``num_hashes`` hashes.
  Keys go, in the order they are added, ``num_entries`` to a row; once ``rows *
  num_entries`` reaches ``max_entries`` no row is added: the key that finds the last
  row full goes to row 0, and the keys after it alternate over the rows (0, 1, 0, ...
  for two rows).
* The positions of a key: its UTF-8 bytes hashed ``num_hashes`` times with Hadoop's
  MurmurHash (MurmurHash2, 32 bits, Hadoop's tail order and sign-extended tail bytes),
  each round seeded with the previous round's hash (the first with 0); a position is
  ``abs(hash % vector_size)`` in Java's signed arithmetic.
* Serialized with Java's ``DataOutput`` (big-endian): the filter header (int -1,
  int ``num_hashes``, byte hash type 1 = Murmur, int ``vector_size``), int
  ``num_entries``, int keys in the last row (keys past the bound count there too),
  int number of rows, then per row the same header and ``ceil(vector_size / 8)``
  bytes, bit ``i`` in byte ``i // 8`` under mask ``1 << (i % 8)``. The footer value is
  that, Base64 (standard alphabet, padded).

This is byte for byte what Hadoop's ``DynamicBloomFilter.write`` produces, so Hadoop's
class reads it (tests/engine/test_hudi_bloom.py checks both that and Hudi's own files).

Hashing is vectorised: each round runs over all keys of a chunk at once, keys sorted by
length so the words of a round touch a prefix of the chunk; the per-key word mixing,
which does not depend on the seed, is computed once for all rounds.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import HudiError

#: Footer keys (``HoodieBloomFilterWriteSupport``).
BLOOM_FILTER_KEY = "org.apache.hudi.bloomfilter"
TYPE_CODE_KEY = "hoodie_bloom_filter_type_code"
MIN_RECORD_KEY = "hoodie_min_record_key"
MAX_RECORD_KEY = "hoodie_max_record_key"
FOOTER_KEYS = (BLOOM_FILTER_KEY, TYPE_CODE_KEY, MIN_RECORD_KEY, MAX_RECORD_KEY)

#: ``BloomFilterTypeCode.DYNAMIC_V0``: the type Hudi writes by default.
TYPE_CODE = "DYNAMIC_V0"
#: Hudi's defaults: hoodie.index.bloom.num_entries, hoodie.index.bloom.fpp and
#: hoodie.bloom.index.filter.dynamic.max.entries.
NUM_ENTRIES = 60_000
FPP = 0.000000001
MAX_ENTRIES = 100_000
#: The fewest keys a base file's filter is sized for (:func:`entries_for`).
MIN_ENTRIES = 1_000
#: ``Hash.MURMUR_HASH``.
MURMUR_HASH = 1

_VERSION = -1  # the filter format version Hadoop and Hudi write
_HEADER = struct.Struct(">iibi")  # version, hashes, hash type, vector size
_DYNAMIC = struct.Struct(">iii")  # keys per row, keys in the last row, rows
_M = np.uint32(0x5BD1E995)
#: Keys hashed together: the working arrays of a chunk stay in the CPU cache.
CHUNK = 1 << 15


def bit_size(num_entries: int, fpp: float) -> int:
    """Bits per row for ``num_entries`` keys at false-positive rate ``fpp``."""
    return math.ceil(num_entries * (-math.log(fpp) / (math.log(2) * math.log(2))))


def hash_count(bits: int, num_entries: int) -> int:
    """Hashes per key for rows of ``bits`` bits holding ``num_entries`` keys."""
    return math.ceil(math.log(2) * bits / num_entries)


def _row_limit(num_entries: int, max_entries: int) -> int:
    """How many rows the filter grows to before keys wrap around."""
    return max(1, -(-max_entries // num_entries))


def _rows_of(start: int, count: int, num_entries: int, row_limit: int) -> np.ndarray:
    """The row each of the keys ``start .. start + count - 1`` (in add order) goes to."""
    index = np.arange(start, start + count, dtype=np.int64)
    full = row_limit * num_entries
    rows = np.minimum(index // num_entries, row_limit - 1)
    # Past the bound: the key that finds the last row full goes to row 0, then the
    # keys take the rows in turn from row 0.
    past = index > full
    rows[past] = (index[past] - full - 1) % row_limit
    rows[index == full] = 0
    return rows


def _utf8(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The keys as one string array (large offsets kept as they are)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if pa.types.is_large_string(keys.type) or pa.types.is_string(keys.type):
        array = keys
    else:
        array = keys.cast(pa.string())
    if array.null_count:
        raise HudiError("a record key is null: Hudi's bloom filter cannot hold it")
    return array


def _buffers(keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start offsets, byte lengths and the (padded) data bytes of a string array."""
    offset_type = np.int64 if pa.types.is_large_string(keys.type) else np.int32
    _, offsets_buf, data_buf = keys.buffers()
    if not len(keys) or offsets_buf is None:
        none = np.zeros(0, dtype=np.int64)
        return none, none, np.zeros(4, dtype=np.uint8)
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[
        keys.offset : keys.offset + len(keys) + 1
    ].astype(np.int64)
    lengths = np.diff(offsets)
    data = np.zeros(int(offsets[-1]) + 4, dtype=np.uint8)  # 4 bytes of room for word reads
    if data_buf is not None and len(keys):
        raw = np.frombuffer(data_buf, dtype=np.uint8)
        data[int(offsets[0]) : int(offsets[-1])] = raw[int(offsets[0]) : int(offsets[-1])]
    return offsets[:-1], lengths, data


class _Hasher:
    """Murmur positions of a chunk of keys, round by round (the chunk sorted by length)."""

    def __init__(self, starts: np.ndarray, lengths: np.ndarray, data: np.ndarray) -> None:
        if len(lengths) and int(lengths.min()) == 0:
            raise HudiError("a record key is empty: Hudi's bloom filter cannot hold it")
        words_per_key = lengths >> 2
        self.order: np.ndarray | slice = slice(None)  # keys of one length need no sorting
        if len(lengths) and words_per_key.min() != words_per_key.max():
            self.order = np.argsort(-words_per_key, kind="stable")
            starts = starts[self.order]
            lengths = lengths[self.order]
            words_per_key = words_per_key[self.order]
        # Little-endian 32-bit words at any byte offset: an unaligned view of the data.
        words = np.ndarray(
            shape=(len(data) - 3,), dtype="<u4", buffer=data.data, offset=0, strides=(1,)
        )
        self.mixed: list[np.ndarray] = []
        most = int(words_per_key[0]) if len(words_per_key) else 0
        # counts[w]: keys with more than w words (a prefix, keys being sorted).
        counts = np.searchsorted(-words_per_key, -np.arange(most), side="left")
        for w in range(most):
            k = words[starts[: counts[w]] + 4 * w].astype(np.uint32)
            k *= _M
            k ^= k >> np.uint32(24)
            k *= _M
            self.mixed.append(k)
        # The tail bytes, sign-extended as Java's bytes are, and whether there is a tail.
        left = lengths & 3
        ends = starts + lengths
        tail = np.zeros(len(lengths), dtype=np.int32)
        for back, shift in ((3, 16), (2, 8), (1, 0)):
            has = left >= back
            byte = np.zeros(len(lengths), dtype=np.int32)
            byte[has] = data[ends[has] - back].view(np.int8)
            tail ^= byte << shift
        self.tail: np.ndarray | None = None  # None: no key has a tail
        self.tail_mul: np.ndarray | None = None
        if left.any():
            self.tail = tail.view(np.uint32)
            self.tail_mul = np.where(left != 0, _M, np.uint32(1)).astype(np.uint32)
        self.lengths = lengths.astype(np.uint32)

    def rounds(self, num_hashes: int, vector_size: int) -> Iterator[np.ndarray]:
        """For each of ``num_hashes`` rounds the positions of the (sorted) keys."""
        size = np.uint32(vector_size)
        seed = np.zeros(len(self.lengths), dtype=np.uint32)
        for _ in range(num_hashes):
            h = seed ^ self.lengths
            for k in self.mixed:
                part = h[: len(k)]
                part *= _M
                part ^= k
            if self.tail is not None and self.tail_mul is not None:
                h ^= self.tail
                h *= self.tail_mul
            h ^= h >> np.uint32(13)
            h *= _M
            h ^= h >> np.uint32(15)
            seed = h
            # abs(h % size) in Java's int arithmetic is abs(h) mod size; abs of
            # Integer.MIN_VALUE wraps to itself, which as unsigned is 2^31, as it should.
            magnitude = np.abs(h.view(np.int32)).view(np.uint32)
            yield magnitude - (magnitude // size) * size


@dataclass
class DynamicBloomFilter:
    """A ``HoodieDynamicBoundedBloomFilter``: its parameters and its rows of bits."""

    vector_size: int
    num_hashes: int
    num_entries: int
    #: Keys counted in the last row (every key past the bound counts there too).
    last_row_keys: int
    #: One row of ``vector_size`` booleans per bloom filter row.
    bits: np.ndarray
    hash_type: int = MURMUR_HASH

    @classmethod
    def build(
        cls,
        keys: pa.Array | pa.ChunkedArray,
        *,
        num_entries: int = NUM_ENTRIES,
        fpp: float = FPP,
        max_entries: int = MAX_ENTRIES,
    ) -> DynamicBloomFilter:
        """The filter Hudi builds when it adds ``keys`` in this order to a new filter."""
        keys = _utf8(keys)
        vector_size = bit_size(num_entries, fpp)
        num_hashes = hash_count(vector_size, num_entries)
        limit = _row_limit(num_entries, max_entries)
        n = len(keys)
        rows = min(limit, max(1, -(-n // num_entries)))
        bits = np.zeros(rows * vector_size, dtype=np.bool_)
        starts, lengths, data = _buffers(keys)
        for first in range(0, n, CHUNK):
            last = min(n, first + CHUNK)
            hasher = _Hasher(starts[first:last], lengths[first:last], data)
            row_offsets = None
            if rows > 1:
                key_rows = _rows_of(first, last - first, num_entries, limit)[hasher.order]
                row_offsets = (key_rows * vector_size).astype(np.int64)
            for positions in hasher.rounds(num_hashes, vector_size):
                if row_offsets is None:
                    bits[positions] = True
                else:
                    bits[row_offsets + positions] = True
        return cls(
            vector_size=vector_size,
            num_hashes=num_hashes,
            num_entries=num_entries,
            last_row_keys=n - (rows - 1) * num_entries,
            bits=bits.reshape(rows, vector_size),
        )

    def serialize(self) -> bytes:
        """The filter as Hudi's (and Hadoop's) ``write(DataOutput)`` writes it."""
        header = _HEADER.pack(_VERSION, self.num_hashes, self.hash_type, self.vector_size)
        parts = [header, _DYNAMIC.pack(self.num_entries, self.last_row_keys, len(self.bits))]
        for row in self.bits:
            parts.append(header)
            parts.append(np.packbits(row, bitorder="little").tobytes())
        return b"".join(parts)

    def to_footer(self) -> str:
        """The footer value: the serialized filter in Base64."""
        return base64.b64encode(self.serialize()).decode("ascii")

    @classmethod
    def deserialize(cls, raw: bytes) -> DynamicBloomFilter:
        """Read a filter ``serialize`` (or Hudi) wrote."""
        try:
            version, num_hashes, hash_type, vector_size = _HEADER.unpack_from(raw, 0)
            num_entries, last_row_keys, rows = _DYNAMIC.unpack_from(raw, _HEADER.size)
        except struct.error as exc:
            raise HudiError(f"bloom filter too short: {exc}") from exc
        if version != _VERSION or hash_type != MURMUR_HASH:
            raise HudiError(f"unsupported bloom filter (version {version}, hash {hash_type})")
        row_bytes = (vector_size + 7) // 8
        at = _HEADER.size + _DYNAMIC.size
        if len(raw) != at + rows * (_HEADER.size + row_bytes):
            raise HudiError(f"bloom filter of {len(raw)} bytes does not hold {rows} rows")
        bits = np.zeros((rows, vector_size), dtype=np.bool_)
        for r in range(rows):
            if _HEADER.unpack_from(raw, at) != (version, num_hashes, hash_type, vector_size):
                raise HudiError(f"bloom filter row {r} has another shape than the filter")
            at += _HEADER.size
            packed = np.frombuffer(raw, dtype=np.uint8, count=row_bytes, offset=at)
            bits[r] = np.unpackbits(packed, bitorder="little", count=vector_size).view(np.bool_)
            at += row_bytes
        return cls(vector_size, num_hashes, num_entries, last_row_keys, bits, hash_type)

    @classmethod
    def from_footer(cls, value: str | bytes) -> DynamicBloomFilter:
        """Read a footer value (Base64 text)."""
        return cls.deserialize(base64.b64decode(value, validate=True))

    def might_contain(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Per key whether the filter may hold it (False: it certainly does not)."""
        keys = _utf8(keys)
        starts, lengths, data = _buffers(keys)
        found = np.zeros(len(keys), dtype=np.bool_)
        for first in range(0, len(keys), CHUNK):
            last = min(len(keys), first + CHUNK)
            hasher = _Hasher(starts[first:last], lengths[first:last], data)
            hit = np.ones((len(self.bits), last - first), dtype=np.bool_)
            for positions in hasher.rounds(self.num_hashes, self.vector_size):
                hit &= self.bits[:, positions]
            found[first:last][hasher.order] = hit.any(axis=0)
        return found


def min_max_keys(keys: pa.Array | pa.ChunkedArray) -> tuple[str, str] | None:
    """The least and greatest key in Java ``String`` order (None for no keys).

    Java compares UTF-16 code units, so a character above U+FFFF (a surrogate pair,
    0xD800..) sorts before U+E000..U+FFFF, where code point (and UTF-8 byte) order puts
    it after. In UTF-8 those are the sequences led by bytes 0xF0..0xF4 and 0xEE..0xEF:
    moving the lead bytes 0xEE and 0xEF above 0xF4 (to 0xF5 and 0xF6, which never occur
    in UTF-8) makes byte order Java's order; continuation bytes are 0x80..0xBF and stay.
    """
    keys = _utf8(keys)
    if not len(keys):
        return None
    starts, lengths, data = _buffers(keys)
    used = data[int(starts[0]) : int(starts[-1] + lengths[-1])]
    if not len(used) or int(used.max()) < 0xF0:
        bounds = pc.min_max(keys)  # no character above U+FFFF: byte order is Java's
        return bounds["min"].as_py(), bounds["max"].as_py()
    remap = np.arange(256, dtype=np.uint8)
    remap[0xEE], remap[0xEF] = 0xF5, 0xF6
    back = np.arange(256, dtype=np.uint8)
    back[0xF5], back[0xF6] = 0xEE, 0xEF
    offsets = np.append(starts - starts[0], starts[-1] + lengths[-1] - starts[0])
    binary = pa.Array.from_buffers(
        pa.large_binary(),
        len(keys),
        [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(remap[used])],
    )
    bounds = pc.min_max(binary)
    low, high = (
        back[np.frombuffer(bounds[end].as_py(), dtype=np.uint8)].tobytes().decode("utf-8")
        for end in ("min", "max")
    )
    return low, high


def entries_for(count: int) -> int:
    """The ``num_entries`` of the filter of a base file holding ``count`` keys.

    Hudi sizes every file's filter for ``hoodie.index.bloom.num_entries`` keys (60,000 at
    a false-positive rate of 1e-9: 323 KB, 431 KB of Base64 in the footer) however few it
    holds. A base file never gains keys after it is written, so its own count (at least
    :data:`MIN_ENTRIES`, at most Hudi's default) keeps that rate for every key it has;
    Hudi's bloom index reads each filter's size from the filter itself. A 400-row file's
    footer shrinks from 431 KB to 7 KB.
    """
    return min(NUM_ENTRIES, max(MIN_ENTRIES, count))


def footer_metadata(
    keys: pa.Array | pa.ChunkedArray, num_entries: int = NUM_ENTRIES
) -> dict[str, str]:
    """The footer key-value metadata Hudi writes for a base file of ``keys`` (file order),
    its filter sized for ``num_entries`` keys (``hoodie.index.bloom.num_entries``)."""
    found = {
        BLOOM_FILTER_KEY: DynamicBloomFilter.build(keys, num_entries=num_entries).to_footer(),
        TYPE_CODE_KEY: TYPE_CODE,
    }
    bounds = min_max_keys(keys)
    if bounds is not None:
        found[MIN_RECORD_KEY], found[MAX_RECORD_KEY] = bounds
    return found
