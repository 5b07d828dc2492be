"""Freshness benchmark: steady producer -> live `cdcctl start` -> commit visible.

Usage:  .venv/bin/python bench/freshness.py [--rates 1000,5000,20000] [--seconds 120]
            [--buckets 8] [--mix default|updates] [--tables N --active M,...]
            [--retain-hours 1] [--max-batch-seconds S] [--engine DIR] [--broker tansu|kafka]
            [--linger-ms 5]

For each rate, a fresh replicator (`cdcctl start`, no --until-caught-up) runs against
the embedded broker (or Apache Kafka: --broker kafka, bench/brokers.py); after it has
committed a warm-up snapshot, a producer (linger --linger-ms) writes Debezium events
(the demo workload's stream) at a steady rate for --seconds. A watcher
sees every completed Hudi commit appear; each event's freshness is the time its commit
became visible minus the time it was produced (the checkpoint in the commit says which
offsets it holds). Printed per rate: p50/p95/p99 freshness, and the backlog (produced
minus applied messages) at a quarter, half and three quarters of the run and at its
end, which tells whether lag grows.

The peer: a plain confluent-kafka consumer in a process of its own reads the same
messages as they are produced (the replicator's fetch settings); its p50/p99 (received
- produced) is what Kafka alone costs. The machine's cores and load average (before and
after each run) are printed with every line: the machine is shared, so compare figures
of one invocation, or interleave runs (--engine runs the replicator from another
checkout, e.g. the commit before a change, for A B A B rounds).

Modes:
  --mix updates     an update-heavy mix (85 % updates on a hot set, 10 % inserts, 5 %
                    deletes) into Merge-on-Read tables: compaction runs as log files
                    pile up, cleaning every 10 commits with --retain-hours of history
                    kept readable (default 1 h); the line adds the compactions (base
                    files written) and cleans of the run.
  --tables N        N tables (one topic each, the workload's orders), of which --active
                    (one or more counts, comma separated: one run each) receive the
                    stream, the rate spread over them; the others only get their warm-up
                    rows. The line adds the commits made and the replicator's own
                    driver time per table commit (plan + commit phases of its batch
                    lines, divided by the table commits); `--tables 100 --active 10` next
                    to `--tables 10 --active 10` is the cost of 90 idle tables.

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
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
from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import brokers  # noqa: E402

from engine.naming import table_name_for_topic  # noqa: E402
from engine.playground.broker import produce_messages  # noqa: E402
from engine.playground.workload import InventoryWorkload  # noqa: E402

NAMING = "prefix_schema_table"
UPDATES = {"insert": 0.10, "update": 0.85, "delete": 0.05}
ORDERS_ONLY = {"orders": {"insert": 0.3, "update": 0.6, "delete": 0.1}}


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


class Watcher(threading.Thread):
    """Records (visible time, applied offset) of every new commit of every table."""

    def __init__(self, target: Path, topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.target, self.topics = target, topics
        self.commits: dict[str, list[tuple[float, int]]] = {t: [] for t in topics}
        self.stop = threading.Event()
        self._applied = dict.fromkeys(topics, 0)

    def run(self) -> None:
        # A commit's visible time is its file's modification time, not when this thread
        # saw it, so a slow round costs no accuracy; only new names are looked at (with
        # 100 tables, reading every name of every timeline 50 times a second took most of
        # a core from the replicator).
        seen: dict[str, set[str]] = {t: set() for t in self.topics}
        while not self.stop.is_set():
            for topic in self.topics:
                hoodie = self.target / table_name_for_topic(topic, NAMING) / ".hoodie"
                try:
                    names = set(os.listdir(hoodie)) - seen[topic]
                except OSError:
                    continue
                for name in names:  # commit, deltacommit (MOR)
                    if not name.endswith("commit") or name.startswith("."):
                        seen[topic].add(name)
                        continue
                    path = hoodie / name
                    try:
                        meta = json.loads(path.read_text())
                        visible = path.stat().st_mtime
                    except (OSError, ValueError):
                        continue  # being written: read again next round
                    seen[topic].add(name)
                    checkpoint = meta["extraMetadata"].get("deltastreamer.checkpoint.key", "")
                    offset = int(checkpoint.rsplit(":", 1)[1]) if ":" in checkpoint else 0
                    self.commits[topic].append((visible, offset))
                    self._applied[topic] = max(self._applied[topic], offset)
            time.sleep(0.1)

    def applied(self, topic: str) -> int:
        return self._applied[topic]


def peer_consumer(
    bootstrap: str, starts: dict[str, int], expect: int, out: str, ready: mp.Event
) -> None:
    """The peer: read the produced messages with a plain consumer (the replicator's fetch
    settings) and write (topic, offset, received time) of each to ``out``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "freshness-peer",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(t, 0, o) for t, o in starts.items()])
    got: list[tuple[str, int, float]] = []
    ready.set()
    deadline = None
    while len(got) < expect:
        for m in consumer.consume(10_000, 0.05):
            if m.error() is None:
                got.append((m.topic(), m.offset(), time.time()))
        if deadline is None and len(got):
            deadline = time.monotonic() + 600
        if deadline is not None and time.monotonic() > deadline:
            break
    consumer.close()
    Path(out).write_text(json.dumps(got))


def workloads(mode: str, rate: int, tables: int, prefix: str) -> tuple[list, list]:
    """The warm-up messages and the stream generators' (workload, mix, hot) per table set."""
    if tables:
        made = [InventoryWorkload(seed=rate + i, prefix=f"{prefix}{i:03d}") for i in range(tables)]
        warm = [m for w in made for m in w.snapshot(customers=0, products=0, orders=500)]
        return warm, [(w, ORDERS_ONLY, None) for w in made]
    w = InventoryWorkload(seed=rate, prefix=prefix)
    warm = list(w.snapshot(customers=2000, products=200, orders=2000))
    if mode == "updates":
        return warm, [(w, UPDATES, 0.3)]
    return warm, [(w, None, None)]


def batch_costs(log_path: Path) -> tuple[int, float, float]:
    """Table commits, and the plan (stage) and commit seconds, over the replicator's
    batch lines after the warm-up batch."""
    commits, stage, commit = 0, 0.0, 0.0
    for line in log_path.read_text().splitlines():
        m = re.match(r"batch (\d+): .*\| (.*) \| (.*)$", line)
        if not m or m.group(1) == "1":
            continue
        commits += m.group(2).count("+")
        phases = dict(re.findall(r"(\w+) ([\d.]+)s", m.group(3)))
        stage += float(phases.get("stage", 0))
        commit += float(phases.get("commit", 0))
    return commits, stage, commit


def run_rate(args: argparse.Namespace, rate: int, active: int, bootstrap: str, root: Path) -> str:
    load_before = load()
    tag = f"{rate}-{active}"
    prefix = f"many{rate}a{active}t" if args.tables else f"fresh{rate}"
    warmup, sources = workloads(args.mix, rate, args.tables, prefix)
    streaming = sources[:active] if args.tables else sources
    per = int(rate * args.seconds) // len(streaming)
    streams = [list(w.stream(per, mix, hot)) for w, mix, hot in streaming]
    # Interleave the tables' streams so that the rate is spread evenly over them.
    stream = [m for group in zip(*streams, strict=True) for m in group]
    topics = sorted({t for t, _, _ in warmup + stream})
    produce_messages(bootstrap, warmup)
    target = root / f"lake-{tag}"
    config = root / f"cdcctl-{tag}.toml"
    replicator = f'work_dir = "{root / f"work-{tag}"}"\n'
    if args.max_batch_seconds:
        replicator += f"max_batch_seconds = {args.max_batch_seconds}\n"
    config.write_text(
        f'[source]\nbootstrap_servers = "{bootstrap}"\ntopics = "^{prefix}"\n'
        f'[target]\npath = "{target}"\ntable_naming = "{NAMING}"\n'
        f"[hudi]\nnum_buckets = {args.buckets}\nclean_retain_hours = {args.retain_hours}\n"
        f"[replicator]\n{replicator}"
    )
    warm = {t: sum(1 for m in warmup if m[0] == t) for t in topics}
    watcher = Watcher(target, topics)
    watcher.start()
    # The replicator's own lines (one per batch) go to a file: an unread pipe would fill
    # up and block it on a long run.
    log_path = (args.log_dir or root) / f"replicator-{tag}.log"
    log = log_path.open("w")
    env = dict(os.environ)
    if args.engine:
        env["PYTHONPATH"] = str(args.engine)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdcctl", "start", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
        env=env,
        # `python -m` puts the working folder first on sys.path, before PYTHONPATH (and
        # Spark's Python workers start there too): without it this checkout ran.
        cwd=args.engine,
    )
    deadline = time.monotonic() + 180
    while any(watcher.applied(t) < warm[t] for t in topics):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            proc.wait()
            log.close()
            return f"{rate:>7,}/s  replicator did not start: {log_path.read_text()[-500:]}"
        time.sleep(0.1)

    ready = mp.get_context("spawn").Event()
    peer_out = root / f"peer-{tag}.json"
    peer = mp.get_context("spawn").Process(
        target=peer_consumer,
        args=(bootstrap, {t: warm[t] for t in topics}, len(stream), str(peer_out), ready),
    )
    peer.start()
    ready.wait(60)
    time.sleep(1.0)  # the peer's first fetch is under way

    produced: dict[str, list[float]] = {t: [] for t in topics}
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": args.linger_ms, "compression.type": "lz4"}
    )
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
        if len(backlog) < 3 and time.time() - started >= args.seconds * (len(backlog) + 1) / 4:
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
    peer.join(60)
    if peer.is_alive():
        peer.kill()

    latencies = []
    for topic in topics:
        times = produced[topic]
        prev = warm[topic]
        for visible, offset in sorted(watcher.commits[topic], key=lambda c: c[1]):
            for i in range(max(prev, warm[topic]), offset):
                latencies.append(visible - times[i - warm[topic]])
            prev = max(prev, offset)
    lat = np.array(latencies) if latencies else np.array([float("nan")])
    peer_lat = [
        received - produced[t][o - warm[t]]
        for t, o, received in (json.loads(peer_out.read_text()) if peer_out.exists() else [])
        if 0 <= o - warm[t] < len(produced[t])
    ]
    plat = np.array(peer_lat) if peer_lat else np.array([float("nan")])
    achieved = len(stream) / elapsed
    line = (
        f"{rate:>7,}/s  sent {achieved:>9,.0f}/s  p50 {np.percentile(lat, 50):6.2f}s  "
        f"p95 {np.percentile(lat, 95):6.2f}s  p99 {np.percentile(lat, 99):6.2f}s  "
        f"| peer consume p50 {np.percentile(plat, 50):.3f}s p99 {np.percentile(plat, 99):.3f}s "
        f"| backlog at 1/4, 1/2, 3/4, end {' '.join(f'{b:,}' for b in [*backlog, backlog_end])}"
        f"  measured {len(latencies):,}/{len(stream):,} events"
    )
    if args.tables:
        commits, stage, commit = batch_costs(log_path)
        per_commit = (stage + commit) / commits * 1000 if commits else float("nan")
        line += (
            f" | {args.tables} tables, {active} active: {commits:,} table commits, "
            f"plan+commit {per_commit:.1f} ms per table commit ({stage + commit:.1f} s)"
        )
    if args.mix == "updates":
        files = [p.name for p in target.rglob("*") if p.is_file()]
        bases = sum(1 for n in files if n.endswith(".parquet") and ".hoodie" not in n)
        cleans = sum(1 for n in files if n.endswith(".clean"))
        line += f" | base files {bases}, cleans {cleans}, retain {args.retain_hours:g} h"
    return line + f" | load {load_before} -> {load()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="1000,5000,20000")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--log-dir", type=Path, help="keep each run's replicator output here")
    ap.add_argument("--buckets", type=int, default=8, help="hudi.num_buckets of the tables")
    ap.add_argument("--mix", choices=("default", "updates"), default="default")
    ap.add_argument("--tables", type=int, default=0, help="N one-topic tables (see Modes)")
    ap.add_argument("--active", default="", help="with --tables: active tables, e.g. 10,100")
    ap.add_argument("--retain-hours", type=float, default=1.0, help="hudi.clean_retain_hours")
    ap.add_argument("--max-batch-seconds", type=float, help="replicator.max_batch_seconds")
    ap.add_argument("--engine", type=Path, help="run the replicator from this checkout")
    ap.add_argument(
        "--linger-ms",
        type=float,
        default=5,
        help="the producer's linger.ms (counted in freshness: a message waits for its batch)",
    )
    brokers.add_argument(ap)
    args = ap.parse_args()
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    actives = [int(a) for a in args.active.split(",")] if args.active else [args.tables or 1]
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {load()}"
    )
    print(
        f"{args.seconds:.0f} s per rate; freshness = commit visible - produced; "
        f"mix {args.mix}; buckets {args.buckets}; engine {args.engine or 'this checkout'}; "
        f"broker {brokers.describe(args.broker)}"
    )
    with brokers.broker(args.broker) as broker, tempfile.TemporaryDirectory() as tmp:
        for rate in (int(r) for r in args.rates.split(",")):
            for active in actives:
                run_root = Path(tmp) / f"r{rate}-{active}"
                run_root.mkdir()
                line = run_rate(args, rate, active, broker.bootstrap_servers, run_root)
                print(line, flush=True)


if __name__ == "__main__":
    main()
