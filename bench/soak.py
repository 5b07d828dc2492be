"""Soak benchmark: a live `cdcctl start` under a steady stream for a long time.

Usage:  .venv/bin/python bench/soak.py [--rate 2000] [--minutes 60] [--buckets 4]
                                       [--sample-seconds 60] [--log-dir DIR]

A replicator (`cdcctl start`, the real CLI in a child process) runs against the embedded
broker while a producer writes the demo workload's Debezium stream (three tables:
inserts, updates, deletes, tombstones) at a steady rate. Every --sample-seconds one line
is printed, so a reader sees whether anything grows that should not:

* memory: resident set of the replicator and of everything it started (Spark's JVM and
  Python workers), summed over the process tree;
* `.hoodie/` of all tables: files directly in it (the active timeline), files and bytes
  under `archived/`, bytes of cdcctl's tombstone sidecars, and the total;
* batches in the interval: count, median and p95 of their duration (from the
  replicator's own progress lines), and the backlog (produced minus applied messages).

At the end: the first and last quarter side by side. A benchmark, not a test: it
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.naming import table_name_for_topic  # noqa: E402
from engine.playground.broker import EmbeddedBroker, produce_messages  # noqa: E402
from engine.playground.workload import InventoryWorkload  # noqa: E402

BATCH_LINE = re.compile(r"^batch (\d+): (\d+) msgs in ([\d.]+)s")


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def folder_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under a folder."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
                files += 1
            except FileNotFoundError:
                pass
    return files, size


def hoodie_figures(tables: list[Path]) -> dict[str, int]:
    """Active-timeline files, archived files and bytes, tombstone bytes, total bytes."""
    out = dict(active=0, archived_files=0, archived_bytes=0, tombstone_bytes=0, total_bytes=0)
    for table in tables:
        hoodie = table / ".hoodie"
        if not hoodie.is_dir():
            continue
        out["active"] += sum(1 for e in os.scandir(hoodie) if e.is_file())
        files, size = folder_size(hoodie / "archived")
        out["archived_files"] += files
        out["archived_bytes"] += size
        out["tombstone_bytes"] += folder_size(hoodie / ".cdcctl")[1]
        out["total_bytes"] += folder_size(hoodie)[1]
    return out


def applied_per_topic(target: Path, topics: list[str]) -> dict[str, int]:
    """Per topic: messages applied, from its table's newest commit's checkpoint."""
    out = dict.fromkeys(topics, 0)
    for topic in topics:
        hoodie = target / table_name_for_topic(topic) / ".hoodie"
        if not hoodie.is_dir():
            continue
        newest = max(
            (p for p in hoodie.iterdir() if p.name.endswith(("commit", "deltacommit"))),
            default=None,
            key=lambda p: p.name,
        )
        if newest is None:
            continue
        try:
            meta = json.loads(newest.read_text())
        except (OSError, ValueError):
            continue
        checkpoint = meta.get("extraMetadata", {}).get("deltastreamer.checkpoint.key", "")
        out[topic] = sum(
            int(part.split(":")[1]) for part in checkpoint.split(",")[1:] if ":" in part
        )
    return out


def applied(target: Path, topics: list[str]) -> int:
    """Messages applied over all topics."""
    return sum(applied_per_topic(target, topics).values())


class LogReader(threading.Thread):
    """Follows the replicator's stderr file and collects (time, batch seconds)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.batches: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with self.path.open() as f:
            while not self.stop.is_set():
                line = f.readline()
                if not line:
                    time.sleep(0.2)
                    continue
                m = BATCH_LINE.match(line)
                if m:
                    self.batches.append((time.time(), float(m.group(3))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rate", type=int, default=2000, help="events per second")
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--buckets", type=int, default=4, help="hudi.num_buckets of the tables")
    ap.add_argument("--sample-seconds", type=float, default=60)
    ap.add_argument("--log-dir", type=Path, help="keep the replicator's output here")
    args = ap.parse_args()
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"soak: {args.rate:,} ev/s for {args.minutes:g} min, {args.buckets} buckets per table")
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log_dir = args.log_dir or root
        log_dir.mkdir(parents=True, exist_ok=True)
        bootstrap = broker.bootstrap_servers
        workload = InventoryWorkload(seed=7, prefix="soak")
        warmup = list(workload.snapshot(customers=2000, products=200, orders=2000))
        topics = sorted({t for t, _, _ in warmup})
        produce_messages(bootstrap, warmup)
        target = root / "lake"
        config = root / "cdcctl.toml"
        config.write_text(
            f'[source]\nbootstrap_servers = "{bootstrap}"\ntopics = "^soak\\\\."\n'
            f'[target]\npath = "{target}"\n[hudi]\nnum_buckets = {args.buckets}\n'
            f'[replicator]\nmax_batch_seconds = 0.5\nwork_dir = "{root / "work"}"\n'
        )
        log_path = log_dir / "soak-replicator.log"
        log = log_path.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdcctl", "start", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        reader = LogReader(log_path)
        reader.start()
        deadline = time.monotonic() + 180
        while applied(target, topics) < len(warmup):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                print("replicator did not start:", log_path.read_text()[-800:])
                return
            time.sleep(0.5)

        tables = [target / table_name_for_topic(t) for t in topics]
        producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"}
        )
        stream = workload.stream(int(args.rate * args.minutes * 60))
        started = time.time()
        next_sample = started + args.sample_seconds
        produced = len(warmup)
        rows: list[dict[str, float]] = []
        print(
            f"{'min':>5} {'rss MiB':>8} {'active':>7} {'archived':>9} {'arch MiB':>9} "
            f"{'tomb MiB':>9} {'.hoodie MiB':>11} {'batches':>8} {'p50 s':>6} {'p95 s':>6} "
            f"{'backlog':>8}",
            flush=True,
        )
        for topic, key, value in stream:
            producer.produce(topic, key=key, value=value)
            produced += 1
            if produced % 200 == 0:
                producer.poll(0)
                ahead = started + (produced - len(warmup)) / args.rate - time.time()
                if ahead > 0:
                    time.sleep(ahead)
            now = time.time()
            if now >= next_sample:
                producer.flush()
                batches = [s for t, s in reader.batches if next_sample - args.sample_seconds <= t]
                hood = hoodie_figures(tables)
                row = {
                    "min": (now - started) / 60,
                    "rss": tree_rss(proc.pid) / 2**20,
                    "active": hood["active"],
                    "archived": hood["archived_files"],
                    "arch": hood["archived_bytes"] / 2**20,
                    "tomb": hood["tombstone_bytes"] / 2**20,
                    "hoodie": hood["total_bytes"] / 2**20,
                    "batches": len(batches),
                    "p50": float(np.percentile(batches, 50)) if batches else float("nan"),
                    "p95": float(np.percentile(batches, 95)) if batches else float("nan"),
                    "backlog": produced - applied(target, topics),
                }
                rows.append(row)
                print(
                    f"{row['min']:5.1f} {row['rss']:8.0f} {row['active']:7.0f} "
                    f"{row['archived']:9.0f} {row['arch']:9.1f} {row['tomb']:9.1f} "
                    f"{row['hoodie']:11.1f} {row['batches']:8.0f} {row['p50']:6.2f} "
                    f"{row['p95']:6.2f} {row['backlog']:8.0f}",
                    flush=True,
                )
                next_sample += args.sample_seconds
                if proc.poll() is not None:
                    print("the replicator exited:", log_path.read_text()[-800:])
                    return
        producer.flush()
        elapsed = time.time() - started
        proc.terminate()
        proc.wait(timeout=120)
        reader.stop.set()
        log.close()
        sent = produced - len(warmup)
        print(f"sent {sent:,} events in {elapsed / 60:.1f} min ({sent / elapsed:,.0f}/s)")
        if len(rows) >= 4:
            q = max(1, len(rows) // 4)
            for label, part in (("first quarter", rows[:q]), ("last quarter", rows[-q:])):
                print(
                    f"{label:>13}: rss {np.mean([r['rss'] for r in part]):.0f} MiB, "
                    f"active timeline {np.mean([r['active'] for r in part]):.0f} files, "
                    f".hoodie {np.mean([r['hoodie'] for r in part]):.1f} MiB, "
                    f"batch p50 {np.nanmean([r['p50'] for r in part]):.2f} s, "
                    f"p95 {np.nanmean([r['p95'] for r in part]):.2f} s, "
                    f"backlog {np.mean([r['backlog'] for r in part]):,.0f}"
                )


if __name__ == "__main__":
    main()
