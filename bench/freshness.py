"""Freshness benchmark: steady producer -> live `cdcctl start` -> commit visible.

Usage:  .venv/bin/python bench/freshness.py [--rates 1000,5000,20000] [--seconds 120] [--buckets 8]

For each rate, a fresh replicator (`cdcctl start`, no --until-caught-up) runs against
the embedded broker; after it has committed a warm-up snapshot, a producer writes
Debezium events (the demo workload's stream) at a steady rate for --seconds. A watcher
sees every completed Hudi commit appear; each event's freshness is the time its commit
became visible minus the time it was produced (the checkpoint in the commit says which
offsets it holds). Printed per rate: p50/p95/p99 freshness, and the backlog (produced
minus applied messages) at a quarter, half and three quarters of the run and at its
end, which tells whether lag grows. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.naming import table_name_for_topic  # noqa: E402
from engine.playground.broker import EmbeddedBroker, produce_messages  # noqa: E402
from engine.playground.workload import InventoryWorkload  # noqa: E402


class Watcher(threading.Thread):
    """Records (visible time, applied offset) of every new commit of every table."""

    def __init__(self, target: Path, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.target, self.topics = target, topics
        self.commits: dict[str, list[tuple[float, int]]] = {t: [] for t in topics}
        self.stop = threading.Event()
        self._seen: set[Path] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            for topic in self.topics:
                hoodie = self.target / table_name_for_topic(topic) / ".hoodie"
                if not hoodie.is_dir():
                    continue
                for path in hoodie.glob("*.*commit"):  # commit, deltacommit (MOR)
                    if path in self._seen:
                        continue
                    self._seen.add(path)
                    try:
                        meta = json.loads(path.read_text())
                        visible = path.stat().st_mtime
                    except (OSError, ValueError):
                        self._seen.discard(path)
                        continue
                    checkpoint = meta["extraMetadata"].get("deltastreamer.checkpoint.key", "")
                    offset = int(checkpoint.rsplit(":", 1)[1]) if ":" in checkpoint else 0
                    self.commits[topic].append((visible, offset))
            time.sleep(0.02)

    def applied(self, topic: str) -> int:
        return max((o for _, o in self.commits[topic]), default=0)


def run_rate(
    rate: int,
    seconds: float,
    bootstrap: str,
    prefix: str,
    root: Path,
    log_dir: Path | None,
    buckets: int,
) -> str:
    workload = InventoryWorkload(seed=rate, prefix=prefix)
    warmup = list(workload.snapshot(customers=2000, products=200, orders=2000))
    stream = list(workload.stream(int(rate * seconds)))
    topics = sorted({t for t, _, _ in warmup + stream})
    produce_messages(bootstrap, warmup)
    target = root / f"lake-{rate}"
    config = root / f"cdcctl-{rate}.toml"
    config.write_text(
        f'[source]\nbootstrap_servers = "{bootstrap}"\ntopics = "^{prefix}\\\\."\n'
        f'[target]\npath = "{target}"\n[hudi]\nnum_buckets = {buckets}\n'
        f'[replicator]\nmax_batch_seconds = 0.25\nwork_dir = "{root / f"work-{rate}"}"\n'
    )
    watcher = Watcher(target, topics)
    watcher.start()
    # The replicator's own lines (one per batch) go to a file: an unread pipe would fill
    # up and block it on a long run.
    log_path = (log_dir or root) / f"replicator-{rate}.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcctl", "start", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    warm = {t: sum(1 for m in warmup if m[0] == t) for t in topics}
    deadline = time.monotonic() + 120
    while any(watcher.applied(t) < warm[t] for t in topics):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait()
            log.close()
            return f"{rate:>7,}/s  replicator did not start: {log_path.read_text()[-500:]}"
        time.sleep(0.1)

    produced: dict[str, list[float]] = {t: [] for t in topics}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    tick, per_tick = 0.01, rate / 100
    started = time.time()
    backlog: list[int] = []  # at 1/4, 1/2 and 3/4 of the run
    sent, owed = 0, 0.0
    while sent < len(stream):
        owed += per_tick
        while owed >= 1 and sent < len(stream):
            topic, key, value = stream[sent]
            producer.produce(topic, key=key, value=value)
            produced[topic].append(time.time())
            sent += 1
            owed -= 1
        producer.poll(0)
        if len(backlog) < 3 and time.time() - started >= seconds * (len(backlog) + 1) / 4:
            backlog.append(sum(warm[t] + len(produced[t]) - watcher.applied(t) for t in topics))
        next_at = started + (sent / rate)
        time.sleep(max(0.0, min(tick, next_at - time.time())))
    producer.flush()
    elapsed = time.time() - started
    backlog_end = sum(warm[t] + len(produced[t]) - watcher.applied(t) for t in topics)
    drain_deadline = time.monotonic() + 120
    while any(watcher.applied(t) < warm[t] + len(produced[t]) for t in topics):
        if time.monotonic() > drain_deadline:
            break
        time.sleep(0.1)
    proc.terminate()
    proc.wait(timeout=60)
    log.close()
    watcher.stop.set()

    latencies = []
    for topic in topics:
        times = produced[topic]
        prev = warm[topic]
        for visible, offset in sorted(watcher.commits[topic], key=lambda c: c[1]):
            for i in range(max(prev, warm[topic]), offset):
                latencies.append(visible - times[i - warm[topic]])
            prev = max(prev, offset)
    lat = np.array(latencies) if latencies else np.array([float("nan")])
    achieved = len(stream) / elapsed
    return (
        f"{rate:>7,}/s  sent {achieved:>9,.0f}/s  p50 {np.percentile(lat, 50):6.2f}s  "
        f"p95 {np.percentile(lat, 95):6.2f}s  p99 {np.percentile(lat, 99):6.2f}s  "
        f"backlog at 1/4, 1/2, 3/4, end {' '.join(f'{b:,}' for b in [*backlog, backlog_end])}  "
        f"measured {len(latencies):,}/{len(stream):,} events"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="1000,5000,20000")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--log-dir", type=Path, help="keep each run's replicator output here")
    ap.add_argument("--buckets", type=int, default=8, help="hudi.num_buckets of the tables")
    args = ap.parse_args()
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{args.seconds:.0f} s per rate; freshness = commit visible - produced")
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        for rate in (int(r) for r in args.rates.split(",")):
            line = run_rate(
                rate,
                args.seconds,
                broker.bootstrap_servers,
                f"fresh{rate}",
                Path(tmp),
                args.log_dir,
                args.buckets,
            )
            print(line, flush=True)


if __name__ == "__main__":
    main()
