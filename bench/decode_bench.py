"""Throughput benchmark of the Debezium JSON and Avro decoders (not a test).

Generates PostgreSQL update events as the JsonConverter writes them and reports the
decode rate. By default: 1,000,000 schemaless events (``schemas.enable=false``); with
``--schemas`` the same events wrapped in ``{"schema":...,"payload":...}`` (keys too);
with ``--avro`` the same events re-serialized as Confluent's AvroConverter writes them
(confluent-kafka's AvroSerializer against the test schema registry), decoded by the
``debezium-avro`` decoder, next to fastavro decoding the same bodies one by one.

Usage::

    python bench/decode_bench.py [--count N] [--schemas | --avro] [--repeat R] [--hints] [--guarded]
    python bench/decode_bench.py --wide [--count N] [--schemas] [--repeat R]

``--hints`` decodes with column type hints (``price = "decimal(10,2)"``, ``updated_at =
"timestamp"``), as ``[tables.<name>.columns]`` gives them.
``--guarded`` decodes through ``engine.decode.decoder_for`` with the default config, as
the replicator does: behind the size and nesting limits of ``engine.decode.limits``.

``--wide`` decodes issue 25's catch-up workload instead (``bench/catchup.py --wide``: the
inventory mix, orders with a 200-2,000 character ``note``, a hot set, deletes with
tombstones) in batches of 100,000 messages split by topic as the replicator does, with and
without the decode limits, alternately: the limits' cost is the difference (wall and
process CPU seconds, medians of ``--repeat`` rounds, with the load average).

For a single-core figure pin the process, e.g. ``taskset -c 0 python bench/decode_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.column_types import parse_column_type  # noqa: E402
from engine.config import config_from_dict  # noqa: E402
from engine.decode import RecordBatch, decode_debezium_json, decoder_for  # noqa: E402

HINTS = {"price": "decimal(10,2)", "updated_at": "timestamp"}

_KEY_SCHEMA = {
    "type": "struct",
    "name": "bench.public.items.Key",
    "optional": False,
    "fields": [{"type": "int64", "optional": False, "field": "id"}],
}
_ROW_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int32", "optional": True, "field": "qty"},
    {"type": "double", "optional": True, "field": "price"},
    {"type": "boolean", "optional": True, "field": "active"},
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.MicroTimestamp",
        "version": 1,
        "field": "updated_at",
    },
]
_SOURCE_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "true,last,false,incremental"},
        "default": "false",
        "field": "snapshot",
    },
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
]
_VALUE_SCHEMA = {
    "type": "struct",
    "name": "bench.public.items.Envelope",
    "optional": False,
    "fields": [
        {
            "type": "struct",
            "fields": _ROW_FIELDS,
            "optional": True,
            "name": "bench.public.items.Value",
            "field": "before",
        },
        {
            "type": "struct",
            "fields": _ROW_FIELDS,
            "optional": True,
            "name": "bench.public.items.Value",
            "field": "after",
        },
        {
            "type": "struct",
            "fields": _SOURCE_FIELDS,
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "field": "source",
        },
        {"type": "string", "optional": False, "field": "op"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
        {
            "type": "struct",
            "optional": True,
            "name": "event.block",
            "field": "transaction",
            "fields": [
                {"type": "string", "optional": False, "field": "id"},
                {"type": "int64", "optional": False, "field": "total_order"},
                {"type": "int64", "optional": False, "field": "data_collection_order"},
            ],
        },
    ],
}


def generate(count: int, schemas: bool) -> tuple[list[bytes], list[bytes]]:
    """Build ``count`` update events (keys, values) as JsonConverter bytes."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    key_prefix = b'{"schema":' + dumps(_KEY_SCHEMA).encode() + b',"payload":' if schemas else b""
    value_prefix = (
        b'{"schema":' + dumps(_VALUE_SCHEMA).encode() + b',"payload":' if schemas else b""
    )
    suffix = b"}" if schemas else b""
    keys: list[bytes] = []
    values: list[bytes] = []
    lsn = 34_000_000
    for i in range(count):
        lsn += 120
        row_id = i % 100_000
        key = {"id": row_id}
        envelope = {
            "before": None,
            "after": {
                "id": row_id,
                "name": f"item-{i}",
                "qty": i % 1000,
                "price": (i % 10_000) / 100,
                "active": i % 3 == 0,
                "updated_at": 1_700_000_000_000_000 + i,
            },
            "source": {
                "version": "2.7.0.Final",
                "connector": "postgresql",
                "name": "bench",
                "ts_ms": 1_700_000_000_000 + i // 10,
                "snapshot": "false",
                "db": "shop",
                "sequence": f'["{lsn - 60}","{lsn}"]',
                "schema": "public",
                "table": "items",
                "txId": 5000 + i // 10,
                "lsn": lsn,
                "xmin": None,
            },
            "op": "u",
            "ts_ms": 1_700_000_000_100 + i // 10,
            "transaction": None,
        }
        keys.append(key_prefix + dumps(key).encode() + suffix)
        values.append(value_prefix + dumps(envelope).encode() + suffix)
    return keys, values


def main() -> None:
    """Run the benchmark and print the rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--schemas", action="store_true", help="schemas.enable=true records")
    parser.add_argument("--avro", action="store_true", help="Confluent Avro (schema registry)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hints", action="store_true", help="decode with column type hints")
    parser.add_argument("--guarded", action="store_true", help="with the decode limits")
    parser.add_argument("--wide", action="store_true", help="issue 25's workload, limits A/B")
    args = parser.parse_args()
    if args.wide:
        bench_wide(args.count, args.schemas, args.repeat)
        return
    if args.avro:
        bench_avro(args.count, args.repeat)
        return
    types = {}
    if args.hints:
        types = {c: parse_column_type(t) for c, t in HINTS.items()}
    decode = decode_debezium_json
    if args.guarded:
        cfg = {"source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
               "target": {"path": "unused"}}  # fmt: skip
        if args.hints:
            cfg["tables"] = {"public_items": {"columns": HINTS}}
        decode = decoder_for(config_from_dict(cfg))  # type: ignore[assignment]
        types = {}

    keys, values = generate(args.count, args.schemas)
    size = sum(map(len, values)) + sum(map(len, keys))
    partitions = [0] * args.count
    offsets = list(range(args.count))
    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        if types:
            result = decode_debezium_json(
                RecordBatch("bench.public.items", keys, values, partitions, offsets),
                column_types=types,
            )
        else:
            result = decode(RecordBatch("bench.public.items", keys, values, partitions, offsets))
        best = min(best, time.perf_counter() - start)
        assert result.batch is not None and result.batch.num_rows == args.count, result.bad[:3]
    mode = "schemas.enable=true" if args.schemas else "schemaless"
    mode += " with hints" if args.hints else ""
    mode += ", with the decode limits" if args.guarded else ""
    print(
        f"{mode}: {args.count:,} messages ({size / 1e6:.0f} MB) in {best:.2f} s "
        f"= {args.count / best:,.0f} msgs/s ({size / best / 1e6:.0f} MB/s)"
    )


def bench_wide(count: int, schemas: bool, repeat: int) -> None:
    """Decode the wide catch-up workload with and without the limits, alternately."""
    import os
    import statistics

    from engine.playground.workload import InventoryWorkload

    workload = InventoryWorkload(seed=1, prefix="bench", schemas=schemas, notes=True)
    mix = {"update": 0.6, "insert": 0.2, "delete": 0.1}
    messages = list(workload.events(count, snapshot_fraction=0.1, mix=mix, hot_fraction=0.5))
    size = sum(len(k or b"") + len(v or b"") for _, k, v in messages)
    batches: list[list[RecordBatch]] = []
    for start in range(0, len(messages), 100_000):
        topics: dict[str, tuple[list, list, list]] = {}
        for offset in range(start, min(start + 100_000, len(messages))):
            topic, key, value = messages[offset]
            keys, values, offsets = topics.setdefault(topic, ([], [], []))
            keys.append(key)
            values.append(value)
            offsets.append(offset)
        batches.append([RecordBatch(t, k, v, [0] * len(o), o) for t, (k, v, o) in topics.items()])
    del messages
    cfg = {"source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
           "target": {"path": "unused"}}  # fmt: skip
    guarded = decoder_for(config_from_dict(cfg))
    sides = {"with the limits": guarded, "without": guarded.inner}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for round_no in range(repeat):
        # ABBA: the side that goes first alternates (the first pays for warming memory).
        order = list(sides.items()) if round_no % 2 == 0 else list(sides.items())[::-1]
        for name, decode in order:
            wall, cpu = time.perf_counter(), time.process_time()
            rows = 0
            for batch in batches:
                for records in batch:
                    result = decode(records)
                    assert not result.bad, result.bad[:3]
                    rows += result.batch.num_rows if result.batch is not None else 0
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            assert rows == count, rows
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"wide workload, schemas.enable={schemas}: {count:,} messages ({size / 2**20:,.0f} MiB), "
        f"{os.cpu_count()} cores, load average {load}"
    )
    median = {
        name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
        for name, t in times.items()
    }
    for name, (wall, cpu) in median.items():
        print(f"  {name:16} {count / wall:>9,.0f} msgs/s, {wall:.2f} s wall, {cpu:.2f} CPU-s")
    (gw, gc), (uw, uc) = median["with the limits"], median["without"]
    print(
        f"  cost of the limits: {100 * (gw - uw) / uw:+.1f}% wall, "
        f"{100 * (gc - uc) / uc:+.1f}% CPU (medians of {repeat} rounds, ABBA order)"
    )


def bench_avro(count: int, repeat: int) -> None:
    import io

    import fastavro

    from engine.decode.debezium_avro import AvroDecoder, RegistrySettings, SchemaCache
    from engine.playground.registry import SchemaRegistry
    from tests.avro_support import JsonToAvro

    json_keys, json_values = generate(count, True)
    with SchemaRegistry() as registry:
        convert = JsonToAvro(registry.url, fast=True)
        started = time.perf_counter()
        pairs = [
            convert.message("bench.public.items", k, v)
            for k, v in zip(json_keys, json_values, strict=True)
        ]
        print(f"serialized {count:,} with AvroSerializer in {time.perf_counter() - started:.1f} s")
        keys = [k for _, k, _ in pairs]
        values = [v for _, _, v in pairs]
        size = sum(len(b or b"") for b in keys) + sum(len(b or b"") for b in values)
        partitions = [0] * count
        offsets = list(range(count))
        decoder = AvroDecoder(SchemaCache(RegistrySettings(registry.url)))
        decoder(
            RecordBatch("bench.public.items", keys[:10], values[:10], partitions[:10], offsets[:10])
        )
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            result = decoder(RecordBatch("bench.public.items", keys, values, partitions, offsets))
            best = min(best, time.perf_counter() - start)
            assert result.batch is not None and result.batch.num_rows == count, result.bad[:3]
        print(
            f"debezium-avro: {count:,} messages ({size / 1e6:.0f} MB) in {best:.2f} s "
            f"= {count / best:,.0f} msgs/s ({size / best / 1e6:.0f} MB/s)"
        )
        value_id = int.from_bytes(values[0][1:5], "big")  # type: ignore[index]
        schema = fastavro.parse_schema(json.loads(registry.store.schemas[value_id]["schema"]))
        sample = values[: min(count, 200_000)]
        start = time.perf_counter()
        for v in sample:
            fastavro.schemaless_reader(io.BytesIO(v[5:]), schema, None)  # type: ignore[index]
        took = time.perf_counter() - start
        rate = len(sample) / took
        print(f"fastavro, record by record (values only, to Python dicts): {rate:,.0f} msgs/s")


if __name__ == "__main__":
    main()
