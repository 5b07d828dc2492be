"""Limits every decoder runs behind: message size and JSON nesting depth.

A replicator decodes data it does not control. Two shapes of input could hurt the
process itself rather than just fail to decode, so they are refused before any parser
sees them:

* a message larger than ``source.max_message_bytes`` (key plus value): memory;
* a key or value nested deeper than ``source.max_nesting_depth`` (JSON objects and
  arrays): Arrow's JSON reader recurses in C and crashes the process (a segmentation
  fault) on some hundred thousand levels, Python's ``json`` raises ``RecursionError``
  past about a thousand.

Such a record becomes a :class:`BadMessage` with its coordinates and a reason naming the
key to raise; the rest of the batch is decoded normally. :func:`guarded` wraps the decoder
of any format, so each format gets the limits without code of its own.

The depth check is cheap: a message with fewer ``{`` plus ``[`` bytes than the limit
cannot be too deep (two ``bytes.count`` calls, the normal case); only otherwise are the
string literals cut out and the depth of the remaining brackets computed with a
vectorised cumulative sum. Brackets inside malformed (unterminated) strings count, so an
invalid message may be reported as too deep rather than as invalid JSON; it is bad
either way. Binary formats (Avro) carry JSON only in their text fields; for them the check
only ever over-counts, and the default leaves ample room.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.result import BadMessage, DecodeResult

__all__ = [
    "DECODER_FAILED",
    "DEFAULT_MAX_NESTING_DEPTH",
    "guarded",
    "nesting_depth",
    "too_deep",
]

#: Default of ``source.max_nesting_depth``: a Debezium envelope with its Connect schema
#: nests about 8 levels, plus the depth of struct and array columns.
DEFAULT_MAX_NESTING_DEPTH = 64
#: Largest accepted ``source.max_nesting_depth``: deeper input reaches Python's recursion
#: limit in ``json`` and the decoders' schema walkers.
MAX_NESTING_DEPTH_CEILING = 256

# A complete JSON string literal (unrolled loop: no backtracking on long strings).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Opening brackets become 1, closing ones 255 (-1 as int8), everything else is deleted.
_TABLE = bytes(1 if c in b"{[" else 255 if c in b"}]" else 0 for c in range(256))
_OTHERS = bytes(c for c in range(256) if c not in b"{[]}")


def nesting_depth(data: bytes) -> int:
    """Deepest nesting of JSON objects and arrays in ``data`` (strings ignored)."""
    stripped = _STRING.sub(b"", data) if b'"' in data else data
    steps = stripped.translate(_TABLE, _OTHERS)
    if not steps:
        return 0
    arr = pa.Array.from_buffers(pa.int8(), len(steps), [None, pa.py_buffer(steps)])
    running = pc.cumulative_sum(arr.cast(pa.int64()))
    return max(0, int(pc.max(running).as_py()))


def too_deep(data: bytes, limit: int) -> int | None:
    """The nesting depth of ``data`` if it exceeds ``limit``, else None."""
    if data.count(b"{") + data.count(b"[") <= limit:
        return None
    depth = nesting_depth(data)
    return depth if depth > limit else None


#: Start of the reason given to a record the decoder raised on (a decoder bug).
DECODER_FAILED = "the decoder failed on this message"

Decoder = Callable[
    [str, Sequence[bytes | None], Sequence[bytes | None], Sequence[int], Sequence[int]],
    DecodeResult,
]


def _problem(
    key: bytes | None, value: bytes | None, max_bytes: int | None, max_depth: int
) -> str | None:
    size = len(key or b"") + len(value or b"")
    if max_bytes is not None and size > max_bytes:
        return f"message of {size} bytes is larger than source.max_message_bytes = {max_bytes}"
    for part, data in (("key", key), ("value", value)):
        if data is None:
            continue
        depth = too_deep(bytes(data), max_depth)
        if depth is not None:
            return (
                f"{part} nested {depth} levels deep, deeper than source.max_nesting_depth = "
                f"{max_depth}; raise it (at most {MAX_NESTING_DEPTH_CEILING}) and "
                "`cdcctl deadletters replay` if the message is genuine"
            )
    return None


def guarded(decode: Decoder, *, max_message_bytes: int | None, max_nesting_depth: int) -> Decoder:
    """``decode`` behind the size and depth limits: records over a limit are bad."""

    def decode_within_limits(
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        partitions: Sequence[int],
        offsets: Sequence[int],
    ) -> DecodeResult:
        if not len(keys) == len(values) == len(partitions) == len(offsets):
            raise ValueError("keys, values, partitions and offsets must have the same length")
        refused: dict[int, str] = {}
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            problem = _problem(k, v, max_message_bytes, max_nesting_depth)
            if problem is not None:
                refused[i] = problem
        if not refused:
            return _isolating(decode, topic, keys, values, partitions, offsets)
        keep = [i for i in range(len(values)) if i not in refused]
        result = _isolating(
            decode,
            topic,
            [keys[i] for i in keep],
            [values[i] for i in keep],
            [partitions[i] for i in keep],
            [offsets[i] for i in keep],
        )
        bad = [
            BadMessage(
                topic,
                int(partitions[i]),
                int(offsets[i]),
                None if keys[i] is None else bytes(keys[i]),  # type: ignore[arg-type]
                None if values[i] is None else bytes(values[i]),  # type: ignore[arg-type]
                reason,
            )
            for i, reason in refused.items()
        ]
        result.bad = sorted([*result.bad, *bad], key=lambda b: (b.partition, b.offset))
        return result

    return decode_within_limits


def _isolating(
    decode: Decoder,
    topic: str,
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    partitions: Sequence[int],
    offsets: Sequence[int],
) -> DecodeResult:
    """``decode``, but a record it raises on becomes bad instead of failing the batch.

    A decoder is meant never to raise on input (the fuzz tests check it; every exception
    found so far was fixed). Should one still do, the batch is bisected down to the
    records it raises on; those become bad messages with the exception in the reason
    (so they are quarantined with their coordinates, and can be replayed once fixed) and
    the rest is decoded again.
    """
    try:
        return decode(topic, keys, values, partitions, offsets)
    except Exception:  # noqa: BLE001 - isolated below, reported per record
        pass
    culprits: dict[int, str] = {}

    def probe(indices: list[int]) -> None:
        try:
            decode(
                topic,
                [keys[i] for i in indices],
                [values[i] for i in indices],
                [partitions[i] for i in indices],
                [offsets[i] for i in indices],
            )
        except Exception as exc:  # noqa: BLE001
            if len(indices) == 1:
                culprits[indices[0]] = f"{DECODER_FAILED} ({type(exc).__name__}: {exc})"[:500]
                return
            mid = len(indices) // 2
            probe(indices[:mid])
            probe(indices[mid:])

    probe(list(range(len(values))))
    rest = [i for i in range(len(values)) if i not in culprits]
    try:
        result = decode(
            topic,
            [keys[i] for i in rest],
            [values[i] for i in rest],
            [partitions[i] for i in rest],
            [offsets[i] for i in rest],
        )
    except Exception as exc:  # noqa: BLE001 - records that only fail together
        reason = f"{DECODER_FAILED} with its batch ({type(exc).__name__}: {exc})"[:500]
        culprits.update(dict.fromkeys(rest, reason))
        result = DecodeResult(None, [], [], 0)
    result.bad = sorted(
        [
            *result.bad,
            *(
                BadMessage(
                    topic,
                    int(partitions[i]),
                    int(offsets[i]),
                    None if keys[i] is None else bytes(keys[i]),  # type: ignore[arg-type]
                    None if values[i] is None else bytes(values[i]),  # type: ignore[arg-type]
                    reason,
                )
                for i, reason in culprits.items()
            ),
        ],
        key=lambda b: (b.partition, b.offset),
    )
    return result
