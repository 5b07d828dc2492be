"""The decode stage: raw Kafka records of one topic -> a change batch.

In: per topic the keys, values, partitions and offsets of a batch's records. Out: a
:class:`DecodeResult`: the change batch (an Arrow table with the control columns of
:mod:`engine.model` followed by the typed row image), the record-key fields, the bad
records with their coordinates, and how many valid non-row records were skipped. One
package per message format; ``positions`` turns Debezium ``source`` blocks into source
positions for every format, ``gtid`` re-encodes MySQL positions by GTID where configured.

Adding a format: a package with a function of the :class:`Decoder` shape, registered in
:data:`DECODERS` under the ``source.format`` value that selects it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.decode.debezium_json import decode_debezium_json
from engine.decode.result import BadMessage, DecodeResult

#: A decoder: ``(topic, keys, values, partitions, offsets) -> DecodeResult``.
Decoder = Callable[
    [str, Sequence[bytes | None], Sequence[bytes | None], Sequence[int], Sequence[int]],
    DecodeResult,
]

#: Decoders by ``source.format``.
DECODERS: dict[str, Decoder] = {"debezium-json": decode_debezium_json}


def decoder_for(fmt: str) -> Decoder:
    """The decoder of a ``source.format`` value (config validation refuses others)."""
    try:
        return DECODERS[fmt]
    except KeyError:
        raise ValueError(f"no decoder for format {fmt!r}") from None


__all__ = [
    "DECODERS",
    "BadMessage",
    "DecodeResult",
    "Decoder",
    "decode_debezium_json",
    "decoder_for",
]
