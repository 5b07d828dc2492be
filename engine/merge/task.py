"""One merge task: a file group's events folded into its stored state, inside Spark.

The driver stages each touched bucket's events as an Arrow IPC file in the work folder
and sends a :class:`MergeTask` (paths and small values only, so it pickles cheaply)
holding the Hudi writer's plan for the group (:class:`~engine.hudi.SliceWrite`). On a
cluster the events travel in the task itself (``events_ipc``): no executor needs the
driver's work folder. The task reads the
group's current rows and tombstones through that plan, runs the pure fold
(:func:`engine.merge.rules.merge_file_group`) and writes the result through the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from engine import faults
from engine.hudi import HOODIE_RECORD_KEY, RowCounts, SliceResult, SliceWrite, Tombstones
from engine.merge.partial import is_partial
from engine.merge.rules import (
    MergeCounts,
    MergeOptions,
    MergeResult,
    fold_groups,
    merge_file_group,
)
from engine.merge.toast import has_toast
from engine.model import COPIES, KEY, POS, POS_SUB

#: The stored columns an append reads (whole rows only when TOAST values must be filled);
#: also what the worker keeps in memory of each file it writes to a Merge-on-Read table.
APPEND_COLUMNS = [HOODIE_RECORD_KEY, POS, POS_SUB]


@dataclass
class MergeTask:
    """Everything a Spark task needs to merge one file group (picklable)."""

    slice: SliceWrite
    #: The group's events (Arrow IPC file), or None when only a truncate touches it (or
    #: they travel in ``events_ipc``).
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
    #: The group's events as Arrow IPC bytes, shipped with the task (a cluster).
    events_ipc: bytes | None = None

    @property
    def has_events(self) -> bool:
        """Whether the task brings events (else only a truncate or rewrite touches it)."""
        return bool(self.events_file or self.events_ipc)


@dataclass
class TaskResult:
    """What a task wrote, and what its fold did."""

    slice: SliceResult
    counts: MergeCounts


@dataclass
class _Inputs:
    """What a task read: the group's events, stored rows and tombstones."""

    data_schema: pa.Schema
    events: pa.Table | None
    old: pa.Table | None
    old_tombs: pa.Table | None
    #: An append that read only the key and positions of the batch's keys.
    light_append: bool
    #: The group's whole set of tombstones with its sidecar chain's length (``old_tombs``
    #: is the part of it the fold sees: a light append's batch keys' only).
    tomb_chain: Tombstones | None = None


def execute_task(task: MergeTask) -> TaskResult:
    """Run one file-group merge (inside a Spark task or, for tests, in-process)."""
    inputs = _read(task)
    return _write(task, inputs, _fold(task, inputs))


def execute_many(tasks: list[MergeTask]) -> list[TaskResult]:
    """Run several file-group merges (one Spark task's share of a batch), in ``tasks``
    order. The light appends of one table are folded together
    (:func:`~engine.merge.rules.fold_groups`): a fold's fixed cost (some forty steps
    over small frames) is paid once per table instead of once per file group; each
    group is still read and written on its own."""
    results: list[TaskResult | None] = [None] * len(tasks)
    together: dict[object, list[tuple[int, _Inputs]]] = {}
    for i, task in enumerate(tasks):
        key = _fold_key(task)
        inputs = _read(task)
        if key is None or not inputs.light_append or inputs.events is None or inputs.old is None:
            results[i] = _write(task, inputs, _fold(task, inputs))
        else:
            together.setdefault(key, []).append((i, inputs))
    for members in together.values():
        first = tasks[members[0][0]]
        folded: list[MergeResult] | None = None
        if len(members) > 1:
            try:
                folded = fold_groups(
                    [(m.old, m.events, m.old_tombs) for _, m in members],
                    instant=first.slice.instant,
                    data_schema=members[0][1].data_schema,
                    options=first.options,
                )
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # groups' columns differ: one by one
                folded = None
        for k, (i, inputs) in enumerate(members):
            result = folded[k] if folded is not None else _fold(tasks[i], inputs)
            results[i] = _write(tasks[i], inputs, result)
    return [r for r in results if r is not None]


def _fold_key(task: MergeTask) -> object | None:
    """Tasks with equal keys may be folded together (None: this one alone): appends of
    one table in one batch, with the same options, of a table without partial images
    or row counts, and no truncate."""
    plan, options = task.slice, task.options
    if not (task.has_events and _appends(task)):
        return None
    if options.copies or options.truncate is not None:
        return None
    key = (plan.store.url, plan.instant, task.data_schema_ipc, options, task.index_dir)
    try:
        hash(key)
    except TypeError:  # an option value that cannot be compared cheaply
        return None
    return key


def _read(task: MergeTask) -> _Inputs:
    data_schema = pa.ipc.read_schema(pa.py_buffer(task.data_schema_ipc))
    plan = task.slice
    events = None
    if task.events_ipc:
        events = pa.ipc.open_file(pa.py_buffer(task.events_ipc)).read_all()
    elif task.events_file:
        with pa.memory_map(task.events_file) as source:
            events = pa.ipc.open_file(source).read_all()
    light_append = False
    keys = events.column(KEY) if events is not None else pa.array([], pa.string())
    if _appends(task):
        # Only the stored rows of the batch's keys matter, and of those only the key and
        # positions, unless a TOAST placeholder needs the stored values.
        columns = None
        # Partial images fill every column a batch does not carry from the stored row.
        if not is_partial(data_schema) and (
            events is None or not has_toast(events, task.options.toast_placeholder)
        ):
            columns = _light(task)
            light_append = True
        old = plan.read(keys=keys, columns=columns, index_dir=task.index_dir)
    else:
        old = plan.read()
    chain = plan.read_tombstone_chain()
    old_tombs = chain.rows if chain is not None else None
    if light_append and old_tombs is not None:
        # Like the stored rows, only the batch's keys' tombstones can change: the others
        # stay in the chain untouched (expired ones go when the set is next written whole).
        old_tombs = old_tombs.filter(
            pc.is_in(old_tombs.column(KEY), value_set=keys.cast(old_tombs.schema.field(KEY).type))
        )
    return _Inputs(data_schema, events, old, old_tombs, light_append, chain)


def _appends(task: MergeTask) -> bool:
    """Whether the task appends a log file to a group that has a base file."""
    return task.slice.append and task.slice.base_file is not None


def _light(task: MergeTask) -> list[str]:
    # A full-row table's fold adds to the stored row counts: read and cache them too.
    return APPEND_COLUMNS + [COPIES] if task.options.copies else APPEND_COLUMNS


def _fold(task: MergeTask, inputs: _Inputs) -> MergeResult:
    plan = task.slice
    return merge_file_group(
        inputs.old,
        inputs.events,
        instant=plan.instant,
        data_schema=inputs.data_schema,
        old_tombstones=inputs.old_tombs,
        options=task.options,
        old_has_only_batch_keys=_appends(task),
    )


def _write(task: MergeTask, inputs: _Inputs, result: MergeResult) -> TaskResult:
    plan = task.slice
    counts = result.counts
    if inputs.old is not None and not result.changed:
        # Only late events or no-op tombstones: keep the current slice instead of copying it.
        return TaskResult(plan.unchanged(), counts)
    written = plan.write(
        carried=result.carried,
        upserts=result.upserts,
        deleted_keys=result.deleted_keys,
        tombs=result.tombstones,
        key_column=KEY,
        data_schema=inputs.data_schema,
        counts=RowCounts(counts.inserts, counts.updates, counts.deletes + counts.truncated),
        cache_columns=_light(task),
        index_dir=task.index_dir,
        previous=inputs.tomb_chain,
        seen_tombs=inputs.old_tombs if inputs.light_append else None,
    )
    faults.point("task_written", pid=task.driver_pid or None)
    return TaskResult(written, counts)
