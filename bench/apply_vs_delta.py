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
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from applying import (  # noqa: E402
    TOPIC,
    ChangeSets,
    change_batch,
    in_process_replicator,
    machine,
)

__all__ = ["TOPIC", "change_batch", "in_process_replicator"]  # bench/growth.py imports them


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

    changes = ChangeSets(args.rows)
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rep = in_process_replicator(root, args.buckets, table_type=args.table_type)
        base = changes.base()
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
        print(
            f"{'changes':>9} {'engine s (range)':>20} {'delta-rs s (range)':>20} "
            f"{'delta/engine':>13}"
        )
        for size in (int(x) for x in args.changes.split(",")):
            engine_times, delta_times = [], []
            for _ in range(args.repeat):
                batch = changes.next(size)
                t0 = time.perf_counter()
                rep.merge_batch(TOPIC, batch, ["id"], {0: changes.pos})
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
