"""Run a decoder on hostile records and check the decode contract.

The contract (engine/decode/result.py): every input record ends in exactly one of a batch
row, a bad message with its coordinates, or the ignored count; nothing raises, nothing
hangs. :func:`decode_checked` calls the decoder the replicator would build for the config
(:func:`engine.decode.decoder_for`, limits included) under a time bound and checks the
result; a violation raises :class:`ContractBroken` (or :class:`Hang`) naming what broke.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

import pyarrow as pa

from engine.config import config_from_dict
from engine.decode import FORMATS, Decoder, DecodeResult, RecordBatch, decoder_for
from engine.decode.limits import DECODER_FAILED
from engine.model import CONTROL_COLUMNS, OFFSET, OP, PARTITION
from tests.fuzz.registry import target_config

#: Longest one decode call may take before it counts as a hang. Far above any real
#: decode of a fuzz batch (milliseconds); it only bounds a runaway input.
HANG_SECONDS = 20.0
#: ``_cdc_op`` values a change batch may hold (engine/model.py).
OPS = {"r", "c", "u", "d", "t", "x"}


class ContractBroken(AssertionError):
    """The decoder's result breaks the decode contract."""


class Hang(BaseException):
    """One decode call ran past :data:`HANG_SECONDS`.

    A BaseException, so that the guard's exception net (which catches ``Exception``)
    does not turn it into bad messages: a hang must surface as such."""


@contextmanager
def time_bound(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the main thread if the block runs longer than ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"decoding took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@cache
def decoder(fmt: str) -> Decoder:
    """The guarded decoder of fuzz target ``fmt`` (as the replicator builds it)."""
    return decoder_for(config_from_dict(target_config(fmt)))


@cache
def raw_decoder(fmt: str) -> Decoder:
    """The format's own decoder, without the limits and the exception net."""
    return FORMATS[fmt](config_from_dict(target_config(fmt)))


def check(
    topic: str,
    records: Sequence[tuple[bytes | None, bytes | None]],
    partitions: Sequence[int],
    offsets: Sequence[int],
    result: DecodeResult,
) -> None:
    """Raise :class:`ContractBroken` unless ``result`` accounts for every record once."""

    def broken(what: str) -> ContractBroken:
        return ContractBroken(f"{what} (topic {topic!r}, {len(records)} records)")

    n = len(records)
    coords = {(p, o): i for i, (p, o) in enumerate(zip(partitions, offsets, strict=True))}
    if len(coords) != n:
        raise ValueError("the harness must give every record distinct coordinates")
    rows: list[tuple[int, int]] = []
    batch = result.batch
    if batch is not None:
        if not isinstance(batch, pa.Table):
            raise broken(f"batch is a {type(batch).__name__}, not a pyarrow.Table")
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise broken(f"batch is not a valid Arrow table: {exc}") from exc
        if tuple(batch.column_names[: len(CONTROL_COLUMNS)]) != CONTROL_COLUMNS:
            raise broken(f"batch starts with {batch.column_names[:9]}, not the control columns")
        if len(set(batch.column_names)) != len(batch.column_names):
            raise broken(f"batch has duplicate column names {batch.column_names}")
        rows = list(
            zip(batch.column(PARTITION).to_pylist(), batch.column(OFFSET).to_pylist(), strict=True)
        )
        ops = set(batch.column(OP).to_pylist())
        if not ops <= OPS:
            raise broken(f"batch has _cdc_op values {sorted(map(str, ops - OPS))}")
    bad = [(b.partition, b.offset) for b in result.bad]
    if len(rows) + len(bad) + result.ignored != n:
        raise broken(f"{len(rows)} rows + {len(bad)} bad + {result.ignored} ignored != {n} records")
    if result.ignored < 0:
        raise broken(f"negative ignored count {result.ignored}")
    seen = rows + bad
    if len(set(seen)) != len(seen):
        raise broken("a record is both a row and bad, or appears twice")
    unknown = [c for c in seen if c not in coords]
    if unknown:
        raise broken(f"rows or bad messages at coordinates no record has: {unknown[:3]}")
    for b in result.bad:
        key, value = records[coords[(b.partition, b.offset)]]
        if b.topic != topic or b.key != key or b.value != value:
            raise broken(f"bad message at {b.partition}/{b.offset} does not carry its record")
        if not isinstance(b.reason, str) or not b.reason.strip():
            raise broken(f"bad message at {b.partition}/{b.offset} has no reason")
    if not all(isinstance(f, str) for f in result.key_fields):
        raise broken(f"key fields {result.key_fields!r} are not all names")


def decode_checked(
    fmt: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> DecodeResult:
    """Decode ``records`` (partitions 0/1 alternating, offsets counting up) and check them.

    Raises:
        ContractBroken: The result breaks the contract.
        Hang: Decoding took longer than :data:`HANG_SECONDS`.
        Exception: Whatever the decoder raised (itself a finding).
    """
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    partitions = [i % 2 for i in range(len(records))]
    offsets = [1000 + i for i in range(len(records))]
    with time_bound(HANG_SECONDS):
        result = decoder(fmt)(RecordBatch(topic, keys, values, partitions, offsets))
        for b in result.bad:
            if b.reason.startswith(DECODER_FAILED):
                # The guard's net caught a decoder exception: a finding. Re-raise the
                # original (with its traceback) from the format's own decoder.
                raw_decoder(fmt)(RecordBatch(topic, [b.key], [b.value], [b.partition], [b.offset]))
                raise ContractBroken(f"{b.reason} (only with its batch)")
    check(topic, records, partitions, offsets, result)
    return result
