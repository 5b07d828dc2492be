"""Decoders turning raw Kafka records into change batches (see :mod:`engine.model`)."""

from __future__ import annotations

from engine.decode.debezium_json import BadMessage, DecodeResult, decode_debezium_json

__all__ = ["BadMessage", "DecodeResult", "decode_debezium_json"]
