"""Catch-up benchmark: N Debezium events already in the broker, replicated from scratch.

Usage:  .venv/bin/python bench/catchup.py --events 100000,1000000,5000000 [--schemas] [--repeat N]
        .venv/bin/python bench/catchup.py --events 1000000 --format debezium-avro
        .venv/bin/python bench/catchup.py --events 1000000 --wide [--schemas | --format ...]
        .venv/bin/python bench/catchup.py --events 1000000 --snapshot [--wide]
        .venv/bin/python bench/catchup.py ... --broker kafka   (Apache Kafka: ./bootstrap.sh peers)
        .venv/bin/python bench/catchup.py ... --target s3      (moto's S3 server, requests counted)

``--format debezium-avro``: the same workload re-serialized as Confluent's AvroConverter
writes it (tests/avro_support.py: the first messages of each schema by confluent-kafka's
AvroSerializer, checked byte for byte against fastavro, which writes the rest), decoded
against the test schema registry (engine/playground/registry.py) over HTTP.

Workload per size N (issue 4): the demo inventory tables, 10% snapshot reads, then 60%
updates, 20% inserts, 10% deletes (each delete followed by its tombstone, counted as a
message) of N messages in total.

``--wide`` (issue 25's shape): the same mix, but orders (about 80% of the messages) carry
a ``note`` text column of 200-2,000 characters (InventoryWorkload ``notes``), and half
the updates and deletes hit a hot set (the newest 1% of each table's rows,
``hot_fraction`` 0.5).

``--snapshot``: an initial snapshot only (every message a read, ``op = r``, of rows not
yet in the empty target: the first load of a new replica), with or without ``--wide``.
Profiling: ``--profile FILE`` runs the replicator under ``py-spy record --subprocesses
--idle --threads --format raw`` at 100 Hz (about 25% slower; the memory and CPU lines
then count py-spy as the driver and the driver among the workers; py-spy must be on
PATH or beside this Python: ``pip install py-spy``, a dev tool, not a
dependency); ``--spark-option KEY=VALUE`` (repeatable) adds ``[spark.options]``, e.g.
``spark.eventLog.enabled=true`` and ``spark.eventLog.dir=file:$PWD/spark-events`` (an
existing folder) for task times; ``--kafka-option KEY=VALUE`` (repeatable) adds a
``source.kafka_options`` entry (librdkafka), e.g. ``queued.max.messages.kbytes=65536``.

Prints the machine, events/s end to end, seconds per batch, peak RSS of the whole
replicator process tree (Python driver + Spark JVM + Python workers), and the raw
consume rate of the same topics (no decoding) measured in the same run, as a ratio.
With ``--repeat N`` each size runs N times (a fresh broker and target each time) and
the medians of the end-to-end rate and of the ratio close the size's output: on a
shared VM single runs vary by ±15%. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import Consumer, TopicPartition

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import brokers  # noqa: E402

from engine.playground.broker import produce_messages  # noqa: E402
from engine.playground.workload import InventoryWorkload  # noqa: E402

#: Of the streamed part (90% of the messages): 60% / 20% / 10% of the whole.
MIX = {"update": 0.6, "insert": 0.2, "delete": 0.1}


def machine() -> str:
    mem = psutil.virtual_memory().total / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{platform.node()} {platform.machine()} {os.cpu_count()} cores {mem:.0f} GiB, "
        f"Python {platform.python_version()}, load average {load}"
    )


def raw_consume(bootstrap: str, topics: list[str], expected: int) -> float:
    """Seconds to consume every message of ``topics`` without decoding."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
            "queued.min.messages": 500_000,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    consumer.assign([TopicPartition(t, 0, 0) for t in topics])
    started, n = time.perf_counter(), 0
    while n < expected:
        n += len(consumer.consume(min(500_000, expected - n), 5.0))
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


class PeakRss:
    """Samples the RSS of a process and all its descendants every 50 ms."""

    def __init__(self, pid: int, cluster: list[int] | None = None) -> None:
        self.root = psutil.Process(pid)
        #: A standalone cluster's daemons (``--cluster``): their trees (executor JVMs and
        #: their Python workers) count as "cluster", their CPU from now on only.
        self.cluster = [psutil.Process(p) for p in cluster or []]
        self.cpu_before: dict[int, float] = {}
        for daemon in self.cluster:
            for p in [daemon, *daemon.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    self.cpu_before[p.pid] = t.user + t.system
        self.peak = 0
        self.breakdown: dict[str, int] = {}
        self.cpu: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                in_cluster = set()
                for daemon in self.cluster:
                    tree = [daemon, *daemon.children(recursive=True)]
                    in_cluster.update(p.pid for p in tree)
                    procs += tree
                total, parts = 0, {}
                for p in procs:
                    try:
                        rss = p.memory_info().rss
                        name = (
                            "cluster"
                            if p.pid in in_cluster
                            else "jvm"
                            if p.name() == "java"
                            else ("driver" if p.pid == self.root.pid else "python workers")
                        )
                    except psutil.Error:
                        continue
                    total += rss
                    parts[name] = parts.get(name, 0) + rss
                    try:
                        t = p.cpu_times()
                        used = t.user + t.system - self.cpu_before.get(p.pid, 0.0)
                        self.cpu[p.pid] = (name, used)
                    except psutil.Error:
                        pass
                if total > self.peak:
                    self.peak, self.breakdown = total, parts
            except psutil.Error:
                pass
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", default="1000000", help="comma-separated sizes")
    ap.add_argument("--schemas", action="store_true", help="JsonConverter schemas.enable=true")
    ap.add_argument("--format", default="debezium-json", choices=["debezium-json", "debezium-avro"])
    ap.add_argument("--batch", type=int, default=100_000, help="replicator.max_batch_events")
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="runs per size (medians printed)")
    ap.add_argument("--wide", action="store_true", help="long text column, hot set (issue 25)")
    ap.add_argument("--snapshot", action="store_true", help="an initial snapshot only (op r)")
    ap.add_argument("--profile", metavar="FILE", help="py-spy raw profile of the replicator")
    ap.add_argument("--spark-option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="WORKERS",
        help="run the merges on a Spark standalone cluster of WORKERS one-core workers "
        "started for the run (engine/playground/spark_cluster.py) instead of local[2]",
    )
    ap.add_argument(
        "--target",
        default="folder",
        choices=["folder", "s3"],
        help="s3: the replicas go to moto's S3 server (engine/playground/objectstore.py) "
        "through a proxy that counts the requests",
    )
    brokers.add_argument(ap)
    ap.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="source.kafka_options entry (librdkafka), e.g. queued.max.messages.kbytes=65536",
    )
    args = ap.parse_args()

    print(f"machine: {machine()}; broker {brokers.describe(args.broker)}")
    for size in (int(x) for x in args.events.split(",")):
        print(f"\n=== {size:,} events ===")
        runs = [run_one(size, args) for _ in range(args.repeat)]
        if len(runs) > 1:
            rates = sorted(r[0] for r in runs)
            ratios = sorted(r[1] for r in runs)
            print(
                f"\nmedian of {len(runs)} runs: "
                f"{statistics.median(rates):,.0f} events/s end to end "
                f"(runs {rates[0]:,.0f}-{rates[-1]:,.0f}), ratio {statistics.median(ratios):.3f} "
                f"(runs {ratios[0]:.3f}-{ratios[-1]:.3f})"
            )


def _option(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--spark-option``."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        sys.exit(f"--spark-option wants KEY=VALUE, got {text!r}")
    return key, value


def run_one(events: int, args: argparse.Namespace) -> tuple[float, float]:
    """One run from an empty broker and target; returns (events/s end to end, ratio)."""
    from contextlib import ExitStack

    from engine.playground.registry import SchemaRegistry

    avro = args.format == "debezium-avro"
    with ExitStack() as stack:
        broker = stack.enter_context(brokers.broker(args.broker))
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        registry = stack.enter_context(SchemaRegistry()) if avro else None
        cluster = None
        spark_options = list(map(_option, args.spark_option))
        if args.cluster:
            from engine.playground.spark_cluster import StandaloneCluster

            cluster = stack.enter_context(
                StandaloneCluster(Path(tmp) / "cluster", workers=args.cluster, memory="2g")
            )
            spark_options += [("spark.master", cluster.url), ("spark.executor.memory", "1g")]
            print(f"cluster:     {cluster.url}, {args.cluster} workers of 1 core")
        workload = InventoryWorkload(
            seed=1, prefix="bench", schemas=args.schemas or avro, notes=args.wide
        )
        t0 = time.perf_counter()
        messages = list(
            workload.events(
                events,
                snapshot_fraction=1.0 if args.snapshot else 0.1,
                mix=MIX,
                hot_fraction=0.5 if args.wide else None,
            )
        )
        if registry is not None:
            from tests.avro_support import JsonToAvro

            convert = JsonToAvro(registry.url, fast=True)
            messages = [convert.message(*m) for m in messages]
        gen_s = time.perf_counter() - t0
        topics = sorted({m[0] for m in messages})
        broker.create_topics(topics)
        t0 = time.perf_counter()
        produced = produce_messages(broker.bootstrap_servers, messages)
        prod_s = time.perf_counter() - t0
        payload = sum(len(v or b"") + len(k or b"") for _, k, v in messages)
        del messages
        print(
            f"workload: {produced:,} messages ({payload / 2**20:,.0f} MiB), "
            f"format {args.format}, schemas.enable={args.schemas}, wide={args.wide}, "
            f"snapshot only={args.snapshot}; "
            f"generated in {gen_s:.1f}s, produced in {prod_s:.1f}s"
        )

        raw_s = raw_consume(broker.bootstrap_servers, topics, produced)
        target: Path | str = Path(tmp) / "lake"
        env = dict(os.environ)
        proxy = None
        if args.target == "s3":
            from engine.playground.objectstore import S3Proxy, S3Server

            server = stack.enter_context(S3Server(bucket="lake"))
            proxy = stack.enter_context(S3Proxy(server.endpoint))
            target = "s3://lake/bench"
            # Credentials by reference to the environment: resolved by the driver, they
            # travel in the tasks (a cluster's executors have no AWS environment).
            env.update({k: v for k, v in server.env().items() if k.startswith("AWS_")})
        config = Path(tmp) / "cdcctl.toml"
        config.write_text(
            f'[source]\nbootstrap_servers = "{broker.bootstrap_servers}"\ntopics = "^bench\\\\."\n'
            f'format = "{args.format}"\n'
            + "kafka_options = {"
            + ", ".join(f'"{k}" = "{v}"' for k, v in map(_option, args.kafka_option))
            + "}\n"
            + (f'[source.schema_registry]\nurl = "{registry.url}"\n' if registry else "")
            + f'[target]\npath = "{target}"\n'
            + (
                f'[target.s3]\nendpoint = "{proxy.endpoint}"\npath_style = true\n'
                'access_key_id = "${env:AWS_ACCESS_KEY_ID}"\n'
                'secret_access_key = "${env:AWS_SECRET_ACCESS_KEY}"\n'
                if proxy is not None
                else ""
            )
            + f"[hudi]\nnum_buckets = {args.buckets}\n"
            f'[replicator]\nmax_batch_events = {args.batch}\nwork_dir = "{Path(tmp) / "work"}"\n'
            + "[spark.options]\n"
            + "".join(f'"{k}" = "{v}"\n' for k, v in spark_options)
        )
        started = time.perf_counter()
        command = [sys.executable, "-m", "cdcctl", "start", "--config", str(config)]
        command.append("--until-caught-up")
        if args.profile:
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            record = [spy, "record", "--subprocesses", "--idle", "--threads", "--format", "raw"]
            command = [*record, "-o", args.profile, "--", *command]
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        rss = PeakRss(proc.pid, cluster.pids if cluster is not None else None)
        stdout, stderr = proc.communicate()
        wall = time.perf_counter() - started
        peak = rss.stop()
        if proc.returncode != 0:
            print(stderr, file=sys.stderr)
            sys.exit(f"replicator failed with exit code {proc.returncode}")
        batches = [float(s) for s in re.findall(r"msgs in ([0-9.]+)s", stderr)]
        busy = sum(batches)
        print(f"raw consume: {produced / raw_s:,.0f} msg/s ({raw_s:.2f}s)")
        print(
            f"replicate:   {produced / wall:,.0f} events/s end to end, process start to exit, "
            f"incl. Spark start ({wall:.1f}s)"
        )
        if batches:
            print(
                f"per batch:   {len(batches)} batches of at most {args.batch:,} events; latency "
                f"poll->commit (batches overlap) mean {busy / len(batches):.2f}s, "
                f"max {max(batches):.2f}s"
            )
        print(
            f"ratio:       end-to-end / raw consume = {(produced / wall) / (produced / raw_s):.3f}"
        )
        parts = ", ".join(f"{k} {v / 2**20:,.0f}" for k, v in sorted(rss.breakdown.items()))
        cpu: dict[str, float] = {}
        for name, seconds in rss.cpu.values():
            cpu[name] = cpu.get(name, 0.0) + seconds
        print(
            "CPU seconds: "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items()))
            + f" (total {sum(cpu.values()):.1f} on {os.cpu_count()} cores)"
        )
        print(
            f"peak RSS:    {peak / 2**20:,.0f} MiB "
            f"(driver + JVM + Python workers; at peak: {parts} MiB)"
        )
        print("batches (per-phase seconds):")
        for line in stderr.splitlines():
            if line.startswith("batch "):
                print("  " + line)
        if proxy is not None:
            print(requests_line(proxy.requests))
        print(stdout.strip())
        return produced / wall, (produced / wall) / (produced / raw_s)


_COMMIT = re.compile(r"/\.hoodie/\d{17}\.(commit|deltacommit|replacecommit)$")


def requests_line(requests: list[tuple[str, str, str]]) -> str:
    """The requests the replicator made to the bucket, by kind, and per commit."""
    kinds: dict[str, int] = {}
    commits = 0
    for method, path, condition in requests:
        bare = path.split("?", 1)[0]
        if method == "GET" and "list-type=" in path:
            kind = "LIST"
        elif method in ("GET", "HEAD"):
            what = (
                "lease"
                if bare.endswith("lease.json")
                else "timeline"
                if "/.hoodie/" in bare
                else "log"
                if ".log." in bare
                else "base"
                if bare.endswith(".parquet")
                else "other"
            )
            kind = f"{method} {what}"
        elif method == "PUT" and condition.lower().startswith("if-none-match"):
            kind = "PUT create-if-absent"
            commits += bool(_COMMIT.search(bare))
        elif method == "PUT" and condition.lower().startswith("if-match"):
            kind = "PUT compare-and-swap"
        else:
            kind = method
        kinds[kind] = kinds.get(kind, 0) + 1
    total = sum(kinds.values())
    per = f"{total / commits:.1f} per commit ({commits} commits)" if commits else "no commit"
    return (
        "requests:    "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))
        + (f"; {total:,} in all, {per}")
    )


if __name__ == "__main__":
    main()
