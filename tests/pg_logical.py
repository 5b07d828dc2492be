"""Debezium PostgreSQL change events built from PostgreSQL's own logical decoding.

A test changes a real database with SQL; :class:`LogicalSlot` reads what the server
decoded (the ``test_decoding`` plugin, through a replication slot with
``pg_logical_slot_get_changes``) and turns each row change into the Kafka message the
Debezium PostgreSQL connector would write through JsonConverter with schemas: the key,
and the envelope with ``before``/``after``, ``op``, ``source`` (``db``, ``schema``,
``table``, ``lsn``, ``sequence`` = [commit LSN, event LSN], ``txId``) and ``ts_ms``. An
unchanged TOASTed value (``unchanged-toast-datum``, REPLICA IDENTITY DEFAULT) becomes
``__debezium_unavailable_value``; a delete's ``before`` holds only the key columns, as
with REPLICA IDENTITY DEFAULT. Column types come from the catalog and map as the
connector maps them (decimal.handling.mode=precise, time.precision.mode=adaptive).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg

PLACEHOLDER = "__debezium_unavailable_value"
_EPOCH = dt.datetime(1970, 1, 1)
_COLUMN = re.compile(r'\s*("(?:[^"]|"")+"|[^\[\s]+)\[(.*?)\]:')


@dataclass
class Column:
    name: str
    typname: str  # pg_type.typname (``_int4`` for int4[])
    precision: int | None
    scale: int | None
    key: bool


def _connect_field(col: Column) -> dict[str, Any]:
    """The Connect schema of one column, as Debezium's PostgreSQL connector writes it."""
    t = col.typname
    plain = {
        "int2": "int16", "int4": "int32", "int8": "int64", "bool": "boolean",
        "float4": "float", "float8": "double", "text": "string", "varchar": "string",
        "bpchar": "string", "bytea": "bytes",
    }  # fmt: skip
    field: dict[str, Any]
    if t in plain:
        field = {"type": plain[t]}
    elif t == "numeric" and col.scale is not None:
        field = {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {
                "scale": str(col.scale),
                "connect.decimal.precision": str(col.precision),
            },
        }
    elif t == "numeric":
        field = {
            "type": "struct",
            "fields": [
                {"type": "int32", "optional": False, "field": "scale"},
                {"type": "bytes", "optional": False, "field": "value"},
            ],
            "name": "io.debezium.data.VariableScaleDecimal",
            "version": 1,
        }
    elif t == "date":
        field = {"type": "int32", "name": "io.debezium.time.Date", "version": 1}
    elif t == "timestamp":
        field = {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}
    elif t == "timestamptz":
        field = {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}
    elif t == "time":
        field = {"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}
    elif t in ("json", "jsonb"):
        field = {"type": "string", "name": "io.debezium.data.Json", "version": 1}
    elif t == "uuid":
        field = {"type": "string", "name": "io.debezium.data.Uuid", "version": 1}
    elif t.startswith("_"):
        element = _connect_field(Column("", t[1:], None, None, False))
        element.pop("field", None)
        element["optional"] = True
        field = {"type": "array", "items": element}
    else:
        raise ValueError(f"no Debezium mapping for {t} in this test helper")
    field["optional"] = not col.key
    field["field"] = col.name
    return field


def _unscaled(d: Decimal, scale: int) -> bytes:
    n = int(d.scaleb(scale))
    return n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True)


def _pg_array(text: str) -> list[str | None]:
    """A one-dimensional PostgreSQL array literal's elements (as text; NULL -> None)."""
    inner = text[1:-1]
    out: list[str | None] = []
    i = 0
    while i < len(inner):
        if inner[i] == '"':
            j, buf = i + 1, []
            while inner[j] != '"':
                if inner[j] == "\\":
                    j += 1
                buf.append(inner[j])
                j += 1
            out.append("".join(buf))
            i = j + 2
        else:
            j = inner.find(",", i)
            j = len(inner) if j < 0 else j
            token = inner[i:j]
            out.append(None if token == "NULL" else token)
            i = j + 1
    return out


def _value(col: Column, text: str | None) -> Any:
    """The JSON payload value of a column from its text output."""
    if text is None:
        return None
    t = col.typname
    if t in ("int2", "int4", "int8"):
        return int(text)
    if t == "bool":
        return text in ("t", "true")
    if t in ("float4", "float8"):
        return float(text)
    if t == "numeric" and col.scale is not None:
        return base64.b64encode(_unscaled(Decimal(text), col.scale)).decode()
    if t == "numeric":
        d = Decimal(text)
        scale = max(0, -d.as_tuple().exponent)  # type: ignore[operator]
        return {"scale": scale, "value": base64.b64encode(_unscaled(d, scale)).decode()}
    if t == "date":
        return (dt.date.fromisoformat(text) - dt.date(1970, 1, 1)).days
    if t == "timestamp":
        v = dt.datetime.fromisoformat(text)
        return (v - _EPOCH) // dt.timedelta(microseconds=1)
    if t == "timestamptz":
        v = dt.datetime.fromisoformat(text).astimezone(dt.UTC)
        return v.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if t == "time":
        v = dt.time.fromisoformat(text)
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    if t == "bytea":
        return base64.b64encode(bytes.fromhex(text[2:])).decode()
    if t.startswith("_"):
        element = Column("", t[1:], None, None, False)
        return [_value(element, e) for e in _pg_array(text)]
    return text


def _parse_tuple(text: str) -> dict[str, str | None | object]:
    """``name[type]:value ...`` of test_decoding -> column texts (None for null)."""
    values: dict[str, str | None | object] = {}
    i = 0
    while i < len(text):
        m = _COLUMN.match(text, i)
        if not m:
            break
        name = m.group(1)
        if name.startswith('"'):
            name = name[1:-1].replace('""', '"')
        i = m.end()
        if text.startswith("'", i):
            j, buf = i + 1, []
            while True:
                k = text.index("'", j)
                buf.append(text[j:k])
                if text.startswith("'", k + 1):
                    buf.append("'")
                    j = k + 2
                else:
                    i = k + 1
                    break
            values[name] = "".join(buf)
        else:
            j = text.find(" ", i)
            j = len(text) if j < 0 else j
            token = text[i:j]
            i = j
            if token == "null":
                values[name] = None
            elif token == "unchanged-toast-datum":
                values[name] = PLACEHOLDER_MARK
            else:
                values[name] = token
    return values


PLACEHOLDER_MARK = object()


class LogicalSlot:
    """A ``test_decoding`` replication slot of one database, read into Debezium messages."""

    def __init__(self, conn: psycopg.Connection, prefix: str, slot: str = "cdcctl_test") -> None:
        self.conn = conn
        self.prefix = prefix
        self.slot = slot
        self.db = str(conn.info.dbname)
        self._columns: dict[tuple[str, str], list[Column]] = {}
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))

    def drop(self) -> None:
        self.conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))

    def columns(self, schema: str, table: str) -> list[Column]:
        if (schema, table) not in self._columns:
            rows = self.conn.execute(
                """
                SELECT a.attname, t.typname,
                       CASE WHEN t.typname = 'numeric' AND a.atttypmod > 0
                            THEN ((a.atttypmod - 4) >> 16) & 65535 END,
                       CASE WHEN t.typname = 'numeric' AND a.atttypmod > 0
                            THEN (a.atttypmod - 4) & 65535 END,
                       coalesce(a.attnum = ANY(i.indkey), false)
                FROM pg_attribute a
                JOIN pg_type t ON t.oid = a.atttypid
                LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
                WHERE a.attrelid = (quote_ident(%s) || '.' || quote_ident(%s))::regclass
                  AND a.attnum > 0 AND NOT a.attisdropped
                ORDER BY a.attnum
                """,
                (schema, table),
            ).fetchall()
            self._columns[(schema, table)] = [Column(*r) for r in rows]
        return self._columns[(schema, table)]

    def topic(self, schema: str, table: str) -> str:
        return f"{self.prefix}.{schema}.{table}"

    def _schemas(self, schema: str, table: str) -> tuple[dict, dict]:
        cols = self.columns(schema, table)
        row = {
            "type": "struct",
            "fields": [_connect_field(c) for c in cols],
            "optional": True,
            "name": f"{self.prefix}.{schema}.{table}.Value",
        }
        key = {
            "type": "struct",
            "fields": [_connect_field(c) for c in cols if c.key],
            "optional": False,
            "name": f"{self.prefix}.{schema}.{table}.Key",
        }
        source = {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
            "fields": [
                {"type": "string", "optional": False, "field": "version"},
                {"type": "string", "optional": False, "field": "connector"},
                {"type": "string", "optional": False, "field": "name"},
                {"type": "int64", "optional": False, "field": "ts_ms"},
                {"type": "string", "optional": True, "field": "snapshot"},
                {"type": "string", "optional": False, "field": "db"},
                {"type": "string", "optional": True, "field": "sequence"},
                {"type": "string", "optional": False, "field": "schema"},
                {"type": "string", "optional": False, "field": "table"},
                {"type": "int64", "optional": True, "field": "txId"},
                {"type": "int64", "optional": True, "field": "lsn"},
            ],
        }
        envelope = {
            "type": "struct",
            "name": f"{self.prefix}.{schema}.{table}.Envelope",
            "optional": False,
            "version": 2,
            "fields": [
                {**row, "field": "before"},
                {**row, "field": "after"},
                source,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
            ],
        }
        return key, envelope

    def changes(self) -> list[tuple[str, bytes | None, bytes | None]]:
        """Every change since the last call, as Debezium messages in commit order."""
        rows = self.conn.execute(
            "SELECT lsn::text, xid::text, data FROM pg_logical_slot_get_changes(%s, NULL, NULL, "
            "'include-xids', '1', 'skip-empty-xacts', '1')",
            (self.slot,),
        ).fetchall()
        # Session settings of the decoding: timestamps with zone print in UTC.
        messages: list[tuple[str, bytes | None, bytes | None]] = []
        pending: list[tuple[int, int, str]] = []
        for lsn_text, xid, data in rows:
            lsn = _lsn(lsn_text)
            if data.startswith("BEGIN"):
                pending = []
            elif data.startswith("COMMIT"):
                for event_lsn, txid, line in pending:
                    messages.extend(self._message(line, event_lsn, lsn, txid))
                pending = []
            else:
                pending.append((lsn, int(xid), data))
        return messages

    def _message(
        self, line: str, lsn: int, commit_lsn: int, txid: int
    ) -> list[tuple[str, bytes | None, bytes | None]]:
        m = re.match(
            r'table ("(?:[^"]|"")+"|[^.]+)\.("(?:[^"]|"")+"|[^:]+): (\w+): ?(.*)$', line, re.S
        )
        if not m:
            raise ValueError(f"unexpected test_decoding line: {line[:200]}")
        schema, table = (p.strip('"') for p in m.group(1, 2))
        action, rest = m.group(3), m.group(4)
        cols = self.columns(schema, table)
        key_schema, envelope = self._schemas(schema, table)
        topic = self.topic(schema, table)
        now = int(time.time() * 1000)
        source = {
            "version": "2.5.0.Final", "connector": "postgresql", "name": self.prefix,
            "ts_ms": now, "snapshot": "false", "db": self.db,
            "sequence": json.dumps([str(commit_lsn), str(lsn)]), "schema": schema,
            "table": table, "txId": txid, "lsn": lsn,
        }  # fmt: skip

        def image(values: dict[str, Any]) -> dict[str, Any]:
            out = {}
            for c in cols:
                v = values.get(c.name)
                out[c.name] = PLACEHOLDER if v is PLACEHOLDER_MARK else _value(c, v)  # type: ignore[arg-type]
            return out

        def wrap(schema_obj: dict, payload: Any) -> bytes:
            return json.dumps({"schema": schema_obj, "payload": payload}).encode()

        if action == "TRUNCATE":
            value = {"before": None, "after": None, "source": source, "op": "t", "ts_ms": now}
            return [(topic, None, wrap(envelope, value))]
        if action == "UPDATE" and rest.startswith("old-key:"):
            raise ValueError("primary-key changes are not needed by these tests")
        values = _parse_tuple(rest)
        key_payload = {c.name: _value(c, values.get(c.name)) for c in cols if c.key}  # type: ignore[arg-type]
        key = wrap(key_schema, key_payload)
        if action == "DELETE":
            before = {c.name: (key_payload[c.name] if c.key else None) for c in cols}
            value = {"before": before, "after": None, "source": source, "op": "d", "ts_ms": now}
        else:
            op = "c" if action == "INSERT" else "u"
            value = {
                "before": None,
                "after": image(values),
                "source": source,
                "op": op,
                "ts_ms": now,
            }
        return [(topic, key, wrap(envelope, value))]


def _lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)
