"""Growth benchmark: seconds per batch of 10k changes as a Copy-on-Write table grows.

Usage:  .venv/bin/python bench/growth.py [--sizes 1,2,5,10] [--changes 10000]

The table grows by inserts to each size (millions of rows); at each size two 10k-change
batches of updates are timed: keys spread uniformly over the whole table, and 90% of
the updates on the newest 10% of keys ("hot"). With Copy-on-Write and a bucket index,
a batch that touches every file group rewrites the whole table, so these figures size
the Merge-on-Read work that follows. A benchmark, not a test: it asserts nothing.
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
    args = ap.parse_args()
    rng = np.random.default_rng(2)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{args.buckets} buckets; {args.changes:,} updates per timed batch")
    print(f"{'rows':>12} {'uniform s':>10} {'hot s':>8} {'rows rewritten (uniform)':>26}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rep = in_process_replicator(root, args.buckets, clean_retain_commits=2)
        rows, pos = 0, 0
        for size in (int(float(x) * 1_000_000) for x in args.sizes.split(",")):
            while rows < size:
                n = min(1_000_000, size - rows)
                batch = change_batch(np.arange(rows, rows + n), np.full(n, "c"), pos, rng)
                rep.merge_batch(TOPIC, batch, ["id"], {0: pos + n})
                rows, pos = rows + n, pos + n
            timings = []
            for hot in (False, True):
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
                timings.append(time.perf_counter() - t0)
                pos += len(ids)
            print(f"{rows:>12,} {timings[0]:>10.2f} {timings[1]:>8.2f} {rows:>26,}")


if __name__ == "__main__":
    main()
