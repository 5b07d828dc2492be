"""Soak with faults: steady traffic, periodic SIGKILLs of the replicator, broker restarts.

Usage:  .venv/bin/python bench/soak_faults.py [--minutes 30] [--rate 300]
            [--kill-every 240] [--restart-every 300] [--down-seconds 3]
            [--sample-seconds 30] [--log-dir DIR]

Not part of the test suite (it runs for as long as asked). What it does:

* An S3-compatible store (moto's server, :mod:`engine.playground.objectstore`) and the
  embedded Tansu broker keeping its topics there, so a broker restart keeps them.
* A producer writes the demo workload's Debezium stream (three tables; inserts, updates,
  deletes, tombstones; JSON with schemas) at a steady ``--rate``.
* A live `cdcctl start` (the real CLI, its own process group) replicates it. Every
  ``--kill-every`` seconds its whole process group (the CLI, Spark's JVM and workers) is
  SIGKILLed and it is started again at once; every ``--restart-every`` seconds the broker
  is SIGKILLed and started again on the same port after ``--down-seconds``.
* Every ``--sample-seconds`` one line: minute, resident memory of the replicator's
  process tree, kills and restarts so far, produced and applied events, backlog.

At the end the producer stops, the replicator catches up and is stopped, and every
replica (read by hudi-rs) is compared with two oracles (``tests/oracle.py``'s
independent fold): the last message produced per key, and every message the topics hold
(read back from offset 0). Memory: the maximum, and the median of the first and last
quarter of the samples taken at least 90 s after a (re)start (Spark's start-up excluded).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from soak import applied, tree_rss  # noqa: E402

from engine.naming import table_name_for_topic  # noqa: E402
from engine.playground.broker import EmbeddedBroker, produce_messages  # noqa: E402
from engine.playground.gate import TcpGate  # noqa: E402
from engine.playground.objectstore import S3Server  # noqa: E402
from engine.playground.workload import InventoryWorkload  # noqa: E402
from tests.integration.replicas import read_replica  # noqa: E402
from tests.oracle import fold, inventory_types  # noqa: E402

PREFIX = "soak"


class Replicator:
    """`cdcctl start` in its own process group, appending to one log file."""

    def __init__(self, config: Path, log_path: Path) -> None:
        self.config = config
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.kills = 0

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cdcctl", "start", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self.started = time.monotonic()

    def kill(self) -> None:
        """SIGKILL the CLI and everything it started (Spark's JVM and workers)."""
        assert self.proc is not None
        pgid = self.proc.pid
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for child in children:  # anything that left the group
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait()
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.kill()


def read_topics(bootstrap: str, topics: list[str]) -> list[tuple[str, bytes | None, Any]]:
    """Every message the topics hold, from offset 0 (one partition each)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "soak-check",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    out: list[tuple[str, bytes | None, Any]] = []
    try:
        for topic in topics:
            consumer.assign([TopicPartition(topic, 0, 0)])
            seen: set[int | None] = set()  # a message fetched twice is counted once
            idle = 0
            while idle < 10:
                msgs = consumer.consume(10_000, 1.0)
                if not msgs:
                    idle += 1
                    continue
                idle = 0
                for m in msgs:
                    if m.error() is None and m.offset() not in seen:
                        seen.add(m.offset())
                        out.append((topic, m.key(), m.value()))
    finally:
        consumer.close()
    return out


def compare(target: Path, expected: dict[str, dict[str, dict]]) -> dict[str, str]:
    """Per topic: "equal (N rows)" or what differs."""
    out = {}
    for topic, rows in sorted(expected.items()):
        actual = read_replica(target / table_name_for_topic(topic))
        missing = set(rows) - set(actual)
        extra = set(actual) - set(rows)
        differ = [k for k in rows if k in actual and rows[k] != actual[k]]
        if missing or extra or differ:
            out[topic] = (
                f"DIFFERENT: {len(missing)} missing, {len(extra)} extra, {len(differ)} differ"
            )
        else:
            out[topic] = f"equal ({len(rows):,} rows)"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=int, default=300, help="events per second")
    ap.add_argument("--kill-every", type=float, default=240, help="seconds between SIGKILLs")
    ap.add_argument(
        "--restart-every", type=float, default=300, help="seconds between broker restarts"
    )
    ap.add_argument("--down-seconds", type=float, default=3.0, help="broker outage per restart")
    ap.add_argument("--sample-seconds", type=float, default=30)
    ap.add_argument(
        "--outage",
        choices=("restart", "gate"),
        default="restart",
        help="restart: SIGKILL and restart the broker (topics in an S3 store); "
        "gate: cut every connection to an in-memory broker for --down-seconds",
    )
    ap.add_argument(
        "--linger-ms",
        type=int,
        default=1000,
        help="producer linger: Tansu's S3 store keeps one object per record batch",
    )
    ap.add_argument("--buckets", type=int, default=4)
    ap.add_argument("--log-dir", type=Path, help="keep the replicator's log here")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"machine: {platform.node()} {os.cpu_count()} cores, load {load[0]:.1f} at start")
    print(
        f"soak with faults: {args.rate:,} ev/s for {args.minutes:g} min; replicator SIGKILL "
        f"every {args.kill_every:g} s, broker restart every {args.restart_every:g} s "
        f"({args.down_seconds:g} s down, outage = {args.outage}), "
        f"producer linger {args.linger_ms} ms",
        flush=True,
    )
    types = inventory_types(PREFIX)
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        gate: TcpGate | None = None
        if args.outage == "restart":
            store = stack.enter_context(S3Server())
            broker = stack.enter_context(EmbeddedBroker(storage=store))
            bootstrap = broker.bootstrap_servers
        else:  # in-memory topics: the outage is a closed gate in front of the broker
            gate = TcpGate()
            broker = stack.enter_context(EmbeddedBroker(advertised_port=gate.port))
            gate.open(broker.port)
            stack.callback(gate.close)
            bootstrap = gate.bootstrap_servers
        root = Path(tmp)
        log_dir = args.log_dir or root
        log_dir.mkdir(parents=True, exist_ok=True)
        workload = InventoryWorkload(seed=17, prefix=PREFIX, schemas=True)
        last: dict[tuple[str, bytes | None], tuple[str, bytes | None, Any]] = {}
        warmup = list(workload.snapshot(customers=2000, products=200, orders=2000))
        topics = sorted({t for t, _, _ in warmup})
        for m in warmup:
            last[(m[0], m[1])] = m
        produce_messages(bootstrap, warmup)
        target = root / "lake"
        config = root / "cdcctl.toml"
        # Tansu's S3 engine lists and reads objects for a fetch; a consumer behind the
        # end gets only empty fetches when it waits at most 50 ms (the replicator's
        # fetch.wait.max.ms), measured against moto; 500 ms (librdkafka's default) works.
        options = (
            'kafka_options = { "fetch.wait.max.ms" = 500 }\n' if args.outage == "restart" else ""
        )
        config.write_text(
            f'[source]\nbootstrap_servers = "{bootstrap}"\ntopics = "^soak\\\\."\n{options}'
            f'[target]\npath = "{target}"\n[hudi]\nnum_buckets = {args.buckets}\n'
            f'[replicator]\nmax_batch_seconds = 1.0\nwork_dir = "{root / "work"}"\n'
            "retry_max_seconds = 3600\n"
        )
        replicator = Replicator(config, log_dir / "soak-faults-replicator.log")
        replicator.start()

        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}: {err}")

        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": args.linger_ms,
                "compression.type": "lz4",
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": 600_000,
                "on_delivery": on_delivery,
                "delivery.report.only.error": True,
                "log_level": 2,  # the broker restarts: no connection-refused lines
            }
        )
        total = int(args.rate * args.minutes * 60)
        stream = workload.stream(total)
        started = time.monotonic()
        next_sample = started + args.sample_seconds
        next_kill = started + args.kill_every
        next_restart = started + args.restart_every
        restarts = 0
        produced = len(warmup)
        samples: list[tuple[float, float, bool]] = []  # (minute, rss MiB, steady)
        print(
            f"{'min':>5} {'rss MiB':>8} {'kills':>6} {'restarts':>8} {'produced':>9} "
            f"{'applied':>9} {'backlog':>8} {'load':>5}",
            flush=True,
        )
        for m in stream:
            producer.produce(m[0], key=m[1], value=m[2])
            last[(m[0], m[1])] = m
            produced += 1
            if produced % 100:
                continue
            producer.poll(0)
            ahead = started + (produced - len(warmup)) / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            now = time.monotonic()
            if now >= next_kill:
                replicator.kill()
                replicator.start()
                next_kill += args.kill_every
            if now >= next_restart:
                if gate is None:
                    broker.restart(kill=True, down_seconds=args.down_seconds)
                else:
                    gate.close()
                    time.sleep(args.down_seconds)
                    gate.open()
                restarts += 1
                next_restart += args.restart_every
            if replicator.proc is not None and replicator.proc.poll() is not None:
                print("the replicator exited by itself; see", replicator.log_path, flush=True)
                replicator.start()
            if now >= next_sample:
                rss = tree_rss(replicator.proc.pid) / 2**20 if replicator.proc else 0.0
                settled = now - replicator.started >= 90
                minute = (now - started) / 60
                samples.append((minute, rss, settled))
                done = applied(target, topics)
                print(
                    f"{minute:5.1f} {rss:8.0f} {replicator.kills:6d} {restarts:8d} "
                    f"{produced:9,d} {done:9,d} {produced - done:8,d} {os.getloadavg()[0]:5.1f}",
                    flush=True,
                )
                next_sample += args.sample_seconds
        producer.flush(600)
        elapsed = time.monotonic() - started
        sent = produced - len(warmup)
        print(f"sent {sent:,} events in {elapsed / 60:.1f} min ({sent / elapsed:,.0f}/s)")
        print(f"replicator SIGKILLs: {replicator.kills}, broker restarts: {restarts}")
        print(f"delivery failures reported by the producer: {len(failures)} {failures[:3]}")

        # Catch up: every message the topics hold applied (checkpoints), then stop.
        in_topics = read_topics(bootstrap, topics)
        deadline = time.monotonic() + 1800
        while applied(target, topics) < len(in_topics) and time.monotonic() < deadline:
            if replicator.proc is not None and replicator.proc.poll() is not None:
                replicator.start()
            time.sleep(2)
        caught = time.monotonic() - (deadline - 1800)
        print(
            f"caught up {applied(target, topics):,} of {len(in_topics):,} messages "
            f"in {caught:.0f} s"
        )
        replicator.stop()

        from_producer = fold(last.values(), types)
        from_topics = fold(in_topics, types)
        print("topics hold every produced key's last message:", from_producer == from_topics)
        print("replica vs oracle of the messages in the topics:")
        for topic, verdict in compare(target, from_topics).items():
            print(f"  {topic}: {verdict}")
        print("replica vs oracle of the last message produced per key:")
        for topic, verdict in compare(target, from_producer).items():
            print(f"  {topic}: {verdict}")

        rss_all = [r for _, r, _ in samples]
        steady = [r for _, r, s in samples if s]
        print(
            f"replicator tree RSS: max {max(rss_all, default=0):.0f} MiB "
            f"over {len(samples)} samples"
        )
        if len(steady) >= 4:
            q = max(1, len(steady) // 4)
            print(
                f"steady samples (>= 90 s after a start): first quarter median "
                f"{np.median(steady[:q]):.0f} MiB, last quarter median "
                f"{np.median(steady[-q:]):.0f} MiB, "
                f"max {max(steady):.0f} MiB"
            )
        text = replicator.log_path.read_text(errors="replace")
        print(
            f"replicator log: {text.count('Traceback')} tracebacks, "
            f"{text.count('recovered after')} recovered incidents, "
            f"{text.count('rolled back unfinished')} starts that rolled back an instant, "
            f"{text.count('FAILED')} FAILED lines"
        )
        print(f"load at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
