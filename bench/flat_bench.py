"""Decode rate of the per-record rewriting path (not a test): flattened events
(``source.format = "debezium-flat"``) and a ``keyless = "full-row"`` table, next to the
bulk Debezium JSON path on the same rows.

Usage::

    python bench/flat_bench.py [--count N] [--schemas]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import config_from_dict  # noqa: E402
from engine.decode import RecordBatch, decoder_for  # noqa: E402

TOPIC = "bench.public.items"
_ROW = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int32", "optional": True, "field": "qty"},
    {"type": "double", "optional": True, "field": "price"},
]
_META = [
    {"type": "string", "optional": True, "field": "__op"},
    {"type": "int64", "optional": True, "field": "__lsn"},
    {"type": "int64", "optional": True, "field": "__source_ts_ms"},
    {"type": "string", "optional": True, "field": "__deleted"},
]
_SOURCE = {
    "type": "struct",
    "optional": False,
    "field": "source",
    "fields": [
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "int64", "optional": True, "field": "lsn"},
        {"type": "int64", "optional": True, "field": "ts_ms"},
    ],
}


def _row(i: int) -> dict:
    return {"id": i, "name": f"item {i}", "qty": i % 100, "price": i / 7}


def _wrap(schema: dict | None, payload: dict, schemas: bool) -> bytes:
    if not schemas:
        return json.dumps(payload, separators=(",", ":")).encode()
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()


def generate(kind: str, n: int, schemas: bool) -> tuple[list, list]:
    row_schema = {"type": "struct", "optional": True, "name": TOPIC + ".Value", "fields": _ROW}
    env_schema = {
        "type": "struct",
        "optional": False,
        "name": TOPIC + ".Envelope",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            _SOURCE,
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    flat_schema = {"type": "struct", "optional": False, "fields": _ROW + _META}
    keys, values = [], []
    for i in range(n):
        lsn = 1000 + i
        if kind == "flat":
            meta = {"__op": "u", "__lsn": lsn, "__source_ts_ms": lsn, "__deleted": "false"}
            values.append(_wrap(flat_schema, {**_row(i), **meta}, schemas))
            keys.append(json.dumps({"id": i}).encode())
        else:
            source = {"connector": "postgresql", "lsn": lsn, "ts_ms": lsn}
            env = {"op": "c", "before": None, "after": _row(i), "source": source}
            values.append(_wrap(env_schema, env, schemas))
            keys.append(None if kind == "keyless" else json.dumps({"id": i}).encode())
    return keys, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--schemas", action="store_true")
    args = parser.parse_args()
    scratch = Path(tempfile.gettempdir()) / "cdcctl-bench"  # never written: decoding only
    base = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
        "target": {"path": str(scratch / "lake")},
        "replicator": {"work_dir": str(scratch / "work")},
    }
    cases = {
        "envelope (debezium-json)": ("envelope", base),
        "flattened (debezium-flat)": (
            "flat",
            {**base, "source": {**base["source"], "format": "debezium-flat"}},
        ),
        'keyless = "full-row"': (
            "keyless",
            {**base, "tables": {"public_items": {"keyless": "full-row"}}},
        ),
    }
    n = args.count
    for label, (kind, cfg) in cases.items():
        decode = decoder_for(config_from_dict(cfg))
        keys, values = generate(kind, n, args.schemas)
        t0 = time.perf_counter()
        result = decode(RecordBatch(TOPIC, keys, values, [0] * n, list(range(n))))
        took = time.perf_counter() - t0
        assert result.batch is not None and result.batch.num_rows == n, result.bad[:1]
        print(f"{label:28s} {n / took:>10,.0f} events/s ({n:,} events, {took:.2f} s)")


if __name__ == "__main__":
    main()
