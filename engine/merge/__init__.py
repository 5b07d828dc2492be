"""The merge stage: a batch's events folded into each touched Hudi file group.

In: a change batch split by bucket (staged by the planner) and the Hudi writer's plan for
each group. Out: per group the written file (:class:`~engine.hudi.SliceResult`) and what
the fold did (:class:`MergeCounts`). ``rules`` is the pure fold (order, late events,
deletes and tombstones, truncate), ``positions`` position comparison and inheritance,
``toast`` unchanged-value placeholders, ``partial`` partial images (per-column
positions), ``evolution`` which schema changes apply, ``task`` one group's merge with
its file I/O, ``job`` the Spark job of a batch.
"""

from __future__ import annotations

from engine.merge.evolution import evolve_schema
from engine.merge.job import run_merge_job
from engine.merge.rules import MergeCounts, MergeOptions, MergeResult, merge_file_group
from engine.merge.task import MergeTask, TaskResult, execute_task

__all__ = [
    "MergeCounts",
    "MergeOptions",
    "MergeResult",
    "MergeTask",
    "TaskResult",
    "evolve_schema",
    "execute_task",
    "merge_file_group",
    "run_merge_job",
]
