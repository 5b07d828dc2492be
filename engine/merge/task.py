"""One merge task: a file group's events folded into its stored state, inside Spark.

The driver stages each touched bucket's events as an Arrow IPC file and sends a
:class:`MergeTask` (paths and small values only, so it pickles cheaply) holding the
Hudi writer's plan for the group (:class:`~engine.hudi.SliceWrite`). The task reads the
group's current rows and tombstones through that plan, runs the pure fold
(:func:`engine.merge.rules.merge_file_group`) and writes the result through the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from engine import faults
from engine.hudi import HOODIE_RECORD_KEY, RowCounts, SliceResult, SliceWrite
from engine.merge.partial import is_partial
from engine.merge.rules import MergeCounts, MergeOptions, merge_file_group
from engine.merge.toast import has_toast
from engine.model import COPIES, KEY, POS, POS_SUB

#: The stored columns an append reads (whole rows only when TOAST values must be filled);
#: also what the worker keeps in memory of each file it writes to a Merge-on-Read table.
APPEND_COLUMNS = [HOODIE_RECORD_KEY, POS, POS_SUB]


@dataclass
class MergeTask:
    """Everything a Spark task needs to merge one file group (picklable)."""

    slice: SliceWrite
    #: The group's events (Arrow IPC file), or None when only a truncate touches it.
    events_file: str | None
    #: The table's data schema, IPC-serialised.
    data_schema_ipc: bytes
    options: MergeOptions = field(default_factory=MergeOptions)
    #: The driver's pid: a crash injected inside the task kills the driver.
    driver_pid: int = 0
    #: Estimated cost (bytes to read and write), for packing tasks into Spark partitions.
    weight: int = 0
    #: The table's folder of base-file key indexes, shared by the merge workers (None:
    #: each worker keeps its own in memory).
    index_dir: str | None = None


@dataclass
class TaskResult:
    """What a task wrote, and what its fold did."""

    slice: SliceResult
    counts: MergeCounts


def execute_task(task: MergeTask) -> TaskResult:
    """Run one file-group merge (inside a Spark task or, for tests, in-process)."""
    data_schema = pa.ipc.read_schema(pa.py_buffer(task.data_schema_ipc))
    plan = task.slice
    append = plan.append and plan.base_file is not None
    # A full-row table's fold adds to the stored row counts: read and cache them too.
    light = APPEND_COLUMNS + [COPIES] if task.options.copies else APPEND_COLUMNS
    events = None
    if task.events_file:
        with pa.memory_map(task.events_file) as source:
            events = pa.ipc.open_file(source).read_all()
    if append:
        # Only the stored rows of the batch's keys matter, and of those only the key and
        # positions, unless a TOAST placeholder needs the stored values.
        keys = events.column(KEY) if events is not None else pa.array([], pa.string())
        columns = None
        # Partial images fill every column a batch does not carry from the stored row.
        if not is_partial(data_schema) and (
            events is None or not has_toast(events, task.options.toast_placeholder)
        ):
            columns = light
        old = plan.read(keys=keys, columns=columns, index_dir=task.index_dir)
    else:
        old = plan.read()
    old_tombs = plan.read_tombstones()
    result = merge_file_group(
        old,
        events,
        instant=plan.instant,
        data_schema=data_schema,
        old_tombstones=old_tombs,
        options=task.options,
        old_has_only_batch_keys=append,
    )
    counts = result.counts
    if old is not None and not result.changed:
        # Only late events or no-op tombstones: keep the current slice instead of copying it.
        return TaskResult(plan.unchanged(), counts)
    written = plan.write(
        carried=result.carried,
        upserts=result.upserts,
        deleted_keys=result.deleted_keys,
        tombs=result.tombstones if result.tombstones.num_rows else None,
        key_column=KEY,
        data_schema=data_schema,
        counts=RowCounts(counts.inserts, counts.updates, counts.deletes + counts.truncated),
        cache_columns=light,
        index_dir=task.index_dir,
    )
    faults.point("task_written", pid=task.driver_pid or None)
    return TaskResult(written, counts)
