"""Growth benchmark: seconds per batch of 10k changes as a table grows.

Usage:  .venv/bin/python bench/growth.py [--sizes 1,2,5,10] [--changes 10000] [--batches 5]
            [--table-type MERGE_ON_READ|COPY_ON_WRITE]
        .venv/bin/python bench/growth.py --deletes [--sizes 1] [--batches 60]

The table grows by inserts to each size (millions of rows); at each size ``--batches``
10k-change batches of updates are timed for two key patterns: keys spread uniformly
over the whole table, and 90% of the updates on the newest 10% of keys ("hot"). The
median and the slowest batch are printed: with Merge-on-Read a batch appends a log file
per file group and an occasional batch compacts (rewrites) the groups whose logs grew;
with Copy-on-Write and a bucket index every batch rewrites every file group it touches,
i.e. the whole table. A benchmark, not a test: it asserts nothing.

``--deletes``: the table's delete tombstones grow instead of its rows. At the first
size, ``--batches`` batches of ``--changes`` changes, half deletes of stored keys and
half inserts of new ones (the row count stays flat), are timed one by one; every
delete leaves a tombstone kept for the retention window (a week by default), so the
tombstones grow by ``changes / 2`` a batch. Printed: the median seconds per batch for
each tenth of the run, with the tombstones held then.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from apply_vs_delta import TOPIC, change_batch, in_process_replicator  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1,2,5,10", help="table sizes in millions of rows")
    ap.add_argument("--changes", type=int, default=10_000)
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument(
        "--table-type", default="MERGE_ON_READ", choices=["MERGE_ON_READ", "COPY_ON_WRITE"]
    )
    ap.add_argument("--deletes", action="store_true", help="grow the tombstones, not the rows")
    args = ap.parse_args()
    rng = np.random.default_rng(2)
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{args.buckets} buckets, {args.table_type}; {args.changes:,} updates per timed batch, "
        f"{args.batches} batches per pattern"
    )
    if args.deletes:
        deletes(args, rng)
        return
    print(f"{'rows':>12} {'uniform median / max s':>24} {'hot median / max s':>20}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rep = in_process_replicator(
            root, args.buckets, clean_retain_commits=2, table_type=args.table_type
        )
        rows, pos = 0, 0
        medians: list[tuple[int, float]] = []
        for size in (int(float(x) * 1_000_000) for x in args.sizes.split(",")):
            while rows < size:
                n = min(1_000_000, size - rows)
                batch = change_batch(np.arange(rows, rows + n), np.full(n, "c"), pos, rng)
                rep.merge_batch(TOPIC, batch, ["id"], {0: pos + n})
                rows, pos = rows + n, pos + n
            timings: dict[bool, list[float]] = {False: [], True: []}
            for hot in [False, True] * args.batches:
                if hot:
                    newest = np.arange(int(rows * 0.9), rows)
                    n_hot = int(args.changes * 0.9)
                    ids = np.concatenate(
                        [
                            rng.choice(newest, n_hot, replace=False),
                            rng.choice(int(rows * 0.9), args.changes - n_hot, replace=False),
                        ]
                    )
                else:
                    ids = rng.choice(rows, args.changes, replace=False)
                batch = change_batch(ids, np.full(len(ids), "u"), pos, rng)
                t0 = time.perf_counter()
                rep.merge_batch(TOPIC, batch, ["id"], {0: pos + len(ids)})
                timings[hot].append(time.perf_counter() - t0)
                pos += len(ids)
            uni, hot_t = timings[False], timings[True]
            medians.append((rows, float(np.median(uni))))
            print(
                f"{rows:>12,} {np.median(uni):>15.2f} / {max(uni):>5.2f}"
                f" {np.median(hot_t):>11.2f} / {max(hot_t):>5.2f}"
            )
    if len(medians) > 1:
        (small, first), (large, last) = medians[0], medians[-1]
        print(
            f"uniform median at {large:,} rows / at {small:,} rows: {last / first:.2f}x "
            f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
        )


def deletes(args: argparse.Namespace, rng: np.random.Generator) -> None:
    """Seconds per batch as the delete tombstones pile up (``--deletes``)."""
    size = int(float(args.sizes.split(",")[0]) * 1_000_000)
    half = args.changes // 2
    with tempfile.TemporaryDirectory() as tmp:
        rep = in_process_replicator(
            Path(tmp), args.buckets, clean_retain_commits=2, table_type=args.table_type
        )
        for start in range(0, size, 1_000_000):
            n = min(1_000_000, size - start)
            batch = change_batch(np.arange(start, start + n), np.full(n, "c"), start, rng)
            rep.merge_batch(TOPIC, batch, ["id"], {0: start + n})
        live = np.arange(size)
        rng.shuffle(live)
        next_id, pos, times = size, size, []
        for _ in range(args.batches):
            gone, live = live[:half], live[half:]
            born = np.arange(next_id, next_id + half)
            live = np.concatenate([live, born])
            next_id += half
            ids = np.concatenate([gone, born])
            ops = np.concatenate([np.full(half, "d"), np.full(half, "c")])
            batch = change_batch(ids, ops, pos, rng)
            t0 = time.perf_counter()
            rep.merge_batch(TOPIC, batch, ["id"], {0: pos + len(ids)})
            times.append(time.perf_counter() - t0)
            pos += len(ids)
    print(f"{size:,} rows; {half:,} deletes + {half:,} inserts a batch")
    print(f"{'batches':>10} {'tombstones':>12} {'median s':>9} {'max s':>7}")
    step = max(1, len(times) // 10)
    for lo in range(0, len(times), step):
        part = times[lo : lo + step]
        print(
            f"{lo + 1:>4}-{lo + len(part):<5} {(lo + len(part)) * half:>12,} "
            f"{np.median(part):>9.3f} {max(part):>7.3f}"
        )
    first, last = np.median(times[:step]), np.median(times[-step:])
    print(
        f"last tenth / first tenth: {last / first:.2f}x "
        f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )


if __name__ == "__main__":
    main()
