"""The committer: a decoded batch planned per table, then committed per table.

:meth:`Committer.plan` turns each table's share into a plan (its instant, the events
staged per bucket, one merge task per touched file group: :func:`plan_table`);
:meth:`Committer.finish` commits each table's instant once the merge job wrote its
files: write stats, the checkpoint and what it applied (``cdcctl.counts``), then the
counters and the table's state; a table's own failure stops or holds that table alone.
The replicator reads back what a completed commit recorded through :func:`commit_extra`
(the replica's own readers — progress, epochs, validate, detail — use the Hudi view).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine import faults
from engine.config import Config
from engine.errors import HudiError, SchemaEvolutionError, WriterLockError
from engine.hudi.options import COUNTS_KEY
from engine.lineage import Lineage, TableLineage
from engine.merge import MergeCounts, TaskResult
from engine.model import SOURCE_TS
from engine.replicator.batches import BatchReport, PendingBatch, PreparedBatch, TableShare
from engine.replicator.deadletter import REPLAYED_KEY, coordinates_text
from engine.replicator.offsets import Offsets
from engine.replicator.planning import TablePlan, plan_table, retention
from engine.replicator.recovery import Recovery
from engine.replicator.tables import TableRuntime, Tables
from engine.state import StateRecorder
from engine.state.model import commit_counts as counts_record
from engine.state.recorder import add_commit_counts

log = logging.getLogger("cdcctl.replicator")

#: Source times of a table's batch sampled for the latency percentiles.
LATENCY_SAMPLE = 256


def commit_extra(writer: Any, instant: str) -> dict[str, str]:
    """The extra metadata a completed commit of a table recorded."""
    extra: dict[str, str] = writer.extra_metadata(instant)
    return extra


def commit_counts(writer: Any, instant: str) -> dict[str, int]:
    """What a completed commit recorded it applied (``cdcctl.counts``)."""
    counts: dict[str, int] = json.loads(commit_extra(writer, instant).get(COUNTS_KEY) or "{}")
    return counts


def applied_counts(
    total: MergeCounts, plan: TablePlan, rt: TableRuntime, bad: int
) -> dict[str, int]:
    """What a table's commit applied, as its ``cdcctl.counts`` records it."""
    # Source events applied by op (each once; tombstones and late ones excluded); with a
    # schema change topic, ddl counts its events, else batches that changed the schema.
    ddl = plan.ddl_events if rt.progress.ddl.used else int(plan.schema_changed)
    return counts_record(
        {**dataclasses.asdict(total), "events_t": plan.truncates, "bad": bad, "ddl": ddl}
    )


def table_lineage(rt: TableRuntime, schema: pa.Schema, location: str) -> TableLineage:
    """What the lineage events say of a table after a commit."""
    try:
        source = json.loads(rt.progress.source_table or "{}")
    except ValueError:
        source = {}
    return TableLineage(
        rt.name,
        rt.topic,
        {k: str(v) for k, v in source.items() if isinstance(v, str)},
        schema,
        list(rt.writer.record_key_fields) if rt.writer is not None else [],
        kept=[str(c) for c in rt.progress.schema_state.get("kept") or []],
        renamed=dict(rt.progress.ddl.renamed),
        location=location,
    )


class Committer:
    """Plans and commits the tables of each batch."""

    def __init__(
        self, config: Config, tables: Tables, offsets: Offsets, recovery: Recovery
    ) -> None:
        self.cfg = config
        self.tables = tables
        self.offsets = offsets
        self.recovery = recovery
        self.staging = tables.staging
        self.recorder: StateRecorder | None = None
        #: OpenLineage events (``[lineage]``), while a run runs.
        self.lineage: Lineage | None = None
        #: Batches planned, and commits made (a turn that made one ends an incident).
        self.batches = 0
        self.commits = 0

    # -- planning ------------------------------------------------------------------------
    def plan(self, prepared: PreparedBatch) -> PendingBatch:
        """Plan every table of a batch (after the previous batch committed)."""
        self.batches += 1
        pending = PendingBatch(prepared=prepared, number=self.batches)
        first_task = 0
        for share in prepared.tables:
            rt = share.rt
            if not rt.live:
                continue
            plan = self._plan_table(share, first_task, prepared)
            if plan is None:
                continue
            pending.plans.append(plan)
            pending.bad[rt.name] = share.bad
            if share.fail is not None:
                pending.fail[rt.name] = share.fail
            if share.batch is not None and share.batch.num_rows:
                times = pc.drop_null(share.batch.column(SOURCE_TS)).to_numpy()
                if times.size > LATENCY_SAMPLE:
                    times = times[np.linspace(0, times.size - 1, LATENCY_SAMPLE).astype(int)]
                pending.source_ts[rt.name] = times
            first_task += len(plan.tasks)
            # Staged for the merge: the decoded rows need not live while it runs (the
            # next batch is polled and decoded meanwhile: two batches' rows at once).
            share.batch = None
        return pending

    def _plan_table(
        self, share: TableShare, first_task: int, prepared: PreparedBatch
    ) -> TablePlan | None:
        """One table's plan (None: nothing to merge; what it settles is settled here)."""
        rt = share.rt
        offsets = {**rt.progress.committed, **share.read_to}
        moved = share.replayed or share.repair or share.ddl_events
        if offsets == rt.progress.committed and not moved:
            rt.counters.bad += share.bad
            if share.fail is not None:
                self.offsets.fail(rt, share.fail)
            return None  # everything was held back: nothing to commit yet
        t0 = time.monotonic()
        live_tail = dict(rt.progress.tail)
        try:
            if rt.writer is None:
                self.tables.lock(rt)  # a new table: locked before it is created
            plan = plan_table(
                self.cfg,
                rt,
                share.batch,
                share.key_fields,
                first_task,
                offsets,
                self.staging,
                drop_columns=share.drop_columns,
                renames=share.renames,
                ddl_events=share.ddl_events,
                row_schemas=share.row_schemas,
            )
        except (SchemaEvolutionError, HudiError, WriterLockError) as exc:
            self.offsets.fail(rt, str(exc))
            return None
        except OSError as exc:  # its storage: retried for this table alone
            self.recovery.table_trouble(rt, exc, committed=False)
            return None
        prepared.timed("stage", time.monotonic() - t0)
        if plan is None:  # nothing applicable and no table yet: nothing to commit
            rt.progress.committed = offsets
            rt.uncommitted_ddl = [i for i in rt.uncommitted_ddl if i not in share.ddl_items]
            rt.counters.bad += share.bad
            rt.counters.ddl += share.ddl_events
            if share.fail is not None:
                self.offsets.fail(rt, share.fail)
            return None
        plan.snapshot_ended = share.snapshot_ended
        if share.replayed:
            # Replayed events are old: the live stream's tails stay what they were.
            rt.progress.tail = live_tail
            plan.extra = rt.progress.extra(rt.topic, rt.progress.floor)
            plan.extra[REPLAYED_KEY] = json.dumps(
                [coordinates_text(w) for w in share.replayed], separators=(",", ":")
            )
        plan.ddl_items = share.ddl_items
        return plan

    # -- committing ------------------------------------------------------------------------
    def finish(self, pending: PendingBatch) -> BatchReport:
        """Commit every table of a batch whose merge job ended well."""
        phases = pending.prepared.phases
        now = time.monotonic()
        ended = pending.merge_ended if pending.merge_ended is not None else now
        phases["merge"] = ended - pending.merge_started
        phases["waited"] = now - ended
        faults.point("files_written")
        t0 = time.monotonic()
        results = iter(pending.results)
        tables = {}
        for plan in pending.plans:
            own = [next(results) for _ in plan.tasks]
            try:
                tables[plan.rt.name] = self.commit(
                    plan,
                    own,
                    pending.bad.get(plan.rt.name, 0),
                    pending.source_ts.get(plan.rt.name, np.empty(0, np.int64)),
                )
            except HudiError as exc:
                # This table alone stops; its instant stays unfinished and is rolled back
                # at the next start. The other tables of the batch still commit.
                self.offsets.fail(plan.rt, str(exc))
                continue
            except OSError as exc:
                # Its storage: retried for this table alone (its instant is rolled back
                # then); the other tables of the batch still commit.
                landed = plan.rt.progress.committed is plan.offsets
                self.recovery.table_trouble(plan.rt, exc, committed=landed)
                continue
            if plan.rt.name in pending.fail:  # errors.tolerance = "none": stop at the bad one
                self.offsets.fail(plan.rt, pending.fail[plan.rt.name])
        phases["commit"] = time.monotonic() - t0
        return BatchReport(
            number=pending.number,
            messages=pending.prepared.count,
            seconds=time.monotonic() - pending.prepared.started,
            tables=tables,
            phases=phases,
            rewind=pending.prepared.rewind,
        )

    def commit(
        self,
        plan: TablePlan,
        results: list[TaskResult],
        bad: int = 0,
        source_ts: np.ndarray | None = None,
    ) -> dict[str, int]:
        """Commit one table's instant; what it applied."""
        rt, writer = plan.rt, plan.rt.writer
        if writer is None:
            raise RuntimeError(f"{rt.name}: a planned table has no writer")
        total = MergeCounts()
        for r in results:
            total.add(r.counts)
        applied = applied_counts(total, plan, rt, bad)
        faults.point("before_commit")
        writer.commit(
            plan.instant,
            [r.slice for r in results],
            plan.schema,
            rt.topic,
            plan.offsets,
            {**plan.extra, COUNTS_KEY: json.dumps(applied, separators=(",", ":"))},
        )
        faults.point("after_commit")
        shutil.rmtree(self.staging / rt.name / plan.instant, ignore_errors=True)
        rt.progress.committed = plan.offsets
        if plan.ddl_items:
            rt.uncommitted_ddl = [i for i in rt.uncommitted_ddl if i not in plan.ddl_items]
        self.commits += 1
        c = rt.counters
        add_commit_counts(c, applied)
        c.last_source_ts_ms = rt.progress.max_source_ts  # as of this commit
        streamed = total.events_c + total.events_u + total.events_d + plan.truncates
        if rt.incident is not None:
            self.recovery.table_recovered(rt)
        # Snapshot reads only, the table's last one not among them: still snapshotting.
        rt.committed(snapshot=total.events_r > 0 and not streamed and not plan.snapshot_ended)
        if self.recorder is not None:
            sample = source_ts if source_ts is not None else np.empty(0, np.int64)
            self.recorder.committed(rt.name, plan.instant, applied, sample)
            if plan.schema_changed:
                self.recorder.event(rt.name, "schema", f"schema changed at {plan.instant}")
            for note in plan.schema_notes:
                self.recorder.event(rt.name, "schema", note)
        for note in plan.schema_notes:
            log.warning("%s: %s", rt.name, note)
        if self.lineage is not None:
            self.lineage.committed(
                table_lineage(rt, plan.schema, writer.location),
                instant=plan.instant,
                created=writer.created_by(plan.instant),
                schema_changed=plan.schema_changed,
                notes=plan.schema_notes,
            )
        h = self.cfg.hudi
        writer.maintain(
            c.commits, retention(self.cfg), h.keep_min_commits, h.keep_max_commits,
            h.archive_retention_hours,
        )  # fmt: skip
        return applied
