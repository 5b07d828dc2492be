"""Per-record rewrites in front of the Debezium JSON decoder.

Two shapes of change stream become ordinary Debezium envelopes here, record by record, and
then go through :func:`engine.decode.debezium_json.decode_debezium_json` like any other:
flattened events (``source.format = "debezium-flat"``, :mod:`engine.decode.flat`) and
records of tables whose record key is rebuilt from row fields (``[tables.<name>]
key_fields`` / ``keyless = "full-row"``, :mod:`engine.decode.identity`).
:func:`rewriting_decoder` puts both in front of the inner decoder and maps its result back
to the input records (real offsets, bad records by input position).

Flattened topics without a key rewrite take the bulk path of :mod:`engine.decode.flat`.
Everything else here parses each record once in Python (``json.loads`` /
``json.dumps``, :mod:`engine.decode.jsonconverter`), several times slower than the bulk
decoder; ``BULK = False`` forces that path (tests check both agree).

Every input record ends in exactly one of batch / bad / ignored: a record split in two
(an update of a full-row table) is reported once if either half is bad, and its other
half is taken out of the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.flat import Flattener, bulk_envelope_schema, settle_flat, wrap_flat
from engine.decode.identity import Identity, snapshot_rows_apart
from engine.decode.jsonconverter import BadRecord, ConvertedSchemas, Unwrapper, compact, encode
from engine.decode.records import Decoder, RecordBatch
from engine.decode.result import DecodeResult
from engine.model import BY_FIELD, OFFSET

if TYPE_CHECKING:
    from engine.config import FlattenedConfig

#: Off in tests that compare the bulk path with the per-record one.
BULK = True


def rewriting_decoder(
    inner: Decoder,
    flattened: FlattenedConfig | None,
    identities: Callable[[str], Identity | None],
) -> Decoder:
    """A decoder that rewrites records (flattened -> envelope, record keys) before ``inner``.

    Args:
        inner: The Debezium JSON decoder.
        flattened: Settings when the topics hold flattened events; None for envelopes.
        identities: The key rewrite of a topic's table, or None when it has none.
    """
    flattener = Flattener(flattened) if flattened is not None else None
    unwrap = Unwrapper()

    bulk_schemas = ConvertedSchemas()

    def bulk(records: RecordBatch) -> DecodeResult | None:
        assert flattened is not None
        values, offsets = records.values, records.offsets
        wrapped = wrap_flat(values, unwrap)
        if wrapped is None:
            return None
        heads: dict[int, tuple[dict, bytes]] = {}
        envelopes: list[bytes | None] = []
        for value, schema in zip(*wrapped, strict=True):
            if value is None or schema is None:
                envelopes.append(value)
                continue
            env_schema = bulk_schemas.get(schema, bulk_envelope_schema)
            hit = heads.get(id(env_schema))
            if hit is None or hit[0] is not env_schema:
                head = ('{"schema":' + compact(env_schema) + ',"payload":').encode(
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
            settled = settle_flat(batch, flattened, real, idx.to_pylist())
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
            except BadRecord as exc:
                bad[i] = str(exc)
                continue
            if not pairs:
                out_keys.append(keys[i])
                out_values.append(encode(schema, payload, heads))
                origin.append(i)
                continue
            schema = identity.schema(schema) if identity is not None else schema
            for key, env in pairs:
                out_keys.append(compact(key).encode("utf-8", "surrogatepass"))
                out_values.append(encode(schema, env, heads))
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
                batch = snapshot_rows_apart(batch, real)
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
