"""Schema changes seen in the events' own schemas, per ``schema_changes`` and
``fill_defaults`` (PostgreSQL has no DDL topic: a dropped column or a changed type shows
up only in the next event's schema).

:func:`evolve` takes a table's change batch with the value schemas its events carried
(:mod:`engine.decode.row_schemas`), decides with
:func:`engine.merge.evolution.evolve_table` and shapes the batch accordingly: columns
removed under ``apply`` leave the batch too (its rows from before the drop included), and
a column added with a default gets it in the batch's rows whose events predate it.

Which columns the source has is read from the schema of the batch's newest event by
source position, and only when that position is newer than any judged before: a batch
of events sent again (a connector restarted after a crash re-sends what it had not
confirmed, with the schema they had then) or replayed dead letters never make a column
look dropped or added. A column removed under ``apply`` is also taken out of such older
events. What was judged is kept in the table's commits (``cdcctl.schema.state``: the
kept and removed columns, the narrowings kept wider, the newest position judged), so
each change is noted once and ``cdcctl validate`` knows the kept columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from engine.config import Config
from engine.decode.row_schemas import RowSchema, newest_schema, rows_without
from engine.merge.evolution import Evolution, evolve_table, widened
from engine.replicator.tables import TableRuntime


def _defaults(schemas: Sequence[RowSchema]) -> dict:
    """Column -> default, the newest schema's where several declare one."""
    out: dict = {}
    for s in sorted(schemas, key=lambda s: max(hi for _, hi in s.spans.values())):
        out.update(s.defaults)
    return out


def _narrowed_in_source(batch: pa.Schema, current: pa.Schema, newest: RowSchema) -> pa.Schema:
    """The batch's schema with the newest event's narrower type for a column the batch
    reads in the table's own wider type (events from before and after a narrowing in one
    batch read as the wider type): the narrowing is judged in the batch it happens in."""
    for name, typ in newest.types.items():
        i = batch.get_field_index(name)
        if i < 0 or name not in current.names:
            continue
        wide = batch.field(i).type
        if wide == current.field(name).type and typ != wide and widened(typ, wide) == wide:
            batch = batch.set(i, batch.field(i).with_type(typ))
    return batch


def evolve(
    cfg: Config,
    rt: TableRuntime,
    batch: pa.Table,
    schemas: Sequence[RowSchema],
    current: pa.Schema | None,
    key_fields: Sequence[str],
) -> tuple[pa.Table, Evolution]:
    """The batch in the table's new shape and what its schema does to the table.

    Raises:
        SchemaEvolutionError: a change the table's policy does not apply.
    """
    policy = cfg.schema_policy(rt.name)
    state = rt.progress.schema_state
    newest = newest_schema(schemas, batch)
    source: set[str] | None = None
    pos = None
    if newest is not None:
        schema, pos = newest
        judged = state.get("pos")
        if pos is None or judged is None or list(pos) > list(judged):
            source = set(schema.columns)
    dropped = [c for c in state.get("dropped") or [] if source is None or c not in source]
    gone = [c for c in dropped if c in batch.column_names]
    if gone:  # removed under ``apply``: older events that still carry it lose it too
        batch = batch.drop_columns(gone)
    defaults = _defaults(schemas)
    judged = batch.schema
    if source is not None and current is not None and newest is not None:
        judged = _narrowed_in_source(judged, current, newest[0])
    ev = evolve_table(
        current,
        judged,
        policy=policy,
        source_columns=source,
        defaults=defaults,
        kept_before=[*(state.get("kept") or []), *(state.get("narrowed") or [])],
        key_fields=key_fields,
    )
    if ev.drop:
        batch = batch.drop_columns([c for c in ev.drop if c in batch.column_names])
    fills = ev.fills
    if current is None and policy[2]:
        fills = {c: defaults[c] for c in batch.column_names if c in defaults}
    for name, value in fills.items():
        older = rows_without(schemas, batch, name)
        if not pc.any(older).as_py():
            continue
        i = batch.schema.get_field_index(name)
        col = batch.column(i)
        filled = pc.if_else(pc.and_(older, pc.is_null(col)), pa.scalar(value, col.type), col)
        batch = batch.set_column(i, batch.schema.field(i), filled)
    if source is not None:
        if pos is not None:
            state["pos"] = list(pos)
        state["kept"] = ev.kept
        state["dropped"] = sorted(set(dropped) | set(ev.drop))
    if ev.narrowed:
        state["narrowed"] = sorted(set(state.get("narrowed") or []) | set(ev.narrowed))
    return batch, ev
