"""Validate benchmark: `cdcctl validate`'s engine on a large table against PostgreSQL.

Usage:  .venv/bin/python bench/validate.py [--rows 1000000] [--dsn postgresql://user@host:port/db]

Without ``--dsn`` it starts a scratch PostgreSQL cluster (tests/scratch_postgres.py, from
``./bootstrap.sh peers``) and removes it at the end. Creates a scratch database on the
server (dropped at the end), fills a table of
``--rows`` rows in SQL, builds its replica with the engine (``Replicator.merge_batch``
of the same rows, no Kafka), then times :func:`engine.validate_replicas` twice: equal,
and after 10 differences made in the source (4 updates, 3 deletes, 3 inserts). Prints
seconds, rows/s, ranges and peak memory. A benchmark, not a test: it asserts only that
the differences are found.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.config import config_from_dict  # noqa: E402
from engine.replicator import Replicator  # noqa: E402
from engine.spark import get_spark  # noqa: E402
from engine.validate import validate_replicas  # noqa: E402
from tests.scratch_postgres import start_scratch_postgres  # noqa: E402

TOPIC = "bench.public.items"
TABLE = """
CREATE TABLE public.items (
    id bigint PRIMARY KEY, name text, qty integer, price numeric(12, 2),
    at timestamp, flag boolean
)
"""
FILL = """
INSERT INTO public.items
SELECT g, 'name-' || g, (g %% 1000)::int, ((g * 37) %% 1000000) / 100.0,
       timestamp '2024-01-01' + g * interval '1 second', g %% 3 = 0
FROM generate_series(%s, %s) g
"""


def rows_batch(lo: int, hi: int) -> pa.Table:
    """The change batch (snapshot reads) of ids lo..hi, the same values as FILL."""
    ids = np.arange(lo, hi + 1, dtype=np.int64)
    n = len(ids)
    cents = ((ids * 37) % 1_000_000).tolist()
    price = pa.array([Decimal(c).scaleb(-2) for c in cents], pa.decimal128(12, 2))
    epoch_2024 = 1_704_067_200_000_000
    return pa.table(
        {
            "_cdc_key": pa.array(ids.astype(str)),
            "_cdc_op": pa.array(np.full(n, "r")),
            "_cdc_pos": pa.array(ids, pa.int64()),
            "_cdc_pos_sub": pa.array(ids, pa.int64()),
            "_cdc_source_ts_ms": pa.array(np.full(n, 1_700_000_000_000), pa.int64()),
            "_cdc_partition": pa.array(np.zeros(n, np.int32)),
            "_cdc_offset": pa.array(ids, pa.int64()),
            "_cdc_tx_id": pa.nulls(n, pa.string()),
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(np.char.add("name-", ids.astype(str))),
            "qty": pa.array((ids % 1000).astype(np.int32)),
            "price": price,
            "at": pa.array(epoch_2024 + ids * 1_000_000, pa.int64()).cast(pa.timestamp("us")),
            "flag": pa.array(ids % 3 == 0),
        }
    )


def build_replica(root: Path, rows: int) -> Path:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(root / "lake")},
            "hudi": {"num_buckets": 8},
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    rep = Replicator(cfg, spark=get_spark("local[2]", "2g"))
    step = 250_000
    for lo in range(1, rows + 1, step):
        hi = min(rows, lo + step - 1)
        rep.merge_batch(TOPIC, rows_batch(lo, hi), ["id"], {0: hi})
    return root / "lake"


def run(target: Path, dsn: str, label: str) -> None:
    t0 = time.monotonic()
    [report] = validate_replicas(target, dsn)
    seconds = time.monotonic() - t0
    print(
        f"{label}: {report.status}, {report.source_rows:,} source rows, "
        f"{report.replica_rows:,} replica rows in {seconds:.2f} s = "
        f"{report.source_rows / seconds:,.0f} rows/s; {report.method}, {report.ranges} ranges, "
        f"{report.ranges_differing} differing, {report.rows_compared_row_by_row:,} rows "
        f"compared row by row; missing {report.missing}, extra {report.extra}, "
        f"differing {report.differing}",
        flush=True,
    )
    if label.startswith("10"):
        assert (report.missing, report.extra, report.differing) == (3, 3, 4), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dsn", help="a PostgreSQL superuser DSN (default: a scratch cluster)")
    args = parser.parse_args()
    if args.dsn:
        bench(args)
        return
    cluster = start_scratch_postgres()
    try:
        args.dsn = cluster.dsn
        bench(args)
    finally:
        cluster.stop()


def bench(args: argparse.Namespace) -> None:
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {args.rows:,} rows",
        flush=True,
    )
    name = f"cdcctl_bench_validate_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = args.dsn.rsplit("/", 1)[0] + "/" + name
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.monotonic()
            conn.execute(TABLE)
            conn.execute(FILL, (1, args.rows))
            conn.execute("VACUUM ANALYZE public.items")
            print(f"source filled in {time.monotonic() - t0:.1f} s", flush=True)
            with tempfile.TemporaryDirectory(prefix="cdcctl-bench-validate-") as tmp:
                t0 = time.monotonic()
                target = build_replica(Path(tmp), args.rows)
                print(f"replica built in {time.monotonic() - t0:.1f} s", flush=True)
                run(target, dsn, "equal")
                step = args.rows // 10
                for i in range(4):
                    conn.execute("UPDATE public.items SET qty = -1 WHERE id = %s", (1 + i * step,))
                for i in range(3):
                    conn.execute("DELETE FROM public.items WHERE id = %s", (5 + i * step,))
                conn.execute(FILL, (args.rows + 1, args.rows + 3))
                run(target, dsn, "10 differences")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory of this process (replica build included): {peak:,.0f} MiB")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
