"""The control plane: the state store and the requests filed there.

Between batches (and every half second of a long merge) :meth:`ControlPlane.poll` hands
new tables to the :class:`~engine.state.StateRecorder` (:meth:`ControlPlane.adopt`),
carries out waiting requests — pause, resume, stop, replay, resync, accept an epoch,
apply a repair's deletes — measures the lag when due and lets the recorder write the
store. A resync, a replay or a repair first commits the batch in flight; a resume waits
until it is committed. Deletes a repair filed while no replicator ran are applied at the
first poll.
"""

from __future__ import annotations

import functools
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass

from engine import faults
from engine.config import Config
from engine.decode import RecordBatch
from engine.errors import CdcError, HudiError, TableNameError, WriterLockError
from engine.hudi import ownership
from engine.replicator import epochs, repairs, trimmed
from engine.replicator.batches import PreparedBatch, TableShare
from engine.replicator.committer import commit_counts, commit_extra
from engine.replicator.deadletter import DeadLetters, ReplayOutcome
from engine.replicator.intake import Intake
from engine.replicator.offsets import Offsets
from engine.replicator.progress import TableProgress
from engine.replicator.reset import drop_replica
from engine.replicator.tables import TableRuntime, Tables
from engine.state import Request, StateRecorder, TableCounters, TableState
from engine.state.control import LAG_EVERY_SECONDS
from engine.upstream import SourceWatcher

log = logging.getLogger("cdcctl.replicator")


@dataclass(eq=False)
class ControlPlane:
    """Answers control requests and keeps the state store in step with the tables."""

    cfg: Config
    tables: Tables
    offsets: Offsets
    intake: Intake
    dead_letters: DeadLetters
    #: Commits the batch in flight now; False if there was none.
    settle: Callable[[], bool]
    #: Plans, merges and commits one batch here; the instant of its table (None: none).
    apply: Callable[[PreparedBatch], str | None]
    #: Asks the loop to stop after the batch in flight.
    stop: Callable[[], None]
    recorder: StateRecorder | None = None
    #: The source side's watcher while the replicator runs (its newest look is kept).
    watcher: SourceWatcher | None = None
    #: Whether the deletes repairs filed before this run were looked for.
    repairs_seen: bool = False

    def _event(self, rt: TableRuntime, kind: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(self.tables.store_name(rt), kind, message)

    # -- the state store -------------------------------------------------------------------
    def adopt(self) -> None:
        """Hand tables the state store has not taken on yet to it (counters loaded and
        reconciled with the commits it missed); a table the store says is paused stays so."""
        recorder = self.recorder
        if recorder is None:
            return
        for rt in list(self.tables):
            name = self.tables.store_name(rt)
            if name in recorder.adopted:
                continue
            writer = rt.writer
            stored = recorder.adopt(
                name,
                rt.topic,
                rt.counters,
                writer.completed_instants() if writer is not None else [],
                functools.partial(commit_counts, writer),
            )
            if stored is TableState.PAUSED and not rt.state.stopped:
                self._pause(rt)

    def sync(self, lag: dict[str, int] | None = None, *, force: bool = False) -> None:
        """Hand the state store every table's status (and ``lag``, when measured) and
        the topics that hold no rows, with the records each had skipped."""
        if self.recorder is not None:
            self.recorder.sync(
                self.tables.statuses(),
                lag,
                force=force,
                controls=self.control_topics(),
                source=self.watcher.latest if self.watcher is not None else None,
            )

    def control_topics(self) -> dict[str, tuple[str, int]]:
        """Topics recognised as holding no rows: topic -> (kind, records skipped)."""
        return {
            rt.topic: (rt.control, rt.counters.ignored)
            for rt in self.tables.by_topic.values()
            if rt.control is not None
        }

    def poll(self, *, merging: bool = False) -> None:
        """Answer control requests, measure lag when due, and sync the state store.

        ``merging``: called while a batch merges; a resume waits until it is committed
        (a table's partitions are assigned again at its checkpoint, which that commit
        may still move).
        """
        recorder = self.recorder
        if recorder is None:
            return
        self.adopt()
        requests = recorder.requests()
        if any(r.kind.startswith("resync") for r in requests):
            if merging:  # a resync waits for the batch merging now to be committed
                requests = [r for r in requests if not r.kind.startswith("resync")]
            elif self.settle():  # the batch in flight may write the table
                requests = recorder.requests()
        for request in requests:
            if not (merging and request.kind in ("resume", "replay", "repair")):
                recorder.answer(request, self._handle(request))
        if not merging and not self.repairs_seen:
            self.repairs_seen = True
            for name in repairs.tables_with_pending(self.cfg.work_path()):
                rt = next(iter(self._named(name)), None)
                if rt is None:
                    log.warning("%s: repair deletes wait for a table not replicated now", name)
                else:
                    log.info("%s: %s", name, self._repair_safely(rt))
        if all(rt.state is TableState.PAUSED for rt in self.tables) and any(self.tables):
            recorder.replicator_state("paused")
        elif recorder.state == "paused":
            recorder.replicator_state("running")
        lag = None
        if self.offsets.lag_due(LAG_EVERY_SECONDS):
            lag = self.offsets.lag()
        self.sync(lag)

    # -- requests --------------------------------------------------------------------------
    def _handle(self, request: Request) -> str:
        """Carry out one control request; its outcome, in words."""
        if request.kind == "stop":
            self.stop()
            return "stopping after the batch in flight"
        if request.kind == "replay":
            self.settle()  # its commit comes first: replays plan after it
            try:
                outcome = self.replay(request.table or "")
            except CdcError as exc:
                return f"error: {exc.message}"
            return f"incomplete: {outcome.describe()}" if outcome.failed else outcome.describe()
        named = self._named(request.table)
        if request.kind.startswith("resync") or request.kind in ("epoch", "repair"):
            if not named:
                return f"error: no table named {request.table!r}"
            if request.kind == "epoch":
                return self._epoch(named[0])
            if request.kind == "repair":
                return self._repair_safely(named[0])
            return self._resync(named[0], force=request.kind == "resync-force")
        troubled = (TableState.FAILED, TableState.FAILING)
        if request.table is None:
            targets = [rt for rt in self.tables if rt.state not in troubled]
        else:
            targets = named
            if not targets:
                return f"error: no table named {request.table!r}"
            if targets[0].state in troubled:
                return f"error: {request.table} is {targets[0].state.value}: {targets[0].error}"
        act = self._pause if request.kind == "pause" else self._resume
        changed = [rt.name for rt in targets if act(rt)]
        verb = "paused" if request.kind == "pause" else "resumed"
        return f"{verb} {', '.join(changed)}" if changed else f"already {verb}"

    def _named(self, name: str | None) -> list[TableRuntime]:
        """The table the state store names ``name`` (none, or one)."""
        return [rt for rt in self.tables if self.tables.store_name(rt) == name]

    def _pause(self, rt: TableRuntime) -> bool:
        """Stop reading a table; its positions stay at its last commit. False if paused."""
        if not rt.pause():
            return False
        self.offsets.stop_reading(rt)
        log.info("%s: paused", rt.name)
        return True

    def _resume(self, rt: TableRuntime) -> bool:
        """Read a paused table again from its last commit. False if it was not paused."""
        if not rt.resume():
            return False
        self.offsets.read_again(rt)
        log.info("%s: resumed", rt.name)
        return True

    def _resync(self, rt: TableRuntime, force: bool = False) -> str:
        """Drop a table's replica and read its topic again from its start; the outcome.

        Carried out between batches (nothing of the table is merging): its partitions
        are unassigned, its folder or prefix emptied
        (:func:`engine.replicator.reset.drop_replica`: only that table's in the target;
        its writer lock or lease is kept held), its staged
        files dropped, its progress and counters start over, and its partitions are
        assigned again from the beginning. Works on a paused or stopped table too; it
        replicates afterwards. The other tables go on. Refused (nothing done) when the
        topic was trimmed past what rebuilds the table whole, unless ``force``
        (:func:`engine.replicator.trimmed.guard`).
        """
        owner = self.tables.owner(rt.name)
        if owner != rt.topic:
            return f"error: the folder of {rt.name} belongs to topic {owner}"
        try:
            found = ownership.findings(rt.store)
            if found:  # another writer's data may be there: never removed
                return (
                    f"error: table {rt.name}: another Hudi writer made or changed "
                    f"{rt.location} ({'; '.join(found)}); resync will not remove it. "
                    f"{ownership.advice(rt.name)}"
                )
            note = trimmed.guard(
                self.cfg, rt.name, rt.topic, rt.store, force=force, decode=self.intake.decode
            )
            self.tables.lock(rt)
            if rt.lease is not None:
                # The lease records the last commit as completing until the next one; its
                # files go with the replica, so the record must go first (a reopen or the
                # next start would roll forward a commit whose files are gone).
                rt.lease.settle()
        except (CdcError, OSError) as exc:
            return f"error: {exc}"
        parts = [(rt.topic, p) for p in rt.partitions]
        self.offsets.stop_reading(rt)
        # The store forgets the table's counters first: a crash before the replica is
        # gone leaves the store counting its commits again at the next start.
        rt.writer = None
        rt.progress = TableProgress()
        rt.counters = TableCounters()
        rt.restart()  # a retried storage error of the old replica ends
        if self.recorder is not None:
            self.recorder.reset(self.tables.store_name(rt))
            self.sync(force=True)
        try:
            drop_replica(self.tables.target, rt.name, keep_lock=self.tables.locks is not None)
            faults.point("resync_dropped")  # the replica gone, its rebuild not begun
            shutil.rmtree(self.tables.staging / rt.name, ignore_errors=True)
        except (CdcError, OSError) as exc:
            self.offsets.fail(rt, f"resync: could not remove the replica: {exc}")
            return f"error: {exc}"
        self.offsets.read_from_start(parts)
        log.info("%s: resync: replica dropped, reading %s from the beginning", rt.name, rt.topic)
        said = f" ({note})" if note else ""
        return f"resyncing {rt.name}: replica dropped, reading {rt.topic} from the beginning{said}"

    def _epoch(self, rt: TableRuntime) -> str:
        """Accept the new position epoch a table stopped at (:func:`.epochs.accept`) and
        read it again from its checkpoint; the outcome."""
        if rt.state is not TableState.FAILED or epochs.MARK not in (rt.error or ""):
            return f"error: table {rt.name} did not stop at a position epoch change"
        try:
            assert rt.writer is not None  # it failed at an event of a table it wrote
            instant, _ = epochs.accept(rt.writer, rt.topic)
            self.tables.reopen(rt)
        except (HudiError, WriterLockError, OSError) as exc:
            return f"error: {exc}"
        rt.restart()
        self.offsets.read_again(rt)
        self._event(rt, "epoch", f"new position epoch accepted at {instant}")
        log.info("%s: new position epoch accepted at %s", rt.name, instant)
        return f"new position epoch accepted at {instant}; reading {rt.topic} from its checkpoint"

    def _repair_safely(self, rt: TableRuntime) -> str:
        """:meth:`_repair`; an unexpected failure is its outcome (the replicator goes on,
        the files stay)."""
        try:
            return self._repair(rt)
        except (CdcError, OSError, ValueError, KeyError) as exc:
            log.warning("%s: repair: %s", rt.name, exc)
            return f"error: {exc}"

    def _repair(self, rt: TableRuntime) -> str:
        """Apply the deletes repairs filed for a table (:mod:`.repairs`), each as one
        instant of deletes at the source position it was found at; the outcome."""
        try:
            todo = repairs.pending(self.cfg.work_path(), self.tables.store_name(rt))
        except CdcError as exc:
            return f"error: {exc.message}"
        if not todo:
            return "no repair deletes waiting"
        if rt.state.stopped or rt.state is TableState.FAILING:
            return f"error: table {rt.name} is {rt.state.value}: {rt.error}; the deletes wait"
        if rt.writer is None:
            return f"error: table {rt.name} has no replica yet; the deletes wait"
        if rt.progress.epoch.accepted or self.cfg.source.mysql_gtid_ordering:
            return (
                f"error: table {rt.name}'s positions are mapped (an accepted epoch, GTID "
                "ordering): the deletes cannot be ordered and wait; remove them with "
                f"{repairs.folder(self.cfg.work_path(), rt.name)}"
            )
        self.settle()  # the batch in flight commits first
        deleted = late = 0
        for item in todo:
            batch = item.batch()
            prepared = PreparedBatch(count=0, started=time.monotonic())
            keys = rt.writer.record_key_fields
            prepared.tables.append(TableShare(rt, batch, keys, {}, repair=True))
            before = (rt.counters.deletes, rt.counters.late)
            instant = self.apply(prepared)
            if rt.state.stopped or rt.state is TableState.FAILING or instant is None:
                return (
                    f"error: table {rt.name}: the repair's deletes were not committed: {rt.error}"
                )
            repairs.done(item)
            now = rt.counters.deletes - before[0], rt.counters.late - before[1]
            deleted, late = deleted + now[0], late + now[1]
            said = f"deleted {now[0]} row(s) the source no longer had at {item.position_text}" + (
                f" ({now[1]} changed since: kept)" if now[1] else ""
            )
            self._event(rt, "repair", f"{said}, instant {instant}")
            log.info("%s: repair: %s, instant %s", rt.name, said, instant)
        kept = f", {late} kept (changed in the source since)" if late else ""
        return f"repair: {deleted} row(s) deleted{kept}"

    # -- dead letters ----------------------------------------------------------------------
    def replay(self, name: str) -> ReplayOutcome:
        """Decode a table's pending dead letters again and apply those that decode.

        In source order (partition, offset), through the same merge rules as any batch (a
        stale event is late), as one Hudi instant that leaves the checkpoint where it is
        and lists the letters it applied in its extra metadata (``REPLAYED_KEY``), so
        that a crash before the replay log records them is reconciled next time. Dead
        letters at or after the checkpoint are left to the replicator, which reads them.
        """
        letters = self.dead_letters.letters(name)
        if not letters:
            raise TableNameError(
                f"table {name!r} has no dead letters",
                hint="`cdcctl deadletters` lists the tables that have some",
            )
        topic = letters[0].topic
        rt = self.tables.get(topic)
        if rt is None or rt.name != name:
            raise TableNameError(
                f"topic {topic!r} of table {name!r} is not replicated by this config",
                hint="check source.topics and source.include_tables / exclude_tables",
            )
        if rt.state.stopped or rt.state is TableState.FAILING:
            raise TableNameError(
                f"table {name} is {rt.state.value}: {rt.error}",
                hint="fix the cause and restart the replicator, then replay",
            )
        outcome = ReplayOutcome(name, failed={})
        writer = rt.writer
        if writer is not None:
            self.tables.lock(rt)
            outcome.reconciled = self.dead_letters.reconcile(
                name, ((i, commit_extra(writer, i)) for i in writer.completed_instants())
            )
        todo = []
        for letter in self.dead_letters.pending(name):
            if letter.topic != topic:
                continue
            if letter.offset >= rt.progress.committed.get(letter.partition, 0):
                outcome.waiting += 1
            else:
                todo.append(letter)
        if not todo:
            return outcome
        keys = [d.key for d in todo]
        values = [d.value for d in todo]
        parts = [d.partition for d in todo]
        offs = [d.offset for d in todo]
        result = self.intake.decode(RecordBatch(topic, keys, values, parts, offs))
        failed = {(b.topic, b.partition, b.offset): b.reason for b in result.bad}
        applied = [d.where for d in todo if d.where not in failed]
        outcome.failed = failed
        if applied:
            prepared = PreparedBatch(count=len(todo), started=time.monotonic())
            batch = self.intake.replayed(rt, result)
            prepared.tables.append(
                TableShare(rt, batch, result.key_fields, {}, replayed=applied,
                           row_schemas=result.row_schemas)
            )  # fmt: skip
            instant = self.apply(prepared)
            if rt.state.stopped or rt.state is TableState.FAILING or instant is None:
                raise HudiError(f"table {name}: the replay was not committed: {rt.error}")
            outcome.applied, outcome.instant = len(applied), instant
            log.info("%s: replayed %d dead letter(s) in instant %s", name, len(applied), instant)
        self.dead_letters.record_replay(name, applied, outcome.instant, failed)
        if self.recorder is not None:
            self.recorder.event(rt.name, "replay", outcome.describe())
        return outcome
