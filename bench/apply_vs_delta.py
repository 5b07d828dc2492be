"""Apply benchmark: the engine's merge+commit vs delta-rs MERGE, same change sets, one run.

Usage:  .venv/bin/python bench/apply_vs_delta.py [--rows 2000000] [--changes 1000,10000,200000]
            [--repeat 3] [--table-type MERGE_ON_READ|COPY_ON_WRITE]

A table of ``--rows`` rows is built once per engine (Hudi via the engine, Delta via
``write_deltalake``); then each deduplicated change set (80% updates, 10% inserts, 10%
deletes, keys uniform over the table) is applied by both, in the same order, ``--repeat``
times (fresh keys each time; the median is printed, with the range). Decoding is not
measured: the engine gets the decoded change batch, delta-rs gets the same rows.
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.config import config_from_dict  # noqa: E402
from engine.model import STREAMED_BIT  # noqa: E402
from engine.replicator import Replicator  # noqa: E402
from engine.spark import get_spark  # noqa: E402

TOPIC = "bench.app.items"


def change_batch(ids: np.ndarray, ops: np.ndarray, pos0: int, rng: np.random.Generator) -> pa.Table:
    """A decoded change batch (control columns + row image), as the decoder emits it."""
    n = len(ids)
    deleted = ops == "d"
    return pa.table(
        {
            "_cdc_key": pa.array(ids.astype(str)),
            "_cdc_op": pa.array(ops),
            "_cdc_pos": pa.array(STREAMED_BIT + pos0 + np.arange(n), pa.int64()),
            "_cdc_pos_sub": pa.array(pos0 + np.arange(n), pa.int64()),
            "_cdc_source_ts_ms": pa.array(np.full(n, 1_700_000_000_000), pa.int64()),
            "_cdc_partition": pa.array(np.zeros(n, np.int32)),
            "_cdc_offset": pa.array(pos0 + np.arange(n), pa.int64()),
            "_cdc_tx_id": pa.nulls(n, pa.string()),
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(np.char.add("name-", rng.integers(0, 10**9, n).astype(str))),
            "qty": pa.array(np.where(deleted, 0, rng.integers(0, 1000, n)), pa.int32()),
            "price": pa.array(rng.random(n) * 100),
            "status": pa.array(rng.choice(["NEW", "PAID", "SHIPPED"], n)),
        }
    )


def in_process_replicator(
    root: Path, buckets: int, clean_retain_commits: int = 10, table_type: str = "MERGE_ON_READ"
) -> Replicator:
    """A replicator writing under ``root``, merging with a local Spark session (no Kafka)."""
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(root / "lake")},
            "hudi": {
                "num_buckets": buckets,
                "clean_retain_commits": clean_retain_commits,
                "table_type": table_type,
            },
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    return Replicator(cfg, spark=get_spark("local[2]", "1g"))


def delta_rows(batch: pa.Table) -> pa.Table:
    return batch.select(["id", "name", "qty", "price", "status", "_cdc_op"]).rename_columns(
        ["id", "name", "qty", "price", "status", "op"]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", default="1000,10000,200000")
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--table-type", default="MERGE_ON_READ", choices=["MERGE_ON_READ", "COPY_ON_WRITE"]
    )
    args = ap.parse_args()
    from deltalake import DeltaTable, write_deltalake

    rng = np.random.default_rng(1)
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rep = in_process_replicator(root, args.buckets, table_type=args.table_type)
        base = change_batch(np.arange(args.rows), np.full(args.rows, "r"), 0, rng)
        t0 = time.perf_counter()
        rep.merge_batch(TOPIC, base, ["id"], {0: args.rows})
        hudi_load = time.perf_counter() - t0
        delta_path = str(root / "delta")
        t0 = time.perf_counter()
        write_deltalake(delta_path, delta_rows(base).drop_columns(["op"]))
        delta_load = time.perf_counter() - t0
        print(
            f"table: {args.rows:,} rows; initial load: engine {hudi_load:.2f}s, "
            f"delta-rs {delta_load:.2f}s ({args.buckets} buckets, {args.table_type})"
        )
        next_id, pos = args.rows, args.rows
        print(
            f"{'changes':>9} {'engine s (range)':>20} {'delta-rs s (range)':>20} "
            f"{'delta/engine':>13}"
        )
        for size in (int(x) for x in args.changes.split(",")):
            engine_times, delta_times = [], []
            for _ in range(args.repeat):
                kinds = rng.choice(["u", "c", "d"], size, p=[0.8, 0.1, 0.1])
                existing = rng.choice(next_id, size, replace=False)
                ids = np.where(kinds == "c", np.arange(next_id, next_id + size), existing)
                next_id += size
                batch = change_batch(ids, kinds, pos, rng)
                pos += size
                t0 = time.perf_counter()
                rep.merge_batch(TOPIC, batch, ["id"], {0: pos})
                engine_times.append(time.perf_counter() - t0)
                source = delta_rows(batch)
                t0 = time.perf_counter()
                (
                    DeltaTable(delta_path)
                    .merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
                    .when_matched_delete(predicate="s.op = 'd'")
                    .when_matched_update(
                        {c: f"s.{c}" for c in ("name", "qty", "price", "status")},
                        predicate="s.op != 'd'",
                    )
                    .when_not_matched_insert(
                        {c: f"s.{c}" for c in ("id", "name", "qty", "price", "status")},
                        predicate="s.op != 'd'",
                    )
                    .execute()
                )
                delta_times.append(time.perf_counter() - t0)
            engine_s, delta_s = float(np.median(engine_times)), float(np.median(delta_times))
            print(
                f"{size:>9,} {engine_s:>6.2f} ({min(engine_times):.2f}-{max(engine_times):.2f})"
                f"{delta_s:>9.2f} ({min(delta_times):.2f}-{max(delta_times):.2f})"
                f" {delta_s / engine_s:>12.2f}x"
            )


if __name__ == "__main__":
    main()
