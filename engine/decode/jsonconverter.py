"""JsonConverter records taken apart and written back, for the rewrites in front of the
Debezium JSON decoder (:mod:`engine.decode.rewrite`).

:class:`Unwrapper` splits a record into ``(Connect schema, payload)``, parsing each
distinct schema once; :class:`ConvertedSchemas` keeps a converted schema per original one;
:func:`encode` writes ``{"schema":...,"payload":...}`` back as compact JSON. A record
that cannot be rewritten raises :class:`BadRecord` with the reason it becomes bad for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from engine.decode.debezium_json.split import fingerprint


class BadRecord(Exception):
    """A record that cannot be rewritten: its reason."""


def compact(obj: Any) -> str:
    """Compact JSON text. Encode it with ``surrogatepass``: a lone surrogate escape
    (``"\\ud800"``) in a message then stays invalid UTF-8, which the JSON decoder
    quarantines as a bad message, instead of raising here."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


_HEAD = b'{"schema":'
_PAYLOAD = ',"payload":'
_DECODER = json.JSONDecoder()


class Unwrapper:
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
            return schema_or_none(obj.get("schema")), obj["payload"]
        return None, obj

    def _prefix(self, raw: bytes) -> dict | None:
        try:
            text = raw.decode("utf-8")
            schema, end = _DECODER.raw_decode(text, len(_HEAD))
        except ValueError:  # UnicodeDecodeError included
            return None
        if not text.startswith(_PAYLOAD, end):
            return None
        schema = schema_or_none(schema)
        if schema is None:
            return None  # e.g. the legacy {"schema":null,"payload":null} tombstone
        self._last = text[: end + len(_PAYLOAD)].encode("utf-8")
        if len(self.prefixes) >= 64:
            self.prefixes.clear()
        self.prefixes[self._last] = schema
        return schema


def schema_or_none(schema: Any) -> dict | None:
    return schema if isinstance(schema, dict) and "type" in schema else None


class ConvertedSchemas:
    """Converted Connect schemas. Records of one table version share one schema object
    (:class:`Unwrapper`), so the object's id finds it; the object is kept referenced, so
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


def encode(schema: dict | None, payload: Any, cache: dict[int, tuple[dict, str]]) -> bytes:
    if schema is None:
        return compact(payload).encode("utf-8", "surrogatepass")
    hit = cache.get(id(schema))
    if hit is None or hit[0] is not schema:  # the object is held, so its id is its own
        hit = cache[id(schema)] = (schema, '{"schema":' + compact(schema) + ',"payload":')
    return (hit[1] + compact(payload) + "}").encode("utf-8", "surrogatepass")
