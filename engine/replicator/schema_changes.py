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
kept and removed columns, the narrowings kept wider, the newest position judged, the
columns filled with their defaults), so each change is noted once, ``cdcctl validate``
knows the kept columns, and events from before a filled column was added that arrive
in a later batch (a lagging partition, a replayed dead letter) get its default too.
"""

from __future__ import annotations

import base64
import datetime
import decimal
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.config import Config
from engine.decode.row_schemas import RowSchema, newest_schema, rows_without, schema_ids
from engine.merge.evolution import Evolution, evolve_table, widened
from engine.replicator.tables import TableRuntime


def _defaults(schemas: Sequence[RowSchema]) -> dict:
    """Column -> default, the newest schema's where several declare one."""
    out: dict = {}
    for s in sorted(schemas, key=lambda s: s.newest_offset()):
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
    ids = schema_ids(schemas, batch) if schemas else None
    newest = newest_schema(schemas, batch, ids)
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
        batch = batch.drop_columns(gone)  # (same rows: ``ids`` still holds)
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
    fills = dict(ev.fills)
    if current is None and policy[2]:
        fills = {c: defaults[c] for c in batch.column_names if c in defaults}
    # Columns filled by earlier batches: events sent before the column was added can
    # still arrive (a lagging partition, a dead letter replayed); until the column is
    # dropped in the source again.
    gone_now = set(ev.kept) | set(ev.drop) | set(dropped)
    remembered = {
        name: value
        for name, value in _read_filled(state.get("filled") or {}, ev.schema).items()
        if name not in gone_now and name not in fills
    }
    todo = {**remembered, **fills}
    for name, value in todo.items():
        older = rows_without(schemas, batch, name, ids)
        if not pc.any(older).as_py():
            continue
        if name not in batch.column_names:
            typ = ev.schema.field(name).type
            batch = batch.append_column(pa.field(name, typ), pa.nulls(batch.num_rows, typ))
        i = batch.schema.get_field_index(name)
        col = batch.column(i)
        filled = pc.if_else(pc.and_(older, pc.is_null(col)), pa.scalar(value, col.type), col)
        batch = batch.set_column(i, batch.schema.field(i), filled)
    if source is not None:
        if pos is not None:
            state["pos"] = list(pos)
        state["kept"] = ev.kept
        state["dropped"] = sorted(set(dropped) | set(ev.drop))
    filled = {
        n: v
        for n, v in (state.get("filled") or {}).items()
        if n not in gone_now and n in ev.schema.names
    }
    for name, value in fills.items():
        encoded = _encode_value(value)
        if encoded is not None:
            filled[name] = encoded
    if filled or state.get("filled"):
        state["filled"] = filled
    if ev.narrowed:
        state["narrowed"] = sorted(set(state.get("narrowed") or []) | set(ev.narrowed))
    return batch, ev


def _encode_value(value: Any) -> Any:
    """A default as JSON for ``cdcctl.schema.state``; None when it has no such form."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"v": value}
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime.time):  # Arrow casts no text to a time
        return {"time": value.isoformat()}
    if isinstance(value, (datetime.date, datetime.datetime, decimal.Decimal)):
        return {"text": pa.scalar(value).cast(pa.string()).as_py()}
    return None


def _read_filled(filled: dict, schema: pa.Schema) -> dict[str, Any]:
    """The remembered defaults of the table's columns, as values of their types."""
    out: dict[str, Any] = {}
    for name, enc in filled.items():
        if name not in schema.names or not isinstance(enc, dict):
            continue
        typ = schema.field(name).type
        try:
            if "v" in enc:
                out[name] = pa.scalar(enc["v"], typ).as_py()
            elif "b64" in enc:
                out[name] = pa.scalar(base64.b64decode(enc["b64"]), typ).as_py()
            elif "time" in enc:
                out[name] = pa.scalar(datetime.time.fromisoformat(enc["time"]), typ).as_py()
            elif "text" in enc:
                out[name] = pa.scalar(enc["text"], pa.string()).cast(typ).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError, ValueError):
            continue  # a default the column's type no longer takes: not filled
    return out
