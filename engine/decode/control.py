"""What a topic holds, recognised by the content of its records, whatever its name.

Debezium writes more than row changes: transaction BEGIN/END markers, heartbeats, the
MySQL schema change topic, its internal schema history topic, and PostgreSQL logical
decoding messages (``op=m``). Their default names are excluded by
``source.exclude_topics``, but names are configurable (``topic.transaction``,
``topic.heartbeat.prefix``, ``schema.history.internal.kafka.topic``, routing SMTs), so
the replicator looks at what a new topic's records are before it makes a table of it:
:func:`topic_kind` over a sample of one batch's values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

#: Kinds of topic that are not tables of rows.
SCHEMA_CHANGE: Final = "schema change"
TRANSACTION: Final = "transaction metadata"
HEARTBEAT: Final = "heartbeat"
SCHEMA_HISTORY: Final = "schema history"
MESSAGE: Final = "logical decoding message"
#: A row change, tombstone or anything else: the decoder's business.
ROW: Final = "row"
UNKNOWN: Final = "unknown"

CONTROL_KINDS: Final = (SCHEMA_CHANGE, TRANSACTION, HEARTBEAT, SCHEMA_HISTORY, MESSAGE)
_ROW_OPS = frozenset({"c", "u", "d", "r", "t"})
#: Records of a batch looked at to tell a topic's kind.
SAMPLE: Final = 32


def payload_of(value: bytes) -> dict[str, Any] | None:
    """A value's JSON object, JsonConverter wrapper removed (None: not a JSON object)."""
    try:
        obj = json.loads(value)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        # Nested too deeply: the decoder's limits make such a record a bad message.
        return None
    if isinstance(obj, dict) and "payload" in obj and set(obj) <= {"schema", "payload"}:
        obj = obj["payload"]
    return obj if isinstance(obj, dict) else None


def record_kind(value: bytes | None) -> str:
    """What one JSON record value is (:data:`ROW` for tombstones and undecodable values)."""
    if value is None:
        return ROW
    obj = payload_of(value)
    if obj is None:
        return UNKNOWN
    return document_kind(obj)


def document_kind(obj: Any) -> str:
    """What one decoded record value (a JSON payload or an Avro document) is."""
    if not isinstance(obj, dict):
        return UNKNOWN
    op = obj.get("op")
    if op == "m":
        return MESSAGE
    if isinstance(op, str) and op in _ROW_OPS:  # (an op that is a list or object: unhashable)
        return ROW
    if op is None:
        if obj.get("status") in ("BEGIN", "END") and "id" in obj:
            return TRANSACTION
        if "ddl" in obj or "tableChanges" in obj:
            source = obj.get("source")
            # The schema history topic: source {"server": ...} and a binlog "position".
            if "position" in obj and isinstance(source, dict) and "server" in source:
                return SCHEMA_HISTORY
            return SCHEMA_CHANGE
        if set(obj) == {"ts_ms"}:
            return HEARTBEAT
    return UNKNOWN


def topic_kind(
    values: Sequence[bytes | None],
    documents: Callable[[Sequence[bytes | None]], list[Any]] | None = None,
) -> str | None:
    """The control kind of a topic from a batch of its values; None: a topic of rows
    (or nothing recognisable yet, which the decoder judges record by record).

    A topic is a control topic when the sampled records that say anything are all of
    one control kind; one row change makes it a table. ``documents`` decodes values of a
    binary format (``debezium-avro``) into documents; JSON is read without it.
    """
    sample = [v for v in values if v is not None][:SAMPLE]
    kinds_of = (
        [document_kind(d) for d in documents(sample)]
        if documents is not None
        else [record_kind(v) for v in sample]
    )
    if ROW in kinds_of:
        return None
    kinds = set(kinds_of) - {UNKNOWN}
    return kinds.pop() if len(kinds) == 1 else None
