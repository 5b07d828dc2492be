"""The events of some keys still in a table's topic: one bounded read, decoded as the
replicator decodes them.

Each partition is read from the offset of ``since`` (Kafka's ``offsets_for_times``) or,
without it, from its last ``max_messages / partitions`` records, up to its end as it was
when the read began; at most ``max_messages`` records are read in all. The records go
through the format's own decoder (:func:`engine.decode.decoder_for`), so the keys and
positions are exactly those the replicator folds; the rows of the wanted keys and the
table's truncates are kept, with each record's Kafka timestamp.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from engine.config import Config
from engine.decode import Decoder, RecordBatch
from engine.errors import SourceError
from engine.model import KEY, OFFSET, OP, OP_TRUNCATE, PARTITION
from engine.source.kafka import TIMEOUT_S, kafka_reason
from engine.source.scan import scan_consumer

#: Records asked of the consumer at once.
CHUNK = 10_000
#: Column of the kept rows: the record's Kafka timestamp (ms; -1: none).
KAFKA_TS = "_kafka_ts_ms"


@dataclass
class TopicRead:
    """What one bounded read of a topic found."""

    topic: str
    #: Partition -> (first offset read, end offset) of the read.
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Partition -> the first offset the log still holds.
    log_start: dict[int, int] = field(default_factory=dict)
    #: Records read, and whether the read stopped at ``max_messages`` before the ends.
    scanned: int = 0
    capped: bool = False
    #: The decoded rows of the wanted keys and the truncates, in (partition, offset)
    #: order, with :data:`KAFKA_TS`; None when there is none.
    rows: pa.Table | None = None


def _stamp(m: Message) -> int:
    kind, ts = m.timestamp()
    return ts if kind != 0 else -1  # TIMESTAMP_NOT_AVAILABLE


def _starts(
    consumer: Consumer, topic: str, marks: dict[int, tuple[int, int]], since_ms: int | None, n: int
) -> dict[int, int]:
    """The offset each partition is read from."""
    if since_ms is None:
        share = max(1, n // max(1, len(marks)))
        return {p: max(low, high - share) for p, (low, high) in marks.items()}
    asked = [TopicPartition(topic, p, since_ms) for p in marks]
    at = consumer.offsets_for_times(asked, timeout=TIMEOUT_S)
    # -1: no record at or after that time in the partition; nothing to read there.
    return {tp.partition: (tp.offset if tp.offset >= 0 else marks[tp.partition][1]) for tp in at}


def _keep(rows: pa.Table, keys: Iterable[str]) -> pa.Table:
    wanted = pc.is_in(rows.column(KEY), value_set=pa.array(list(keys), pa.string()))
    truncate = pc.equal(rows.column(OP), OP_TRUNCATE)
    return rows.filter(pc.or_(pc.fill_null(wanted, False), pc.fill_null(truncate, False)))


def read_keys(
    cfg: Config,
    topic: str,
    keys: list[str],
    decode: Decoder,
    *,
    since_ms: int | None = None,
    max_messages: int = 100_000,
) -> TopicRead:
    """The records of ``keys`` (and the truncates) in ``topic`` within the bounds.

    Raises:
        SourceError: the broker does not answer, or the topic is not there.
    """
    found = TopicRead(topic)
    kept: list[pa.Table] = []
    with scan_consumer(cfg.source, "explain", CHUNK) as consumer:
        try:
            meta = consumer.list_topics(topic, timeout=TIMEOUT_S)
            described = meta.topics.get(topic)
            if described is None or described.error is not None:
                raise SourceError(
                    f"the broker has no topic {topic}",
                    hint="explain reads the topic the replica was written from; "
                    "without it only the replica's history is shown (--max-messages 0)",
                )
            marks = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
                for p in sorted(described.partitions)
            }
            starts = _starts(consumer, topic, marks, since_ms, max_messages)
        except KafkaException as exc:
            raise SourceError(f"cannot read where {topic} starts: {kafka_reason(exc)}") from None
        found.log_start = {p: low for p, (low, _) in marks.items()}
        found.ranges = {p: (starts[p], high) for p, (_, high) in marks.items()}
        todo = {p for p, (start, end) in found.ranges.items() if start < end}
        if todo:
            consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(todo)])
        idle_since = time.monotonic()
        while todo and found.scanned < max_messages:
            msgs = consumer.consume(min(CHUNK, max_messages - found.scanned), 1.0)
            records: list[Message] = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(m.partition() or 0)
                        continue
                    raise SourceError(f"cannot read {topic}[{m.partition()}]: {err.str()}")
                part, offset = m.partition() or 0, m.offset() or 0
                if part in todo and offset < found.ranges[part][1]:
                    records.append(m)
                    if offset + 1 >= found.ranges[part][1]:
                        todo.discard(part)
            if not records:
                if time.monotonic() - idle_since > TIMEOUT_S:
                    raise SourceError(f"{topic} did not answer within {TIMEOUT_S:g} s")
                continue
            idle_since = time.monotonic()
            found.scanned += len(records)
            kept += _decoded(decode, topic, records, keys)
        found.capped = bool(todo)
    if kept:
        rows = pa.concat_tables(kept, promote_options="permissive")
        found.rows = rows.sort_by([(PARTITION, "ascending"), (OFFSET, "ascending")])
    return found


def _decoded(
    decode: Decoder, topic: str, records: list[Message], keys: list[str]
) -> list[pa.Table]:
    result = decode(
        RecordBatch(
            topic,
            [m.key() for m in records],
            [m.value() for m in records],
            [m.partition() or 0 for m in records],
            [m.offset() or 0 for m in records],
        )
    )
    if result.batch is None or result.batch.num_rows == 0:
        return []
    rows = _keep(result.batch, keys)
    if rows.num_rows == 0:
        return []
    stamps = {(m.partition() or 0, m.offset() or 0): _stamp(m) for m in records}
    ts = [
        stamps.get((p, o), -1)
        for p, o in zip(
            rows.column(PARTITION).to_pylist(), rows.column(OFFSET).to_pylist(), strict=True
        )
    ]
    return [rows.append_column(KAFKA_TS, pa.array(ts, pa.int64()))]
