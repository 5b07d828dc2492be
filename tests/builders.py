"""Build Debezium PostgreSQL JsonConverter messages (schemas.enable=true) for tests."""

from __future__ import annotations

import json
from collections.abc import Sequence

Column = tuple[str, str]  # (name, Connect type)


def field(name: str, typ: str, optional: bool = True) -> dict:
    return {"type": typ, "optional": optional, "field": name}


def value_schema(columns: Sequence[Column]) -> dict:
    """The Envelope schema of a table with ``columns`` (the first one is the key)."""
    row = [field(n, t, i > 0) for i, (n, t) in enumerate(columns)]
    source = [
        field("lsn", "int64"),
        field("snapshot", "string"),
        field("ts_ms", "int64", False),
        field("sequence", "string"),
        field("txId", "int64"),
    ]
    tx = [
        field("id", "string", False),
        field("total_order", "int64", False),
        field("data_collection_order", "int64", False),
    ]
    return {
        "type": "struct",
        "name": "srv.app.t.Envelope",
        "optional": False,
        "fields": [
            {"type": "struct", "fields": row, "optional": True, "name": "V", "field": "before"},
            {"type": "struct", "fields": row, "optional": True, "name": "V", "field": "after"},
            {"type": "struct", "fields": source, "optional": False, "name": "S", "field": "source"},
            field("op", "string", False),
            field("ts_ms", "int64"),
            {"type": "struct", "fields": tx, "optional": True, "name": "T", "field": "transaction"},
        ],
    }


def key(k: int, name: str = "id") -> bytes:
    schema = {
        "type": "struct",
        "name": "K",
        "optional": False,
        "fields": [field(name, "int32", False)],
    }
    return json.dumps({"schema": schema, "payload": {name: k}}).encode()


def value(
    op: str,
    lsn: int,
    after: dict | None,
    columns: Sequence[Column],
    *,
    snapshot: bool | str = False,
    tx: tuple[str, int, int] | None = None,
) -> bytes:
    payload = {
        "before": None,
        "after": after,
        "source": {
            "lsn": lsn,
            # A string is the mark itself: "first", "last", "last_in_data_collection", ...
            "snapshot": snapshot if isinstance(snapshot, str) else str(snapshot).lower(),
            "ts_ms": 1_700_000_000_000 + lsn,
            "sequence": json.dumps([None, str(lsn)]),
            "txId": lsn,
        },
        "op": op,
        "ts_ms": 1_700_000_000_000 + lsn,
        "transaction": (
            {"id": tx[0], "total_order": tx[1], "data_collection_order": tx[2]} if tx else None
        ),
    }
    return json.dumps({"schema": value_schema(columns), "payload": payload}).encode()
