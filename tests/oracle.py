"""Independent reference model of a replica: fold Debezium messages into final table states.

The end-to-end tests compare what the engine wrote to Hudi with what this module
computes from the same Kafka messages. To be a meaningful reference it shares no code
with the engine: it imports nothing from ``engine`` and decodes every message with
``json.loads`` in the most direct way, trading speed for obviousness.

Semantics (PostgreSQL connector, JsonConverter with or without schemas):

* Position of an event: ``(streamed, source.lsn)`` where ``streamed`` is 0 for snapshot
  rows (``source.snapshot`` present and not ``"false"``) and 1 otherwise, so snapshot
  rows order before streamed changes. Per key, an event is applied only if its position
  is greater than the position of the last applied event; a replay (equal position) or a
  late older event loses.
* ``r``/``c``/``u`` upsert ``after``; ``d`` deletes the key (the deletion keeps its
  position, so older events arriving afterwards still lose).
* A tombstone (null value) is a no-op when the key is already deleted or unknown, and a
  delete otherwise - unless the event right before it for the same key lost (a replayed
  old delete followed by its tombstone must not delete a newer row).
* ``t`` (truncate) at position T removes every row of the topic whose position is below
  T; events at or below T arriving later for keys it removed lose.
* Reads without an LSN (incremental snapshot) are applied in arrival order.
* Flattened events ordered by an order field (:func:`fold_flattened`): the position is
  the field's value, and an event at a position equal to its key's is another change
  (two in one millisecond), applied after it: the one consumed last wins. Only an
  LSN names one change, so only an equal LSN is a replay.
* A value equal to the TOAST placeholder ``__debezium_unavailable_value`` (a string
  column) means "unchanged": the key's current value is kept; a key with no current row
  gets ``None``.
* ``m`` (logical decoding message) events are ignored.

Column values come out as ``pyarrow``'s ``to_pylist()`` returns what a replica stores:
``Decimal`` -> :class:`decimal.Decimal` with the schema's scale; ``MicroTimestamp`` and
the other zone-less timestamps -> naive :class:`datetime.datetime` (the UTC wall clock);
``ZonedTimestamp`` -> aware ``datetime`` in UTC; ``Date`` -> :class:`datetime.date`;
time-of-day types -> :class:`datetime.time`; ``bytes`` -> :class:`bytes`; strings (Enum,
Json, Uuid, ...) -> ``str``; numbers and booleans as they are.

Schemaless messages carry no types, so :func:`fold` takes a ``types`` hint per topic;
:data:`INVENTORY_TYPES` describes the demo workload's tables.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

__all__ = [
    "INVENTORY_TYPES",
    "TypeHint",
    "decode_column",
    "fold",
    "fold_flattened",
    "fold_verdicts",
    "inventory_types",
    "record_key",
]

#: A column type: a semantic type name (``"io.debezium.time.Date"``) or Connect primitive
#: (``"int32"``), or ``(name, parameters)`` when parameters matter (Decimal scale).
TypeHint = str | tuple[str, Mapping[str, str]]
# A resolved column type: (semantic name or primitive type, schema parameters).
ColumnType = tuple[str | None, Mapping[str, str]]

_DECIMAL = "org.apache.kafka.connect.data.Decimal"

#: Column types of the demo workload's tables, keyed by ``<schema>.<table>`` (which
#: :func:`fold` matches against the end of a topic name, whatever the prefix).
INVENTORY_TYPES: dict[str, dict[str, TypeHint]] = {
    "inventory.customers": {
        "id": "int32",
        "first_name": "string",
        "last_name": "string",
        "email": "string",
        "created_at": "io.debezium.time.MicroTimestamp",
        "vip": "boolean",
    },
    "inventory.products": {
        "id": "int32",
        "name": "string",
        "description": "string",
        "price": (_DECIMAL, {"scale": "2", "connect.decimal.precision": "10"}),
        "weight": "double",
        "updated_at": "io.debezium.time.ZonedTimestamp",
    },
    "inventory.orders": {
        "id": "int64",
        "customer_id": "int32",
        "product_id": "int32",
        "quantity": "int32",
        "order_date": "io.debezium.time.Date",
        "status": ("io.debezium.data.Enum", {"allowed": "NEW,PAID,SHIPPED,CANCELLED"}),
    },
}


def inventory_types(prefix: str = "dbserver1") -> dict[str, dict[str, TypeHint]]:
    """:data:`INVENTORY_TYPES` keyed by full topic names for ``prefix``."""
    return {f"{prefix}.{name}": columns for name, columns in INVENTORY_TYPES.items()}


# ----------------------------------------------------------------------------- values

_EPOCH = datetime(1970, 1, 1)
_EPOCH_DATE = date(1970, 1, 1)


def _decimal(value: Any, params: Mapping[str, str]) -> Decimal:
    scale = int(params.get("scale", "0"))
    if isinstance(value, str):
        raw = base64.b64decode(value)
        unscaled = int.from_bytes(raw, "big", signed=True)
        digits = tuple(int(c) for c in str(abs(unscaled)))
        return Decimal((1 if unscaled < 0 else 0, digits, -scale))
    # decimal.format=NUMERIC: a JSON number.
    return Decimal(str(value)).quantize(Decimal(1).scaleb(-scale))


def _variable_scale_decimal(value: Any, params: Mapping[str, str]) -> Decimal:
    return _decimal(value["value"], {"scale": str(value["scale"])})


def _zoned(value: Any, params: Mapping[str, str]) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC)


def _time_of_day(unit_us: float) -> Callable[[Any, Mapping[str, str]], Any]:
    def decode(value: Any, params: Mapping[str, str]) -> Any:
        return (_EPOCH + timedelta(microseconds=int(value * unit_us))).time()

    return decode


_DECODERS: dict[str, Callable[[Any, Mapping[str, str]], Any]] = {
    _DECIMAL: _decimal,
    "io.debezium.data.VariableScaleDecimal": _variable_scale_decimal,
    "io.debezium.time.Timestamp": lambda v, p: _EPOCH + timedelta(milliseconds=v),
    "io.debezium.time.MicroTimestamp": lambda v, p: _EPOCH + timedelta(microseconds=v),
    # Replicas store microseconds; nanoseconds are floored like an Arrow cast would.
    "io.debezium.time.NanoTimestamp": lambda v, p: _EPOCH + timedelta(microseconds=v // 1000),
    "org.apache.kafka.connect.data.Timestamp": lambda v, p: _EPOCH + timedelta(milliseconds=v),
    "io.debezium.time.ZonedTimestamp": _zoned,
    "io.debezium.time.Date": lambda v, p: _EPOCH_DATE + timedelta(days=v),
    "org.apache.kafka.connect.data.Date": lambda v, p: _EPOCH_DATE + timedelta(days=v),
    "io.debezium.time.Time": _time_of_day(1000),
    "org.apache.kafka.connect.data.Time": _time_of_day(1000),
    "io.debezium.time.MicroTime": _time_of_day(1),
    "io.debezium.time.NanoTime": _time_of_day(0.001),
    "bytes": lambda v, p: base64.b64decode(v),
    "float": lambda v, p: float(v),
    "double": lambda v, p: float(v),
    "int8": lambda v, p: int(v),
    "int16": lambda v, p: int(v),
    "int32": lambda v, p: int(v),
    "int64": lambda v, p: int(v),
    "boolean": lambda v, p: bool(v),
}


def decode_column(
    value: Any, type_name: str | None, params: Mapping[str, str] | None = None
) -> Any:
    """Decode one JSON payload value to the Python object a replica would return.

    Args:
        value: The value as ``json.loads`` produced it.
        type_name: Semantic type name, else Connect primitive type; ``None`` keeps the
            value as it is.
        params: Schema parameters (Decimal ``scale``).
    """
    if value is None or type_name is None:
        return value
    decoder = _DECODERS.get(type_name)
    return value if decoder is None else decoder(value, params or {})


def _schema_columns(value_schema: Mapping[str, Any]) -> dict[str, ColumnType]:
    """Column types of the ``after`` struct of an envelope schema."""
    for field in value_schema.get("fields", ()):
        if field.get("field") == "after":
            return {
                column["field"]: (
                    column.get("name") or column.get("type"),
                    column.get("parameters") or {},
                )
                for column in field.get("fields", ())
            }
    raise ValueError("the value schema has no 'after' field: not a Debezium envelope")


def _hint_columns(hint: Mapping[str, TypeHint] | None) -> dict[str, ColumnType]:
    columns: dict[str, ColumnType] = {}
    for column, type_hint in (hint or {}).items():
        if isinstance(type_hint, str):
            columns[column] = (type_hint, {})
        else:
            columns[column] = (type_hint[0], type_hint[1])
    return columns


# ----------------------------------------------------------------------------- messages


def _load(raw: bytes | str | None) -> tuple[Any, Any]:
    """Parse a key or value; return ``(schema or None, payload)``."""
    if raw is None:
        return None, None
    doc = json.loads(raw)
    # The wrapped JsonConverter form has exactly these two members (a bare envelope
    # never has a top-level "schema").
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        return doc["schema"], doc["payload"]
    return None, doc


def record_key(raw_key: bytes | str | None) -> str:
    """The record key string of a message key: ``"42"`` or ``"a:1,b:x"`` if composite.

    Raises:
        ValueError: For a null key (keyless tables are not supported here).
    """
    _, payload = _load(raw_key)
    if payload is None:
        raise ValueError("message without a key: keyless tables are not supported by the oracle")
    if not isinstance(payload, dict):
        return str(payload)
    if len(payload) == 1:
        return str(next(iter(payload.values())))
    return ",".join(f"{name}:{value}" for name, value in payload.items())


Position = tuple[int, int]
TOAST_PLACEHOLDER = "__debezium_unavailable_value"


def _position(source: Mapping[str, Any]) -> Position | None:
    """``(streamed, lsn)``, or ``None`` when the event has no LSN."""
    snapshot = source.get("snapshot")
    streamed = snapshot is None or snapshot is False or snapshot == "false"
    lsn = source.get("lsn")
    if lsn is None:
        return None
    return (1 if streamed else 0, int(lsn))


class _Table:
    """Fold state of one topic."""

    def __init__(self) -> None:
        # key -> (position of the last applied event, row or None when deleted)
        self.rows: dict[str, tuple[Position, dict[str, Any] | None]] = {}
        # key -> position of the last event seen (applied or not), for tombstones
        self.last_seen: dict[str, Position | None] = {}
        self.truncated_at: Position | None = None

    def floor(self, key: str) -> Position | None:
        current = self.rows.get(key)
        return current[0] if current is not None else self.truncated_at

    def apply(
        self,
        key: str,
        position: Position | None,
        row: dict[str, Any] | None,
        *,
        ties_apply: bool = False,
    ) -> None:
        """Apply one event. ``ties_apply``: the position is an order value, so an equal
        one is a later change (applied), not a replay."""
        self.last_seen[key] = position
        floor = self.floor(key)
        if position is None:
            # No LSN (incremental snapshot read): apply in arrival order and keep the
            # stored position.
            self.rows[key] = (floor or (0, -1), row)
            return
        if floor is not None and (position < floor or (position == floor and not ties_apply)):
            return  # replay or late older event
        self.rows[key] = (position, row)

    def tombstone(self, key: str) -> None:
        current = self.rows.get(key)
        if current is None or current[1] is None:
            return  # already deleted (or never seen): nothing to do
        seen = self.last_seen.get(key, current[0])
        if seen is not None and seen < current[0]:
            return  # it follows an older event that lost, e.g. a replayed delete
        self.rows[key] = (current[0], None)

    def truncate(self, position: Position | None) -> None:
        if position is None:
            self.rows.clear()
            return
        if self.truncated_at is None or position > self.truncated_at:
            self.truncated_at = position
        self.rows = {k: v for k, v in self.rows.items() if v[0] >= position}


def fold(
    messages: Iterable[tuple[str, bytes | str | None, bytes | str | None]],
    types: Mapping[str, Mapping[str, TypeHint]] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Fold Debezium messages into the final state of each topic's table.

    Args:
        messages: ``(topic, key, value)`` in consumption order (per key, the order of
            the key's partition). ``value`` ``None`` is a tombstone.
        types: Column types for schemaless messages, keyed by topic name or by the
            topic's last two dot-separated parts (``"inventory.orders"``); columns
            without a type keep their JSON value. Messages with schemas ignore it.

    Returns:
        ``{topic: {record key: {column: value}}}`` with the live rows; every topic that
        had a message is present, possibly empty.

    Raises:
        ValueError: On a message that is not a PostgreSQL Debezium envelope.
    """
    tables: dict[str, _Table] = {}
    hint_cache: dict[str, dict[str, ColumnType]] = {}
    for topic, raw_key, raw_value in messages:
        table = tables.get(topic)
        if table is None:
            table = tables[topic] = _Table()
        schema, payload = _load(raw_value)
        if payload is None:
            # Tombstone: null bytes, or {"schema": null, "payload": null} from old Kafka.
            table.tombstone(record_key(raw_key))
            continue
        if not isinstance(payload, dict) or "op" not in payload:
            raise ValueError(f"{topic}: not a Debezium envelope: {str(payload)[:200]}")
        op = payload["op"]
        source = payload.get("source") or {}
        if op == "m":
            continue
        position = _position(source)
        if op == "t":
            table.truncate(position)
            continue
        if op not in ("r", "c", "u", "d"):
            raise ValueError(f"{topic}: unknown op {op!r}")
        key = record_key(raw_key)
        if op == "d":
            table.apply(key, position, None)
            continue
        after = payload.get("after")
        if not isinstance(after, dict):
            raise ValueError(f"{topic}: op {op!r} without an 'after' row")
        if schema is not None:
            columns = _schema_columns(schema)
        else:
            columns = hint_cache.get(topic)
            if columns is None:
                hint = None
                if types is not None:
                    hint = types.get(topic)
                    if hint is None:
                        hint = types.get(".".join(topic.split(".")[-2:]))
                columns = hint_cache[topic] = _hint_columns(hint)
        row = {}
        current = table.rows.get(key)
        for name, value in after.items():
            if value == TOAST_PLACEHOLDER:
                row[name] = current[1].get(name) if current and current[1] else None
                continue
            type_name, params = columns.get(name, (None, {}))
            row[name] = decode_column(value, type_name, params)
        table.apply(key, position, row)
    return {
        topic: {key: row for key, (_, row) in table.rows.items() if row is not None}
        for topic, table in tables.items()
    }


def fold_verdicts(
    messages: Iterable[tuple[str, bytes | str | None, bytes | str | None]], key: str
) -> list[tuple[str, str]]:
    """What the fold of one topic's ``messages`` did with each event of ``key`` and with
    each truncate, in order: ``(op, verdict)``, ``op`` ``x`` for a tombstone.

    Verdicts: ``applied`` (``toast-filled`` when a column held the placeholder and the key
    had a row to take the value from), ``replay``
    (a position equal to the newest one the key had), ``late`` (older, or not newer than a
    truncate that removed it), ``tombstone`` (a tombstone that deleted nothing); a
    tombstone that deleted a live row is ``applied``.
    """
    table = _Table()
    out: list[tuple[str, str]] = []
    for _, raw_key, raw_value in messages:
        _, payload = _load(raw_value)
        if payload is None:
            k = record_key(raw_key)
            live = k in table.rows and table.rows[k][1] is not None
            table.tombstone(k)
            if k == key:
                gone = live and table.rows[k][1] is None
                out.append(("x", "applied" if gone else "tombstone"))
            continue
        op = payload["op"]
        position = _position(payload.get("source") or {})
        if op == "t":
            before = table.truncated_at
            table.truncate(position)
            if before is not None and position is not None and position <= before:
                out.append(("t", "replay" if position == before else "late"))
            else:
                out.append(("t", "applied"))
            continue
        k = record_key(raw_key)
        floor = table.floor(k)
        # Not newer than a truncate that removed the key: late (the fold counts it so).
        truncated = k not in table.rows and table.truncated_at is not None
        after = payload.get("after") or {}
        row = None if op == "d" else dict(after)
        live = k in table.rows and table.rows[k][1] is not None  # a value to keep
        table.apply(k, position, row)
        if k != key:
            continue
        if floor is not None and position is not None and position <= floor:
            out.append((op, "replay" if position == floor and not truncated else "late"))
        elif TOAST_PLACEHOLDER in after.values() and live:
            out.append((op, "toast-filled"))
        else:
            out.append((op, "applied"))
    return out


def fold_flattened(
    messages: Iterable[tuple[str, bytes | str | None, bytes | str | None]],
    order_field: str,
    prefix: str = "__",
) -> dict[str, dict[str, dict[str, Any]]]:
    """Fold schemaless flattened events (Debezium's ExtractNewRecordState) that carry no
    LSN, ordered by ``order_field`` (a row column or an added field, integer values).

    ``prefix`` starts the fields the SMT adds; they are not row columns. A delete is
    ``<prefix>deleted = "true"`` (rewrite mode) or ``<prefix>op = "d"``; a tombstone
    deletes as in :func:`fold`. Values are kept as JSON gives them.
    """
    tables: dict[str, _Table] = {}
    for topic, raw_key, raw_value in messages:
        table = tables.setdefault(topic, _Table())
        _, payload = _load(raw_value)
        key = record_key(raw_key)
        if payload is None:
            table.tombstone(key)
            continue
        added = {k[len(prefix) :]: v for k, v in payload.items() if k.startswith(prefix)}
        row = {k: v for k, v in payload.items() if not k.startswith(prefix)}
        deleted = str(added.get("deleted")).lower() == "true" or added.get("op") == "d"
        position = (1, int(payload[order_field]))
        table.apply(key, position, None if deleted else row, ties_apply=True)
    return {
        topic: {key: row for key, (_, row) in table.rows.items() if row is not None}
        for topic, table in tables.items()
    }
