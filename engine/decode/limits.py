"""Limits every decoder runs behind: message size and JSON nesting depth.

A replicator decodes data it does not control. Two shapes of input could hurt the
process itself rather than just fail to decode, so they are refused before any parser
sees them:

* a message larger than ``source.max_message_bytes`` (key plus value): memory;
* a key or value nested deeper than ``source.max_nesting_depth`` (JSON objects and
  arrays): Arrow's JSON reader recurses in C and crashes the process (a segmentation
  fault) at some 40,000 levels, Python's ``json`` raises ``RecursionError`` past about
  a thousand.

Such a record becomes a :class:`BadMessage` with its coordinates and a reason naming the
key to raise; the rest of the batch is decoded normally. :func:`guarded` wraps the decoder
of any format, so each format gets the limits without code of its own.

The depth check is cheap: a message with no more ``{`` plus ``[`` bytes than the limit
cannot be too deep (counted with C-level calls over the whole batch); JsonConverter
records have their schema part scanned once per schema; for the others the string
literals are cut out with bytes operations and the depths of all of a batch's records
are computed with one vectorised cumulative sum. Only keys and values whose first
non-blank byte is ``{`` or ``[`` are checked: nothing else can nest (a JSON scalar,
invalid JSON, Avro's binary wire format, which starts with a zero byte).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from operator import length_hint
from typing import Any

import numpy as np

from engine.decode.records import Decoder, RecordBatch
from engine.decode.result import DecodeResult
from engine.errors import CdcError

__all__ = [
    "DECODER_FAILED",
    "PARSE_SAFE_BYTES",
    "DEFAULT_MAX_NESTING_DEPTH",
    "Guarded",
    "guarded",
    "nesting_depth",
    "nesting_reason",
    "too_deep",
    "too_deep_records",
]

#: Default of ``source.max_nesting_depth``: a Debezium envelope with its Connect schema
#: nests about 8 levels, plus the depth of struct and array columns.
DEFAULT_MAX_NESTING_DEPTH = 64
#: Largest accepted ``source.max_nesting_depth``: deeper input reaches Python's recursion
#: limit in ``json`` and the decoders' schema walkers.
MAX_NESTING_DEPTH_CEILING = 256

# Opening brackets become 1, closing ones 255 (-1 as int8), everything else is deleted.
_TABLE = bytes(1 if c in b"{[" else 255 if c in b"}]" else 0 for c in range(256))
_OTHERS = bytes(c for c in range(256) if c not in b"{[]}")


def _bracket_steps(data: bytes) -> bytes:
    """The brackets of ``data`` outside string literals, as +1 / -1 (int8) bytes.

    String literals are cut out the way a JSON parser delimits them, with C-speed bytes
    operations only: escaped backslashes, then escaped quotes are removed (left to right,
    as a parser pairs them), and what lies between the remaining quotes is dropped. Where
    the text is not valid JSON a parser stops at the first error, and up to there it
    delimits strings exactly like this, so it never nests deeper than computed here.
    """
    if b'"' in data:
        if b"\\" in data:
            data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
        data = b"".join(data.split(b'"')[::2])
    return data.translate(_TABLE, _OTHERS)


def _depths(steps: list[bytes]) -> list[int]:
    """Deepest nesting of each bracket-step string (one vectorised pass for all)."""
    lengths = np.fromiter((len(s) for s in steps), np.int64, len(steps))
    out = np.zeros(len(steps), np.int64)
    nonempty = np.flatnonzero(lengths)
    if len(nonempty):
        running = np.cumsum(np.frombuffer(b"".join(steps), np.int8), dtype=np.int64)
        starts = (np.cumsum(lengths) - lengths)[nonempty]
        base = np.where(starts > 0, running[np.maximum(starts - 1, 0)], 0)
        out[nonempty] = np.maximum.reduceat(running, starts) - base
    return [max(0, int(d)) for d in out]


def nesting_depth(data: bytes) -> int:
    """Deepest nesting of JSON objects and arrays in ``data`` (strings ignored)."""
    return _depths([_bracket_steps(data)])[0]


def too_deep(data: bytes, limit: int) -> int | None:
    """The nesting depth of ``data`` if it exceeds ``limit``, else None."""
    found = _too_deep_many([data], limit)
    return found.get(0)


_OPENERS = (b"{", b"[")
#: What ``bytes.isspace`` calls blank, as first bytes.
_BLANKS = (b" ", b"\t", b"\n", b"\r", b"\x0b", b"\x0c")
#: JsonConverter's wrapper: records of one table version share the bytes up to here.
_WRAPPED_HEAD = b'{"schema":'
_PAYLOAD_SEP = b',"payload":'
# Per distinct wrapper prefix: (deepest nesting inside it, depth at its end), or None when
# it ends inside a string. Bounded like the decoder's own prefix cache.
_PREFIX_DEPTHS: dict[bytes, tuple[int, int] | None] = {}
_PREFIX_DEPTHS_MAX = 1024


def _prefix_depth(prefix: bytes) -> tuple[int, int] | None:
    found = _PREFIX_DEPTHS.get(prefix, False)
    if found is not False:
        return found  # type: ignore[return-value]
    unescaped = prefix.replace(b"\\\\", b"").replace(b'\\"', b"")
    result: tuple[int, int] | None = None
    if unescaped.count(b'"') % 2 == 0:  # the separator is outside any string
        steps = _bracket_steps(prefix)
        end = steps.count(b"\x01") - steps.count(b"\xff")
        result = (_depths([steps])[0], end) if end >= 0 else None
    if len(_PREFIX_DEPTHS) >= _PREFIX_DEPTHS_MAX:
        _PREFIX_DEPTHS.clear()
    _PREFIX_DEPTHS[prefix] = result
    return result


def _too_deep_many(datas: Sequence[bytes | None], limit: int) -> dict[int, int]:
    """Positions (and depths) of the records nested deeper than ``limit``.

    A record with at most ``limit`` opening brackets cannot be too deep: the brackets of
    such records are counted with C-level ``map`` calls, without a Python step per
    record. JsonConverter records (``{"schema":...,"payload":...}``) repeat one schema, so
    the schema part is scanned once per distinct prefix (and recognised by a memcmp in
    the next records) and only the payload is counted per record. The records that may
    be too deep are scanned together.
    """
    # Nesting needs an opening bracket per level: a record no longer than the limit
    # cannot exceed it (Debezium keys, most small values, tombstones), whatever it holds.
    # (``length_hint`` is ``len``, and 0 for a null, without a Python step per record.)
    lengths = np.fromiter(map(length_hint, datas), np.int64, len(datas))
    longer = np.flatnonzero(lengths > limit).tolist()
    if not longer:
        return {}
    raw = [d if type(d) is bytes else bytes(d or b"") for d in map(datas.__getitem__, longer)]
    found = _too_deep_long(raw, limit)
    return {longer[j]: depth for j, depth in found.items()}


def _too_deep_long(raw: list[bytes], limit: int) -> dict[int, int]:
    """:func:`_too_deep_many` of records longer than ``limit`` bytes."""
    n = len(raw)
    # Only a JSON text that opens with an object or array can nest; anything else (a
    # scalar, invalid JSON, Avro's binary wire format) is left to the decoder.
    nests = np.fromiter(map(bytes.startswith, raw, repeat(_OPENERS)), np.bool_, n)
    # JSON may open with blanks; anything else (Avro's zero byte) is settled without a
    # Python step per record.
    blank = np.fromiter(map(bytes.startswith, raw, repeat(_BLANKS)), np.bool_, n)
    for i in np.flatnonzero(blank).tolist():
        if raw[i].lstrip()[:1] in _OPENERS:
            nests[i] = True
    wrapped = np.fromiter(map(bytes.startswith, raw, repeat(_WRAPPED_HEAD)), np.bool_, n)
    plain = np.flatnonzero(nests & ~wrapped).tolist()
    plain_raw = [raw[i] for i in plain]
    opening = np.fromiter(map(bytes.count, plain_raw, repeat(b"{")), np.int64, len(plain))
    opening += np.fromiter(map(bytes.count, plain_raw, repeat(b"[")), np.int64, len(plain))
    prefix_max: dict[int, int] = {}
    steps: list[bytes] = []
    candidates: list[int] = []
    for j in np.flatnonzero(opening > limit).tolist():
        candidates.append(plain[j])
        steps.append(_bracket_steps(plain_raw[j]))
    # The previous record's wrapper prefix: the next records of the table usually repeat
    # it, which a memcmp (startswith) confirms without copying or hashing it.
    last: bytes | None = None
    last_known: tuple[int, int] = (0, 0)
    for i in np.flatnonzero(wrapped).tolist():
        data = raw[i]
        if last is not None and data.startswith(last) and data.startswith(_PAYLOAD_SEP, len(last)):
            cut, (inner, end) = len(last), last_known
        else:
            cut = data.find(_PAYLOAD_SEP)
            known = _prefix_depth(data[:cut]) if cut > 0 else None
            if known is None:
                if data.count(b"{") + data.count(b"[") > limit:
                    candidates.append(i)
                    steps.append(_bracket_steps(data))
                continue
            last, last_known = data[:cut], known
            inner, end = known
        if inner <= limit and end + data.count(b"{", cut) + data.count(b"[", cut) <= limit:
            continue
        candidates.append(i)
        prefix_max[i] = inner
        steps.append(b"\x01" * end + _bracket_steps(data[cut:]))
    if not candidates:
        return {}
    depths = _depths(steps)
    found = {}
    for i, depth in zip(candidates, depths, strict=True):
        depth = max(depth, prefix_max.get(i, 0))
        if depth > limit:
            found[i] = depth
    return found


#: Values at most this long skip the scan before a decoder that checks nesting by its
#: parse (``checks_nesting``): none can nest deeper than its length, and Arrow's JSON
#: reader handles such depths (it errs at 600-4,000 levels; it crashed the process only
#: at some 8,000, in a multi-block read with threads). Longer values are scanned first.
PARSE_SAFE_BYTES = 4096

#: Start of the reason given to a record the decoder raised on (a decoder bug).
DECODER_FAILED = "the decoder failed on this message"


def nesting_reason(part: str, depth: int, limit: int) -> str:
    """The reason given to a key or value nested deeper than ``limit``."""
    return (
        f"{part} nested {depth} levels deep, deeper than source.max_nesting_depth = "
        f"{limit}; raise it (at most {MAX_NESTING_DEPTH_CEILING}) and "
        "`cdcctl deadletters replay` if the message is genuine"
    )


def too_deep_records(datas: Sequence[bytes | None], limit: int) -> dict[int, int]:
    """Positions (and depths) of the records of ``datas`` nested deeper than ``limit``."""
    return _too_deep_many(datas, limit)


def _refused(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    max_bytes: int | None,
    max_depth: int,
    *,
    values_parsed: bool = False,
) -> dict[int, str]:
    """Reasons of the records over a limit, by position. With ``values_parsed`` only the
    values longer than :data:`PARSE_SAFE_BYTES` are scanned for nesting (the decoder
    checks the others by its parse)."""
    refused: dict[int, str] = {}
    n = len(values)
    value_sizes = np.fromiter(map(length_hint, values), np.int64, n)
    if max_bytes is not None:
        sizes = np.fromiter(map(length_hint, keys), np.int64, n) + value_sizes
        for i in np.flatnonzero(sizes > max_bytes).tolist():
            refused[i] = (
                f"message of {sizes[i]} bytes is larger than source.max_message_bytes = {max_bytes}"
            )
    deep: dict[str, dict[int, int]] = {"value": {}, "key": _too_deep_many(keys, max_depth)}
    if values_parsed:
        long = np.flatnonzero(value_sizes > PARSE_SAFE_BYTES).tolist()
        if long:
            found = _too_deep_many([values[i] for i in long], max_depth)
            deep["value"] = {long[j]: d for j, d in found.items()}
    else:
        deep["value"] = _too_deep_many(values, max_depth)
    for part in ("value", "key"):
        for i, depth in deep[part].items():
            refused.setdefault(i, nesting_reason(part, depth, max_depth))
    return refused


class Guarded:
    """A format's decoder behind the size and depth limits and the exception net.

    Called like the decoder it wraps (a record over a limit is bad, never parsed).
    ``documents`` is the wrapped decoder's own reader of values as plain documents
    (``debezium-avro``: how transaction-metadata, heartbeat and schema change records
    are read), or None for the JSON formats, whose values are read as JSON.
    :meth:`refused` applies the same limits to records the replicator reads itself
    (schema change records), so that no path parses what the limits refuse.
    """

    def __init__(
        self, decode: Decoder, *, max_message_bytes: int | None, max_nesting_depth: int
    ) -> None:
        self.inner = decode
        self.max_message_bytes = max_message_bytes
        self.max_nesting_depth = max_nesting_depth
        self.documents: Callable[[Sequence[bytes | None]], list[Any]] | None = getattr(
            decode, "documents", None
        )
        #: The wrapped decoder refuses values nested too deep by its own parse (it says
        #: so with a true ``checks_nesting``): only long values are scanned before it.
        self.values_parsed = bool(getattr(decode, "checks_nesting", False))

    def refused(
        self, keys: Sequence[bytes | None], values: Sequence[bytes | None]
    ) -> dict[int, str]:
        """Reasons of the records over a limit, by position."""
        return _refused(keys, values, self.max_message_bytes, self.max_nesting_depth)

    def __call__(self, records: RecordBatch) -> DecodeResult:
        refused = _refused(
            records.keys,
            records.values,
            self.max_message_bytes,
            self.max_nesting_depth,
            values_parsed=self.values_parsed,
        )
        if not refused:
            return _isolating(self.inner, records)
        result = _isolating(
            self.inner, records.take([i for i in range(len(records)) if i not in refused])
        )
        result.bad = sorted(
            [*result.bad, *records.bad_messages(refused)], key=lambda b: (b.partition, b.offset)
        )
        return result


def guarded(decode: Decoder, *, max_message_bytes: int | None, max_nesting_depth: int) -> Guarded:
    """``decode`` behind the size and depth limits: records over a limit are bad."""
    return Guarded(decode, max_message_bytes=max_message_bytes, max_nesting_depth=max_nesting_depth)


def _isolating(decode: Decoder, records: RecordBatch) -> DecodeResult:
    """``decode``, but a record it raises on becomes bad instead of failing the batch.

    A decoder is meant never to raise on input (the fuzz tests check it; every exception
    found so far was fixed). Should one still do, the batch is bisected down to the
    records it raises on; those become bad messages with the exception in the reason
    (so they are quarantined with their coordinates, and can be replayed once fixed) and
    the rest is decoded again. The engine's own errors (:class:`CdcError`: a schema
    registry or source catalog that cannot be reached, refused credentials) are about
    the system, not a record: they are raised as they are, to be retried or reported.
    """
    try:
        return decode(records)
    except CdcError:
        raise
    except Exception:  # noqa: BLE001 - isolated below, reported per record
        pass
    culprits: dict[int, str] = {}

    def probe(indices: list[int]) -> None:
        try:
            decode(records.take(indices))
        except CdcError:
            raise
        except Exception as exc:  # noqa: BLE001
            if len(indices) == 1:
                culprits[indices[0]] = f"{DECODER_FAILED} ({type(exc).__name__}: {exc})"[:500]
                return
            mid = len(indices) // 2
            probe(indices[:mid])
            probe(indices[mid:])

    probe(list(range(len(records))))
    rest = [i for i in range(len(records)) if i not in culprits]
    try:
        result = decode(records.take(rest))
    except Exception as exc:  # noqa: BLE001 - records that only fail together
        reason = f"{DECODER_FAILED} with its batch ({type(exc).__name__}: {exc})"[:500]
        culprits.update(dict.fromkeys(rest, reason))
        result = DecodeResult(None, [], [], 0)
    result.bad = sorted(
        [*result.bad, *records.bad_messages(culprits)], key=lambda b: (b.partition, b.offset)
    )
    return result
