"""Time of writing one base file (``write_base_file``), the Copy-on-Write rewrite's and the
compaction's last step (not a test).

Builds a file group's rows in the file schema (Hudi's meta columns, an orders-like row
image, the ``_cdc_*`` columns; integer record keys) and writes them with
``engine.hudi.file_slice.write_base_file``, best of ``--repeat``; then the footer's
share alone (``engine.hudi.bloom.footer_metadata``) when the build has it.

Usage::

    python bench/base_file_write.py [--rows 1000000 2000000 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from engine.hudi.file_slice import base_rows, write_base_file  # noqa: E402

DATA_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("customer_id", pa.int64()),
        ("status", pa.string()),
        ("amount", pa.float64()),
        ("note", pa.string()),
        ("updated_at", pa.timestamp("us", tz="UTC")),
        ("_cdc_op", pa.string()),
        ("_cdc_pos", pa.int64()),
        ("_cdc_pos_sub", pa.int64()),
        ("_cdc_source_ts_ms", pa.int64()),
    ]
)


def group_rows(n: int) -> pa.Table:
    """``n`` rows of one file group, as ``SliceWrite.write`` hands them to the writer."""
    rng = np.random.default_rng(7)
    ids = np.arange(1_000_000, 1_000_000 + n, dtype=np.int64)
    upserts = pa.table(
        {
            "id": ids,
            "customer_id": rng.integers(1, 50_000, n),
            "status": pa.array(np.array(["new", "paid", "shipped", "done"])[ids % 4]),
            "amount": rng.random(n) * 500,
            "note": pa.array([f"order note {i % 997}" for i in range(n)]),
            "updated_at": pa.array(1_790_000_000_000_000 + ids * 1000, pa.timestamp("us", "UTC")),
            "_cdc_op": pa.array(np.full(n, "u")),
            "_cdc_pos": (1 << 62) + ids * 16,
            "_cdc_pos_sub": ids * 16,
            "_cdc_source_ts_ms": 1_790_000_000_000 + ids,
        }
    )
    return base_rows(
        pa.table({}),
        upserts,
        "id",
        instant="20261125120000000",
        task_partition=0,
        file_name="00000000-0000-0000-0000-000000000000-0_0-1-0_20261125120000000.parquet",
        data_schema=DATA_SCHEMA,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 2_000_000, 100])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    try:
        from engine.hudi.bloom import footer_metadata
    except ImportError:
        footer_metadata = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            rows = group_rows(n)
            path = Path(tmp) / f"g{n}.parquet"
            times, size = [], 0
            for _ in range(args.repeat):
                start = time.perf_counter()
                size = write_base_file(rows, path)
                times.append(time.perf_counter() - start)
            line = f"{n:>9,} rows: write_base_file best {min(times):.3f} s"
            line += f" (runs {', '.join(f'{t:.3f}' for t in times)}), {size / 1e6:.2f} MB"
            if footer_metadata is not None:
                keys = rows.column("_hoodie_record_key")
                best = float("inf")
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    footer_metadata(keys)
                    best = min(best, time.perf_counter() - start)
                line += f"; footer alone {best:.3f} s ({n / best / 1e6:.1f} M keys/s)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
