"""Decoder of generic CDC JSON: events of producers that are not Debezium.

A message value is one JSON object (an event), or, with ``records_field``, an object
whose ``records_field`` member is an array of events. An event is a flat JSON object:
the row's columns plus an op field (``op_field``, whose value is one of the configured
insert / update / delete values) and an order field (``order_field``: newest wins, see
:mod:`.order`). The order field stays a row column; the op field does not.

Every event becomes one row of the change batch (:mod:`engine.model`): ``_cdc_op`` is
``c`` / ``u`` / ``d``, ``(_cdc_pos, _cdc_pos_sub)`` the encoded order value, Kafka
partition and offset as read, ``_cdc_by_field`` true (two events of a key with equal
order values are two changes: the later Kafka offset wins). The record key is
``key_fields`` taken from the event (else from the message key, a JSON object); without
``key_fields`` the message key's members are the key fields. Deletes carry the key fields only.

Images: with ``images = "full"`` a column an event does not carry is null. With
``"partial"`` it is unchanged: the batch then has, for every non-key column ``c``, the
hidden columns ``_cdc_pos__c`` / ``_cdc_sub__c`` holding the event's position where the
event carries ``c`` and null where it does not, plus ``_cdc_floor_pos`` /
``_cdc_floor_sub`` (null here; the merge keeps the row's newest delete in them). The
merge (:mod:`engine.merge.partial`) lets the newest value of each column win.

Types are the JSON types (int64, float64, bool, string, nested); integers and fractions
in one column give float64; a column whose values disagree otherwise becomes JSON text
(noted). A column that is null in every event of the batch is left out (it is added once
a value arrives, so its type comes from a real value).

Bad messages (quarantined with their coordinates): invalid JSON, a value that is not an
object, a missing or non-array ``records_field``, a missing op field or unknown op value,
a missing or unparsable order value, a missing key field, a field name that starts with
``_cdc_`` or ``_hoodie_``. One bad event makes its whole message bad. Null values (Kafka
tombstones, e.g. from log compaction) carry no order value and are ignored (counted).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from engine.config import CdcJsonConfig
from engine.decode.cdc_json.order import OrderError, encode_order
from engine.decode.records import RecordBatch
from engine.decode.result import BadMessage, DecodeResult
from engine.decode.text import LONE_SURROGATE, holds_lone_surrogate
from engine.model import (
    BY_FIELD,
    FLOOR_POS,
    FLOOR_SUB,
    GTID,
    KEY,
    OFFSET,
    OP,
    OP_CREATE,
    OP_DELETE,
    OP_UPDATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
    TX_ID,
    column_pos,
    column_sub,
)

_RESERVED_PREFIXES = ("_cdc_", "_hoodie_")

#: A cdc-json decoder for one table's settings.
TableSettings = Callable[[str], CdcJsonConfig]


class _Bad(Exception):
    """One message cannot be decoded (the reason is the message)."""


def _scalar_text(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return value
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return repr(value)  # what json.dumps writes for a float
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def key_text(fields: Sequence[str], values: Sequence[Any]) -> str:
    """The Hudi record key: the value for one field, ``f1:v1,f2:v2`` for several
    (``__null__`` / ``__empty__`` for null and empty parts), as the Debezium decoder
    writes it."""
    if len(fields) == 1:
        return "__null__" if values[0] is None else _scalar_text(values[0])
    parts = []
    for name, value in zip(fields, values, strict=True):
        text = "__null__" if value is None else _scalar_text(value)
        parts.append(f"{name}:{text or '__empty__'}")
    return ",".join(parts)


def _column(values: list[Any], notes: list[str], name: str) -> pa.Array:
    """An Arrow column from JSON values (ints with fractions: float64; otherwise
    disagreeing types: JSON text)."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        notes.append(f"column {name!r} holds values of different JSON types: stored as JSON text")
        return pa.array(
            [None if v is None else json.dumps(v, ensure_ascii=False) for v in values],
            pa.string(),
        )
    if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):  # pragma: no cover
        return arr.cast(pa.string())
    return arr


class CdcJsonDecoder:
    """The ``cdc-json`` decoder of a :class:`~engine.decode.records.RecordBatch`.

    Args:
        settings: The effective ``[source.cdc_json]`` settings of a topic (with its
            table's ``[tables.<name>]`` overrides applied).
    """

    def __init__(self, settings: TableSettings) -> None:
        self._settings = settings

    def __call__(self, records: RecordBatch) -> DecodeResult:
        keys, values = records.keys, records.values
        cfg = self._settings(records.topic)
        ops = {v: OP_CREATE for v in cfg.insert_values}
        ops.update({v: OP_UPDATE for v in cfg.update_values})
        ops.update({v: OP_DELETE for v in cfg.delete_values})
        rows: list[tuple[int, str, str, int, int, int | None, dict[str, Any]]] = []
        bad: list[BadMessage] = []
        ignored = 0
        key_fields: list[str] = list(cfg.key_fields)
        for i in range(len(records)):
            value = values[i]
            if value is None:
                ignored += 1
                continue
            try:
                events = self._events(value, cfg)
                if not events:
                    ignored += 1
                    continue
                decoded = [self._event(ev, keys[i], cfg, ops, key_fields) for ev in events]
            except _Bad as exc:
                bad.append(records.bad(i, str(exc)))
                continue
            mismatch = next(
                (d[0] for d in decoded if key_fields and list(d[0]) != key_fields), None
            )
            if mismatch is not None:
                reason = (
                    f"key fields ({', '.join(mismatch)}) differ from the table's "
                    f"({', '.join(key_fields)}): set key_fields"
                )
                bad.append(records.bad(i, reason))
                continue
            for fields, text, op, pos, sub, ts, image in decoded:
                if not key_fields:
                    key_fields.extend(fields)
                rows.append((i, text, op, pos, sub, ts, image))
        if not rows:
            return DecodeResult(None, key_fields, bad, ignored)
        notes: list[str] = []
        batch = self._batch(rows, key_fields, records.partitions, records.offsets, cfg, notes)
        return DecodeResult(
            batch, key_fields, bad, ignored, key_field_sets=[tuple(key_fields)], notes=notes
        )

    @staticmethod
    def _events(value: bytes, cfg: CdcJsonConfig) -> list[dict[str, Any]]:
        try:
            obj = json.loads(value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Bad(f"not valid JSON ({exc})") from None
        if holds_lone_surrogate(value, obj):
            raise _Bad(LONE_SURROGATE)
        if not isinstance(obj, dict):
            raise _Bad(f"the value is a JSON {type(obj).__name__}, not an object (an event)")
        if not cfg.records_field:
            return [obj]
        events = obj.get(cfg.records_field)
        if not isinstance(events, list):
            raise _Bad(
                f"records_field {cfg.records_field!r} is "
                + ("missing" if cfg.records_field not in obj else "not an array of events")
            )
        for j, ev in enumerate(events):
            if not isinstance(ev, dict):
                raise _Bad(f"event {j} of {cfg.records_field!r} is not a JSON object")
        return events

    @staticmethod
    def _event(
        ev: dict[str, Any],
        raw_key: bytes | None,
        cfg: CdcJsonConfig,
        ops: dict[str, str],
        key_fields: list[str],
    ) -> tuple[list[str], str, str, int, int, int | None, dict[str, Any]]:
        if cfg.op_field not in ev:
            raise _Bad(f"the op field {cfg.op_field!r} is missing")
        op_value = ev[cfg.op_field]
        op = ops.get(op_value) if isinstance(op_value, str) else None
        if op is None:
            raise _Bad(
                f"unknown op value {op_value!r} in {cfg.op_field!r} (expected one of "
                f"{', '.join(repr(v) for v in ops)}; set insert_values / update_values / "
                "delete_values)"
            )
        if ev.get(cfg.order_field) is None:
            raise _Bad(f"the order field {cfg.order_field!r} is missing or null")
        try:
            pos, sub, ts = encode_order(ev[cfg.order_field], cfg.order_type)
        except OrderError as exc:
            raise _Bad(f"order field {cfg.order_field!r}: {exc}") from None
        names = "\0" + "\0".join(ev)
        if "\0_cdc_" in names or "\0_hoodie_" in names:
            name = next(n for n in ev if n.startswith(_RESERVED_PREFIXES))
            raise _Bad(f"field {name!r}: names starting with _cdc_ or _hoodie_ are reserved")
        fields = cfg.key_fields or key_fields
        key_obj: dict[str, Any] | None = None
        if raw_key is not None and (not fields or any(f not in ev for f in fields)):
            try:
                parsed = json.loads(raw_key)
            except (ValueError, UnicodeDecodeError):
                parsed = None
            if parsed is not None and holds_lone_surrogate(raw_key, parsed):
                raise _Bad(f"key: {LONE_SURROGATE}")
            key_obj = parsed if isinstance(parsed, dict) else None
        if not fields:
            if not key_obj:
                raise _Bad(
                    "no key: the message key is not a JSON object of key fields; set "
                    "key_fields in [source.cdc_json] or [tables.<name>]"
                )
            fields = list(key_obj)
        key_values = []
        for name in fields:
            if name in ev:
                key_values.append(ev[name])
            elif key_obj is not None and name in key_obj:
                key_values.append(key_obj[name])
            else:
                raise _Bad(f"the key field {name!r} is missing from the event and the key")
        if any(v is None or isinstance(v, dict | list) for v in key_values):
            raise _Bad(f"a key field ({', '.join(fields)}) is null or not a scalar")
        if op == OP_DELETE:
            image = dict(zip(fields, key_values, strict=True))
        else:
            image = dict(ev)
            del image[cfg.op_field]
            if key_obj is not None:
                image.update(zip(fields, key_values, strict=True))
        return list(fields), key_text(fields, key_values), op, pos, sub, ts, image

    @staticmethod
    def _batch(
        rows: list[tuple[int, str, str, int, int, int | None, dict[str, Any]]],
        key_fields: list[str],
        partitions: Sequence[int],
        offsets: Sequence[int],
        cfg: CdcJsonConfig,
        notes: list[str],
    ) -> pa.Table:
        m = len(rows)
        pos = [r[3] for r in rows]
        sub = [r[4] for r in rows]
        out: dict[str, pa.Array] = {
            KEY: pa.array([r[1] for r in rows], pa.string()),
            OP: pa.array([r[2] for r in rows], pa.string()),
            POS: pa.array(pos, pa.int64()),
            POS_SUB: pa.array(sub, pa.int64()),
            SOURCE_TS: pa.array([r[5] for r in rows], pa.int64()),
            PARTITION: pa.array([int(partitions[r[0]]) for r in rows], pa.int32()),
            OFFSET: pa.array([int(offsets[r[0]]) for r in rows], pa.int64()),
            TX_ID: pa.nulls(m, pa.string()),
            GTID: pa.nulls(m, pa.string()),
        }
        names: list[str] = list(key_fields)
        seen = set(names)
        for r in rows:
            for name in r[6]:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
        partial = cfg.images == "partial"
        hidden: dict[str, pa.Array] = {}
        for name in names:
            present = [name in r[6] for r in rows]
            values = [r[6].get(name) for r in rows]
            if name not in key_fields and all(v is None for v in values) and not partial:
                continue  # never a value: the column arrives with its first value
            col = _column(values, notes, name)
            if pa.types.is_null(col.type) and name not in key_fields:
                col = None  # only nulls so far: positions are kept, the column comes later
            if col is not None:
                out[name] = col
            if partial and name not in key_fields:
                mask = [p and r[2] != OP_DELETE for p, r in zip(present, rows, strict=True)]
                hidden[column_pos(name)] = pa.array(
                    [p if k else None for p, k in zip(pos, mask, strict=True)], pa.int64()
                )
                hidden[column_sub(name)] = pa.array(
                    [s if k else None for s, k in zip(sub, mask, strict=True)], pa.int64()
                )
        if partial:
            out.update(hidden)
            out[FLOOR_POS] = pa.nulls(m, pa.int64())
            out[FLOOR_SUB] = pa.nulls(m, pa.int64())
        out[BY_FIELD] = pa.repeat(pa.scalar(True), m)  # equal order values: the later wins
        return pa.table(out)
