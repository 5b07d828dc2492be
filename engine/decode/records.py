"""What every decoder takes: the records of one topic from one micro-batch.

A :class:`RecordBatch` holds the raw keys and values of the records with their Kafka
partitions and offsets, aligned by position (record ``i`` is ``keys[i]``, ``values[i]``,
``partitions[i]``, ``offsets[i]``). Its construction is the one check that the four
agree in length. A decoder reports a record it cannot decode by position
(:meth:`RecordBatch.bad` / :meth:`RecordBatch.bad_messages`), with its coordinates and
raw bytes; :meth:`RecordBatch.take` gives the batch of some of its records (the limits
and the exception net of :mod:`engine.decode.limits` decode subsets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine.decode.result import BadMessage, DecodeResult


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """The records of one topic from one micro-batch, in consumption order.

    Attributes:
        topic: The Kafka topic (reported with bad records; heartbeat detection).
        keys: Raw record keys (None for a null key).
        values: Raw record values (None for a tombstone).
        partitions: Kafka partition of each record.
        offsets: Kafka offset of each record (or, for a decoder called by another
            decoder, any number that tells the records apart: see :mod:`.rewrite`).

    Raises:
        ValueError: The four sequences differ in length.
    """

    topic: str
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    partitions: Sequence[int]
    offsets: Sequence[int]

    def __post_init__(self) -> None:
        n = len(self.values)
        if not len(self.keys) == len(self.partitions) == len(self.offsets) == n:
            raise ValueError("keys, values, partitions and offsets must have the same length")

    def __len__(self) -> int:
        return len(self.values)

    def take(self, indices: Sequence[int]) -> RecordBatch:
        """The batch of records ``indices`` (in that order)."""
        return RecordBatch(
            self.topic,
            [self.keys[i] for i in indices],
            [self.values[i] for i in indices],
            [self.partitions[i] for i in indices],
            [self.offsets[i] for i in indices],
        )

    def bad(self, i: int, reason: str) -> BadMessage:
        """Record ``i`` as a bad message: its coordinates and raw bytes."""
        key, value = self.keys[i], self.values[i]
        return BadMessage(
            self.topic,
            int(self.partitions[i]),
            int(self.offsets[i]),
            None if key is None else bytes(key),
            None if value is None else bytes(value),
            reason,
        )

    def bad_messages(self, reasons: Mapping[int, str]) -> list[BadMessage]:
        """The records of ``reasons`` (position -> reason) as bad messages, in batch order."""
        return [self.bad(i, reasons[i]) for i in sorted(reasons)]


#: A decoder: the records of one topic -> their change batch (:class:`DecodeResult`).
Decoder = Callable[[RecordBatch], DecodeResult]
