"""A batch's merge as one Spark job: tasks packed into one Spark task per core.

Every Spark task costs tens of milliseconds of scheduling and Python-worker round
trips, so a batch's file-group merges (:class:`~engine.merge.task.MergeTask`) are packed
into one Spark task per core of similar total weight, each running its share one after
another (:func:`execute_tasks`) in a reused Python worker.
"""

from __future__ import annotations

import gc
from typing import Any

from engine.merge.task import MergeTask, TaskResult, execute_many


def execute_tasks(tasks: list[MergeTask]) -> list[TaskResult]:
    """Run several file-group merges one after another: one Spark task's share of a batch."""
    freeze_imported_objects()
    return execute_many(tasks)


_frozen = False


def freeze_imported_objects() -> None:
    """Exempt the objects of the imported modules from garbage collection, once per process.

    A reused PySpark worker runs a full ``gc.collect()`` after every task; with pyarrow,
    polars and the engine imported that scan costs ~40 ms of CPU per task, more than
    most merges. Frozen objects are skipped by the collector (``gc.freeze``), so the
    per-task collection only looks at what tasks created since.
    """
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


def pack_tasks(tasks: list[MergeTask], slots: int) -> list[list[int]]:
    """Split task indices into at most ``slots`` bins of similar total weight
    (longest first, each to the least loaded bin)."""
    bins: list[list[int]] = [[] for _ in range(max(1, min(slots, len(tasks))))]
    loads = [0] * len(bins)
    for i in sorted(range(len(tasks)), key=lambda i: -tasks[i].weight):
        j = loads.index(min(loads))
        bins[j].append(i)
        loads[j] += max(tasks[i].weight, 1)
    return [b for b in bins if b]


def run_merge_job(spark: Any, tasks: list[MergeTask]) -> list[TaskResult]:
    """Run a batch's merge tasks as one Spark job; results in ``tasks`` order."""
    bins = pack_tasks(tasks, spark.defaultParallelism)
    shares = [[tasks[i] for i in b] for b in bins]
    done = spark.parallelize(shares, len(shares)).map(execute_tasks).collect()
    results: list[TaskResult | None] = [None] * len(tasks)
    for b, share_results in zip(bins, done, strict=True):
        for i, result in zip(b, share_results, strict=True):
            results[i] = result
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"the merge job returned no result for {len(missing)} task(s)")
    return [r for r in results if r is not None]
