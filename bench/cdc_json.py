"""Generic CDC JSON benchmark: decode speed and the fold of full vs partial images.

Usage:  .venv/bin/python bench/cdc_json.py [--events 100000] [--rows 200000] [--columns 8]

Decode: ``--events`` messages (updates of random keys carrying every column for full
images, two random columns for partial ones) through the cdc-json decoder, events/s.
Fold: one file group of ``--rows`` stored rows and a batch of ``--events`` such events,
folded in-process by :func:`engine.merge.merge_file_group` (no Spark, no files): the
cost of keeping per-column positions. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.config import config_from_dict  # noqa: E402
from engine.decode import RecordBatch, decoder_for  # noqa: E402
from engine.hudi import HOODIE_RECORD_KEY  # noqa: E402
from engine.merge import evolve_schema, merge_file_group  # noqa: E402
from engine.model import KEY  # noqa: E402


def _values(n: int, keys: int, columns: int, partial: bool, start: int, rng: random.Random):
    out = []
    names = [f"col_{j}" for j in range(columns)]
    for i in range(n):
        carried = rng.sample(names, 2) if partial else names
        event = {"PK": rng.randrange(keys), "_action": "_update", "_timestamp": start + i}
        event.update({c: rng.randrange(1000) for c in carried})
        out.append(json.dumps(event).encode())
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--columns", type=int, default=8)
    args = parser.parse_args()
    rng = random.Random(1)
    for images in ("full", "partial"):
        cfg = config_from_dict(
            {
                "source": {
                    "bootstrap_servers": "127.0.0.1:1",
                    "topics": ".",
                    "format": "cdc-json",
                    "cdc_json": {"key_fields": ["PK"], "images": images},
                },
                "target": {"path": str(Path(tempfile.gettempdir()) / "cdcctl-bench-cdc-json")},
            }
        )
        decode = decoder_for(cfg)
        cols = args.columns
        # The stored table: every key inserted once with every column.
        initial = [
            json.dumps(
                {
                    "PK": k,
                    "_action": "_insert",
                    "_timestamp": k,
                    **{f"col_{j}": k for j in range(cols)},
                }
            ).encode()
            for k in range(args.rows)
        ]
        base = decode(
            RecordBatch(
                "b.app.t",
                [None] * len(initial),
                initial,
                [0] * len(initial),
                list(range(len(initial))),
            )
        )
        values = _values(args.events, args.rows, cols, images == "partial", args.rows, rng)
        t0 = time.perf_counter()
        result = decode(
            RecordBatch(
                "b.app.t", [None] * len(values), values, [0] * len(values), list(range(len(values)))
            )
        )
        decode_s = time.perf_counter() - t0
        schema = evolve_schema(evolve_schema(None, base.batch.schema), result.batch.schema)
        first = merge_file_group(None, base.batch, instant="1", data_schema=schema)
        stored = first.upserts.rename_columns(
            [HOODIE_RECORD_KEY if c == KEY else c for c in first.upserts.column_names]
        )
        t0 = time.perf_counter()
        merged = merge_file_group(stored, result.batch, instant="2", data_schema=schema)
        fold_s = time.perf_counter() - t0
        print(
            f"{images:8s} decode {args.events / decode_s:>10,.0f} events/s   "
            f"fold {args.events:,} events into {args.rows:,} rows: {fold_s:6.2f} s "
            f"({merged.counts.updates:,} rows updated)"
        )


if __name__ == "__main__":
    main()
