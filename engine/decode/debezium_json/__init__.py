"""Debezium change events serialized with Kafka Connect's JsonConverter (both shapes).

``decoder`` is the entry point; ``split`` strips the JsonConverter wrapper, ``reader``
parses payloads in bulk, ``envelope`` turns envelopes into control and row columns,
``keys`` builds record keys, ``connect`` maps Connect schemas and logical types to
Arrow, ``common`` holds what they share.
"""

from __future__ import annotations

from engine.decode.debezium_json.decoder import decode_debezium_json

__all__ = ["decode_debezium_json"]
