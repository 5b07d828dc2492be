"""Raw Kafka records of a batch, grouped per topic for the decoders.

A batch arrives as librdkafka message objects in consumption order. The decoders take
per topic four aligned lists (keys, values, partitions, offsets); building them is done
with C-level maps and gathers because at a million messages per few seconds a
per-message Python loop is a measurable share of the batch.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter, methodcaller
from typing import Any, Protocol

import numpy as np
from confluent_kafka import Message


class Record(Protocol):
    """What the engine needs of a Kafka message (confluent_kafka.Message fits)."""

    def topic(self) -> str | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...


#: Per topic: keys, values, partitions and offsets of its records, in consumption order.
TopicRecords = tuple[list[bytes | None], list[bytes | None], list[int], list[int]]


def group_by_topic(messages: Sequence[Record]) -> dict[str, TopicRecords]:
    """Keys, values, partitions and offsets per topic, in consumption order."""
    getters: list[Any]
    if messages and type(messages[0]) is Message:
        # Unbound C methods mapped over the batch: no per-message bytecode.
        getters = [Message.topic, Message.key, Message.value, Message.partition, Message.offset]
    else:  # any other Record (tests, tools)
        getters = [methodcaller(n) for n in ("topic", "key", "value", "partition", "offset")]
    topics, keys, values, parts, offs = (list(map(g, messages)) for g in getters)
    names = set(topics)
    if len(names) == 1:
        return {topics[0]: (keys, values, parts, offs)}
    codes = {name: i for i, name in enumerate(names)}
    code_array = np.fromiter((codes[t] for t in topics), dtype=np.int32, count=len(topics))
    out: dict[str, TopicRecords] = {}
    for name, code in codes.items():
        idx = np.flatnonzero(code_array == code).tolist()
        if len(idx) == 1:
            i = idx[0]
            out[name] = ([keys[i]], [values[i]], [parts[i]], [offs[i]])
            continue
        pick = itemgetter(*idx)
        out[name] = (list(pick(keys)), list(pick(values)), list(pick(parts)), list(pick(offs)))
    return out


def next_offsets(parts: list[int], offs: list[int]) -> dict[int, int]:
    """Per partition, the offset after the last message read."""
    return {p: o + 1 for p, o in _per_partition(parts, offs, max, np.max).items()}


def first_offsets(parts: list[int], offs: list[int]) -> dict[int, int]:
    """Per partition, the first offset read."""
    return _per_partition(parts, offs, min, np.min)


def _per_partition(parts: list[int], offs: list[int], one: Any, many: Any) -> dict[int, int]:
    """Per partition (ascending), ``one`` of its offsets (``many``: the same over a NumPy
    array, for batches of several partitions)."""
    distinct = set(parts)
    if len(distinct) == 1:
        return {parts[0]: one(offs)}
    part_array, off_array = np.asarray(parts), np.asarray(offs, dtype=np.int64)
    return {p: int(many(off_array[part_array == p])) for p in sorted(distinct)}


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a batch is consumed and grouped.

    librdkafka's Message objects are GC-tracked; the 100k of a batch made the collector
    run a full collection about once per batch, each walking every live object
    (measured in the 1M-event catch-up: 12 full collections, ~0.8 s of the driver's main
    thread). Messages hold no reference cycles and are freed by reference counting
    before the collector resumes, so it has nothing of theirs to find.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
