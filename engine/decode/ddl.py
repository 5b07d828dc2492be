"""MySQL/MariaDB schema change events (the schema change topic), parsed.

Debezium's MySQL connector writes every DDL statement to the topic named after its
``topic.prefix``, keyed by ``{"databaseName": ...}``, with a value holding ``ddl`` (the
statement), ``databaseName``, the ``source`` block (binlog ``file``, ``pos``, ``row``,
``gtid``, ``snapshot``) and ``tableChanges``: one entry per table the statement
changed, ``{"type": "CREATE" | "ALTER" | "DROP", "id": "\\"db\\".\\"table\\"",
"table": {"primaryKeyColumnNames": [...], "columns": [...]}}``.

:func:`parse_schema_change` turns one such record into a :class:`SchemaChange`: its
source position in the row events' encoding (:mod:`engine.model`), so that a DDL can be
placed among the rows of its table, and one :class:`TableChange` per table named. What
``tableChanges`` does not say is read from the statement itself: ``TRUNCATE TABLE``
(Debezium sends no table change for it), table renames (``RENAME TABLE a TO b``,
``ALTER TABLE a RENAME TO b``) and column renames (``RENAME COLUMN a TO b``,
``CHANGE [COLUMN] a b ...``). Deciding what a change does to a replica is the
replicator's business (:mod:`engine.replicator.ddl`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from engine.model import STREAMED_BIT

_FILE_INDEX = re.compile(r"(?:^|[^0-9])([0-9]{1,9})$")
#: An identifier as MySQL writes it: `quoted` (backticks doubled) or bare.
_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$\u0080-\uffff]+)"
_QUALIFIED = rf"{_IDENT}(?:\s*\.\s*{_IDENT})?"
_COMMENT = re.compile(r"/\*.*?\*/|(?:--|#)[^\n]*", re.S)
_TRUNCATE = re.compile(rf"^\s*TRUNCATE\s+(?:TABLE\s+)?({_QUALIFIED})\s*;?\s*$", re.I)
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.*)$", re.I | re.S)
_RENAME_PAIR = re.compile(rf"\s*({_QUALIFIED})\s+TO\s+({_QUALIFIED})\s*(?:,|$)", re.I)
_ALTER = re.compile(
    rf"^\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+({_QUALIFIED})\s+(.*)$", re.I | re.S
)
_ALTER_RENAME = re.compile(rf"(?:^|,)\s*RENAME\s+(?:TO\s+|AS\s+)?({_QUALIFIED})\s*(?:,|;|$)", re.I)
_RENAME_COLUMN = re.compile(rf"\bRENAME\s+COLUMN\s+({_IDENT})\s+TO\s+({_IDENT})", re.I)
_CHANGE_COLUMN = re.compile(rf"\bCHANGE\s+(?:COLUMN\s+)?({_IDENT})\s+({_IDENT})\s", re.I)


def unquote(name: str) -> str:
    """An identifier without its backticks (doubled backticks undone)."""
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] == "`":
        return name[1:-1].replace("``", "`")
    return name


def split_qualified(name: str, database: str) -> tuple[str, str]:
    """``db.table`` / ``table`` (backticks allowed) -> (database, table)."""
    parts = re.findall(_IDENT, name)
    if len(parts) >= 2:
        return unquote(parts[0]), unquote(parts[1])
    return database, unquote(parts[0]) if parts else ""


def split_id(table_id: str, database: str) -> tuple[str, str]:
    """A ``tableChanges`` id (``"db"."table"``, also ``db.table``) -> (database, table)."""
    quoted = re.findall(r'"((?:[^"]|"")*)"', table_id)
    if len(quoted) >= 2:
        return quoted[-2].replace('""', '"'), quoted[-1].replace('""', '"')
    if len(quoted) == 1:
        return database, quoted[0].replace('""', '"')
    db, _, table = table_id.rpartition(".")
    return db or database, table


@dataclass(frozen=True)
class Column:
    """A column as ``tableChanges`` describes it (what narrowing checks compare)."""

    name: str
    type_name: str
    length: int | None = None
    scale: int | None = None
    optional: bool = True


@dataclass(frozen=True)
class TableChange:
    """What one statement does to one table.

    ``kind``: CREATE, ALTER, DROP, TRUNCATE or RENAME (a table rename: ``table`` is the
    old name, ``new_table`` the new one). ``columns`` is the table's definition after the
    statement (None when the event does not give it); ``column_renames`` old -> new.
    """

    kind: str
    database: str
    table: str
    columns: tuple[Column, ...] | None = None
    key_columns: tuple[str, ...] = ()
    new_table: str | None = None
    column_renames: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SchemaChange:
    """One record of the schema change topic."""

    ddl: str
    database: str
    #: ``(_cdc_pos, _cdc_pos_sub)`` as row events of the same binlog position get it.
    position: tuple[int, int] | None
    source_ts_ms: int | None
    gtid: str | None
    changes: tuple[TableChange, ...] = field(default_factory=tuple)
    #: Written by the connector's snapshot (``source.snapshot`` true/last), not streamed
    #: from the binlog: the schema as the snapshot found it.
    snapshot: bool = False


def _payload(value: bytes | dict[str, Any]) -> dict[str, Any]:
    try:
        obj = value if isinstance(value, dict) else json.loads(value)
    except RecursionError:
        raise ValueError("nested too deeply to be a schema change event") from None
    if isinstance(obj, dict) and "payload" in obj and set(obj) <= {"schema", "payload"}:
        obj = obj["payload"]
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def is_schema_change(obj: dict[str, Any]) -> bool:
    """Whether a (payload) object is a schema change event (not a row change)."""
    return "op" not in obj and ("ddl" in obj or "tableChanges" in obj)


def _position(source: dict[str, Any]) -> tuple[int, int] | None:
    file, pos = source.get("file"), source.get("pos")
    if not isinstance(file, str) or not isinstance(pos, int):
        return None
    match = _FILE_INDEX.search(file)
    if match is None or not 0 <= pos < 1 << 32:
        raise ValueError(f"source.file {file!r} / pos {pos!r} is not a binlog position")
    row = source.get("row") or 0
    if not isinstance(row, int) or not 0 <= row < 1 << 63:
        raise ValueError(f"source.row {row!r} is not a row number")
    streamed = not _snapshot(source)
    return ((STREAMED_BIT if streamed else 0) | int(match[1]) << 32 | pos, int(row))


def _snapshot(source: dict[str, Any]) -> bool:
    """Whether a record was written by the connector's (initial) snapshot."""
    return source.get("snapshot") not in (None, False, "false", "incremental")


def _columns(table: Any) -> tuple[tuple[Column, ...] | None, tuple[str, ...]]:
    if not isinstance(table, dict):
        return None, ()
    cols = table.get("columns")
    raw_keys = table.get("primaryKeyColumnNames") or []
    if not isinstance(raw_keys, list) or not all(isinstance(k, str) for k in raw_keys):
        raise ValueError("tableChanges: primaryKeyColumnNames is not an array of names")
    keys = tuple(raw_keys)
    if not isinstance(cols, list):
        return None, keys
    out = []
    for c in cols:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            raise ValueError("tableChanges: a column without a name")
        out.append(
            Column(
                c["name"],
                str(c.get("typeName") or "").upper(),
                c.get("length") if isinstance(c.get("length"), int) else None,
                c.get("scale") if isinstance(c.get("scale"), int) else None,
                bool(c.get("optional", True)),
            )
        )
    return tuple(out), keys


def _column_renames(ddl: str) -> tuple[tuple[str, str], ...]:
    pairs = [(unquote(a), unquote(b)) for a, b in _RENAME_COLUMN.findall(ddl)]
    pairs += [(unquote(a), unquote(b)) for a, b in _CHANGE_COLUMN.findall(ddl)]
    return tuple((a, b) for a, b in pairs if a != b)


def _from_statement(ddl: str, database: str) -> list[TableChange]:
    """Table changes Debezium leaves out of ``tableChanges``: truncates and renames."""
    text = _COMMENT.sub(" ", ddl).strip()
    match = _TRUNCATE.match(text)
    if match:
        db, table = split_qualified(match[1], database)
        return [TableChange("TRUNCATE", db, table)]
    match = _RENAME_TABLE.match(text)
    if match:
        out = []
        for old, new in _RENAME_PAIR.findall(match[1]):
            db, table = split_qualified(old, database)
            out.append(TableChange("RENAME", db, table, new_table=split_qualified(new, db)[1]))
        return out
    match = _ALTER.match(text)
    if match:
        rename = _ALTER_RENAME.search(match[2])
        if rename and not re.match(r"\s*(COLUMN|INDEX|KEY)\b", match[2][rename.end(1) :], re.I):
            db, table = split_qualified(match[1], database)
            new_db, new = split_qualified(rename[1], db)
            return [TableChange("RENAME", db, table, new_table=new)]
    return []


def parse_schema_change(value: bytes | dict[str, Any]) -> SchemaChange:
    """One schema change record's value (JSON bytes, or a document an Avro decoder made)
    -> :class:`SchemaChange`.

    Raises:
        ValueError: the value is not a schema change event, or is malformed (the reason
            is what a dead letter records).
    """
    obj = _payload(value)
    if not is_schema_change(obj):
        raise ValueError("not a schema change event (no ddl or tableChanges)")
    ddl = obj.get("ddl") or ""
    if not isinstance(ddl, str):
        raise ValueError("ddl: expected a string")
    database = obj.get("databaseName") or ""
    if not isinstance(database, str):
        raise ValueError("databaseName: expected a string")
    raw_source = obj.get("source")
    source: dict[str, Any] = raw_source if isinstance(raw_source, dict) else {}
    position = _position(source)
    ts = source.get("ts_ms") if isinstance(source.get("ts_ms"), int) else obj.get("ts_ms")
    gtid = source.get("gtid") if isinstance(source.get("gtid"), str) else None
    changes: list[TableChange] = []
    renames = _column_renames(ddl)
    table_changes = obj.get("tableChanges") or []
    if not isinstance(table_changes, list):
        raise ValueError("tableChanges: expected an array")
    for tc in table_changes:
        if not isinstance(tc, dict) or not isinstance(tc.get("id"), str):
            raise ValueError("tableChanges: an entry without an id")
        kind = str(tc.get("type") or "").upper()
        if kind not in ("CREATE", "ALTER", "DROP"):
            raise ValueError(f"tableChanges: unknown type {tc.get('type')!r}")
        db, table = split_id(tc["id"], database)
        columns, keys = _columns(tc.get("table"))
        changes.append(TableChange(kind, db, table, columns, keys, column_renames=renames))
    from_text = _from_statement(ddl, database)
    known = {(c.database, c.table) for c in changes}
    for tc in from_text:
        if tc.kind == "RENAME":
            # Debezium reports a rename as a change of the new table; the old one is
            # what the replica is named after.
            changes = [c for c in changes if (c.database, c.table) != (tc.database, tc.new_table)]
            changes.append(tc)
        elif (tc.database, tc.table) not in known:
            changes.append(tc)
    named = source.get("table")
    if not changes and isinstance(named, str) and named:
        # Older connectors (and snapshots) send an empty tableChanges: the statement's
        # verb and source.table still say which table it concerns.
        verb = _COMMENT.sub(" ", ddl).strip().split(None, 1)[:1]
        kind = verb[0].upper() if verb and verb[0].upper() in ("CREATE", "ALTER", "DROP") else ""
        if kind:
            src_db = source.get("db")
            db = src_db if isinstance(src_db, str) and src_db else database
            changes.append(TableChange(kind, db, named, column_renames=renames))
    if not changes and not ddl and not table_changes:
        raise ValueError("schema change event without ddl or tableChanges")
    return SchemaChange(
        ddl,
        database,
        position,
        ts if isinstance(ts, int) else None,
        gtid,
        tuple(changes),
        snapshot=_snapshot(source),
    )
