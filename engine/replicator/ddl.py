"""What a MySQL/MariaDB schema change does to a replica, per ``source.ddl``.

The replicator reads the schema change topic (the topic named after Debezium's
``topic.prefix``) like any other, parses each record (:mod:`engine.decode.ddl`) and routes
each table change to the replica of ``<prefix>.<database>.<table>``. :func:`decide` then
compares the change with what the table knew (the previous definition seen on the
schema change topic, else the replica's columns) and says, under the table's policy
(``[tables.<name>] ddl``, else ``source.ddl``):

=====================  ===============  ======================  ==================
change                 ``fail`` (dflt)  ``apply``               ``ignore``
=====================  ===============  ======================  ==================
add column, widening   applied          applied                 logged
drop column            table FAILED     column removed          logged
rename column          table FAILED     column renamed          logged
narrowing              table FAILED     wider type kept         logged
other type change      table FAILED     table FAILED            logged
TRUNCATE TABLE         emptied          emptied                 logged
DROP TABLE             table FAILED     emptied                 logged
RENAME TABLE           table FAILED     logged (see below)      logged
CREATE TABLE           compared as an ALTER of the known definition
=====================  ===============  ======================  ==================

A renamed table's old replica keeps its rows as of the rename and gets no more changes;
the new name's topic fills its own replica (docs/guide/formats.md, "MySQL and schema
changes").

Debezium's snapshot writes, for every captured table, ``DROP TABLE IF EXISTS`` and then
``CREATE TABLE`` as the table is (``source.snapshot`` true): that drop is no drop and that
create is no change; the create's definition is recorded, nothing is compared or done.

Everything is logged and counted (``ddl``). A change is handled once per table: the
newest schema change offset handled is kept in the table's commits
(:class:`DdlState`, ``cdcctl.ddl.state``), so reading the topic again after a restart
applies nothing twice. Dropped and renamed columns are remembered there too: a row
event from before the change read later still lands in the new shape.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.ddl import Column, SchemaChange, TableChange
from engine.model import (
    CONTROL_SCHEMA,
    GTID,
    KEY,
    OFFSET,
    OP,
    OP_TRUNCATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
    TX_ID,
)
from engine.source import apply_cuts

DDL_KEY = "cdcctl.ddl.state"

_INT_RANK = {"TINYINT": 1, "SMALLINT": 2, "MEDIUMINT": 3, "INT": 4, "INTEGER": 4, "BIGINT": 5}
_FLOAT_RANK = {"FLOAT": 1, "REAL": 2, "DOUBLE": 2, "DOUBLE PRECISION": 2}
_TEXT_RANK = {"TINYTEXT": 1, "TEXT": 2, "MEDIUMTEXT": 3, "LONGTEXT": 4}
_BLOB_RANK = {"TINYBLOB": 1, "BLOB": 2, "MEDIUMBLOB": 3, "LONGBLOB": 4}
_LENGTHED = {"CHAR", "VARCHAR", "BINARY", "VARBINARY", "BIT"}
_DECIMAL = {"DECIMAL", "NUMERIC", "DEC", "FIXED"}


@dataclass
class DdlState:
    """A table's schema-change bookkeeping, kept in each of its commits."""

    #: ``"topic:partition"`` -> newest offset of the schema change topic handled.
    handled: dict[str, int] = field(default_factory=dict)
    #: Columns dropped by an applied DROP COLUMN (removed from later row events too).
    dropped: list[str] = field(default_factory=list)
    #: Applied column renames, old -> new (applied to later row events too).
    renamed: dict[str, str] = field(default_factory=dict)
    #: The table's definition as the newest schema change gave it: name -> [type,
    #: length, scale].
    columns: dict[str, list] = field(default_factory=dict)

    @classmethod
    def load(cls, text: str | None) -> DdlState:
        if not text:
            return cls()
        data = json.loads(text)
        return cls(
            handled={k: int(v) for k, v in (data.get("handled") or {}).items()},
            dropped=list(data.get("dropped") or []),
            renamed=dict(data.get("renamed") or {}),
            columns=dict(data.get("columns") or {}),
        )

    def dump(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @property
    def used(self) -> bool:
        """Whether the table ever received a schema change event."""
        return bool(self.handled)

    def seen(self, topic: str, partition: int, offset: int) -> bool:
        """Whether this schema change record was handled already."""
        return offset <= self.handled.get(f"{topic}:{partition}", -1)

    def mark(self, topic: str, partition: int, offset: int) -> None:
        key = f"{topic}:{partition}"
        self.handled[key] = max(offset, self.handled.get(key, -1))


@dataclass
class DdlOutcome:
    """What one table change does to one replica."""

    #: ``applied``, ``ignored`` or ``failed``.
    verdict: str
    #: One line for the log (and the table's error when it fails).
    message: str
    #: Empty the replica as of the change's position (TRUNCATE, DROP TABLE applied).
    truncate: bool = False
    drop_columns: list[str] = field(default_factory=list)
    renames: dict[str, str] = field(default_factory=dict)
    #: The new definition to remember (None: keep the old one).
    columns: dict[str, list] | None = None


def _describe(col: Column) -> list:
    return [col.type_name, col.length, col.scale]


def _family(type_name: str) -> tuple[str, int]:
    base = type_name.upper().replace(" UNSIGNED", "").replace(" ZEROFILL", "").strip()
    for family, ranks in (
        ("int", _INT_RANK),
        ("float", _FLOAT_RANK),
        ("text", _TEXT_RANK),
        ("blob", _BLOB_RANK),
    ):
        if base in ranks:
            return family, ranks[base]
    if base in _DECIMAL:
        return "decimal", 0
    if base in _LENGTHED:
        return "lengthed:" + base.removeprefix("VAR"), 0
    return base, 0


def type_change(old: list, new: Column) -> str | None:
    """``"narrowed"``, ``"retyped"`` or None (same or wider) for one column."""
    old_type, old_len, old_scale = old[0] or "", old[1], old[2]
    (fam_old, rank_old), (fam_new, rank_new) = _family(old_type), _family(new.type_name)
    if fam_old != fam_new:
        if {fam_old, fam_new} <= {"lengthed:CHAR", "text"}:
            return None  # VARCHAR <-> TEXT: one string type in the replica
        return "retyped"
    if rank_new < rank_old:
        return "narrowed"
    if fam_new == "decimal":
        if (old_scale or 0) != (new.scale or 0):
            return "retyped"
        if old_len is not None and new.length is not None and new.length < old_len:
            return "narrowed"
    elif old_len is not None and new.length is not None and new.length < old_len:
        return "narrowed"
    return None


def _fixes(table: str, kind: str) -> str:
    return (
        f'To apply {kind}, set source.ddl = "apply" (or ddl = "apply" under '
        f'[tables.{table}]); to go on without applying it, "ignore"; then restart: the '
        "change is read again. Or rebuild the replica with `cdcctl resync " + table + "`."
    )


def _snapshot_schema(policy: str, where: str, tc: TableChange) -> DdlOutcome:
    """A DROP or CREATE the connector's snapshot wrote (see the module's docstring)."""
    if policy == "ignore":
        return DdlOutcome("ignored", f"{where}: the snapshot's table definition (ddl = ignore)")
    if tc.kind == "DROP":
        return DdlOutcome(
            "applied", f"{where}: the snapshot's DROP before its CREATE, not a drop: nothing done"
        )
    if tc.columns is None:
        return DdlOutcome("applied", f"{where}: the snapshot's table definition, without columns")
    definition = {c.name: _describe(c) for c in tc.columns}
    return DdlOutcome(
        "applied", f"{where}: the snapshot's table definition, recorded", columns=definition
    )


def decide(
    policy: str,
    table: str,
    tc: TableChange,
    change: SchemaChange,
    state: DdlState,
    replica: pa.Schema | None,
    *,
    new_topic_table: str | None = None,
) -> DdlOutcome:
    """What ``tc`` does to the replica ``table`` under ``policy``.

    Args:
        policy: ``fail``, ``apply`` or ``ignore``.
        table: the replica's name (for messages).
        tc: the table change.
        change: the schema change event it is part of.
        state: the table's DDL bookkeeping (read only here).
        replica: the replica's current schema (None: no replica yet).
        new_topic_table: for a table rename, the replica name the new name maps to.
    """
    where = f"DDL {change.ddl.strip()[:200]!r}"
    if change.snapshot and tc.kind in ("DROP", "CREATE"):
        return _snapshot_schema(policy, where, tc)
    if tc.kind == "TRUNCATE":
        if policy == "ignore":
            return DdlOutcome("ignored", f"{where}: truncate not applied (ddl = ignore)")
        return DdlOutcome("applied", f"{where}: replica emptied as of the truncate", truncate=True)
    if tc.kind == "DROP":
        if policy == "ignore":
            return DdlOutcome("ignored", f"{where}: table drop not applied (ddl = ignore)")
        if policy == "apply":
            return DdlOutcome(
                "applied", f"{where}: table dropped in the source; replica emptied", truncate=True
            )
        return DdlOutcome(
            "failed",
            f"{where}: the source table was dropped. "
            + _fixes(table, "it (the replica is emptied)"),
        )
    if tc.kind == "RENAME":
        target = f" (replica {new_topic_table})" if new_topic_table else ""
        text = f"{where}: the source table was renamed to {tc.new_table!r}{target}"
        if policy == "ignore":
            return DdlOutcome("ignored", f"{text}; not applied (ddl = ignore)")
        if policy == "apply":
            return DdlOutcome(
                "applied",
                f"{text}; this replica keeps the rows as of the rename and gets no more "
                "changes; the new name's topic fills its own replica",
            )
        return DdlOutcome(
            "failed",
            f"{text}; its changes now go to another topic. {_fixes(table, 'it')}",
        )
    # CREATE / ALTER: compare the new definition with the known one.
    if tc.columns is None:
        return DdlOutcome("applied", f"{where}: no column definitions given; nothing to compare")
    new_cols = {c.name: c for c in tc.columns}
    definition = {c.name: _describe(c) for c in tc.columns}
    known: list[str] | None
    if state.columns:
        known = list(state.columns)
    elif replica is not None:
        known = [f.name for f in replica if not f.name.startswith("_cdc_")]
        known = [state.renamed.get(n, n) for n in known]
    else:
        known = None
    if known is None:
        return DdlOutcome("applied", f"{where}: definition recorded", columns=definition)
    renames = {a: b for a, b in tc.column_renames if a in known and b in new_cols}
    dropped = [n for n in known if n not in new_cols and n not in renames]
    added = [n for n in new_cols if n not in known and n not in renames.values()]
    narrowed, retyped = [], []
    for name, col in new_cols.items():
        old_name = next((a for a, b in renames.items() if b == name), name)
        old = state.columns.get(old_name)
        if old is None:
            continue
        verdict = type_change(old, col)
        if verdict == "narrowed":
            narrowed.append(f"{name} {old[0]}->{col.type_name}")
        elif verdict == "retyped":
            retyped.append(f"{name} {old[0]}->{col.type_name}")
    parts = []
    if added:
        parts.append("added " + ", ".join(added))
    if dropped:
        parts.append("dropped " + ", ".join(dropped))
    if renames:
        parts.append("renamed " + ", ".join(f"{a}->{b}" for a, b in renames.items()))
    if narrowed:
        parts.append("narrowed " + ", ".join(narrowed))
    if retyped:
        parts.append("changed type of " + ", ".join(retyped))
    summary = f"{where}: " + ("; ".join(parts) if parts else "no column change")
    if policy == "ignore":
        return DdlOutcome("ignored", f"{summary} (ddl = ignore: not applied)")
    unsafe = bool(dropped or renames or narrowed or retyped)
    if policy == "fail" and unsafe:
        return DdlOutcome("failed", f"{summary}. {_fixes(table, 'drops, renames and narrowings')}")
    if retyped:
        return DdlOutcome(
            "failed",
            f"{summary}: a change of type cannot be applied in place; rebuild the replica "
            f"with `cdcctl resync {table}`",
        )
    note = "; added columns appear with the first row event that carries them" if added else ""
    if narrowed:
        note += "; narrowed columns keep their wider type in the replica"
    return DdlOutcome(
        "applied",
        summary + note,
        drop_columns=dropped,
        renames=renames,
        columns=definition,
    )


def apply_column_ops(batch: pa.Table | None, state: DdlState) -> pa.Table | None:
    """A change batch in the table's current shape: applied renames and drops done."""
    if batch is None or not (state.dropped or state.renamed):
        return batch
    for old, new in state.renamed.items():
        names = list(batch.column_names)
        if old not in names:
            continue
        if new not in names:
            names[names.index(old)] = new
            batch = batch.rename_columns(names)
            continue
        # One batch holds rows from before the rename (old name) and after it (new name):
        # each row has one of the two, so they are one column again.
        old_values = batch.column(old)
        new_values = batch.column(new)
        if old_values.type != new_values.type:
            old_values = old_values.cast(new_values.type)
        merged = pc.coalesce(new_values, old_values)
        batch = batch.set_column(names.index(new), new, merged).drop_columns([old])
    drop = [n for n in state.dropped if n in batch.column_names]
    return batch.drop_columns(drop) if drop else batch


def cut_batch(batch: pa.Table, cuts: dict[int, int], replica: pa.Schema | None) -> pa.Table:
    """The rows of a batch before the cuts (read again later), without the columns that
    only the rows past the cuts gave a value and the replica lacks: those rows bring them
    when they come. (A schemaless batch has one schema for all its rows: kept, such a
    column would reach the replica all null ahead of its rows, and a rename to its name
    arriving with them would then find it taken.)"""
    kept = apply_cuts(batch, cuts)
    if kept.num_rows == batch.num_rows:
        return kept
    known = set(replica.names) if replica is not None else set()
    valued = {n for n in batch.column_names if batch.column(n).null_count < batch.num_rows}
    return _without_null_columns(kept, known | (set(batch.column_names) - valued))


def drop_unseen_columns(batch: pa.Table, replica: pa.Schema | None, state: DdlState) -> pa.Table:
    """A batch cut at a failing change, without the columns only its rows past the cut
    had (all null now, in neither the replica nor the definition the schema change topic
    gave before the change): the replica must not take the new shape of a change that
    stopped the table (say a renamed column), which a later ``apply`` of that change
    would then meet twice. Without a known definition nothing is dropped."""
    if not state.columns:
        return batch
    known = set(state.columns) | (set(replica.names) if replica is not None else set())
    return _without_null_columns(batch, known)


def _without_null_columns(batch: pa.Table, keep: set[str]) -> pa.Table:
    """``batch`` without its all-null row columns, except those named in ``keep``."""
    drop = [
        f.name
        for f in batch.schema
        if not f.name.startswith("_cdc_")
        and f.name not in keep
        and batch.column(f.name).null_count == batch.num_rows
    ]
    return batch.drop_columns(drop) if drop else batch


def record(state: DdlState, outcome: DdlOutcome) -> None:
    """Remember an applied outcome's column operations and definition."""
    for old, new in outcome.renames.items():
        state.renamed = {a: (new if b == old else b) for a, b in state.renamed.items()}
        state.renamed[old] = new
        if new in state.dropped:
            state.dropped.remove(new)
    for name in outcome.drop_columns:
        if name not in state.dropped:
            state.dropped.append(name)
    if outcome.columns is not None:
        # A column added again under a dropped name is live again.
        state.dropped = [n for n in state.dropped if n not in outcome.columns]
        state.columns = outcome.columns


#: The partition of a truncate a schema change adds to a table's batch: none of the
#: table's own, so cuts of its partitions (transactions, bad messages) never touch it.
DDL_PARTITION = -1


def truncate_row(
    position: tuple[int, int], source_ts_ms: int | None, offset: int, gtid: str | None
) -> pa.Table:
    """A truncate event (``op=t``) at a schema change's binlog position: what a DDL
    TRUNCATE (or an applied DROP TABLE) adds to its table's change batch, so the merge
    empties the replica as of that position exactly as for a row-level truncate.
    ``offset``: the schema change record's offset (kept for the record)."""
    row = {
        KEY: None,
        OP: OP_TRUNCATE,
        POS: position[0],
        POS_SUB: position[1],
        SOURCE_TS: source_ts_ms,
        PARTITION: DDL_PARTITION,
        OFFSET: offset,
        TX_ID: None,
        GTID: gtid,
    }
    return pa.Table.from_pylist([row], schema=CONTROL_SCHEMA)


def cut_at_position(batch: pa.Table, position: tuple[int, int]) -> dict[int, int]:
    """Per partition of the table's batch, the offset of its first event at or after a
    schema change's position (binlog order within a table's topic is offset order)."""
    pos = batch.column(POS).to_pylist()
    sub = batch.column(POS_SUB).to_pylist()
    parts = batch.column(PARTITION).to_pylist()
    offs = batch.column(OFFSET).to_pylist()
    cuts: dict[int, int] = {}
    for p, s, part, off in zip(pos, sub, parts, offs, strict=True):
        if p is None or part == DDL_PARTITION or (p, s or 0) < position:
            continue
        if part not in cuts or off < cuts[part]:
            cuts[part] = off
    return cuts
