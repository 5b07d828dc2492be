"""A representative set of replicas for Hudi's own readers, written by the real engine.

:func:`build` replicates one stream of Debezium PostgreSQL messages (JsonConverter with
schemas) into a Copy-on-Write and a Merge-on-Read table with the real replicator (in this
process, the engine's Spark session, no broker: ``Replicator.apply`` per batch), with
settings small enough that the stream goes through everything a replica lives through:

* a snapshot, then updates, deletes with their Kafka tombstones, late (older) events;
* keys first seen without a position: incremental-snapshot reads with ``source.lsn``
  null (their rows have a null position until a positioned event comes);
* a TIME column (``MicroTime``), a timestamp, a date, a decimal, a boolean;
* Merge-on-Read: log files, compactions after two logs (``compaction_max_log_files``);
* cleans (every 10 commits, ``clean_retain_commits = 2``) and archiving
  (``keep_min_commits = 3``, ``keep_max_commits = 4``).

It returns each table's path, the instant of each batch and the oracle's rows after each
batch (``tests.oracle.fold`` of the messages so far), so readers can be checked at any
retained instant.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from engine.config import config_from_dict
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.replicator import Replicator
from engine.storage import Storage
from tests.engine.test_properties import Msg
from tests.oracle import fold

TOPIC = "srv.app.peers"
TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")


def _field(name: str, typ: str, semantic: str | None = None, **extra: Any) -> dict:
    out = {"type": typ, "optional": True, "field": name, **extra}
    if semantic:
        out["name"] = semantic
    return out


ROW_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    _field("name", "string"),
    _field("qty", "int64"),
    _field(
        "price",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        parameters={"scale": "2", "connect.decimal.precision": "10"},
    ),
    _field("at", "int64", "io.debezium.time.MicroTimestamp"),
    _field("day", "int32", "io.debezium.time.Date"),
    _field("t", "int64", "io.debezium.time.MicroTime"),
    _field("ok", "boolean"),
]
COLUMNS = [f["field"] for f in ROW_FIELDS]


def _unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def _key(i: int) -> bytes:
    schema = {"type": "struct", "name": "K", "optional": False, "fields": [ROW_FIELDS[0]]}
    return json.dumps({"schema": schema, "payload": {"id": i}}).encode()


def _schema() -> dict:
    row = {"type": "struct", "optional": True, "name": "V", "fields": ROW_FIELDS}
    source = [
        {"type": "int64", "optional": True, "field": "lsn"},
        {"type": "string", "optional": True, "field": "snapshot"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ]
    return {
        "type": "struct",
        "name": f"{TOPIC}.Envelope",
        "optional": False,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "optional": False, "name": "S", "fields": source, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }


def row(i: int, version: int) -> dict:
    """Row image ``version`` of key ``i``."""
    return {
        "id": i,
        "name": f"n{i}v{version}",
        "qty": i * 1000 + version,
        "price": _unscaled(i * 100 + version),  # i + version/100
        "at": 1_700_000_000_000_000 + i * 1_000_003 + version,
        "day": 19_000 + i,
        "t": ((i % 24) * 3600 + version) * 1_000_000 + 123_456,
        "ok": (i + version) % 2 == 0,
    }


def _message(op: str, i: int, lsn: int | None, version: int, snapshot: str = "false") -> tuple:
    after = None if op == "d" else row(i, version)
    payload = {
        "before": None,
        "after": after,
        "source": {"lsn": lsn, "snapshot": snapshot, "ts_ms": 1_700_000_000_000 + (lsn or 0)},
        "op": op,
    }
    return TOPIC, _key(i), json.dumps({"schema": _schema(), "payload": payload}).encode()


def batches() -> list[list[tuple]]:
    """The stream, batch by batch (each batch is one commit of each table)."""
    out: list[list[tuple]] = []
    lsn = 1_000
    out.append([_message("r", i, 100 + i, 0, snapshot="true") for i in range(1, 31)])

    def nxt() -> int:
        nonlocal lsn
        lsn += 1
        return lsn

    # Updates, and keys first seen without a position (incremental snapshot reads).
    b = [_message("u", i, nxt(), 1) for i in range(1, 11)]
    b += [_message("r", i, None, 0, snapshot="incremental") for i in range(50, 56)]
    out.append(b)
    # Deletes with tombstones; a late update (older position) of key 1; a position-less
    # read of an existing key (applied in arrival order).
    b = []
    for i in range(11, 16):
        b += [_message("d", i, nxt(), 0), (TOPIC, _key(i), None)]
    b += [_message("u", 1, 900, 99), _message("r", 2, None, 7, snapshot="incremental")]
    out.append(b)
    # Many small batches: logs, compactions, cleans, archiving. Keys 50.. get positions
    # in some rounds only; key 60.. appear without a position late in the stream.
    for r in range(3, 26):
        b = [_message("u", i, nxt(), r) for i in range(1 + r % 5, 31, 5) if not 11 <= i <= 15]
        if r % 4 == 0:
            b.append(_message("u", 50 + r % 6, nxt(), r))
        if r % 7 == 0:
            b.append(_message("r", 60 + r, None, r, snapshot="incremental"))
            b.append(_message("u", 16 + r % 3, r, r))  # late: position far older
        if r == 12:
            b.append(_message("c", 13, nxt(), r))  # a deleted key comes back
        if r == 20:
            b += [_message("d", 21, nxt(), r), (TOPIC, _key(21), None)]
        out.append(b)
    return out


@dataclass
class Replica:
    table_type: str
    #: The table's folder, or its store in a bucket (``build``'s ``bucket``).
    path: Path | Storage
    #: Completed instant of each batch, in batch order.
    instants: list[str] = field(default_factory=list)
    #: The oracle's rows after each batch: {record key: {column: value}}.
    expected: list[dict[str, dict]] = field(default_factory=list)


def build(
    spark: Any,
    root: Path,
    table_types: tuple[str, ...] = TABLE_TYPES,
    n_batches: int | None = None,
    bucket: tuple[str, dict[str, Any]] | None = None,
) -> list[Replica]:
    """Replicate :func:`batches` (the first ``n_batches``) into one table per table type
    under ``root`` (``<root>/<table type>/lake/app_peers``), or with ``bucket`` (an
    ``s3://`` URL and the ``[target]`` keys that reach it) under
    ``<url>/<table type>/lake``, the work folders staying under ``root``."""
    stream = batches()[:n_batches]
    replicas = []
    for table_type in table_types:
        base = root / table_type.lower()
        target: dict[str, Any] = {"path": str(base / "lake")}
        if bucket is not None:
            target = {"path": f"{bucket[0]}/{table_type.lower()}/lake", **bucket[1]}
        cfg = config_from_dict(
            {
                "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
                "target": target,
                "hudi": {
                    "num_buckets": 2,
                    "table_type": table_type,
                    "compaction_max_log_files": 2,
                    "clean_retain_commits": 2,
                    "keep_min_commits": 3,
                    "keep_max_commits": 4,
                },
                "replicator": {"work_dir": str(base / "work")},
            }
        )
        replicator = Replicator(cfg, spark=spark)
        name = table_name_for_topic(TOPIC)
        path: Path | Storage = base / "lake" / name
        if bucket is not None:
            path = cfg.target_store().under(name)
        replica = Replica(table_type, path)
        offset = 0
        sent: list[tuple] = []
        for batch in stream:
            msgs = [Msg(t, k, v, offset + n) for n, (t, k, v) in enumerate(batch)]
            offset += len(batch)
            replicator.apply(msgs)
            sent += batch
            replica.instants.append(HudiTable.open(path).completed_instants()[-1])
            replica.expected.append(fold(sent).get(TOPIC, {}))
        replicas.append(replica)
    return replicas


def plain(value: Any) -> Any:
    """A value as Hudi's reader harness returns it (``interop/spark3.5/hudi_read.py``):
    times of day as microseconds (Spark has no TIME type: Hudi maps ``time-micros`` to
    a long), timestamps and dates as ISO text in UTC, decimals as text."""
    import datetime as dt

    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * 1_000_000 + value.microsecond
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def replay(n_batches: int) -> dict[str, dict]:
    """The oracle's rows after the first ``n_batches`` of :func:`batches`."""
    return fold([m for batch in batches()[:n_batches] for m in batch]).get(TOPIC, {})
