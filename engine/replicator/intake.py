"""Intake: a polled batch becomes one decoded share per table.

Each topic's records are decoded (behind the limits of :mod:`engine.decode.limits`);
topics that hold no rows are recognised and kept out of the tables; undecodable records
go to the dead letters as ``errors.tolerance`` says; with transaction metadata the tail
of a share that would split an unfinished source transaction is cut (and read again);
a position epoch change cuts the share and stops its table. Schema change records are
handed to the :class:`~engine.replicator.ddl_router.SchemaChangeRouter` last, so that
each lands in its table's share of the batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from engine import faults
from engine.config import Config
from engine.decode import BadMessage, DecodeResult, RecordBatch, control
from engine.decode.gtid import gtid_positions
from engine.decode.limits import guarded
from engine.decode.messages import decode_messages
from engine.errors import SourceError
from engine.model import TX_ID
from engine.replicator import epochs
from engine.replicator.batches import PreparedBatch, TableShare
from engine.replicator.ddl import apply_column_ops, cut_batch
from engine.replicator.ddl_router import SchemaChangeRouter
from engine.replicator.deadletter import DeadLetters
from engine.replicator.offsets import Offsets
from engine.replicator.tables import TableRuntime, Tables
from engine.source import (
    TopicRecords,
    TransactionTracker,
    apply_cuts,
    collector_paused,
    data_collection,
    group_by_topic,
    transaction_topic,
)
from engine.source.records import first_offsets, next_offsets
from engine.state import StateRecorder

log = logging.getLogger("cdcctl.replicator")

#: How long rows wait for a schema change topic whose unread gap does not move.
SCHEMA_WAIT_SECONDS = 5.0


@dataclass
class Polled:
    """A polled batch's records, not decoded yet."""

    count: int
    grouped: dict[str, TopicRecords]
    started: float
    #: How long the poll took.
    seconds: float


class Intake:
    """Polls and decodes batches for the tables of one replicator."""

    def __init__(
        self,
        config: Config,
        tables: Tables,
        offsets: Offsets,
        dead_letters: DeadLetters,
        router: SchemaChangeRouter,
    ) -> None:
        self.cfg = config
        self.tables = tables
        self.offsets = offsets
        self.dead_letters = dead_letters
        self.router = router
        #: The format's decoder, behind the limits (the router's too).
        self.decode = router.decode
        #: Logical decoding messages kept as a table, behind the same limits.
        self._decode_messages = guarded(
            decode_messages,
            max_message_bytes=config.source.limits.max_message_bytes,
            max_nesting_depth=config.source.limits.max_nesting_depth,
        )
        self.transactions = TransactionTracker(self.decode.documents)
        self._tx_warned: set[str] = set()
        #: Topics known to hold rows (never checked for being a non-table topic again),
        #: and topics of logical decoding messages kept as tables.
        self._row_topics: set[str] = set()
        self._message_topics: set[str] = set()
        self.recorder: StateRecorder | None = None
        #: Per schema change partition: its last (read, end) gap and since when.
        self._gaps: dict[tuple[str, int], tuple[tuple[int, int], float]] = {}

    def reset_transactions(self) -> None:
        """A new consumer reads the transaction topics from their start."""
        self.transactions = TransactionTracker(self.decode.documents)

    def consume(self, until: Callable[[int], bool] | None = None) -> Polled:
        """Poll the next batch's records (none once the goal is read), grouped per topic;
        ``until``: end the poll early (see :meth:`engine.source.KafkaSource.poll`)."""
        source = self.offsets.running()
        started = time.monotonic()
        count, grouped = 0, {}
        if not self.offsets.caught_up(read=True):
            with collector_paused():
                messages = source.poll(
                    self.cfg.replicator.max_batch_events,
                    self.cfg.replicator.max_batch_seconds,
                    until,
                )
                count = len(messages)
                grouped = group_by_topic(messages)
                del messages  # the raw messages (and librdkafka's buffers) are freed here
        self.offsets.check_out_of_range()
        return Polled(count, grouped, started, time.monotonic() - started)

    def decode_polled(self, polled: Polled) -> tuple[int, PreparedBatch | None]:
        """Decode what :meth:`consume` read; how many messages, and the batch (None:
        nothing polled). With nothing polled, schema changes waiting for their tables'
        rows are looked at again (a wait that ran out lets them go on with no new record):
        the batch holds those carried out, if any."""
        if not polled.count:
            if not self.router.changes_waiting():
                return 0, None
            prepared = self.prepare({}, 0, polled.started)
            return 0, (prepared if prepared.tables else None)
        source = self.offsets.running()
        faults.point("consumed")
        self.transactions.observe(source.poll_transactions())
        prepared = self.prepare(polled.grouped, polled.count, polled.started)
        prepared.phases["poll"] = polled.seconds  # not the commit that may follow the poll
        polled.grouped = {}
        # Not a partition that left the consumer meanwhile (its table failed in this
        # batch): it is read again from its checkpoint when it joins again.
        rewind = {tp: o for tp, o in prepared.rewind.items() if tp in source.assigned}
        if rewind:
            source.seek(rewind)
        return polled.count, prepared

    def prepare(
        self, grouped: dict[str, TopicRecords], count: int, started: float
    ) -> PreparedBatch:
        """Decode every topic of a batch and cut it at unfinished transactions."""
        prepared = PreparedBatch(count=count, started=started)
        prepared.phases["poll"] = time.monotonic() - started
        consumed = self.offsets.consumed
        for topic in [t for t in grouped if t.endswith(".transaction")]:
            self.offsets.tx_topics.add(topic)
            self.transactions.observe(grouped.pop(topic)[1])
        schema_changes: list[tuple[TableRuntime, TopicRecords]] = []
        for topic, (_, values, _, _) in grouped.items():
            rt = self.tables.get(topic)
            if (
                rt is not None
                and rt.live
                and not rt.stopping
                and rt.control is None
                and topic not in self._row_topics
                and topic not in self._message_topics
                and (rt.writer is None or self.cfg.source.logical_messages == "table")
            ):
                self._recognise(rt, values)
        waiting = self._waiting_for_schema_changes(grouped)
        for topic in list(grouped):
            # Popped so each topic's raw bytes are freed as soon as it is decoded.
            keys, values, parts, offs = grouped.pop(topic)
            rt = self.tables.get(topic)
            if rt is None or not rt.live:
                continue  # a paused or held table's records are read again from its checkpoint
            if rt.stopping:
                continue  # it stops at a bad message of the batch in flight
            if topic in waiting:
                for p, first in first_offsets(parts, offs).items():
                    prepared.rewind[(topic, p)] = first  # read again by the next poll
                self.router.hold(topic, next_offsets(parts, offs))
                log.debug("%s: its rows wait for the schema change topic", rt.name)
                continue
            read_to = next_offsets(parts, offs)
            if rt.control is not None:
                # Not a table: read, never written; its position is kept in memory only.
                rt.progress.committed = {**rt.progress.committed, **read_to}
                for p, o in read_to.items():
                    consumed[(topic, p)] = o
                if rt.control == control.SCHEMA_CHANGE:
                    schema_changes.append((rt, (keys, values, parts, offs)))
                    continue
                if rt.control == control.TRANSACTION:
                    self.offsets.tx_topics.add(topic)
                    self.transactions.observe(list(values))
                rt.counters.ignored += len(values)
                continue
            t0 = time.monotonic()
            if topic in self._message_topics:
                result = self._decode_messages(RecordBatch(topic, keys, values, parts, offs))
            else:
                result = self.decode(RecordBatch(topic, keys, values, parts, offs))
            if result.batch is not None:
                self._row_topics.add(topic)
            del keys, values
            prepared.timed("decode", time.monotonic() - t0)
            prepared.tables.append(self._share(rt, result, read_to, prepared))
        # Schema changes last, so that each lands in its table's share of this batch.
        self.router.route(prepared, schema_changes)
        return prepared

    def _share(
        self,
        rt: TableRuntime,
        result: DecodeResult,
        read_to: dict[int, int],
        prepared: PreparedBatch,
    ) -> TableShare:
        """A table's share of the batch from its decoded records: schema state applied,
        positions mapped, cut at unfinished transactions, bad messages and epoch changes."""
        topic = rt.topic
        rt.counters.ignored += result.ignored
        if result.source_table:
            rt.progress.source_table = json.dumps(
                result.source_table, sort_keys=True, separators=(",", ":")
            )
        batch = apply_column_ops(result.batch, rt.progress.ddl)
        if batch is not None and self.cfg.source.mysql_gtid_ordering:
            batch = gtid_positions(batch, rt.progress.gtid_lineages)
        epoch_fail = None
        if batch is not None and epochs.screened(self.cfg):
            batch, epoch_fail = epochs.mapped(batch, rt.progress.epoch, result.snapshot_ended)
        cuts: dict[int, int] = {}
        if batch is not None and self._confirmable(topic, rt, batch):
            cuts, warnings = self.transactions.cuts(
                batch, data_collection(topic), self.cfg.replicator.max_batch_events
            )
            for warning in warnings:
                log.warning("%s: %s", rt.name, warning)
            if cuts:
                batch = cut_batch(batch, cuts, rt.writer.schema() if rt.writer else None)
                for p, cut in cuts.items():
                    read_to[p] = cut
                    prepared.rewind[(topic, p)] = cut
        bad = [b for b in result.bad if b.offset < cuts.get(b.partition, b.offset + 1)]
        share = TableShare(rt, batch, result.key_fields, read_to)
        share.snapshot_ended = result.snapshot_ended
        share.row_schemas = result.row_schemas
        if bad:
            self._bad_messages(share, bad)
        if share.batch is not None and epochs.screened(self.cfg):
            self._epoch_change(share, epoch_fail)
        if share.fail is not None:
            rt.stopping = True
        for p, o in read_to.items():
            self.offsets.consumed[(topic, p)] = o
        return share

    # -- the schema change barrier ---------------------------------------------------------
    def _waiting_for_schema_changes(self, grouped: dict[str, TopicRecords]) -> set[str]:
        """The table topics of this batch whose rows wait until their schema change topic
        is read to its end (they are read again by the next poll).

        The connector hands a schema change to its producer before the rows that follow
        it, but a consumer may read the rows first (two topics: no order between them). A
        change is placed among a table's rows by position only when it is known no later
        than the first row after it (a rename read after such rows would find their new
        column taken for an added one, a ``fail`` stop after them). So while a schema
        change topic has records not read yet (below its high watermark, which the rows
        of this batch were written under), the rows of the tables it covers
        (``<topic>.<database>.<table>``) are not applied. Only in a live run (the
        watermark is the broker's); a broker that does not answer holds nothing back.
        A topic named as the tables' prefix holds them back before its first records are
        read (at a start: which kind of topic it is is known from its records). The
        changes of a waiting table wait with its rows (:meth:`SchemaChangeRouter.route`).
        This closes the consumer's side; what the connector's producer wrote out of order
        (separate partitions, a retried batch) it cannot order, which is rare.
        """
        source = self.offsets.source
        if source is None:
            return set()
        assigned = source.assigned
        behind = []
        for rt in self.tables.by_topic.values():
            if not self._may_hold_schema_changes(rt, grouped):
                continue
            parts = [(rt.topic, p) for p in rt.partitions if (rt.topic, p) in assigned]
            if not parts:
                continue
            consumed = self.offsets.consumed
            read = {tp: consumed[tp] for tp in parts if tp in consumed}
            if rt.topic in grouped:
                _, _, p_read, o_read = grouped[rt.topic]
                read.update({(rt.topic, p): o for p, o in next_offsets(p_read, o_read).items()})
            try:
                # Asked now (one ListOffsets), not the value of an earlier fetch: the end
                # as it is after this batch's rows were fetched.
                ends = source.end_offsets(parts)
                unread = [tp for tp in parts if tp not in read]
                if unread:  # nothing read yet: from where its log starts
                    read.update(source.log_start_offsets(unread))
            except SourceError as exc:
                log.debug("schema change topic %s: end offsets not known: %s", rt.topic, exc)
                continue
            gaps = {tp: (read[tp], end) for tp, end in ends.items() if read[tp] < end}
            if any(self._readable_gap(tp, gap) for tp, gap in gaps.items()):
                behind.append(rt.topic + ".")
        if not behind:
            return set()
        return {
            t
            for t in grouped
            if t.startswith(tuple(behind))
            and (table := self.tables.by_topic.get(t)) is not None
            and table.control is None
        }

    def _may_hold_schema_changes(self, rt: TableRuntime, grouped: dict[str, TopicRecords]) -> bool:
        """Whether a topic is (or, not read yet, may be) the schema change topic of table
        topics of this batch: recognised as one, or not yet known to hold rows; either
        named as their prefix (Debezium's ``topic.prefix``)."""
        if rt.control != control.SCHEMA_CHANGE and (
            rt.control is not None or rt.writer is not None or rt.topic in self._row_topics
        ):
            return False
        # Only when this batch has rows it may hold: no request to the broker otherwise.
        prefix = rt.topic + "."
        return any(t.startswith(prefix) for t in grouped)

    def _readable_gap(self, tp: tuple[str, int], gap: tuple[int, int]) -> bool:
        """Whether a schema change partition's (read, end) gap still holds rows back: a
        gap that stays as it is for :data:`SCHEMA_WAIT_SECONDS` holds nothing readable (a
        transaction's commit marker takes an offset) and stops holding."""
        now = time.monotonic()
        seen = self._gaps.get(tp)
        if seen is None or seen[0] != gap:
            self._gaps[tp] = (gap, now)
            return True
        return now - seen[1] < SCHEMA_WAIT_SECONDS

    # -- topics that are not tables ------------------------------------------------------
    def _recognise(self, rt: TableRuntime, values: Sequence[bytes | None]) -> None:
        """Tell from a new topic's records whether it is a table (see
        :mod:`engine.decode.control`); a topic of another kind never becomes one."""
        kind = control.topic_kind(values, self.decode.documents)
        if kind is None:
            return
        if kind == control.MESSAGE and self.cfg.source.logical_messages == "table":
            self._message_topics.add(rt.topic)
            log.info("%s: logical decoding messages: kept in an append-only table", rt.name)
            return
        if rt.writer is not None:
            return  # a replica exists: it is a table (its messages table, read after a restart)
        if self.recorder is not None:
            self.recorder.forget(self.tables.store_name(rt))
        self.tables.release(rt)
        rt.control = kind
        what = {
            control.SCHEMA_CHANGE: "schema changes are applied to the tables they name",
            control.MESSAGE: 'skipped and counted (source.logical_messages = "skip")',
        }.get(kind, "skipped")
        log.info("topic %r holds %s records, not rows: not a table; %s", rt.topic, kind, what)

    # -- bad messages, epochs, transactions ------------------------------------------------
    def _bad_messages(self, share: TableShare, bad: list[BadMessage]) -> None:
        """Quarantine a share's bad messages as ``errors.tolerance`` says.

        ``"all"``: every one goes to the dead-letter file and is skipped. ``"none"``: the
        share is cut at the first bad message of each partition (the events before it
        still commit), that message goes to the dead-letter file, and the table stops
        once the share is committed, its checkpoint at the bad message.
        """
        rt = share.rt
        if self.cfg.errors.tolerance == "none":
            first: dict[int, BadMessage] = {}
            for b in bad:
                if b.partition not in first or b.offset < first[b.partition].offset:
                    first[b.partition] = b
            bad = sorted(first.values(), key=lambda b: (b.partition, b.offset))
            if share.batch is not None:
                share.batch = apply_cuts(share.batch, {p: b.offset for p, b in first.items()})
            for p, b in first.items():
                share.read_to[p] = b.offset
        written = self.dead_letters.quarantine(rt.name, bad)
        path = self.dead_letters.path(rt.name)
        if self.cfg.errors.tolerance == "none":
            where = "; ".join(
                f"{b.topic}[{b.partition}] offset {b.offset}: {b.reason}" for b in bad
            )
            share.fail = (
                f"a message could not be decoded ({where}); it is in {path} and the table "
                'stopped there (errors.tolerance = "none"). Fix the cause and restart: '
                'replication resumes at that message; or set errors.tolerance = "all" to '
                "skip bad messages to the dead-letter file (`cdcctl deadletters replay` "
                "re-applies them later)"
            )
            return
        share.bad = len(bad)
        log.warning(
            "%s: quarantined %d bad message(s) to %s%s",
            rt.name,
            len(bad),
            path,
            "" if written == len(bad) else f" ({len(bad) - written} already there)",
        )

    def _epoch_change(self, share: TableShare, fail: str | None) -> None:
        """Stop a table at an epoch change of its source positions (:mod:`.epochs`): its
        share is cut at the change, and the table stops once the rest is committed."""
        rt, batch = share.rt, share.batch
        assert batch is not None
        pg = '"postgresql"' in (rt.progress.source_table or "")
        found = epochs.detect(
            batch,
            rt.progress.epoch,
            rt.progress.max_source_ts,
            topic=rt.topic,
            table=rt.name,
            pg=pg,
        )
        if fail is not None:  # positions that cannot be mapped: nothing of the share applies
            found = epochs.EpochChange(epochs.first_offsets(batch), fail)
        if found is not None:
            share.batch = apply_cuts(batch, found.cuts)
            share.read_to.update(found.cuts)
            share.fail = found.message

    def _confirmable(self, topic: str, rt: TableRuntime, batch: pa.Table) -> bool:
        """Whether the batch's transactions can be confirmed complete by END records.

        Events carry transaction ids whenever the connector has transaction metadata on,
        but without a ``<prefix>.transaction`` topic no END record will ever come:
        waiting for one would hold the table back forever. Such batches are applied as
        they come (a warning says once per table that they may split transactions).
        """
        if transaction_topic(topic) in self.offsets.tx_topics:
            return True
        if batch.column(TX_ID).null_count < batch.num_rows and rt.name not in self._tx_warned:
            self._tx_warned.add(rt.name)
            log.warning(
                "%s: events carry transaction ids but there is no %s topic to confirm them; "
                "batches may end inside a transaction",
                rt.name,
                transaction_topic(topic),
            )
        return False

    # -- dead letters replayed -------------------------------------------------------------
    def replayed(self, rt: TableRuntime, result: DecodeResult) -> pa.Table | None:
        """The change batch of dead letters decoded again (``result``), its positions
        mapped as the live stream's are."""
        batch = result.batch
        if batch is not None and self.cfg.source.mysql_gtid_ordering:
            batch = gtid_positions(batch, rt.progress.gtid_lineages)
        if batch is not None and epochs.screened(self.cfg):  # letters of an accepted epoch
            batch, _ = epochs.mapped(batch, rt.progress.epoch, snapshot_ended=False)
        return batch
