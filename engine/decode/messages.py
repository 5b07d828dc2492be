"""PostgreSQL logical decoding messages (``op=m``) as rows of an append-only table.

With ``source.logical_messages = "table"`` each message topic (``<prefix>.message``)
becomes a table with one row per message, never updated or deleted: ``message_id``
(``<partition>:<offset>`` of the Kafka record: the record key, so a message read twice
after a crash is one row), ``prefix``, ``content`` (the bytes given to
``pg_logical_emit_message``, decoded from base64), ``lsn``, ``tx_id`` (the source
transaction id; null for a non-transactional message) and ``ts_ms``.
"""

from __future__ import annotations

import base64
import binascii

import pyarrow as pa

from engine.decode.control import payload_of
from engine.decode.records import RecordBatch
from engine.decode.result import DecodeResult
from engine.model import (
    CONTROL_SCHEMA,
    GTID,
    KEY,
    OFFSET,
    OP,
    OP_CREATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
    STREAMED_BIT,
    TX_ID,
)

MESSAGE_KEY = "message_id"

SCHEMA = pa.schema(
    [
        *CONTROL_SCHEMA,
        (MESSAGE_KEY, pa.string()),
        ("prefix", pa.string()),
        ("content", pa.binary()),
        ("lsn", pa.int64()),
        ("tx_id", pa.int64()),
        ("ts_ms", pa.int64()),
    ]
)


def _row(obj: dict, partition: int, offset: int) -> dict:
    message = obj.get("message")
    if not isinstance(message, dict):
        raise ValueError("op=m without a message object")
    prefix, content = message.get("prefix"), message.get("content")
    if not isinstance(prefix, str):
        raise ValueError("message.prefix: expected a string")
    if content is not None and not isinstance(content, str):
        raise ValueError("message.content: expected base64 text")
    try:
        data = None if content is None else base64.b64decode(content, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"message.content is not base64 ({exc})") from None
    raw_source = obj.get("source")
    source: dict = raw_source if isinstance(raw_source, dict) else {}
    lsn = source.get("lsn")
    lsn = lsn if isinstance(lsn, int) and 0 <= lsn < STREAMED_BIT else None
    tx = source.get("txId")
    ts = source.get("ts_ms") if isinstance(source.get("ts_ms"), int) else obj.get("ts_ms")
    mid = f"{partition}:{offset}"
    return {
        KEY: mid,
        OP: OP_CREATE,
        POS: None if lsn is None else STREAMED_BIT | lsn,
        POS_SUB: lsn,
        SOURCE_TS: ts if isinstance(ts, int) else None,
        PARTITION: partition,
        OFFSET: offset,
        TX_ID: None if tx is None else str(tx),
        GTID: None,
        MESSAGE_KEY: mid,
        "prefix": prefix,
        "content": data,
        "lsn": lsn,
        "tx_id": tx if isinstance(tx, int) else None,
        "ts_ms": obj.get("ts_ms") if isinstance(obj.get("ts_ms"), int) else None,
    }


def decode_messages(records: RecordBatch) -> DecodeResult:
    """Logical decoding messages -> append-only rows; anything else is bad (a message
    topic holds messages only) and tombstones are ignored."""
    rows, bad, ignored = [], [], 0
    for i, (value, part, off) in enumerate(
        zip(records.values, records.partitions, records.offsets, strict=True)
    ):
        if value is None:
            ignored += 1
            continue
        obj = payload_of(value)
        reason = None
        if obj is None:
            reason = "not a JSON object"
        elif obj.get("op") != "m":
            reason = f"a logical decoding message topic holds a record with op {obj.get('op')!r}"
        else:
            try:
                rows.append(_row(obj, int(part), int(off)))
            except ValueError as exc:
                reason = str(exc)
        if reason is not None:
            bad.append(records.bad(i, reason))
    batch = pa.Table.from_pylist(rows, schema=SCHEMA) if rows else None
    return DecodeResult(batch, [MESSAGE_KEY] if rows else [], bad, ignored)
