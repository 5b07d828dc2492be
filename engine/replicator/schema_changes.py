"""Schema changes seen in the events' own schemas, per ``schema_changes`` and
``fill_defaults`` (PostgreSQL has no DDL topic: a dropped column or a changed type shows
up only in the next event's schema).

:func:`evolve` takes a table's change batch with the value schemas its events carried
(:mod:`engine.decode.row_schemas`), decides with
:func:`engine.merge.evolution.evolve_table` and shapes the batch accordingly: columns
removed under ``apply`` leave the batch too (its rows from before the drop included), and
a column added with a default gets it in the batch's rows whose events predate it. The
table's kept columns are remembered in its commits (``cdcctl.schema.kept``), so a drop is
noted once and ``cdcctl validate`` knows them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from engine.config import Config
from engine.decode.row_schemas import RowSchema, newest_columns, rows_without
from engine.merge.evolution import Evolution, evolve_table
from engine.replicator.tables import TableRuntime


def _defaults(schemas: Sequence[RowSchema]) -> dict:
    """Column -> default, the newest schema's where several declare one."""
    out: dict = {}
    for s in sorted(schemas, key=lambda s: max(hi for _, hi in s.spans.values())):
        out.update(s.defaults)
    return out


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
    source = newest_columns(schemas, batch)
    defaults = _defaults(schemas)
    ev = evolve_table(
        current,
        batch.schema,
        policy=policy,
        source_columns=source,
        defaults=defaults,
        kept_before=rt.progress.kept_columns,
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
        rt.progress.kept_columns = ev.kept
    return batch, ev
