"""The offset tracker: the Kafka consumer and where each partition is read.

It holds the replicator's :class:`~engine.source.KafkaSource` (a new one after each
retry), what has been read (``consumed``: decoded, maybe not committed yet), the topics
found and assigned at each table's checkpoint, checkpoints outside their partition's log
(offset gaps, recreated topics), the end offsets to catch up to, and the lag. Tables
leave and rejoin the consumer only through :meth:`Offsets.stop_reading`,
:meth:`Offsets.read_again`, :meth:`Offsets.read_from_start` and :meth:`Offsets.fail`.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from engine.config import Config
from engine.errors import SourceError
from engine.replicator.tables import TableRuntime, Tables
from engine.source import KafkaSource
from engine.state import StateRecorder

log = logging.getLogger("cdcctl.replicator")

Positions = dict[tuple[str, int], int]


class Offsets:
    """Where every partition is read, for the tables of one replicator."""

    def __init__(self, config: Config, tables: Tables) -> None:
        self.cfg = config
        self.tables = tables
        self.source: KafkaSource | None = None
        #: next offset read (decoded, maybe not yet committed) per partition
        self.consumed: Positions = {}
        #: ``consumed`` as of the previous topic refresh (partitions idle since then are
        #: checked for gaps).
        self._seen: Positions = {}
        #: Per partition, (high watermark, exact end) as last probed: while the watermark
        #: stays, the exact end does too (the Tansu broker's watermark lags within a batch).
        self._verified_ends: dict[tuple[str, int], tuple[int, int]] = {}
        #: Transaction-metadata topics known to exist: only their tables' transactions
        #: can be confirmed complete, so only those are held back until their END.
        self.tx_topics: set[str] = set()
        self.last_refresh = 0.0
        self.last_lag = 0.0
        self._goal: Positions | None = None
        self._goal_probe: Future[Positions] | None = None
        self._probe_pool: ThreadPoolExecutor | None = None
        #: The state store's writer (an accepted gap is an event of the event log).
        self.recorder: StateRecorder | None = None

    # -- the consumer --------------------------------------------------------------------
    def connect(self) -> KafkaSource:
        """A new consumer (at start, and after a retry), nothing read yet."""
        self.consumed, self._seen, self._verified_ends = {}, {}, {}
        self.source = KafkaSource(self.cfg.source, self.cfg.replicator.max_batch_events)
        return self.source

    def running(self) -> KafkaSource:
        if self.source is None:
            raise RuntimeError("the replicator is not running")
        return self.source

    def disconnect(self) -> None:
        """Close the consumer (a retry starts a new one)."""
        if self.source is not None:
            self.source.close()
            self.source = None

    def close(self) -> None:
        """The run ends: the end-offset probe and the consumer are closed."""
        if self._probe_pool is not None:
            self._probe_pool.shutdown(wait=True)
        self.disconnect()

    # -- tables joining and leaving the consumer -------------------------------------------
    def stop_reading(self, rt: TableRuntime) -> None:
        """Unassign a table's partitions and forget how far they were read (they are read
        again from its checkpoint when assigned again)."""
        if self.source is not None:
            self.source.unassign([(rt.topic, p) for p in rt.partitions])
        for p in rt.partitions:
            self.consumed.pop((rt.topic, p), None)

    def read_again(self, rt: TableRuntime) -> None:
        """Assign a table's partitions again, at its checkpoint."""
        if self.source is not None:
            self.source.assign(rt.checkpoint)

    def read_from_start(self, partitions: list[tuple[str, int]]) -> None:
        """Assign partitions at the start of their logs (a resynced table)."""
        if self.source is not None:
            self.source.assign(dict.fromkeys(partitions))

    def fail(self, rt: TableRuntime, error: str) -> None:
        """Stop one table (FAILED: a person must act) and its reading; the others go on."""
        rt.fail(error)
        if self.source is not None:
            self.source.unassign([(rt.topic, p) for p in rt.partitions])

    def read_ahead(self) -> bool:
        """Whether anything was read past a table's last commit."""
        return any(
            off > self.tables[t].progress.committed.get(p, 0)
            for (t, p), off in self.consumed.items()
            if t in self.tables.by_topic
        )

    # -- catching up -----------------------------------------------------------------------
    def probe_goal(self, until_caught_up: bool) -> None:
        """The end offsets to catch up to are probed by a second consumer (~0.7 s) while
        the first batch is read; until they are known the replicator is not caught up."""
        source = self.running()
        self._probe_pool, self._goal, self._goal_probe = None, None, None
        if until_caught_up:
            self._probe_pool = ThreadPoolExecutor(1, thread_name_prefix="end-offsets")
            self._goal_probe = self._probe_pool.submit(source.exact_end_offsets, source.assigned)

    def probe_goal_again(self) -> None:
        """After a retry: probe again if the probe has not answered yet."""
        if self._probe_pool is not None and self._goal is None and self.source is not None:
            self._goal_probe = self._probe_pool.submit(
                self.source.exact_end_offsets, self.source.assigned
            )

    def known_goal(self) -> Positions | None:
        """The end offsets to catch up to, once probed (a probe error is raised here)."""
        if self._goal is None and self._goal_probe is not None and self._goal_probe.done():
            self._goal = self._goal_probe.result()
        return self._goal

    def caught_up(self, *, read: bool = False) -> bool:
        """Every live goal partition is committed (or, with ``read``, read) to its end
        (False while the goal is not known)."""
        goal = self.known_goal()
        if goal is None:
            return False
        for (topic, part), end in goal.items():
            rt = self.tables.by_topic.get(topic)
            if rt is None or rt.state.stopped:
                continue
            position = rt.progress.committed.get(part, 0)
            if read:
                position = self.consumed.get((topic, part), position)
            if position < end:
                return False
        return True

    # -- topics and tables -------------------------------------------------------------
    def refresh_due(self) -> bool:
        return time.monotonic() - self.last_refresh > self.cfg.replicator.topic_refresh_seconds

    def refresh(self, trouble: Callable[[TableRuntime, OSError], None]) -> None:
        """Find topics and partitions, open their tables, assign new partitions at their
        checkpoints and check checkpoints for gaps. A table whose storage failed as it
        was opened goes to ``trouble`` (the retries hold it)."""
        source = self.running()
        self.last_refresh = time.monotonic()
        positions: dict[tuple[str, int], int | None] = {}
        data_topics = source.discover()
        tx_topics = source.transaction_topics(data_topics)
        self.tx_topics.update(tx_topics)
        source.assign_transactions(tx_topics)
        for topic, parts in data_topics.items():
            rt = self.tables.get(topic)
            if rt is not None and rt.trouble is not None:
                # Its storage failed as it was opened: held, and opened again later.
                rt.partitions = sorted({*rt.partitions, *parts})
                failure, rt.trouble = rt.trouble, None
                trouble(rt, failure)
                continue
            if rt is None or not rt.live:
                continue
            for part in parts:
                if part not in rt.partitions:
                    rt.partitions.append(part)
                    positions[(topic, part)] = rt.progress.committed.get(part)
        # Checkpoints outside their partition's log: new partitions, and (the topic was
        # recreated) partitions being read whose log now ends before the checkpoint. A
        # partition that delivered messages since the last refresh plainly goes on.
        idle = {tp for tp in source.assigned if self.consumed.get(tp) == self._seen.get(tp)}
        self._seen = dict(self.consumed)
        reading = {
            (rt.topic, p): off
            for rt in self.tables
            if rt.live
            for p, off in rt.progress.committed.items()
            if (rt.topic, p) in idle
        }
        reading.update({tp: off for tp, off in positions.items() if off is not None})
        recreated = self._recreated_topics({topic for topic, _ in positions})
        for (topic, part), restart in self.gaps(
            reading, new=set(positions), recreated=recreated
        ).items():
            positions[(topic, part)] = restart
        source.assign({tp: off for tp, off in positions.items() if self.tables[tp[0]].live})

    def check_out_of_range(self) -> None:
        """The broker refused a fetch position: find out which end it fell off."""
        source = self.running()
        if not source.out_of_range:
            return
        lost, source.out_of_range = source.out_of_range, set()
        restarts = self.gaps(
            {
                tp: self.tables[tp[0]].progress.committed.get(tp[1], 0)
                for tp in lost
                if tp[0] in self.tables.by_topic
            },
            new=lost,
        )
        # An accepted gap reads on from the log's start: the consumer, stopped at the
        # refused position (auto.offset.reset = error), is moved there.
        if restarts:
            source.seek(restarts)

    def _recreated_topics(self, topics: set[str]) -> dict[str, tuple[str, str]]:
        """Learn the topic ids of live tables (those with new partitions here, and those
        not knowing theirs yet: recorded in their next commit) and return the topics
        whose id differs from the one their table recorded: topic -> (recorded, now)."""
        if self.source is None:
            return {}
        wanted = {
            rt.topic
            for rt in self.tables
            if rt.live and (rt.topic in topics or rt.progress.topic_id is None)
        }
        recreated = {}
        for topic, found in self.source.topic_ids(wanted).items():
            progress = self.tables[topic].progress
            if progress.topic_id is None or not progress.committed:
                progress.topic_id = found
            elif progress.topic_id != found:
                recreated[topic] = (progress.topic_id, found)
        return recreated

    def gaps(
        self,
        checkpoints: Positions,
        new: set[tuple[str, int]],
        recreated: dict[str, tuple[str, str]] | None = None,
    ) -> Positions:
        """Find checkpoints outside their partition's log; stop or resume their tables.

        A checkpoint before the log's start means events were deleted (retention,
        compaction) before they were replicated; one past the log's end means the topic
        was deleted and recreated (or truncated). A checkpoint in a topic whose id is not
        the one its table recorded (``recreated``: topic -> ids) was read from a topic
        since deleted: the new topic's offsets before it were never read. Each is a gap
        in the table's change history: the table stops (FAILED) with the missing range
        and the fixes, unless ``replicator.accept_offset_gaps`` names it; then it goes on
        from the log's start and its next commit records the gap.

        Returns:
            Where accepted partitions restart (offsets to seek to).
        """
        recreated = recreated or {}
        if self.source is None:
            return {}
        for topic, (_, now) in recreated.items():
            # A topic read from its start (no checkpoint) misses nothing: its new id holds.
            if not any(tp[0] == topic for tp in checkpoints):
                self.tables[topic].progress.topic_id = now
        if not checkpoints:
            return {}
        source = self.source
        starts = source.log_start_offsets([tp for tp in checkpoints if tp in new])
        # The high watermark decides unless it is below the checkpoint: then the exact
        # end settles it (the Tansu broker's watermark can lag within a record batch).
        highs = source.end_offsets(checkpoints)
        verified = self._verified_ends
        suspects = [
            tp
            for tp, off in checkpoints.items()
            if off > highs[tp] and not (tp in verified and verified[tp][0] == highs[tp])
        ]
        exact = source.exact_end_offsets(suspects) if suspects else {}
        verified.update({tp: (highs[tp], end) for tp, end in exact.items()})
        ends = {**highs, **{tp: verified[tp][1] for tp in checkpoints if tp in verified}}
        restarts: Positions = {}
        for (topic, part), off in sorted(checkpoints.items()):
            start, end = starts.get((topic, part), 0), ends[(topic, part)]
            ids = recreated.get(topic)
            if start <= off <= end and (ids is None or off <= start):
                if ids is not None and self.tables[topic].live:
                    self.tables[topic].progress.topic_id = ids[1]
                continue
            rt = self.tables[topic]
            if start <= off <= end:
                assert ids is not None
                gap = (
                    f"{topic}[{part}]: the topic was deleted and recreated (its id is "
                    f"{ids[1]}, the checkpoint {off} was read from {ids[0]}): offsets "
                    f"{start}..{off - 1} of the new topic were never read"
                )
            elif off < start:
                gap = (
                    f"{topic}[{part}]: offsets {off}..{start - 1} were deleted from the topic "
                    "(retention or compaction) before they were replicated"
                )
            else:
                gap = (
                    f"{topic}[{part}]: the partition now ends at offset {end}, before the "
                    f"checkpoint {off}: the topic was deleted and recreated (or truncated)"
                )
            if any(fnmatch.fnmatchcase(rt.name, p) for p in self.cfg.replicator.accept_offset_gaps):
                log.warning("%s: accepting a gap: %s; going on from offset %d", rt.name, gap, start)
                if self.recorder is not None:  # status and the dashboard show it, not only the log
                    self.recorder.event(
                        rt.name,
                        "gap",
                        f"accepted: {gap}; going on from offset {start} "
                        f"(`cdcctl repair {rt.name}` fetches what it lost from the source)",
                    )
                rt.progress.accepted_gaps.append(f"{topic}[{part}] {off}->{start}")
                rt.progress.committed[part] = start
                if ids is not None:
                    rt.progress.topic_id = ids[1]
                restarts[(topic, part)] = start
                if (topic, part) not in new:
                    source.seek({(topic, part): start})
                continue
            self.fail(
                rt,
                f"{gap}. Rebuild the table from a new snapshot (`cdcctl resync {rt.name}` "
                f"once the topic holds a fresh Debezium snapshot), or accept the gap: add "
                f"{rt.name!r} to replicator.accept_offset_gaps (recorded in its next commit), "
                f"then `cdcctl repair {rt.name}` fetches what the gap lost from the source",
            )
        return restarts

    # -- lag -------------------------------------------------------------------------------
    def after_batch(self) -> int:
        """After a batch's commits: commit the Kafka group offsets (for lag tools only)
        and return how many messages wait behind the tables' checkpoints."""
        source = self.running()
        tables = self.tables.by_topic
        group_offsets = {
            (rt.topic, p): o for rt in tables.values() for p, o in rt.progress.committed.items()
        }
        source.commit_group_offsets(group_offsets)
        ends = source.end_offsets(source.assigned, cached=True)
        return sum(
            max(0, end - tables[t].progress.committed.get(p, 0))
            for (t, p), end in ends.items()
            if t in tables and end >= 0
        )

    def lag_due(self, every: float) -> bool:
        return time.monotonic() - self.last_lag >= every

    def lag(self) -> dict[str, int] | None:
        """Messages waiting per table (by its state store name): end offsets minus its
        committed positions (None when the broker does not answer: the figures shown
        stay as they were)."""
        self.last_lag = time.monotonic()
        if self.source is None:
            return None
        assigned = self.source.assigned
        parts = [(rt.topic, p) for rt in self.tables for p in rt.partitions]
        try:
            ends = self.source.end_offsets([tp for tp in parts if tp in assigned], cached=True)
            ends.update(self.source.end_offsets([tp for tp in parts if tp not in assigned]))
        except SourceError as exc:
            log.debug("lag not measured: %s", exc.message)
            return None
        lag: dict[str, int] = {}
        for rt in self.tables:
            lag[self.tables.store_name(rt)] = sum(
                max(0, ends[(rt.topic, p)] - rt.progress.committed.get(p, 0))
                for p in rt.partitions
                if ends.get((rt.topic, p), -1) >= 0
            )
        return lag
