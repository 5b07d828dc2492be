"""The replicator: the loop that sequences the stages, batch after batch.

``loop`` sequences the collaborators, a turn each batch: ``control_plane`` (requests,
the state store) -> ``intake`` (poll, decode, dead letters, transaction cuts; schema
changes routed by ``ddl_router``) -> ``committer`` (plan, then commit once ``runner``'s
Spark job merged) -> report; ``offsets`` tracks where each partition is read,
``recovery`` retries transient failures (the rule: ``retry``), ``batches`` holds the
records a batch travels in. ``tables`` opens and recovers each topic's table and holds
its state machine; ``planning`` turns a table's batch into an instant and merge tasks;
``compaction`` decides which file groups get a new base file; ``progress`` is the
bookkeeping each commit carries; ``deadletter`` keeps undecodable messages and
``replay`` lists and re-applies them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.replicator.batches import BatchReport
    from engine.replicator.loop import Replicator

__all__ = ["BatchReport", "Replicator"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: listing dead letters (the dashboard's `d`) imports this package
    # but needs neither the loop nor the decoders (about a second of imports).
    if name == "Replicator":
        from engine.replicator.loop import Replicator

        return Replicator
    if name == "BatchReport":
        from engine.replicator.batches import BatchReport

        return BatchReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
