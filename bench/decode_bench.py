"""Throughput benchmark of the Debezium JSON and Avro decoders (not a test).

Generates PostgreSQL update events as the JsonConverter writes them and reports the
decode rate. By default: 1,000,000 schemaless events (``schemas.enable=false``); with
``--schemas`` the same events wrapped in ``{"schema":...,"payload":...}`` (keys too);
with ``--avro`` the same events re-serialized as Confluent's AvroConverter writes them
(confluent-kafka's AvroSerializer against the test schema registry), decoded by the
``debezium-avro`` decoder, next to fastavro decoding the same bodies one by one.

Usage::

    python bench/decode_bench.py [--count N] [--schemas | --avro] [--repeat R] [--hints] [--guarded]

``--hints`` decodes with column type hints (``price = "decimal(10,2)"``, ``updated_at =
"timestamp"``), as ``[tables.<name>.columns]`` gives them.
``--guarded`` decodes through ``engine.decode.decoder_for`` with the default config, as
the replicator does: behind the size and nesting limits of ``engine.decode.limits``.

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
    args = parser.parse_args()
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
