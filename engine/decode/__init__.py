"""The decode stage: raw Kafka records of one topic -> a change batch.

In: a :class:`RecordBatch`, the keys, values, partitions and offsets of one topic's
records in a batch (:mod:`engine.decode.records`). Out: a :class:`DecodeResult`: the
change batch (an Arrow table with the control columns of :mod:`engine.model` followed
by the typed row image), the record-key fields, the bad records with their
coordinates, and how many valid non-row records were skipped. One
package per message format; ``positions`` turns Debezium ``source`` blocks into source
positions for every format, ``gtid`` re-encodes MySQL positions by GTID where configured.

Adding a format: a package with a function of the :class:`Decoder` shape, and a factory
``(Config) -> Decoder`` registered in :data:`FORMATS` under the ``source.format`` value
that selects it. The factory reads what the format needs from the config once (a schema
registry client, ``[tables.<name>]`` overrides through :meth:`Config.table_config`); the
decoder it returns is called per topic and batch. :func:`decoder_for` puts it behind the
limits of :mod:`engine.decode.limits` (message size, nesting depth, an exception net).
Every format also needs a fuzz entry in ``tests/fuzz/registry.py`` (a config fragment and
seed messages); ``tests/engine/test_fuzz_decoders.py`` fails while one is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.column_types import ColumnType, parse_column_type
from engine.decode.cdc_json import CdcJsonDecoder
from engine.decode.debezium_json import decode_debezium_json
from engine.decode.identity import identities_for
from engine.decode.limits import Guarded, guarded
from engine.decode.records import Decoder, RecordBatch
from engine.decode.result import BadMessage, DecodeResult
from engine.decode.rewrite import rewriting_decoder

if TYPE_CHECKING:
    from engine.config import Config

#: Builds the decoder of one format from the whole config.
DecoderFactory = Callable[["Config"], Decoder]


class _NestingByParse:
    """A Debezium JSON decoder that refuses values nested too deep by its parse
    (``checks_nesting``: :class:`engine.decode.limits.Guarded` scans only long values)."""

    checks_nesting = True

    def __init__(self, decode: Decoder) -> None:
        self.decode = decode

    def __call__(self, records: RecordBatch) -> DecodeResult:
        return self.decode(records)


def _typed_debezium_json(cfg: Config, max_nesting_depth: int | None = None) -> Decoder:
    """The Debezium JSON decoder with the config's column types.

    ``[tables.<name>.columns]`` hints (parsed once per table) and, with
    ``source.catalog_types``, the source database's catalog (read now: a catalog that
    cannot be read stops the start with the reason). With ``max_nesting_depth`` it
    refuses values nested deeper by its parse.
    """
    catalog = None
    if cfg.source.database.catalog_types:
        from engine.decode.catalog import SourceCatalog

        catalog = SourceCatalog(cfg)
    hints_of = _column_types(cfg)

    def decode(records: RecordBatch) -> DecodeResult:
        hints = hints_of(records.topic)
        if not hints and catalog is None:
            return decode_debezium_json(records, max_nesting_depth=max_nesting_depth)
        return decode_debezium_json(
            records, column_types=hints, catalog=catalog, max_nesting_depth=max_nesting_depth
        )

    return decode


def _column_types(cfg: Config) -> Callable[[str], dict[str, ColumnType]]:
    """A topic's ``[tables.<name>.columns]`` hints, parsed once per table."""
    parsed: dict[str, dict[str, ColumnType]] = {}

    def of(topic: str) -> dict[str, ColumnType]:
        name = cfg.table_name(topic)
        if name not in parsed:
            columns = cfg.table_config(name).columns
            parsed[name] = {c: parse_column_type(t) for c, t in columns.items()}
        return parsed[name]

    return of


def _cdc_json(cfg: Config) -> Decoder:
    base = cfg.source.cdc_json
    return CdcJsonDecoder(lambda topic: cfg.table_config(cfg.table_name(topic)).cdc_json(base))


def _debezium_json(cfg: Config) -> Decoder:
    """Debezium envelopes; record keys rewritten where ``[tables.<name>]`` says so."""
    if not any(tc.key_fields or tc.keyless for tc in cfg.tables.values()):
        depth = cfg.source.limits.max_nesting_depth
        return _NestingByParse(_typed_debezium_json(cfg, depth))
    return rewriting_decoder(_typed_debezium_json(cfg), None, identities_for(cfg))


def _debezium_flat(cfg: Config) -> Decoder:
    """Rows flattened by ExtractNewRecordState (see :mod:`engine.decode.rewrite`)."""
    return rewriting_decoder(_typed_debezium_json(cfg), cfg.source.flattened, identities_for(cfg))


def _debezium_avro(cfg: Config) -> Decoder:
    from engine.decode.debezium_avro import AvroDecoder, SchemaCache
    from engine.decode.debezium_avro.registry import settings_from_config

    return AvroDecoder(SchemaCache(settings_from_config(cfg)), column_types=_column_types(cfg))


#: Decoder factories by ``source.format``.
FORMATS: dict[str, DecoderFactory] = {
    "debezium-json": _debezium_json,
    "debezium-avro": _debezium_avro,
    "debezium-flat": _debezium_flat,
    "cdc-json": _cdc_json,
}


def decoder_for(cfg: Config) -> Guarded:
    """The decoder of ``cfg.source.format`` (config validation refuses unknown formats),
    behind the limits of :mod:`engine.decode.limits` (``source.max_message_bytes``,
    ``source.max_nesting_depth``): a record over a limit is bad, never parsed."""
    try:
        factory = FORMATS[cfg.source.format]
    except KeyError:
        raise ValueError(f"no decoder for format {cfg.source.format!r}") from None
    return guarded(
        factory(cfg),
        max_message_bytes=cfg.source.limits.max_message_bytes,
        max_nesting_depth=cfg.source.limits.max_nesting_depth,
    )


__all__ = [
    "FORMATS",
    "BadMessage",
    "DecodeResult",
    "Decoder",
    "DecoderFactory",
    "RecordBatch",
    "decode_debezium_json",
    "decoder_for",
]
