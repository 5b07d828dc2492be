"""End offsets of many partitions: one watermark request each vs one ListOffsets round.

Usage:  .venv/bin/python bench/end_offsets.py [--topics 10,100,300] [--rounds 3]

The replicator asks the end of every idle partition at each topic refresh (every
``replicator.topic_refresh_seconds``: checkpoints past a partition's end mean a
recreated topic) and the end of every partition for the catch-up goal. Before
2026-11-28 that was ``get_watermark_offsets`` per partition (a request each); now
``KafkaSource.end_offsets`` asks them all in one ListOffsets request per broker
(``offsets_for_times`` with Kafka's "latest" timestamp). Per topic count (one partition
each, a few messages each, on the embedded broker), rounds interleaved: milliseconds
for the old way and the new, and that both gave the same offsets.

A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import SourceConfig  # noqa: E402
from engine.playground.broker import EmbeddedBroker, produce_messages  # noqa: E402
from engine.source.kafka import TIMEOUT_S, KafkaSource  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", default="10,100,300")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {platform.node()} {os.cpu_count()} cores, load average {load}")
    broker = EmbeddedBroker()
    broker.start()
    try:
        for count in [int(n) for n in args.topics.split(",")]:
            prefix = f"eo{count}_{int(time.time())}"
            topics = [f"{prefix}.t{i}" for i in range(count)]
            broker.create_topics(topics)
            produce_messages(
                broker.bootstrap_servers, [(t, b"k", b"v") for t in topics for _ in range(3)]
            )
            cfg = SourceConfig(bootstrap_servers=broker.bootstrap_servers, topics=f"^{prefix}")
            source = KafkaSource(cfg, 10)
            parts = [(t, 0) for t in topics]
            source.assign(dict.fromkeys(parts))
            old_ms, new_ms, same = [], [], True
            try:
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    one_by_one = {
                        tp: source._consumer.get_watermark_offsets(
                            TopicPartition(*tp), timeout=TIMEOUT_S
                        )[1]
                        for tp in parts
                    }
                    t1 = time.perf_counter()
                    listed = source.end_offsets(parts)
                    t2 = time.perf_counter()
                    old_ms.append((t1 - t0) * 1000)
                    new_ms.append((t2 - t1) * 1000)
                    same = same and listed == one_by_one
            finally:
                source.close()
            print(
                f"{count:>4} partitions: a request each {statistics.median(old_ms):8.1f} ms, "
                f"one ListOffsets {statistics.median(new_ms):7.1f} ms "
                f"(medians of {args.rounds}; same offsets: {same})"
            )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
