"""The decode stage: raw Kafka records of one topic -> a change batch.

In: per topic the keys, values, partitions and offsets of a batch's records. Out: a
:class:`DecodeResult`: the change batch (an Arrow table with the control columns of
:mod:`engine.model` followed by the typed row image), the record-key fields, the bad
records with their coordinates, and how many valid non-row records were skipped. One
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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from engine.decode.debezium_json import decode_debezium_json
from engine.decode.limits import guarded
from engine.decode.result import BadMessage, DecodeResult

if TYPE_CHECKING:
    from engine.config import Config

#: A decoder: ``(topic, keys, values, partitions, offsets) -> DecodeResult``.
Decoder = Callable[
    [str, Sequence[bytes | None], Sequence[bytes | None], Sequence[int], Sequence[int]],
    DecodeResult,
]

#: Builds the decoder of one format from the whole config.
DecoderFactory = Callable[["Config"], Decoder]


def _debezium_json(cfg: Config) -> Decoder:
    return decode_debezium_json


#: Decoder factories by ``source.format``.
FORMATS: dict[str, DecoderFactory] = {"debezium-json": _debezium_json}


def decoder_for(cfg: Config) -> Decoder:
    """The decoder of ``cfg.source.format`` (config validation refuses unknown formats),
    behind the limits of :mod:`engine.decode.limits` (``source.max_message_bytes``,
    ``source.max_nesting_depth``): a record over a limit is bad, never parsed."""
    try:
        factory = FORMATS[cfg.source.format]
    except KeyError:
        raise ValueError(f"no decoder for format {cfg.source.format!r}") from None
    return guarded(
        factory(cfg),
        max_message_bytes=cfg.source.max_message_bytes,
        max_nesting_depth=cfg.source.max_nesting_depth,
    )


__all__ = [
    "FORMATS",
    "BadMessage",
    "DecodeResult",
    "Decoder",
    "DecoderFactory",
    "decode_debezium_json",
    "decoder_for",
]
