"""The schema-change router: schema change records to the tables they name.

The schema change topic's records are parsed (behind the decoders' limits; an unusable
one is a dead letter of that topic), each table change becomes a :class:`DdlItem` for
the table it names, and is decided and carried out (:mod:`engine.replicator.ddl`) in that
table's share of the batch — or kept on the table (``pending_ddl``) while it is paused,
held or stopping, and carried out in the first batch after it is live again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

import pyarrow as pa

from engine.config import Config
from engine.decode import BadMessage
from engine.decode.ddl import SchemaChange, parse_schema_change
from engine.decode.gtid import gtid_positions
from engine.decode.limits import DECODER_FAILED, Guarded
from engine.errors import SourceError, TableNameError
from engine.model import POS, POS_SUB
from engine.replicator.batches import DdlItem, PreparedBatch, TableShare
from engine.replicator.ddl import (
    apply_column_ops,
    cut_at_position,
    cut_batch,
    decide,
    drop_unseen_columns,
    record,
    truncate_row,
)
from engine.replicator.deadletter import DeadLetters
from engine.replicator.offsets import Offsets
from engine.replicator.tables import TableRuntime, Tables
from engine.source import TopicRecords, apply_cuts
from engine.state import StateRecorder

log = logging.getLogger("cdcctl.replicator")


#: How long a table partition's read position may stay short of where a waiting schema
#: change needs it (:meth:`SchemaChangeRouter._rows_unread`) before the change goes on.
ROWS_WAIT_SECONDS = 5.0


@dataclass(eq=False)
class SchemaChangeRouter:
    """Routes schema changes to their tables' shares of each batch."""

    cfg: Config
    tables: Tables
    offsets: Offsets
    dead_letters: DeadLetters
    #: The format's decoder behind its limits (its ``refused`` and ``documents``).
    decode: Guarded
    recorder: StateRecorder | None = None
    #: Per table partition a waiting change needs read further: (read position, since).
    _stalls: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    #: Per table topic whose rows waited for its schema change topic (sought back): per
    #: partition, how far they had been read (:meth:`hold`).
    _held: dict[str, dict[int, int]] = field(default_factory=dict)

    def hold(self, topic: str, read_to: dict[int, int]) -> None:
        """A table's rows, read up to ``read_to`` (per partition), were sought back to wait
        for its schema change topic: its changes wait until they are read again."""
        _raise_to(self._held.setdefault(topic, {}), read_to)

    def changes_waiting(self) -> bool:
        """Whether some live table has schema changes waiting to be carried out."""
        return any(self._may_carry_out(rt) for rt in self.tables)

    def route(
        self, prepared: PreparedBatch, topics: list[tuple[TableRuntime, TopicRecords]]
    ) -> None:
        """Carry out the changes waiting for their tables, then those of the schema
        change topics read in this batch, each table's in the order read.

        A change of a table whose rows were sought back to wait for its schema change
        topic (:meth:`hold`) waits with them and is decided with them: it waits until
        they are read again that far, or until this batch holds a row of that partition
        at or after the change's position (offset order is source order: every row
        before it was read then). Until then the rows after it wait too."""
        self._held = {
            topic: held
            for topic, held in self._held.items()
            if (rt := self.tables.by_topic.get(topic)) is not None
            and any(self._read(rt, p) < o for p, o in held.items())
        }
        for ddl_rt, records in topics:
            self._schema_changes(prepared, ddl_rt, records)
        self._pending(prepared)

    def _read(self, rt: TableRuntime, partition: int) -> int:
        """How far a table partition has been read (its checkpoint before any read)."""
        return self.offsets.consumed.get(
            (rt.topic, partition), rt.progress.committed.get(partition, 0)
        )

    @staticmethod
    def _may_carry_out(rt: TableRuntime) -> bool:
        return bool(rt.pending_ddl) and rt.live and not rt.stopping

    def _schema_changes(
        self,
        prepared: PreparedBatch,
        ddl_rt: TableRuntime,
        records: TopicRecords,
    ) -> None:
        """Route the schema change topic's records to the tables they name."""
        keys, values, parts, offs = records
        bad = []
        ends: dict[str, dict[int, int]] = {}  # per table topic, asked once per batch
        # The limits first: nothing over them is parsed (as for row topics).
        refused = self.decode.refused(keys, values)
        documents = self.decode.documents
        docs = documents(values) if documents is not None else values
        for i, (key, value, doc, part, off) in enumerate(
            zip(keys, values, docs, parts, offs, strict=True)
        ):
            if value is None:
                ddl_rt.counters.ignored += 1
                continue
            try:
                if i in refused:
                    raise ValueError(refused[i])
                if doc is None:
                    raise ValueError("the value does not decode with source.format")
                change = parse_schema_change(doc)
            except ValueError as exc:
                reason = f"not a usable schema change event: {exc}"
                bad.append(BadMessage(ddl_rt.topic, int(part), int(off), key, value, reason))
                continue
            except Exception as exc:  # noqa: BLE001 - the decoders' exception net, for DDL
                reason = f"{DECODER_FAILED} ({type(exc).__name__}: {exc})"[:500]
                bad.append(BadMessage(ddl_rt.topic, int(part), int(off), key, value, reason))
                continue
            if not change.changes:
                ddl_rt.counters.ignored += 1
                log.info("schema change %r names no table: skipped", change.ddl[:200])
            for tc in change.changes:
                target = f"{ddl_rt.topic}.{tc.database}.{tc.table}"
                rt = self._target(target)
                if rt is None:
                    ddl_rt.counters.ignored += 1
                    log.info("schema change of %s skipped: no such table topic", target)
                    continue
                if rt.progress.ddl.seen(ddl_rt.topic, int(part), int(off)):
                    continue  # handled by an earlier commit (the topic is read again on each start)
                rows_to = self._rows_to(rt, ends)
                item = DdlItem(ddl_rt.topic, change, tc, int(part), int(off), rows_to)
                if rt.pending_ddl or not rt.live or rt.stopping or rows_to:
                    rt.pending_ddl.append(item)  # after the ones before it (_pending)
                    continue
                self._apply(prepared, rt, item)
        if bad:
            self.dead_letters.quarantine(ddl_rt.name, bad)
            for b in bad:
                log.error(
                    "schema change topic %s[%d] offset %d: %s; quarantined to %s",
                    b.topic,
                    b.partition,
                    b.offset,
                    b.reason,
                    self.dead_letters.path(ddl_rt.name),
                )

    def _rows_to(self, rt: TableRuntime, ends: dict[str, dict[int, int]]) -> dict[int, int]:
        """How far a table's rows must be read before a schema change just read for it
        is decided (per partition; empty: now). The rows written before the change were
        written before it, so they are below the table topic's end as it is now; the ones
        not read yet (a short poll may bring the schema change topic first) would land
        after the change, or under ``fail`` never. Its rows that waited for the schema
        change topic (:meth:`hold`) count as not read. Only in a live run; a broker that
        does not answer holds nothing back, nor does a partition whose read position
        stops moving short of that end (:data:`ROWS_WAIT_SECONDS`, :meth:`_rows_unread`)."""
        rows_to = dict(self._held.get(rt.topic, {}))
        source = self.offsets.source
        if source is None:
            return rows_to
        if rt.topic not in ends:
            # Every partition, read or not (a paused table's too: its rows written during
            # the pause come before a change read meanwhile).
            parts = [(rt.topic, p) for p in rt.partitions]
            try:
                ends[rt.topic] = {p: o for (_, p), o in source.end_offsets(parts).items()}
            except SourceError as exc:
                log.debug("%s: end offsets not known: %s", rt.topic, exc)
                ends[rt.topic] = {}
        _raise_to(rows_to, {p: end for p, end in ends[rt.topic].items() if self._read(rt, p) < end})
        return rows_to

    def _batch_position(self, rt: TableRuntime, change: SchemaChange) -> tuple[int, int] | None:
        """A change's position as the table's rows carry theirs (under
        ``source.mysql_gtid_ordering`` their positions are re-encoded from their GTIDs;
        a change without a GTID then has none that compares)."""
        if change.position is None or not self.cfg.source.mysql_gtid_ordering:
            return change.position
        if change.gtid is None:
            return None
        row = gtid_positions(
            truncate_row(change.position, None, 0, change.gtid), rt.progress.gtid_lineages
        )
        return (row.column(POS)[0].as_py(), row.column(POS_SUB)[0].as_py() or 0)

    def _target(self, topic: str) -> TableRuntime | None:
        """The table of a topic a schema change names: only a topic found in Kafka (or,
        with :meth:`Replicator.apply`, seen in a batch) and selected; a change of a table
        whose topic does not exist yet has no replica to change and is not made one."""
        rt = self.tables.by_topic.get(topic)
        return None if rt is None or rt.control is not None else rt

    def _pending(self, prepared: PreparedBatch) -> None:
        """Schema changes read while their table was paused, held or waiting for them
        (or behind such a change), in order, once it is live and their rows are read
        (see :meth:`route`)."""
        for rt in list(self.tables):
            if not self._may_carry_out(rt):
                continue
            items, rt.pending_ddl = rt.pending_ddl, []
            for k, item in enumerate(items):
                if not rt.live or rt.stopping or self._rows_unread(prepared, rt, item):
                    rt.pending_ddl = items[k:]
                    break
                self._apply(prepared, rt, item)

    def _rows_unread(self, prepared: PreparedBatch, rt: TableRuntime, item: DdlItem) -> bool:
        """Whether rows of the table from before a change may not be read yet: then the
        change waits, and this batch's rows of the table at or after its position are
        cut and read again (they must follow it)."""
        share = prepared.share(rt)
        batch = share.batch if share is not None else None
        position = self._batch_position(rt, item.change)
        after = cut_at_position(batch, position) if batch is not None and position else {}
        wanted = dict(item.rows_to)
        _raise_to(wanted, self._held.get(rt.topic, {}))
        now = time.monotonic()
        unread = []
        for p, o in wanted.items():
            read = self._read(rt, p)
            if p in after or read >= o:
                continue
            # Offsets no consumer is handed (transaction markers, aborted or compacted
            # records, a log emptied by retention) would hold it forever: a read
            # position that does not move for a while holds nothing.
            last, since = self._stalls.get((rt.topic, p), (None, now))
            if last != read:
                self._stalls[(rt.topic, p)] = (read, now)
            elif now - since >= ROWS_WAIT_SECONDS:
                continue
            unread.append(p)
        if not unread:
            return False
        if share is not None and batch is not None and after:
            share.batch = cut_batch(batch, after, rt.writer.schema() if rt.writer else None)
            share.read_to.update(after)
            for p, cut in after.items():
                self.offsets.consumed[(rt.topic, p)] = cut
                prepared.rewind[(rt.topic, p)] = cut
        return True

    def _apply(self, prepared: PreparedBatch, rt: TableRuntime, item: DdlItem) -> None:
        """Decide and carry out one table change on one table (see
        :mod:`engine.replicator.ddl`): it lands with the table's share of this batch."""
        ddl_topic, change, tc, part, off = (
            item.topic,
            item.change,
            item.table_change,
            item.partition,
            item.offset,
        )
        state = rt.progress.ddl
        if state.seen(ddl_topic, part, off):
            return  # handled by an earlier commit (the topic is read again on each start)
        share = prepared.share(rt)
        # What the table holds: its replica, else (no replica yet) the columns of its
        # rows in this batch, so a change is judged the same whichever batch it lands in.
        replica = rt.writer.schema() if rt.writer is not None else None
        if replica is None and share is not None and share.batch is not None:
            replica = share.batch.schema
        new_name = None
        if tc.kind == "RENAME" and tc.new_table:
            with contextlib.suppress(TableNameError):
                new_name = self.cfg.table_name(f"{ddl_topic}.{tc.database}.{tc.new_table}")
        outcome = decide(
            self.cfg.ddl_policy(rt.name),
            rt.name,
            tc,
            change,
            state,
            replica,
            new_topic_table=new_name,
        )
        where = f"{ddl_topic}[{part}] offset {off}"
        if self.recorder is not None:
            self.recorder.event(rt.name, "ddl", f"{outcome.verdict}: {outcome.message}")
        if outcome.verdict == "failed":
            rt.counters.ddl += 1
            message = f"{outcome.message} (schema change at {where})"
            if share is None or share.batch is None or change.position is None:
                self.offsets.fail(rt, message)
                return
            # The table stops at the change: its rows from before it still commit, the
            # checkpoint stays at its first row after it (read again after the restart).
            position = self._batch_position(rt, change)
            cuts = cut_at_position(share.batch, position) if position is not None else {}
            if cuts:
                share.batch = drop_unseen_columns(
                    apply_cuts(share.batch, cuts),
                    rt.writer.schema() if rt.writer is not None else None,
                    state,
                )
                share.read_to.update(cuts)
                for p, cut in cuts.items():
                    self.offsets.consumed[(rt.topic, p)] = cut
            share.fail = share.fail or message
            rt.stopping = True
            log.error("%s: stops at a schema change: %s", rt.name, message)
            return
        level = logging.INFO if outcome.verdict == "applied" else logging.WARNING
        log.log(
            level,
            "%s: schema change at %s %s: %s",
            rt.name,
            where,
            outcome.verdict,
            outcome.message,
        )
        state.mark(ddl_topic, part, off)
        if share is None:
            share = TableShare(rt, None, [], {})
            prepared.tables.append(share)
        share.ddl_events += 1
        share.ddl_items.append(item)
        rt.uncommitted_ddl.append(item)
        if outcome.verdict != "applied":
            return
        record(state, outcome)
        share.drop_columns += outcome.drop_columns
        for old, new in outcome.renames.items():
            share.renames = {a: (new if b == old else b) for a, b in share.renames.items()}
            share.renames.setdefault(old, new)
        share.batch = apply_column_ops(share.batch, state)
        if outcome.truncate:
            if change.position is None:
                log.warning(
                    "%s: %s has no binlog position: the truncate is not applied", rt.name, where
                )
                return
            row = truncate_row(change.position, change.source_ts_ms, off, change.gtid)
            if self.cfg.source.mysql_gtid_ordering:
                row = gtid_positions(row, rt.progress.gtid_lineages)
            share.batch = (
                row
                if share.batch is None
                else pa.concat_tables([share.batch, row], promote_options="default")
            )


def _raise_to(offsets: dict[int, int], more: dict[int, int]) -> None:
    """Per partition, the larger of ``offsets``' and ``more``'s offset (into ``offsets``)."""
    for p, o in more.items():
        offsets[p] = max(offsets.get(p, o), o)
