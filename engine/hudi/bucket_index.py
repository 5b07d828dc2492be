"""Hudi's SIMPLE bucket index: record key -> bucket number -> file group id.

A bucket-indexed table keeps exactly one file group per bucket, and a Java writer finds
the group of a key by recomputing the bucket from the key, so our hashing must match
Java bit for bit (format doc section 8.2)::

    bucket = (List<String>(hash values).hashCode() & 0x7FFFFFFF) % num_buckets

where ``String.hashCode`` runs over UTF-16 code units with 32-bit wrap-around. The hash
values are ``[key]`` for a key without ``':'``; a key with one is read as Hudi 0.14/0.15's
``BucketIdentifier.getHashKeys`` reads it (the ``"java"`` rule): split on ``','`` into
``field:value`` pairs, each split on ``':'`` with Java's ``String.split`` (trailing empty
strings dropped), collected into a map, and the values of the hash fields looked up in
it (a field that is not there contributes ``null``, whose hash is 0). So a *simple* key
such as ``"10:30"`` hashes as ``[null]`` unless its text before ``':'`` is the key
field's name. Where Java itself fails (a pair without a value, a field named twice), no
Java writer can store the key at all, and the key falls back to the ``"legacy"`` rule.

The ``"legacy"`` rule (tables created by cdcctl before it knew Java's: their
``hoodie.properties`` has no ``cdcctl.bucket.hash.rule``) hashes the text after the first
``':'`` of every ``','``-separated part. A table keeps the rule it was created with: its
rows are already in the buckets that rule chose. ``bucket_ids`` is the vectorised form
used on whole batches.
"""

from __future__ import annotations

import sys
import uuid
from array import array

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import HudiError

_MASK32 = 0xFFFFFFFF
_COLON = ord(":")


def java_string_hash(s: str) -> int:
    """Return Java's ``String.hashCode()`` of ``s`` as a signed 32-bit int.

    Args:
        s: Any text; characters outside the BMP count as two UTF-16 surrogate units,
            exactly as in Java.

    Returns:
        The hash in ``[-2**31, 2**31)``.
    """
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h >= 1 << 31 else h


def _utf16_units(s: str) -> array:
    """Return the UTF-16 code units of ``s`` (surrogate pairs for astral characters)."""
    units = array("H", s.encode("utf-16-le", "surrogatepass"))
    if sys.byteorder == "big":  # the array reads host order; the bytes are little-endian
        units.byteswap()
    return units


#: Names of the hashing rules (``cdcctl.bucket.hash.rule``); see the module docstring.
RULE_JAVA = "java"
RULE_LEGACY = "legacy"
RULES = (RULE_JAVA, RULE_LEGACY)


def _java_split(text: str, sep: str) -> list[str]:
    """Java's ``text.split(sep)`` for a one-character literal separator: no separator
    gives ``[text]``; otherwise the parts with trailing empty strings removed."""
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def hash_values(
    record_key: str, hash_fields: list[str] | None = None, rule: str = RULE_JAVA
) -> list[str | None]:
    """Return the values Hudi hashes for a record key (format doc 8.2).

    Args:
        record_key: The ``_hoodie_record_key`` string.
        hash_fields: The bucket hash fields (the record key fields), in order; needed by
            the ``"java"`` rule for keys containing ``':'``.
        rule: ``"java"`` (Hudi 0.14/0.15) or ``"legacy"`` (see the module docstring).

    Returns:
        The list whose ``List.hashCode`` decides the bucket (None hashes as 0).
    """
    if ":" not in record_key:
        return [record_key]
    if rule == RULE_JAVA and hash_fields:
        pairs: dict[str, str] = {}
        for part in _java_split(record_key, ","):
            field_value = _java_split(part, ":")
            if len(field_value) < 2 or field_value[0] in pairs:
                break  # Java throws: no Java writer can store this key
            pairs[field_value[0]] = field_value[1]
        else:
            return [pairs.get(f) for f in hash_fields]
    return [part.partition(":")[2] if ":" in part else part for part in record_key.split(",")]


def bucket_id(
    record_key: str,
    num_buckets: int,
    hash_fields: list[str] | None = None,
    rule: str = RULE_JAVA,
) -> int:
    """Return the bucket of one record key, as Hudi's ``BucketIdentifier.getBucketId``.

    Args:
        record_key: The ``_hoodie_record_key`` string.
        num_buckets: Buckets per partition (``hoodie.bucket.index.num.buckets``).
        hash_fields: The bucket hash fields (see :func:`hash_values`).
        rule: The table's hashing rule.

    Returns:
        The bucket number in ``[0, num_buckets)``.
    """
    _check_num_buckets(num_buckets)
    h = 1
    for value in hash_values(record_key, hash_fields, rule):
        # java.util.List.hashCode: 31 * h + element hash (0 for null), in int32.
        element = 0 if value is None else java_string_hash(value)
        h = (31 * h + element) & _MASK32
    return (h & 0x7FFFFFFF) % num_buckets


def bucket_ids(
    keys: pa.Array | pa.ChunkedArray,
    num_buckets: int,
    hash_fields: list[str] | None = None,
    rule: str = RULE_JAVA,
) -> np.ndarray:
    """Return the bucket of every key of a string array (vectorised ``bucket_id``).

    Keys that are pure ASCII and contain no ``':'`` (the common case: numeric or UUID
    keys) are hashed with numpy over the Arrow data buffer; the rest go through the
    scalar function, so the result always equals ``bucket_id`` key by key.

    Args:
        keys: Non-null record keys as ``string`` or ``large_string``.
        num_buckets: Buckets per partition.
        hash_fields: The bucket hash fields (see :func:`hash_values`).
        rule: The table's hashing rule.

    Returns:
        An ``int32`` array of bucket numbers, one per key.

    Raises:
        HudiError: If a key is null or the array is not a string array.
    """
    _check_num_buckets(num_buckets)
    chunks = keys.chunks if isinstance(keys, pa.ChunkedArray) else [keys]
    parts = [_bucket_ids_chunk(chunk, num_buckets, hash_fields, rule) for chunk in chunks]
    if not parts:
        return np.zeros(0, dtype=np.int32)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _bucket_ids_chunk(
    arr: pa.Array, num_buckets: int, hash_fields: list[str] | None, rule: str
) -> np.ndarray:
    """``bucket_ids`` for one contiguous Arrow array."""
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.string())
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        raise HudiError(f"record keys must be strings, got {arr.type}")
    n = len(arr)
    if arr.null_count:
        raise HudiError("a record key is null", "every row needs a non-null record key")
    if n == 0:
        return np.zeros(0, dtype=np.int32)

    _, offsets_buf, data_buf = arr.buffers()
    offset_type = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    raw_offsets = np.frombuffer(offsets_buf, dtype=offset_type)[arr.offset : arr.offset + n + 1]
    offsets = raw_offsets.astype(np.int64)
    start, stop = int(offsets[0]), int(offsets[-1])
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)[start:stop]
        if data_buf is not None
        else np.zeros(0, dtype=np.uint8)
    )
    rel = offsets - start  # string boundaries relative to ``data``
    lengths = np.diff(rel)

    # Text with non-ASCII bytes needs UTF-16 code units, and ':' keys need splitting:
    # such strings (rare) take the scalar path. One pass over the bytes rules them out.
    bad: np.ndarray | None = None
    if len(data) and (int(data.max()) >= 0x80 or bool((data == _COLON).any())):
        not_ascii = pc.invert(pc.string_is_ascii(arr))
        bad = pc.or_(not_ascii, pc.match_substring(arr, ":")).to_numpy(zero_copy_only=False)

    string_hash = np.zeros(n, dtype=np.uint32)  # empty strings hash to 0, as in Java
    if len(data) == 0:
        pass  # only empty strings
    elif bool((lengths == lengths[0]).all()):
        # Every string has the same length (UUIDs, fixed-width ids): the bytes already
        # form an n x L matrix.
        _hash_rows(data.reshape(n, -1), string_hash, slice(None))
    else:
        # Group strings by length so each group is an n_L x L matrix gathered from the
        # data buffer; few distinct lengths is the norm for keys.
        order = np.argsort(lengths, kind="stable")
        sorted_lengths = lengths[order]
        cuts = np.flatnonzero(np.diff(sorted_lengths)) + 1
        for group in np.split(order, cuts):
            length = int(lengths[group[0]])
            if length:
                idx = rel[group][:, None] + np.arange(length, dtype=np.int64)
                _hash_rows(data[idx], string_hash, group)

    list_hash = np.uint32(31) + string_hash  # List.hashCode of one element: 31*1 + h
    buckets = ((list_hash & np.uint32(0x7FFFFFFF)) % np.uint32(num_buckets)).astype(np.int32)

    if bad is not None and bad.any():
        idx = np.flatnonzero(bad)
        slow = pc.take(arr, pa.array(idx)).to_pylist()
        buckets[idx] = [bucket_id(k, num_buckets, hash_fields, rule) for k in slow]
    return buckets


def _hash_rows(rows: np.ndarray, out: np.ndarray, where: slice | np.ndarray) -> None:
    """Store ``String.hashCode`` of each row of ASCII bytes into ``out[where]``.

    For bytes c_0..c_{L-1} the hash is sum(c_i * 31^(L-1-i)) mod 2^32: a dot product
    with fixed weights. uint32 arithmetic wraps modulo 2^32 exactly like Java's int.
    """
    length = rows.shape[1]
    weights = np.full(length, 31, dtype=np.uint32)
    weights[0] = 1
    weights = np.cumprod(weights, dtype=np.uint32)[::-1].copy()
    out[where] = np.einsum("ij,j->i", rows, weights, dtype=np.uint32)


def bucket_file_id(bucket: int) -> str:
    """Return a new file group id for a bucket (format doc 8.3).

    Hudi replaces the first 8 characters of a random UUID by the zero-padded bucket
    number and appends ``-0``; Java later finds the group by that 8-digit prefix.

    Args:
        bucket: Bucket number, ``0 <= bucket < 10**8``.

    Returns:
        For example ``"00000003-4a1e-4c2b-9f3d-2b6c8e0a1f55-0"``.
    """
    if not 0 <= bucket < 10**8:
        raise HudiError(f"bucket {bucket} does not fit the 8-digit file id prefix")
    return f"{bucket:08d}{str(uuid.uuid4())[8:]}-0"


def bucket_of_file_id(file_id: str) -> int:
    """Return the bucket number encoded in a bucket file group id.

    Args:
        file_id: A file id made by ``bucket_file_id`` (or by a Java bucket writer).

    Returns:
        The bucket number.

    Raises:
        HudiError: If the id does not start with 8 decimal digits.
    """
    prefix = file_id[:8]
    if len(prefix) != 8 or not prefix.isdigit():
        raise HudiError(
            f"file id {file_id!r} is not a bucket file id",
            "a bucket-indexed table must only hold files whose id starts with 8 digits",
        )
    return int(prefix)


def _check_num_buckets(num_buckets: int) -> None:
    """Reject bucket counts Java would reject (it divides by the count)."""
    if num_buckets <= 0:
        raise HudiError(f"number of buckets must be positive, got {num_buckets}")
