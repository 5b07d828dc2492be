"""Flattened events (``source.format = "debezium-flat"``) as Debezium envelopes.

Rows written by Debezium's ``ExtractNewRecordState`` SMT, the row's columns plus the fields
the SMT adds (``__op``, ``__deleted``, ``__lsn``, ``__source_ts_ms``, ``__table``, ... with
``source.flattened.field_prefix``). The added fields are taken out of the row and become
the envelope's ``op`` and ``source`` block: ``__lsn`` (``__source_lsn``) gives a
PostgreSQL position, ``__file`` + ``__pos`` (+ ``__row``) a MySQL binlog position, else
``source.flattened.order_field`` is the position, else (opt-in) the Kafka offset; events
positioned by these two are marked ``_cdc_by_field`` (an equal value is another change,
not a replay: :mod:`engine.merge.positions`). A delete written in ``rewrite`` mode
(``__deleted = "true"``, the row being the before image) becomes ``op = "d"``; a null
value stays a Kafka tombstone (``drop`` / ``none`` modes delete through the tombstone of
the key). A value that already is a full envelope passes unchanged. With
``schemas.enable=true`` the row's Connect schema becomes the ``before``/``after`` schema,
so logical types are read exactly as in envelopes.

Two paths: :class:`Flattener` rewrites one parsed record (``json.loads``), used where a
record's key is rewritten too (:mod:`engine.decode.identity`); the bulk path
(:func:`wrap_flat` wraps each row as ``{"op":"c","after":<row>}`` by byte operations,
the Arrow reader parses them with the added fields as columns, and :func:`settle_flat`
turns those into op, positions and source time with Arrow kernels) serves every other
flattened topic, several times faster.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.jsonconverter import BadRecord, ConvertedSchemas, Unwrapper, compact
from engine.decode.positions import source_columns
from engine.model import BY_FIELD, OP, OP_TOMBSTONE, POS, POS_SUB, SOURCE_TS

if TYPE_CHECKING:
    from engine.config import FlattenedConfig

_SOURCE_FIELDS = (
    ("connector", "string"), ("lsn", "int64"), ("sequence", "string"), ("file", "string"),
    ("pos", "int64"), ("row", "int64"), ("snapshot", "string"), ("ts_ms", "int64"),
    ("db", "string"), ("schema", "string"), ("table", "string"),
)  # fmt: skip
_SOURCE_SCHEMA = {
    "type": "struct",
    "optional": True,
    "field": "source",
    "name": "cdcctl.flattened.Source",
    "fields": [{"type": t, "optional": True, "field": n} for n, t in _SOURCE_FIELDS],
}
_MAX_POSITION = (1 << 62) - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


NO_ORDER_REASON = (
    "flattened event without an ordering field: it has no {p}lsn (PostgreSQL) and no "
    "{p}file + {p}pos (MySQL), so only its arrival order is known. Add the SMT's "
    "add.fields=lsn (PostgreSQL) or file,pos,row (MySQL), or set "
    "source.flattened.order_field to a column that grows with every change, or accept "
    "arrival order with source.flattened.arrival_order = true "
    '(docs/guide/formats.md "Flattened events")'
)


def _order_value(value: Any, name: str) -> int:
    """An ordering field's value as a non-negative integer below 2**62."""
    out: int | None = None
    if isinstance(value, bool) or value is None:
        out = None
    elif isinstance(value, int):
        out = value
    elif isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            out = int(text)
        else:
            try:
                when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                out = None
            else:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=dt.UTC)
                delta = when - _EPOCH
                out = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if out is None or not 0 <= out <= _MAX_POSITION:
        raise BadRecord(
            f"ordering field {name!r} holds {value!r}: it must be an integer from 0 to 2**62 "
            "or an ISO timestamp"
        )
    return out


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Flattener:
    """Flattened row -> Debezium envelope (the schema conversion is cached)."""

    def __init__(self, settings: FlattenedConfig) -> None:
        self.prefix = settings.field_prefix
        self.order_field = settings.order_field
        self.arrival = settings.arrival_order
        #: Whether some events may be positioned by an order value (``_cdc_by_field``).
        self.by_field = settings.order_field is not None or settings.arrival_order
        self._cache = ConvertedSchemas()

    def schema(self, schema: dict) -> dict:
        return self._cache.get(schema, self._convert)

    def _convert(self, schema: dict) -> dict:
        fields_in = schema.get("fields")
        names = {
            f.get("field")
            for f in (fields_in if isinstance(fields_in, list) else [])
            if isinstance(f, dict) and isinstance(f.get("field"), str)
        }  # (a malformed schema is the decoder's to refuse, with its reason)
        if "op" in names:
            return schema  # an envelope schema: not flattened
        fields = [
            f
            for f in (fields_in if isinstance(fields_in, list) else [])
            if isinstance(f, dict) and not str(f.get("field", "")).startswith(self.prefix)
        ]
        row = {k: v for k, v in schema.items() if k not in ("field", "fields", "optional")}
        row["fields"] = fields
        name = str(schema.get("name") or "row")
        return {
            "type": "struct",
            "optional": False,
            "name": name + ".Envelope",
            "fields": [
                {**row, "optional": True, "field": "before"},
                {**row, "optional": True, "field": "after"},
                _SOURCE_SCHEMA,
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
            ],
        }

    def envelope(self, payload: Any, offset: int) -> tuple[dict, bool]:
        """The envelope of a flattened row, and whether its position is an order value
        (``order_field``, or the Kafka offset with ``arrival_order``) rather than an LSN
        or binlog position."""
        if not isinstance(payload, dict):
            raise BadRecord(f"value is not a JSON object but {type(payload).__name__}")
        p = self.prefix
        if "op" in payload and ("after" in payload or "source" in payload):
            if not any(k.startswith(p) for k in payload):
                return payload, False  # an unflattened envelope on a flattened topic
        meta = {k[len(p) :]: v for k, v in payload.items() if k.startswith(p)}
        row = {k: v for k, v in payload.items() if not k.startswith(p)}

        def get(*names: str) -> Any:
            for name in names:
                if meta.get(name) is not None:
                    return meta[name]
            return None

        op = get("op")
        if _text_or_none(get("deleted")) == "true":
            op = "d"
        elif op is None:
            op = "u"  # no __op: an upsert (insert and update look alike)
        elif op not in ("c", "u", "r", "d"):
            raise BadRecord(f"{p}op is {op!r}, not one of c, u, r, d")
        snapshot = _text_or_none(get("snapshot", "source_snapshot"))
        if snapshot is None:
            snapshot = "true" if op == "r" else "false"
        source: dict[str, Any] = {
            "snapshot": snapshot,
            "ts_ms": get("source_ts_ms", "ts_ms"),
            "db": _text_or_none(get("db", "source_db")),
            "schema": _text_or_none(get("schema", "source_schema")),
            "table": _text_or_none(get("table", "source_table")),
        }
        lsn = get("lsn", "source_lsn")
        binlog_file, binlog_pos = get("file", "source_file"), get("pos", "source_pos")
        if lsn is not None:
            source["connector"] = "postgresql"
            source["lsn"] = lsn
            source["sequence"] = _text_or_none(get("sequence", "source_sequence"))
        elif binlog_file is not None and binlog_pos is not None:
            source["connector"] = "mysql"
            source.update(file=binlog_file, pos=binlog_pos, row=get("row", "source_row") or 0)
        elif self.order_field is not None:
            name = self.order_field
            value = payload.get(name)
            if value is None:
                raise BadRecord(
                    f"ordering field {name!r} (source.flattened.order_field) is missing"
                )
            source["lsn"] = _order_value(value, name)
        elif self.arrival:
            source["lsn"] = offset
        else:
            raise BadRecord(NO_ORDER_REASON.format(p=p))
        by_field = "connector" not in source
        return {"op": op, "before": None, "after": row, "source": source, "ts_ms": None}, by_field


_LEGACY_TOMBSTONE = b'{"schema":null,"payload":null}'
_OPS = pa.array(["c", "u", "r", "d"], pa.string())
_DIGITS = r"^[0-9]{1,19}$"


def wrap_flat(
    values: Sequence[bytes | None], unwrap: Unwrapper
) -> tuple[list[bytes | None], list[dict | None]] | None:
    """Each flattened value as ``{"op":"c","after":<row>}`` by byte operations (the row
    keeps its added fields; :func:`settle_flat` turns them into the envelope's parts).
    None when a record needs the per-record path (an envelope, an unusual layout)."""
    out: list[bytes | None] = []
    schemas: list[dict | None] = []
    for raw in values:
        if raw is None or raw == _LEGACY_TOMBSTONE:
            out.append(None)
            schemas.append(None)
            continue
        if type(raw) is not bytes or b'"after"' in raw or b'"source"' in raw:
            return None
        schema = None
        body = raw
        for prefix, known in unwrap.prefixes.items():
            if raw.startswith(prefix) and raw.endswith(b"}"):
                schema, body = known, raw[len(prefix) : -1]
                break
        else:
            found = unwrap._prefix(raw) if raw.endswith(b"}") else None
            if found is not None:
                schema, body = found, raw[len(unwrap._last) : -1]
            elif b'"payload"' in raw:
                # Not the compact JsonConverter layout (pretty-printed, members reordered):
                # parse it once to find schema and payload.
                try:
                    schema, payload = unwrap(raw)
                except ValueError:
                    return None
                if payload is None:
                    out.append(None)
                    schemas.append(None)
                    continue
                body = compact(payload).encode("utf-8", "surrogatepass")
        stripped = body.strip()
        if stripped == b"null":
            out.append(None)
            schemas.append(None)
            continue
        if not stripped.startswith(b"{"):
            return None
        out.append(b'{"op":"c","after":' + body + b"}")
        schemas.append(schema)
    return out, schemas


def bulk_envelope_schema(schema: dict) -> dict:
    return {
        "type": "struct",
        "optional": False,
        "name": str(schema.get("name") or "row") + ".Envelope",
        "fields": [
            {"type": "string", "optional": False, "field": "op"},
            {**{k: v for k, v in schema.items() if k != "field"}, "optional": True,
             "field": "after"},
        ],
    }  # fmt: skip


def _as_text(arr: pa.ChunkedArray | pa.Array | None) -> pa.Array | None:
    if arr is None:
        return None
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if pa.types.is_null(arr.type):
        return None
    if pa.types.is_boolean(arr.type) or pa.types.is_integer(arr.type):
        return arr.cast(pa.string())
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr.cast(pa.string())
    return None


def _as_int(arr: pa.ChunkedArray | pa.Array | None) -> tuple[pa.Array | None, pa.Array | None]:
    """(int64 values, mask of present values that are not integers)."""
    if arr is None:
        return None, None
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if pa.types.is_null(arr.type):
        return None, None
    if pa.types.is_integer(arr.type):
        return arr.cast(pa.int64()), None
    if pa.types.is_timestamp(arr.type):
        unit = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}[arr.type.unit]
        raw = arr.cast(pa.timestamp(arr.type.unit)).cast(pa.int64())
        if unit is None:
            return pc.divide(raw, pa.scalar(1000, pa.int64())), None
        return pc.multiply(raw, pa.scalar(unit, pa.int64())), None
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        text = arr.cast(pa.string())
        digits = pc.match_substring_regex(text, _DIGITS)
        iso = pc.if_else(pc.invert(pc.fill_null(digits, False)), text, None)
        try:
            as_int = pc.if_else(digits, text, None).cast(pa.int64())
            stamp = pc.cast(
                pc.replace_substring_regex(iso, r"Z$", "+00:00"), pa.timestamp("us", "UTC")
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # Not all ISO timestamps, or digits beyond int64: the slow path says which.
            return None, pc.is_valid(arr)
        micros = stamp.cast(pa.int64())
        return pc.coalesce(as_int, micros), None
    return None, pc.is_valid(arr)


def _constant(text: str) -> Callable[[int], str]:
    return lambda _i: text


def settle_flat(
    batch: pa.Table, settings: FlattenedConfig, offsets: pa.Array, indices: list[int]
) -> tuple[pa.Table, dict[int, str], dict[str, str] | None] | None:
    """Turn the added fields of bulk-decoded rows into op, positions and source time.
    Returns the batch (added fields dropped), bad rows by input index, the source table;
    None when a value needs the per-record path to say exactly what is wrong."""
    p = settings.field_prefix
    n = batch.num_rows
    names = set(batch.column_names)

    def col(*members: str) -> pa.Array | pa.ChunkedArray | None:
        found = [batch.column(p + m) for m in members if p + m in names]
        return found[0] if found else None

    tomb = pc.fill_null(pc.equal(batch.column(OP), OP_TOMBSTONE), False)
    op_text = _as_text(col("op"))
    deleted = _as_text(col("deleted"))
    op = op_text if op_text is not None else pa.nulls(n, pa.string())
    if deleted is not None:
        op = pc.if_else(pc.fill_null(pc.equal(deleted, "true"), False), "d", op)
    op = pc.fill_null(op, "u")
    bad_op = pc.and_(pc.invert(tomb), pc.invert(pc.is_in(op, value_set=_OPS)))

    lsn, lsn_bad = _as_int(col("lsn", "source_lsn"))
    pos, pos_bad = _as_int(col("pos", "source_pos"))
    row, row_bad = _as_int(col("row", "source_row"))
    ts, ts_bad = _as_int(col("source_ts_ms", "ts_ms"))
    binlog = _as_text(col("file", "source_file"))
    if any(m is not None for m in (lsn_bad, pos_bad, row_bad, ts_bad)):
        return None
    nulls = pa.nulls(n, pa.int64())
    lsn = nulls if lsn is None else lsn
    pos = nulls if pos is None else pos
    binlog = pa.nulls(n, pa.string()) if binlog is None else binlog
    has_lsn = pc.is_valid(lsn)
    has_binlog = pc.and_(pc.is_valid(binlog), pc.is_valid(pos))
    ordered = pc.or_(has_lsn, has_binlog)
    order = lsn
    missing_order = None
    if settings.order_field is not None:
        name = settings.order_field
        if name not in names:
            value = nulls
        else:
            value, value_bad = _as_int(batch.column(name))
            if value_bad is not None or value is None:
                return None
        need = pc.invert(ordered)
        if pc.any(
            pc.and_(need, pc.or_(pc.less(value, 0), pc.greater(value, (1 << 62) - 1)))
        ).as_py():
            return None  # out of range: the per-record path names the value
        missing_order = pc.and_(need, pc.is_null(value))
        order = pc.if_else(has_lsn, lsn, value)
    elif settings.arrival_order:
        order = pc.if_else(has_lsn, lsn, offsets)
    else:
        missing_order = pc.invert(ordered)
    snapshot = _as_text(col("snapshot", "source_snapshot"))
    default_snapshot = pc.if_else(pc.equal(op, "r"), "true", "false")
    snapshot = default_snapshot if snapshot is None else pc.coalesce(snapshot, default_snapshot)
    connector = pc.if_else(
        has_lsn, "postgresql", pc.if_else(has_binlog, "mysql", pa.scalar(None, pa.string()))
    )
    use_binlog = pc.and_(pc.invert(has_lsn), has_binlog)
    source = pa.StructArray.from_arrays(
        [
            connector,
            pc.if_else(use_binlog, nulls, order),
            _as_text(col("sequence", "source_sequence")) or pa.nulls(n, pa.string()),
            pc.if_else(use_binlog, binlog, pa.scalar(None, pa.string())),
            pc.if_else(use_binlog, pos, nulls),
            pc.if_else(use_binlog, pc.fill_null(row, 0) if row is not None else 0, nulls),
            snapshot,
            ts if ts is not None else nulls,
        ],
        names=["connector", "lsn", "sequence", "file", "pos", "row", "snapshot", "ts_ms"],
    )
    cols = source_columns(source, n, None)
    bad: dict[int, str] = {}
    index = indices

    def flag(mask: pa.Array | None, reason: Callable[[int], str]) -> None:
        if mask is None:
            return
        mask = pc.and_(pc.fill_null(mask, False), pc.invert(tomb))
        if pc.any(mask).as_py():
            for i in pc.indices_nonzero(mask).to_pylist():
                bad.setdefault(index[i], reason(i))

    ops = op.to_pylist() if pc.any(bad_op).as_py() else []
    flag(bad_op, lambda i: f"{p}op is {ops[i]!r}, not one of c, u, r, d")
    if missing_order is not None:
        if settings.order_field is not None:
            name = settings.order_field
            flag(
                missing_order,
                lambda i: f"ordering field {name!r} (source.flattened.order_field) is missing",
            )
        else:
            flag(missing_order, lambda i: NO_ORDER_REASON.format(p=p))
    for mask, reason in cols.bad:
        flag(mask, _constant(reason))
    out = batch
    out = out.set_column(out.schema.get_field_index(OP), OP, pc.if_else(tomb, OP_TOMBSTONE, op))
    for name, value in ((POS, cols.pos), (POS_SUB, cols.pos_sub), (SOURCE_TS, cols.source_ts_ms)):
        i = out.schema.get_field_index(name)
        # Tombstones keep their null positions (the merge gives them their key's).
        out = out.set_column(i, name, pc.if_else(tomb, out.column(name), value).cast(pa.int64()))
    out = out.drop_columns([c for c in out.column_names if c.startswith(p)])
    if settings.order_field is not None or settings.arrival_order:
        # Positioned by the order value (or offset), not an LSN or binlog position.
        out = out.append_column(BY_FIELD, pc.and_(pc.invert(ordered), pc.invert(tomb)))
    source_table = None
    first = pc.indices_nonzero(pc.invert(tomb))
    if len(first):
        j = first[0].as_py()
        found = {
            k: v
            for k, v in (
                ("connector", connector[j].as_py()),
                ("db", (_as_text(col("db", "source_db")) or pa.nulls(n, pa.string()))[j].as_py()),
                (
                    "schema",
                    (_as_text(col("schema", "source_schema")) or pa.nulls(n, pa.string()))[
                        j
                    ].as_py(),
                ),
                (
                    "table",
                    (_as_text(col("table", "source_table")) or pa.nulls(n, pa.string()))[j].as_py(),
                ),
            )
            if v is not None
        }
        source_table = found or None
    return out, bad, source_table
