"""Validate benchmark: `cdcctl validate`'s engine on a large table against PostgreSQL.

Usage:  .venv/bin/python bench/validate.py [--rows 1000000] [--rounds 3]
            [--dsn postgresql://user@host:port/db]

Without ``--dsn`` it starts a scratch PostgreSQL cluster (tests/scratch_postgres.py, from
``./bootstrap.sh peers``) and removes it at the end. Creates a scratch database on the
server (dropped at the end), fills a table of
``--rows`` rows in SQL, builds its replica with the engine (``Replicator.merge_batch``
of the same rows in four batches, no Kafka: most file slices then have log files), then,
``--rounds`` times interleaved, times :func:`engine.validate_replicas` on the equal table
and its two peers, the raw cost of reading each side: the source table through ``COPY
... TO STDOUT`` (CSV, psycopg) parsed by Arrow, and the replica's columns read by hudi-rs
(``HudiTable.read``). Then 10 differences are made in the source (4 updates, 3 deletes,
3 inserts) and validate is timed ``--rounds`` times again. Prints seconds, rows/s, the
ratio to the peers, ranges, this process's CPU seconds, the load average and peak
memory. A benchmark, not a test: it asserts only that the differences are found.
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
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

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


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(target: Path, dsn: str, label: str) -> float:
    """Seconds of one validation."""
    cpu, t0 = _cpu(), time.monotonic()
    [report] = validate_replicas(target, dsn)
    seconds = time.monotonic() - t0
    print(
        f"{label}: {report.status}, {report.source_rows:,} source rows, "
        f"{report.replica_rows:,} replica rows in {seconds:.2f} s = "
        f"{report.source_rows / seconds:,.0f} rows/s; {report.method}, {report.ranges} ranges, "
        f"{report.ranges_differing} differing, {report.rows_compared_row_by_row:,} rows "
        f"compared row by row; missing {report.missing}, extra {report.extra}, "
        f"differing {report.differing}; this process {_cpu() - cpu:.1f} CPU s; {_load()}",
        flush=True,
    )
    if label.startswith("10"):
        assert (report.missing, report.extra, report.differing) == (3, 3, 4), report
    return seconds


class _CopyFile:
    """A psycopg ``COPY ... TO STDOUT`` as a readable file, for Arrow's CSV reader."""

    closed = False

    def __init__(self, copy: Any) -> None:
        self._rows = iter(copy)
        self._pending = b""

    def read(self, size: int = -1) -> bytes:
        parts, have = [self._pending], len(self._pending)
        while size < 0 or have < size:
            row = next(self._rows, None)
            if row is None:
                break
            parts.append(bytes(row))
            have += len(row)
        data = b"".join(parts)
        cut = len(data) if size < 0 else size
        self._pending = data[cut:]
        return data[:cut]

    def close(self) -> None:
        self.closed = True


def peer_copy(dsn: str) -> float:
    """Seconds to read the source table: COPY TO STDOUT (CSV) parsed by Arrow."""
    t0 = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        with cur.copy("COPY public.items TO STDOUT (FORMAT csv)") as copy:
            names = ["id", "name", "qty", "price", "at", "flag"]
            table = pacsv.read_csv(
                _CopyFile(copy),
                read_options=pacsv.ReadOptions(column_names=names, block_size=8 << 20),
            )
    seconds = time.monotonic() - t0
    print(
        f"  peer, source read (COPY TO STDOUT, CSV, into Arrow): {table.num_rows:,} rows in "
        f"{seconds:.2f} s = {table.num_rows / seconds:,.0f} rows/s; {_load()}",
        flush=True,
    )
    return seconds


def peer_replica(target: Path) -> float:
    """Seconds for hudi-rs to read the replica's columns (its own snapshot read)."""
    import hudi

    [path] = [p for p in target.iterdir() if p.is_dir()]
    t0 = time.monotonic()
    columns = ["id", "name", "qty", "price", "at", "flag", "_cdc_pos"]
    batches = hudi.HudiTable(str(path)).read(hudi.HudiReadOptions().with_projection(columns))
    rows = sum(b.num_rows for b in batches)
    seconds = time.monotonic() - t0
    print(
        f"  peer, replica read (hudi-rs HudiTable.read, {len(columns)} columns): {rows:,} rows "
        f"in {seconds:.2f} s = {rows / seconds:,.0f} rows/s; {_load()}",
        flush=True,
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
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
        f"Python {platform.python_version()}, {args.rows:,} rows, {_load()}",
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
                for i in range(args.rounds):
                    seconds = run(target, dsn, f"equal, round {i + 1}")
                    copy, read = peer_copy(dsn), peer_replica(target)
                    print(
                        f"  validate / source read {seconds / copy:.1f}x, validate / replica "
                        f"read {seconds / read:.1f}x, validate / both reads "
                        f"{seconds / (copy + read):.2f}x",
                        flush=True,
                    )
                step = args.rows // 10
                for i in range(4):
                    conn.execute("UPDATE public.items SET qty = -1 WHERE id = %s", (1 + i * step,))
                for i in range(3):
                    conn.execute("DELETE FROM public.items WHERE id = %s", (5 + i * step,))
                conn.execute(FILL, (args.rows + 1, args.rows + 3))
                for i in range(args.rounds):
                    run(target, dsn, f"10 differences, round {i + 1}")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory of this process (replica build included): {peak:,.0f} MiB")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
