"""Whether a table's topic, read again from its start, still rebuilds the table whole.

``cdcctl resync`` drops a replica and reads its topic from the beginning. When retention
(or ``DeleteRecords``) has already removed the head of the topic, that beginning is not
the topic's history any more: rows whose snapshot read and changes were all deleted would
be missing from the rebuilt table, without a word. :func:`check_topic` is the one rule,
used by the offline resync (:func:`engine.replicator.reset.resync_offline`) and by the
running replicator (``ControlPlane._resync``) alike:

1. **Trimmed or recreated?** A partition whose log starts past offset 0 lost records.
   Compaction never moves a log's start, so a compacted topic (which keeps the last event
   of every key) is not trimmed. A topic deleted and recreated since the replica was
   written (its id, :func:`engine.source.kafka.topic_ids`, differs from the one the
   replica's newest commit records) starts at 0 again but lost all the old topic held:
   each of its partitions holding records is checked as a trimmed one (a run starting at
   offset 0 begins cleanly there), and one holding none yet is refused. A topic the
   broker does not have any more is refused: the table would come back empty.
2. **A whole snapshot in what remains?** Every key lives in one partition, so each checked
   partition must hold, after its log start, all of its share of one Debezium snapshot
   (initial or blocking: ``op = r``, ``source.snapshot`` not ``false``/``incremental``):
   a run of snapshot reads that

   - begins cleanly: after a record that is not a snapshot read (a streamed change, a
     tombstone, an incremental snapshot read) or after an earlier snapshot's end mark,
     in the same partition. A run that starts at the log start may have lost its head,
     so it does not count (its ``first`` mark is not looked for: the decoders report
     end marks only);
   - has ended: it holds an end mark (``source.snapshot`` ``last`` or
     ``last_in_data_collection``), is followed in its partition by a record that is not a
     snapshot read (streaming resumes only after a snapshot is done), or an end mark is
     found elsewhere in the topic no older (Kafka timestamp) than the run's first record.

   Partitions that start at 0 need nothing (unless recreated). The checked partitions
   are read from their log start with a consumer of its own and the format's own decoder
   (snapshot reads are rows of op ``r`` whose position has no ``STREAMED_BIT``,
   :mod:`engine.model`); a partition is left as soon as it qualifies. Runs still open
   at their partition's end then look for an end mark in the unchecked partitions (a
   quiet partition never rolls a segment, so it is rarely trimmed), read from the open
   runs' first timestamp on (``offsets_for_times``). At most :data:`SCAN_RECORDS`
   records are read in all.
3. **Formats without snapshots** (``cdc-json``): a trimmed or recreated topic is refused,
   there is nothing in it that could stand for the deleted history.

Incremental snapshots interleave with streaming and leave no end mark in the topic, so
one is not recognised as whole; once the connector reports it finished, ``--force``
rebuilds from it. A refused resync removes nothing; ``--force`` proceeds and says the
table will be partial.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from engine.config import Config
from engine.decode import Decoder, DecodeResult, RecordBatch, decoder_for
from engine.errors import HudiError, SourceError, StateError
from engine.hudi import HudiView
from engine.model import OFFSET, OP, OP_READ, PARTITION, POS, STREAMED_BIT
from engine.replicator.progress import TOPIC_ID_KEY
from engine.source.kafka import (
    TIMEOUT_S,
    kafka_reason,
    topic_ids,
)
from engine.source.scan import scan_consumer
from engine.storage import Storage

log = logging.getLogger("cdcctl.replicator")

#: Records read at most to find a whole snapshot (the partitions' heads first).
SCAN_RECORDS = 1_000_000
#: Records decoded at once.
CHUNK = 10_000
#: Formats whose events never mark snapshots.
NO_SNAPSHOTS = ("cdc-json",)
_STREAMED = pa.scalar(STREAMED_BIT, pa.int64())


@dataclass
class _Partition:
    """What the scan knows of one trimmed partition."""

    start: int  # the log start (first offset still there)
    #: A boundary was seen: a record that is not a snapshot read, or an end mark (or
    #: the log starts at 0: nothing came before its first record).
    bounded: bool = False
    #: In a run of snapshot reads; whether it began cleanly; its first record's time.
    in_run: bool = False
    clean: bool = False
    run_ts: int = -1
    #: The partition holds a whole snapshot (first clean run that ended).
    whole: bool = False
    #: Offset of that snapshot's first record.
    since: int = -1
    at_end: bool = False


@dataclass
class TopicCheck:
    """What :func:`check_topic` found about a topic read again from its start."""

    topic: str
    #: Partition -> log start, for the partitions that start past 0.
    trimmed: dict[int, int] = field(default_factory=dict)
    #: The topic is gone from the broker.
    missing: bool = False
    #: The topic was deleted and recreated since the replica was written: (the id the
    #: replica recorded, the topic's id now).
    recreated: tuple[str, str] | None = None
    #: Partition -> log start, for the partitions that must hold a whole snapshot: the
    #: trimmed ones, and every partition holding records of a recreated topic.
    checked: dict[int, int] = field(default_factory=dict)
    #: The recreated topic holds no records at all.
    empty: bool = False
    #: Trimmed partitions holding a whole snapshot -> the offset it starts at.
    snapshots: dict[int, int] = field(default_factory=dict)
    #: Records read, and whether the scan stopped at :data:`SCAN_RECORDS`.
    scanned: int = 0
    capped: bool = False
    #: The format carries no snapshots.
    no_snapshots: bool = False

    @property
    def whole(self) -> bool:
        """Whether reading the topic from its start rebuilds the table whole."""
        if self.missing or self.empty:
            return False
        return all(p in self.snapshots for p in {**self.trimmed, **self.checked})

    def problem(self) -> str:
        """Why a rebuild would be partial ('' when it would not)."""
        if self.missing:
            return f"topic {self.topic} does not exist any more: the table would be empty"
        if self.whole:
            return ""
        if self.no_snapshots:
            why = "and this format carries no snapshot that could stand for what was deleted"
        elif self.empty:
            why = "and it holds no records yet: the table would be empty"
        else:
            held = "it" if self.recreated and not self.trimmed else "what remains"
            why = f"and {held} holds no complete snapshot"
            if self.capped:
                why += f" in its first {self.scanned:,} records (the check reads no further)"
        cut = ", ".join(
            f"{self.topic}[{p}] starts at offset {start}"
            for p, start in sorted(self.trimmed.items())
            if p not in self.snapshots
        )
        if self.recreated is not None:
            was, now = self.recreated
            head = (
                f"topic {self.topic} was deleted and recreated since the replica was written "
                f"(its id is {now}, the replica was read from {was}): the old topic's "
                "history is gone"
            )
            return f"{head}, {cut} {why}" if cut else f"{head} {why}"
        return f"{cut} (the records before it were deleted, by retention or DeleteRecords) {why}"

    def advice(self, table: str) -> str:
        """The way out of a refused resync."""
        return (
            "take a fresh Debezium snapshot of the table into the topic first (a blocking "
            "snapshot: signal execute-snapshot with type blocking; or restart the connector "
            "with snapshot.mode=always), then resync; an incremental snapshot leaves no end "
            f"mark: once it finished, or to rebuild a partial table from what remains, "
            f"`cdcctl resync {table} --force`"
        )

    def summary(self) -> str:
        """One line on a resync allowed to go on ('' when the topic was neither trimmed
        nor recreated)."""
        if not (self.trimmed or self.recreated) or self.missing:
            return ""
        parts = ", ".join(f"[{p}] from offset {self.snapshots[p]}" for p in sorted(self.snapshots))
        what = "deleted and recreated" if self.recreated else "trimmed"
        return f"{self.topic} was {what}, but holds a complete snapshot ({parts})"


def guard(
    cfg: Config,
    table: str,
    topic: str,
    folder: Path | Storage,
    *,
    force: bool,
    decode: Decoder | None = None,
) -> str:
    """The check before a resync of ``table`` (read from ``topic``, its replica in
    ``folder``): what to say of it ('' when the topic was neither trimmed nor recreated
    since the replica was written, or there is no replica to lose), also logged (a
    forced partial one as a warning).

    Raises:
        StateError: the rebuild would be partial and ``force`` is not set.
        SourceError: the broker does not answer (``force``: said, not raised).
    """
    if not HudiView.exists(folder):
        return ""  # nothing is dropped: the table is read from its topic's start anyway
    try:
        replica_id = HudiView.open(folder).latest_extra_metadata().get(TOPIC_ID_KEY) or None
    except HudiError:
        replica_id = None  # no topic id to compare: only trimming is looked at
    try:
        found = check_topic(cfg, topic, decode, replica_id=replica_id)
    except SourceError as exc:
        if not force:
            raise
        note = f"forced: not checked whether {topic} still holds a whole snapshot: {exc.message}"
        log.warning("%s: resync: %s", table, note)
        return note
    if found.whole:
        if found.trimmed or found.recreated:
            log.info("%s: resync: %s", table, found.summary())
        return found.summary()
    if not force:
        raise StateError(
            f"resync of {table} refused, it would rebuild a partial table: {found.problem()}; "
            "nothing was removed",
            hint=found.advice(table),
        )
    note = f"forced: {table} will be partial: {found.problem()}"
    log.warning("%s: resync: %s", table, note)
    return note


def _snapshot_rows(batch: pa.Table) -> tuple[list[int], list[int], list[bool]]:
    """Partitions, offsets and snapshot-read flags of a change batch's rows."""
    pos = batch.column(POS)
    snap = pc.and_(
        pc.equal(batch.column(OP), OP_READ),
        pc.and_(pc.is_valid(pos), pc.equal(pc.bit_wise_and(pos, _STREAMED), 0)),
    )
    return (
        batch.column(PARTITION).to_pylist(),
        batch.column(OFFSET).to_pylist(),
        pc.fill_null(snap, False).to_pylist(),
    )


def _end_marks(
    decode: Decoder, topic: str, records: Sequence[Message], result: DecodeResult
) -> list[Message]:
    """The records among ``records`` holding a snapshot's end mark (``result``: their
    decoding), found by halving: the decoders say only whether a batch holds one."""
    if not result.snapshot_ended:
        return []
    if len(records) == 1:
        return list(records)
    mid = len(records) // 2
    halves = records[:mid], records[mid:]
    return [m for h in halves for m in _end_marks(decode, topic, h, _decode(decode, topic, h))]


def _decode(decode: Decoder, topic: str, records: Sequence[Message]) -> DecodeResult:
    return decode(
        RecordBatch(
            topic,
            [m.key() for m in records],
            [m.value() for m in records],
            [m.partition() or 0 for m in records],
            [m.offset() or 0 for m in records],
        )
    )


def _stamp(m: Message) -> int:
    kind, ts = m.timestamp()
    return ts if kind != 0 else -1  # TIMESTAMP_NOT_AVAILABLE


class _Scan:
    """The rule of the module docstring, fed with decoded chunks in partition order."""

    def __init__(self, parts: dict[int, _Partition]) -> None:
        self.parts = parts
        #: Timestamps of the end marks seen anywhere in the topic.
        self.end_stamps: list[int] = []

    def feed(
        self,
        rows: Sequence[tuple[int, int, bool]],
        ends: set[tuple[int, int]],
        stamps: dict[tuple[int, int], int],
    ) -> None:
        """Rows (partition, offset, snapshot read) in offset order per partition; ``ends``
        the (partition, offset) of end marks among them; ``stamps`` Kafka timestamps."""
        self.end_stamps.extend(stamps.get(e, -1) for e in ends)
        for part, offset, snapshot in rows:
            p = self.parts.get(part)
            if p is None or p.whole:
                continue
            if not snapshot:
                if p.in_run and p.clean:
                    p.whole = True  # streaming resumed: that snapshot was done
                p.in_run, p.bounded = False, True
                continue
            if not p.in_run:
                p.in_run, p.clean = True, p.bounded
                p.run_ts, p.since = stamps.get((part, offset), -1), offset
            if (part, offset) in ends:
                p.whole = p.clean
                p.in_run, p.bounded = False, True
        for p in self.parts.values():
            if p.in_run and p.clean and not p.whole:
                # An end mark in another partition no older than this run's first record.
                p.whole = any(ts >= p.run_ts >= 0 for ts in self.end_stamps)

    @property
    def done(self) -> bool:
        return all(p.whole or p.at_end for p in self.parts.values())


def _scan_decoder(cfg: Config) -> Decoder:
    """The format's decoder without the source database's catalog (types do not matter
    here, and an offline resync must not need the database)."""
    if not cfg.source.database.catalog_types:
        return decoder_for(cfg)
    database = cfg.source.database.model_copy(update={"catalog_types": False})
    source = cfg.source.model_copy(update={"database": database})
    return decoder_for(cfg.model_copy(update={"source": source}))


def check_topic(
    cfg: Config, topic: str, decode: Decoder | None = None, *, replica_id: str | None = None
) -> TopicCheck:
    """Whether ``topic``, read from its start, rebuilds its table whole (module docstring).

    ``decode``: the format's decoder (the running replicator's own); made from ``cfg``
    when not given. ``replica_id``: the topic id the replica recorded (None: not known).

    Raises:
        SourceError: the broker does not answer.
    """
    with scan_consumer(cfg.source, "resync-check", CHUNK) as consumer:
        found = TopicCheck(topic)
        try:
            meta = consumer.list_topics(topic, timeout=TIMEOUT_S)
            described = meta.topics.get(topic)
            if described is None or described.error is not None:
                if described is not None and described.error.code() not in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError._UNKNOWN_TOPIC,
                ):
                    raise SourceError(f"cannot describe {topic}: {described.error.str()}")
                found.missing = True
                return found
            marks = {}
            for part in sorted(described.partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, part), timeout=TIMEOUT_S
                )
                marks[part] = (low, high)
                if low > 0:
                    found.trimmed[part] = low
        except KafkaException as exc:
            raise SourceError(
                f"cannot read where {topic} starts: {kafka_reason(exc)}",
                hint="resync first checks that the topic still holds what rebuilds the "
                "table: start the broker, or resync with --force to skip the check",
            ) from None
        now = topic_ids(cfg.source, [topic]).get(topic) if replica_id else None
        if now and now != replica_id:
            assert replica_id is not None
            found.recreated = (replica_id, now)
            # Nothing of the old topic is left: every partition with records must hold
            # its share of a snapshot; one still empty holds no key of it.
            found.checked = {p: low for p, (low, high) in marks.items() if high > low}
            found.empty = not found.checked
        found.checked.update(found.trimmed)
        if not found.checked or found.empty:
            return found
        if cfg.source.format in NO_SNAPSHOTS:
            found.no_snapshots = True
            return found
        others = [p for p, (low, high) in marks.items() if p not in found.checked and high > low]
        _scan(consumer, decode or _scan_decoder(cfg), found, others)
        return found


def _scan(consumer: Consumer, decode: Decoder, found: TopicCheck, others: list[int]) -> None:
    """Read the checked partitions from their log start until each holds a whole snapshot,
    each is read to its end, or :data:`SCAN_RECORDS` records were read; then, for runs
    still open at their partition's end, look for an end mark in the ``others``
    (partitions holding records that need no check) from the runs' first timestamp."""
    topic = found.topic
    parts = {p: _Partition(start, bounded=start == 0) for p, start in found.checked.items()}
    scan = _Scan(parts)
    consumer.assign([TopicPartition(topic, p, start) for p, start in found.checked.items()])
    started = time.monotonic()
    eof: set[int] = set()
    _read(consumer, decode, found, scan, eof, lambda: scan.done)
    open_runs = [s for s in parts.values() if s.in_run and s.clean and not s.whole]
    since = min((s.run_ts for s in open_runs if s.run_ts >= 0), default=-1)
    if scan.done and others and since >= 0:
        # Quiet partitions often never roll a segment: they start at 0 and are not
        # read above, but a snapshot's end mark may be there. Read them from the time
        # the open runs began (offsets_for_times: the first record that is no older).
        asked = [TopicPartition(topic, p, since) for p in others]
        try:
            at = consumer.offsets_for_times(asked, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise SourceError(f"cannot look up offsets of {topic}: {kafka_reason(exc)}") from None
        targets = [tp for tp in at if tp.offset >= 0]
        if targets:
            consumer.assign(targets)
            eof.clear()
            wanted = {tp.partition for tp in targets}

            def settled() -> bool:
                return wanted <= eof or all(s.whole for s in open_runs)

            _read(consumer, decode, found, scan, eof, settled)
    found.capped = found.scanned >= SCAN_RECORDS and not all(s.whole for s in parts.values())
    found.snapshots = {p: s.since for p, s in parts.items() if s.whole}
    log.debug(
        "%s: resync check: %d records read in %.1f s; checked %s; complete snapshot %s",
        topic,
        found.scanned,
        time.monotonic() - started,
        found.checked,
        found.snapshots or "none",
    )


def _read(
    consumer: Consumer,
    decode: Decoder,
    found: TopicCheck,
    scan: _Scan,
    eof: set[int],
    done: Callable[[], bool],
) -> None:
    """Feed what ``consumer`` reads to ``scan`` until ``done()`` or :data:`SCAN_RECORDS`
    records were read (``eof``: the partitions read to their end); a checked partition
    is left as soon as it holds a whole snapshot."""
    topic, parts = found.topic, scan.parts
    idle_since = time.monotonic()
    while not done() and found.scanned < SCAN_RECORDS:
        msgs = consumer.consume(CHUNK, 1.0)
        records: list[Message] = []
        for m in msgs:
            err = m.error()
            part = m.partition()
            if err is None:
                records.append(m)
            elif err.code() == KafkaError._PARTITION_EOF and not err.fatal():
                if part is not None:
                    eof.add(part)
                    if part in parts:
                        parts[part].at_end = True
            else:
                raise SourceError(f"cannot read {topic}[{part}]: {err.str()}")
        if not records:
            if time.monotonic() - idle_since > TIMEOUT_S:
                raise SourceError(f"{topic} did not answer within {TIMEOUT_S:g} s")
            continue
        idle_since = time.monotonic()
        found.scanned += len(records)
        result = _decode(decode, topic, records)
        stamps = {(m.partition() or 0, m.offset() or 0): _stamp(m) for m in records}
        ends = {
            (m.partition() or 0, m.offset() or 0)
            for m in _end_marks(decode, topic, records, result)
        }
        rows = _snapshot_rows(result.batch) if result.batch is not None else ([], [], [])
        scan.feed(list(zip(*rows, strict=True)), ends, stamps)
        left = [TopicPartition(topic, p) for p, s in parts.items() if s.whole and not s.at_end]
        if left:
            consumer.incremental_unassign(left)
            for tp in left:
                parts[tp.partition].at_end = True
