"""Looking at differing keys again while a replicator moves the replica on.

A first comparison (:mod:`engine.validate.compare`) reads the source in one snapshot and
the replica as it stands; a key changed in between differs only in flight. Here such keys
are read again: :func:`recheck_keys` (``validate --recheck``) once the replica has passed
the source's current position, and :func:`settle_keys` (``cdcctl repair``) precisely — the
source in a snapshot at P, the replica once it has applied P, rows newer than P moved on.
:func:`keys_mask` selects a key set's rows in a replica slice by the comparison's own key
text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from engine.validate.compare import (
    _compare_rows,
    _Found,
    _Plan,
    _replica_rows,
    _source_rows,
    _texts,
)
from engine.validate.replica import Replica, strip_streamed
from engine.validate.report import MAX_EXAMPLES, Recheck, RowDiff
from engine.validate.source import SourceDB

#: Keys named in one source query.
KEYS_PER_QUERY = 1000


def recheck_keys(
    db: SourceDB,
    replica_path: Any,
    plan: _Plan,
    found: _Found,
    wait_seconds: float,
    holder: Callable[[], str | None],
    caught_up: Callable[[float], bool] | None = None,
) -> Recheck:
    """Read the differing keys again on both sides once the replica has moved past the
    source's current position (or the wait ran out, or no replicator runs to move it)."""
    target = db.current_position()
    started = time.monotonic()
    reached, replica = _reach(replica_path, target, wait_seconds, holder, caught_up, 1.0)
    keys: dict[str, Any] = {**found.missing, **found.extra}
    keys.update({k: v[0] for k, v in found.differing.items()})
    again = _Found()
    if keys:
        db.begin_snapshot()
        try:
            src = _key_rows(db, plan, list(keys.values()))
            rows = _replica_rows(replica, plan, keys_mask(plan, set(keys)), None, [None])
            _compare_rows(plan, src, rows, again)
        finally:
            db.end_snapshot()
    pos, _ = strip_streamed(replica.tail_position)
    still = set(again.missing) | set(again.extra) | set(again.differing)
    return Recheck(
        source_position=db.position_text(target),
        replica_position=db.position_text(pos),
        reached=reached,
        waited_seconds=round(time.monotonic() - started, 3),
        resolved=sorted(k for k in keys if k not in still)[:MAX_EXAMPLES],
        missing=sorted(again.missing)[:MAX_EXAMPLES],
        extra=sorted(again.extra)[:MAX_EXAMPLES],
        differing=[
            RowDiff(k, again.differing[k][1]) for k in sorted(again.differing)[:MAX_EXAMPLES]
        ],
    )


def _reach(
    replica_path: Any,
    target: int | None,
    wait_seconds: float,
    holder: Callable[[], str | None],
    caught_up: Callable[[float], bool] | None,
    every: float,
) -> tuple[bool, Replica]:
    """Wait until the replica has applied the source's position ``target`` (read now);
    whether it had, and the replica as of then.

    Reached when its newest commit records a position at or past ``target``, or (an idle
    table: no event of it follows ``target``) when ``caught_up(now)`` says the running
    replicator has applied everything its topic held at a lag measurement made since.
    Not when the wait runs out or no replicator runs (``holder``).
    """
    asked = time.time()
    started = time.monotonic()
    replica = Replica.open(replica_path)
    while target is not None:
        pos, _ = strip_streamed(replica.tail_position)
        if pos is not None and pos >= target:
            return True, replica
        if caught_up is not None and caught_up(asked):
            return True, Replica.open(replica_path)
        if holder() is None or time.monotonic() - started >= wait_seconds:
            break
        time.sleep(every)
        replica = Replica.open(replica_path)
    return False, replica


def keys_mask(
    plan: _Plan, names: set[str]
) -> Callable[[duckdb.DuckDBPyConnection, pa.Table], pa.Array]:
    """A replica slice's mask of the rows whose key text is among ``names``."""
    value_set = pa.array(sorted(names), pa.string())

    def keep(con: duckdb.DuckDBPyConnection, t: pa.Table) -> pa.Array:
        texts = _texts(t, plan.keys)
        if len(texts) == 1:
            ktext = pc.fill_null(texts[0], "NULL")
        else:
            parts = []
            for k, tx in zip(plan.keys, texts, strict=True):
                parts.append(
                    pc.binary_join_element_wise(f"{k.name}=", pc.fill_null(tx, "NULL"), "")
                )
            ktext = pc.binary_join_element_wise(*parts, ", ")
        return pc.is_in(ktext, value_set=value_set)

    return keep


@dataclass
class Settled:
    """Keys looked at again precisely (:func:`settle_keys`)."""

    #: Those that still differ.
    found: _Found
    #: The source's position they were read at (None: unknown).
    position: int | None


def settle_keys(
    db: SourceDB,
    replica_path: Any,
    plan: _Plan,
    keys: dict[str, Any],
    wait_seconds: float,
    holder: Callable[[], str | None],
    caught_up: Callable[[float], bool] | None = None,
) -> Settled:
    """Which of ``keys`` (key text -> raw key values) really differ, while changes flow.

    The source's rows of those keys are read in a new snapshot at position P; then the
    replica's, once it has applied everything up to P (waiting at most ``wait_seconds``,
    and only while a replicator runs). A replica row written by a change newer than P
    has moved on past the source's snapshot and is not a difference, nor is a key the
    replica lacks that the source, read again after, lacks too (deleted after P), nor a
    key the replica has that the source, read again after, has too (committed after P,
    or invisible to the snapshot: never deleted at P); the others are compared as
    :func:`compare_table` compares.
    """
    position = db.begin_snapshot()
    try:
        src = list(_key_rows(db, plan, list(keys.values())))
    finally:
        db.end_snapshot()
    _, replica = _reach(replica_path, position, wait_seconds, holder, caught_up, 0.5)
    positions: dict[str, int] = {}
    rows = list(_replica_rows(replica, plan, keys_mask(plan, set(keys)), None, [None],
                              positions=positions))  # fmt: skip
    moved = set()
    for k, stored in positions.items():
        at, _ = strip_streamed(stored)
        if position is not None and at is not None and at > position:
            moved.add(k)
    found = _Found()
    _compare_rows(plan, src, [r for r in rows if r[0] not in moved], found)
    for k in moved:
        found.missing.pop(k, None)
    present = _present_now(db, plan, {**found.missing, **found.extra})
    gone = [k for k in found.missing if k not in present]
    for k in gone:  # deleted after P: the replica has applied that delete already
        found.missing.pop(k)
    back = [k for k in found.extra if k in present]
    for k in back:  # the source has it now (committed after P): the stream brings it
        found.extra.pop(k)
    return Settled(found, position)


def _present_now(db: SourceDB, plan: _Plan, keys: dict[str, Any]) -> set[str]:
    """Those of ``keys`` the source holds now (read in a snapshot of their own)."""
    if not keys:
        return set()
    db.begin_snapshot()
    try:
        return {key for key, *_ in _key_rows(db, plan, list(keys.values()))}
    finally:
        db.end_snapshot()


def _key_rows(
    db: SourceDB, plan: _Plan, raws: list[list[Any]]
) -> Iterator[tuple[str, list[Any], list[str | None], list[Any]]]:
    """The source's rows of the keys ``raws`` (raw key values), a thousand keys a query,
    as :func:`engine.validate.compare._source_rows` yields them (in the open snapshot)."""
    for i in range(0, len(raws), KEYS_PER_QUERY):
        yield from _source_rows(db, plan, *_key_filter(db, plan, raws[i : i + KEYS_PER_QUERY]))


def _key_filter(db: SourceDB, plan: _Plan, raws: list[list[Any]]) -> tuple[str, list[Any]]:
    cols = [db.quote(k.name) for k in plan.keys]
    if len(cols) == 1:
        marks = ", ".join(["%s"] * len(raws))
        return f" WHERE {cols[0]} IN ({marks})", [r[0] for r in raws]
    one = "(" + ", ".join(["%s"] * len(cols)) + ")"
    marks = ", ".join([one] * len(raws))
    return f" WHERE ({', '.join(cols)}) IN ({marks})", [v for r in raws for v in r]
