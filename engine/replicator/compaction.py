"""Compaction policy: which touched file groups get a new base file in this batch.

Copy-on-Write rewrites every touched group. Merge-on-Read must rewrite a group without
a slice, every group on a truncate, and a group whose base file has an older schema (a
log block has its base file's columns). It compacts a group once its logs reach
``hudi.compaction_max_log_files`` files or ``hudi.compaction_max_log_ratio`` of its base
file (small base files count as :data:`MIN_BASE_BYTES`: rewriting them is cheap either
way). Uniform keys make every group due at once, so at most a quarter of the table's
groups are compacted per batch, fullest first, unless a group is twice over the file
limit: a batch's latency never includes a whole-table rewrite.
"""

from __future__ import annotations

import pyarrow as pa

from engine.config import HudiConfig
from engine.hudi import FileSlice, HudiWriter

#: Base files below this size count as this size for the log-size compaction trigger.
MIN_BASE_BYTES = 4 << 20


def choose_rewrites(
    writer: HudiWriter,
    groups: dict[int, FileSlice],
    touched: list[int],
    schema: pa.Schema,
    truncate: bool,
    cfg: HudiConfig,
) -> set[int]:
    """The touched buckets that get a new base file; the others get a log file (MOR)."""
    if not writer.is_mor or truncate:
        return set(touched)
    must, due = set(), []
    for b in touched:
        current = groups.get(b)
        if current is None or writer.schema_at(current.instant) != schema:
            must.add(b)
            continue
        files = len(current.log_files)
        fullness = max(
            files / cfg.compaction_max_log_files,
            current.log_size
            / (cfg.compaction_max_log_ratio * max(current.base_size, MIN_BASE_BYTES)),
        )
        if files >= 2 * cfg.compaction_max_log_files:
            must.add(b)
        elif fullness >= 1:
            due.append((fullness, b))
    budget = max(1, -(-len(groups) // 4))
    return must | {b for _, b in sorted(due, reverse=True)[:budget]}
