"""Debezium change events written by Confluent's AvroConverter (schema registry).

``decoder`` is the entry point; ``registry`` fetches and caches writer schemas, ``schema``
turns them into Connect schemas (typed by the JSON path's rules) and into their wire
form, ``bulk`` decodes the datums of one schema in bulk.
"""

from __future__ import annotations

from engine.decode.debezium_avro.decoder import AvroDecoder
from engine.decode.debezium_avro.registry import RegistrySettings, SchemaCache

__all__ = ["AvroDecoder", "RegistrySettings", "SchemaCache"]
