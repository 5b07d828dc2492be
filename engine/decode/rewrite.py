"""Per-record rewrites in front of the Debezium JSON decoder.

Two shapes of change stream become ordinary Debezium envelopes here, record by record, and
then go through :func:`engine.decode.debezium_json.decode_debezium_json` like any other:

* **Flattened events** (``source.format = "debezium-flat"``): rows written by Debezium's
  ``ExtractNewRecordState`` SMT, the row's columns plus the fields the SMT adds (``__op``,
  ``__deleted``, ``__lsn``, ``__source_ts_ms``, ``__table``, ... with
  ``source.flattened.field_prefix``). The added fields are taken out of the row and become
  the envelope's ``op`` and ``source`` block: ``__lsn`` (``__source_lsn``) gives a
  PostgreSQL position, ``__file`` + ``__pos`` (+ ``__row``) a MySQL binlog position, else
  ``source.flattened.order_field`` is the position, else (opt-in) the Kafka offset; events
  positioned by these two are marked ``_cdc_by_field`` (an equal value is another change,
  not a replay: :mod:`engine.merge.positions`). A
  delete written in ``rewrite`` mode (``__deleted = "true"``, the row being the before
  image) becomes ``op = "d"``; a null value stays a Kafka tombstone (``drop`` / ``none``
  modes delete through the tombstone of the key). A value that already is a full envelope
  passes unchanged. With ``schemas.enable=true`` the row's Connect schema becomes the
  ``before``/``after`` schema, so logical types are read exactly as in envelopes.
* **Tables configured** ``[tables.<name>] key_fields = [...]``: the record key is rebuilt
  from those row fields (after image, or the before image of a delete); and
  ``keyless = "full-row"``: the record key is a hash of the row's values (nulls left out,
  so a column added later does not change the identity of older rows), ``_cdc_row_hash``
  and ``_cdc_copies`` are added to the row, and an update becomes a delete of its before
  image plus an insert of its after image (see :mod:`engine.merge.rules` for the counts).

Flattened topics without such a table setting take a bulk path (:func:`_wrap_flat`
wraps each row as ``{"op":"c","after":<row>}`` by byte operations, the Arrow reader parses
them with the added fields as columns, and :func:`_settle_flat` turns those into op,
positions and source time with Arrow kernels). Everything else here parses each record
once in Python (``json.loads`` / ``json.dumps``), several times slower than the bulk
decoder; ``BULK = False`` forces that path (tests check both agree).

Every input record ends in exactly one of batch / bad / ignored: a record split in two
(an update of a full-row table) is reported once if either half is bad, and its other
half is taken out of the batch.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.debezium_json.split import fingerprint
from engine.decode.positions import source_columns
from engine.decode.records import Decoder, RecordBatch
from engine.decode.result import DecodeResult
from engine.model import (
    BY_FIELD,
    COPIES,
    OFFSET,
    OP,
    OP_TOMBSTONE,
    POS,
    POS_SUB,
    ROW_HASH,
    SOURCE_TS,
)

if TYPE_CHECKING:
    from engine.config import Config, FlattenedConfig, TableConfig

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


class _Bad(Exception):
    """A record that cannot be rewritten: its reason."""


def _compact(obj: Any) -> str:
    """Compact JSON text. Encode it with ``surrogatepass``: a lone surrogate escape
    (``"\\ud800"``) in a message then stays invalid UTF-8, which the JSON decoder
    quarantines as a bad message, instead of raising here."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


_HEAD = b'{"schema":'
_PAYLOAD = ',"payload":'
_DECODER = json.JSONDecoder()


class _Unwrapper:
    """Splits JsonConverter records into (schema, payload), parsing each distinct schema
    once: records of one table version share the byte prefix ``{"schema":<S>,"payload":``
    (as in :mod:`engine.decode.debezium_json.split`)."""

    def __init__(self) -> None:
        self.prefixes: dict[bytes, dict | None] = {}

    def __call__(self, raw: bytes) -> tuple[dict | None, Any]:
        """``(Connect schema or None, payload)`` (raises ValueError if not JSON)."""
        if raw.startswith(_HEAD) and raw.endswith(b"}"):
            for prefix, schema in self.prefixes.items():
                if raw.startswith(prefix):
                    try:
                        return schema, json.loads(raw[len(prefix) : -1])
                    except ValueError:
                        break  # not the compact wrapper after all: parse it whole
            else:
                found = self._prefix(raw)
                if found is not None:
                    try:
                        return found, json.loads(raw[len(self._last) : -1])
                    except ValueError:
                        pass
        obj = json.loads(raw)
        if isinstance(obj, dict) and "payload" in obj and set(obj) <= {"schema", "payload"}:
            return _schema_or_none(obj.get("schema")), obj["payload"]
        return None, obj

    def _prefix(self, raw: bytes) -> dict | None:
        try:
            text = raw.decode("utf-8")
            schema, end = _DECODER.raw_decode(text, len(_HEAD))
        except ValueError:  # UnicodeDecodeError included
            return None
        if not text.startswith(_PAYLOAD, end):
            return None
        schema = _schema_or_none(schema)
        if schema is None:
            return None  # e.g. the legacy {"schema":null,"payload":null} tombstone
        self._last = text[: end + len(_PAYLOAD)].encode("utf-8")
        if len(self.prefixes) >= 64:
            self.prefixes.clear()
        self.prefixes[self._last] = schema
        return schema


def _schema_or_none(schema: Any) -> dict | None:
    return schema if isinstance(schema, dict) and "type" in schema else None


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
        raise _Bad(
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


class _SchemaCache:
    """Converted Connect schemas. Records of one table version share one schema object
    (:class:`_Unwrapper`), so the object's id finds it; the object is kept referenced, so
    its id cannot be reused while cached. Other objects are found by fingerprint."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[dict, dict]] = {}
        self.by_fp: dict[str, dict] = {}

    def get(self, schema: dict, convert: Callable[[dict], dict]) -> dict:
        hit = self.by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        if len(self.by_id) >= 256:
            self.by_id.clear()
            self.by_fp.clear()
        fp = fingerprint(schema)
        out = self.by_fp.get(fp)
        if out is None:
            out = self.by_fp[fp] = convert(schema)
        self.by_id[id(schema)] = (schema, out)
        return out


class _Flattener:
    """Flattened row -> Debezium envelope (the schema conversion is cached)."""

    def __init__(self, settings: FlattenedConfig) -> None:
        self.prefix = settings.field_prefix
        self.order_field = settings.order_field
        self.arrival = settings.arrival_order
        #: Whether some events may be positioned by an order value (``_cdc_by_field``).
        self.by_field = settings.order_field is not None or settings.arrival_order
        self._cache = _SchemaCache()

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
            raise _Bad(f"value is not a JSON object but {type(payload).__name__}")
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
            raise _Bad(f"{p}op is {op!r}, not one of c, u, r, d")
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
                raise _Bad(f"ordering field {name!r} (source.flattened.order_field) is missing")
            source["lsn"] = _order_value(value, name)
        elif self.arrival:
            source["lsn"] = offset
        else:
            raise _Bad(NO_ORDER_REASON.format(p=p))
        by_field = "connector" not in source
        return {"op": op, "before": None, "after": row, "source": source, "ts_ms": None}, by_field


def _row_hash(image: dict) -> str:
    values = {k: v for k, v in image.items() if v is not None and k not in (ROW_HASH, COPIES)}
    return hashlib.sha256(
        _compact(dict(sorted(values.items()))).encode("utf-8", "surrogatepass")
    ).hexdigest()[:32]


def _with_identity_columns(schema: dict) -> dict:
    """Envelope schema whose before/after structs also hold ``_cdc_row_hash``/``_cdc_copies``."""
    fields = []
    for f in schema.get("fields") or []:
        if isinstance(f, dict) and f.get("field") in ("before", "after") and f.get("fields"):
            members = [m for m in f["fields"] if m.get("field") not in (ROW_HASH, COPIES)]
            members += [
                {"type": "string", "optional": True, "field": ROW_HASH},
                {"type": "int64", "optional": True, "field": COPIES},
            ]
            f = {**f, "fields": members}
        fields.append(f)
    return {**schema, "fields": fields}


class _Identity:
    """Record keys of a table with ``key_fields`` or ``keyless = "full-row"``."""

    def __init__(self, table: str, tc: TableConfig) -> None:
        self.table = table
        self.key_fields = tc.key_fields
        self.full_row = tc.keyless == "full-row"
        self._cache = _SchemaCache()

    def schema(self, schema: dict | None) -> dict | None:
        if schema is None or not self.full_row:
            return schema
        return self._cache.get(schema, _with_identity_columns)

    def rekey(self, env: Any) -> list[tuple[dict, dict]]:
        """``[(record key, envelope)]`` for one envelope (two for a full-row update)."""
        if not isinstance(env, dict) or env.get("op") not in ("c", "u", "r", "d"):
            return []  # not a row change: the decoder settles it (ignored or bad)
        op = env["op"]
        before, after = env.get("before"), env.get("after")
        if op == "d":
            image = before if isinstance(before, dict) else after
        else:
            image = after
        if not isinstance(image, dict):
            which = "before" if op == "d" else "after"
            raise _Bad(
                f"table {self.table}: a {op!r} event without a {which} image cannot be keyed "
                "by its row (a delete needs REPLICA IDENTITY FULL / binlog_row_image=FULL)"
            )
        if self.key_fields is not None:
            missing = [f for f in self.key_fields if f not in image]
            if missing:
                raise _Bad(
                    f"table {self.table}: key field(s) {', '.join(missing)} "
                    f"(tables.{self.table}.key_fields) not in the row image"
                )
            key = {f: image[f] for f in self.key_fields}
            if op == "d" and not isinstance(after, dict):
                env = {**env, "after": image}  # the key columns of the delete's row
            return [(key, env)]
        # full-row
        if op in ("c", "r"):
            h = _row_hash(image)
            return [({ROW_HASH: h}, {**env, "after": {**image, ROW_HASH: h, COPIES: 1}})]
        if op == "d":
            h = _row_hash(image)
            return [({ROW_HASH: h}, {**env, "after": {**image, ROW_HASH: h, COPIES: -1}})]
        if not isinstance(before, dict):
            raise _Bad(
                f'table {self.table} (keyless = "full-row"): an update without its before '
                "image cannot say which row changed; set REPLICA IDENTITY FULL (PostgreSQL) "
                "or binlog_row_image=FULL (MySQL); flattened events never carry one"
            )
        old, new = _row_hash(before), _row_hash(image)
        if old == new:  # nothing changed: the row keeps its count
            return [({ROW_HASH: new}, {**env, "after": {**image, ROW_HASH: new, COPIES: 0}})]
        gone = {**env, "op": "d", "after": {**before, ROW_HASH: old, COPIES: -1}}
        came = {**env, "after": {**image, ROW_HASH: new, COPIES: 1}}
        return [({ROW_HASH: old}, gone), ({ROW_HASH: new}, came)]


def _snapshot_rows_apart(batch: pa.Table, offsets: pa.Array) -> pa.Table:
    """Full-row tables: the rows of one snapshot share a source position (its LSN or
    binlog coordinates), so equal rows would look like replays of each other. A snapshot
    row's sub-position becomes its Kafka offset: still before every streamed change (the
    streamed bit of ``_cdc_pos`` is clear), and apart from its equal neighbours."""
    is_read = pc.fill_null(pc.equal(batch.column(OP), "r"), False)
    if not pc.any(is_read).as_py():
        return batch
    i = batch.schema.get_field_index(POS_SUB)
    sub = pc.if_else(is_read, offsets, batch.column(POS_SUB)).cast(pa.int64())
    return batch.set_column(i, POS_SUB, sub)


def _encode(schema: dict | None, payload: Any, cache: dict[int, tuple[dict, str]]) -> bytes:
    if schema is None:
        return _compact(payload).encode("utf-8", "surrogatepass")
    hit = cache.get(id(schema))
    if hit is None or hit[0] is not schema:  # the object is held, so its id is its own
        hit = cache[id(schema)] = (schema, '{"schema":' + _compact(schema) + ',"payload":')
    return (hit[1] + _compact(payload) + "}").encode("utf-8", "surrogatepass")


def rewriting_decoder(
    inner: Decoder,
    flattened: FlattenedConfig | None,
    identities: Callable[[str], _Identity | None],
) -> Decoder:
    """A decoder that rewrites records (flattened -> envelope, record keys) before ``inner``.

    Args:
        inner: The Debezium JSON decoder.
        flattened: Settings when the topics hold flattened events; None for envelopes.
        identities: The key rewrite of a topic's table, or None when it has none.
    """
    flattener = _Flattener(flattened) if flattened is not None else None
    unwrap = _Unwrapper()

    bulk_schemas = _SchemaCache()

    def bulk(records: RecordBatch) -> DecodeResult | None:
        assert flattened is not None
        values, offsets = records.values, records.offsets
        wrapped = _wrap_flat(values, unwrap)
        if wrapped is None:
            return None
        heads: dict[int, tuple[dict, bytes]] = {}
        envelopes: list[bytes | None] = []
        for value, schema in zip(*wrapped, strict=True):
            if value is None or schema is None:
                envelopes.append(value)
                continue
            env_schema = bulk_schemas.get(schema, _bulk_schema)
            hit = heads.get(id(env_schema))
            if hit is None or hit[0] is not env_schema:
                head = ('{"schema":' + _compact(env_schema) + ',"payload":').encode(
                    "utf-8", "surrogatepass"
                )
                hit = heads[id(env_schema)] = (env_schema, head)
            envelopes.append(hit[1] + value + b"}")
        n = len(values)
        result = inner(
            RecordBatch(records.topic, records.keys, envelopes, records.partitions, list(range(n)))
        )
        bad = {b.offset: b.reason for b in result.bad}
        batch, source_table = result.batch, None
        if batch is not None:
            idx = batch.column(OFFSET).combine_chunks()
            real = pa.array(offsets, pa.int64()).take(idx)
            settled = _settle_flat(batch, flattened, real, idx.to_pylist())
            if settled is None:
                return None
            batch, more, source_table = settled
            bad.update(more)
            batch = batch.set_column(batch.schema.get_field_index(OFFSET), OFFSET, real)
            if more:
                keep = pc.invert(pc.is_in(idx, value_set=pa.array(sorted(more), pa.int64())))
                batch = batch.filter(keep)
            if batch.num_rows == 0:
                batch = None
        return DecodeResult(
            batch,
            result.key_fields,
            records.bad_messages(bad),
            result.ignored,
            result.value_schema_fingerprints,
            result.key_field_sets,
            result.notes,
            source_table,
            row_schemas=[s.remapped(pa.array(offsets, pa.int64())) for s in result.row_schemas],
        )

    def decode(records: RecordBatch) -> DecodeResult:
        identity = identities(records.topic)
        if flattener is None and identity is None:
            return inner(records)
        if flattener is not None and identity is None and BULK:
            fast = bulk(records)
            if fast is not None:
                return fast
        keys, values, offsets = records.keys, records.values, records.offsets
        n = len(records)
        out_keys: list[bytes | None] = []
        out_values: list[bytes | None] = []
        origin: list[int] = []
        by_field = [False] * n  # per input record: its position is an order value
        bad: dict[int, str] = {}
        ignored = 0
        heads: dict[int, tuple[dict, str]] = {}
        for i in range(n):
            raw = values[i]
            if raw is None:
                if identity is not None:
                    # The delete event before it did the delete; its Kafka key (null, or
                    # not the configured key) names no replica row.
                    ignored += 1
                    continue
                out_keys.append(keys[i])
                out_values.append(None)
                origin.append(i)
                continue
            try:
                schema, payload = unwrap(raw)
            except (UnicodeDecodeError, ValueError):
                out_keys.append(keys[i])
                out_values.append(raw)  # the decoder reports it as invalid JSON
                origin.append(i)
                continue
            try:
                if flattener is not None:
                    if payload is None:  # the legacy {"schema":null,"payload":null} tombstone
                        if identity is not None:
                            ignored += 1
                            continue
                        out_keys.append(keys[i])
                        out_values.append(None)
                        origin.append(i)
                        continue
                    payload, by_field[i] = flattener.envelope(payload, int(offsets[i]))
                    if schema is not None:
                        schema = flattener.schema(schema)
                pairs = identity.rekey(payload) if identity is not None else []
            except _Bad as exc:
                bad[i] = str(exc)
                continue
            if not pairs:
                out_keys.append(keys[i])
                out_values.append(_encode(schema, payload, heads))
                origin.append(i)
                continue
            schema = identity.schema(schema) if identity is not None else schema
            for key, env in pairs:
                out_keys.append(_compact(key).encode("utf-8", "surrogatepass"))
                out_values.append(_encode(schema, env, heads))
                origin.append(i)
        partitions = [records.partitions[i] for i in origin]
        result = inner(
            RecordBatch(records.topic, out_keys, out_values, partitions, list(range(len(origin))))
        )
        for b in result.bad:
            i = origin[b.offset]
            bad.setdefault(i, b.reason)
        batch = result.batch
        if batch is not None:
            synthetic = batch.column(OFFSET)
            src = pa.array(origin, pa.int64()).take(synthetic)
            if bad:
                keep = pc.invert(pc.is_in(src, value_set=pa.array(sorted(bad), pa.int64())))
                batch, src = batch.filter(keep), src.filter(keep)
            real = pa.array(offsets, pa.int64()).take(src)
            batch = batch.set_column(batch.schema.get_field_index(OFFSET), OFFSET, real)
            if identity is not None and identity.full_row:
                batch = _snapshot_rows_apart(batch, real)
            if flattener is not None and flattener.by_field:
                batch = batch.append_column(BY_FIELD, pa.array(by_field, pa.bool_()).take(src))
            if batch.num_rows == 0:
                batch = None
        return DecodeResult(
            batch,
            result.key_fields,
            records.bad_messages(bad),
            result.ignored + ignored,
            result.value_schema_fingerprints,
            result.key_field_sets,
            result.notes,
            result.source_table,
            result.snapshot_ended,
            # The inner decoder numbered the records 0..; their schemas' real offsets.
            row_schemas=[
                s.remapped(pa.array(offsets, pa.int64()).take(pa.array(origin, pa.int64())))
                for s in result.row_schemas
            ],
        )

    return decode


def identities_for(cfg: Config) -> Callable[[str], _Identity | None]:
    """The key rewrite of each topic's table, from ``[tables.<name>]``."""
    configured = {
        name: tc for name, tc in cfg.tables.items() if tc.key_fields or tc.keyless is not None
    }
    cache: dict[str, _Identity | None] = {}

    def lookup(topic: str) -> _Identity | None:
        if not configured:
            return None
        if topic not in cache:
            name = cfg.table_name(topic)
            tc = configured.get(name)
            cache[topic] = _Identity(name, tc) if tc is not None else None
        return cache[topic]

    return lookup


# -- the bulk path of flattened topics -----------------------------------------------------

#: Off in tests that compare the bulk path with the per-record one.
BULK = True
_LEGACY_TOMBSTONE = b'{"schema":null,"payload":null}'
_OPS = pa.array(["c", "u", "r", "d"], pa.string())
_DIGITS = r"^[0-9]{1,19}$"


def _wrap_flat(
    values: Sequence[bytes | None], unwrap: _Unwrapper
) -> tuple[list[bytes | None], list[dict | None]] | None:
    """Each flattened value as ``{"op":"c","after":<row>}`` by byte operations (the row
    keeps its added fields; :func:`_settle_flat` turns them into the envelope's parts).
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
                body = _compact(payload).encode("utf-8", "surrogatepass")
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


def _bulk_schema(schema: dict) -> dict:
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


def _settle_flat(
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
