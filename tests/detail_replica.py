"""A replica with everything the detail screen shows, written by the real engine.

:func:`build_detail_replica` runs the real replicator (in this process, on a broker and a
SparkContext the caller gives) three times over one Merge-on-Read topic:

1. inserts, updates and deletes in small batches: several delta commits, log files,
   compactions (``compaction_max_log_files = 2``);
2. events with an added column: a schema change;
3. updates, then an incompatible change (an int column becomes a string): the table
   stops FAILED with that error as its last error.

Events carry source times a few seconds before they are produced, so latencies are
seconds. The engine's detail tests use it on a fresh folder; ``tests/data/detail/make.py``
recorded the fixture the screen's snapshots render.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from engine.config import Config, config_from_dict
from engine.playground.broker import produce_messages
from engine.replicator import Replicator
from tests import builders

COLS_V1 = [("id", "int32"), ("name", "string"), ("qty", "int32")]
COLS_V2 = [*COLS_V1, ("color", "string")]
COLS_BAD = [("id", "int32"), ("name", "string"), ("qty", "string")]


def detail_config(root: Path, servers: str, prefix: str) -> Config:
    """The config of the replica: MOR, 2 buckets, compaction after 2 log files."""
    return config_from_dict(
        {
            "source": {"bootstrap_servers": servers, "topics": f"^{re.escape(prefix)}\\."},
            "target": {"path": str(root / "lake")},
            "hudi": {
                "num_buckets": 2,
                "table_type": "MERGE_ON_READ",
                "compaction_max_log_files": 2,
            },
            "replicator": {
                "work_dir": str(root / "work"),
                "max_batch_events": 40,
                "max_batch_seconds": 0.3,
            },
        }
    )


#: Messages produced in all: 170 + 69 + 85.
SENT = 324


def build_detail_replica(broker: Any, spark: Any, root: Path, prefix: str) -> tuple[Config, str]:
    """Write the replica and state store under ``root``; returns the config and topic."""
    topic = f"{prefix}.app.items"
    broker.create_topics([topic])
    cfg = detail_config(root, broker.bootstrap_servers, prefix)
    # Source times (ms) = 1_700_000_000_000 + lsn: a few seconds ago.
    lsn = int(time.time() * 1000) - 1_700_000_000_000 - 3_000

    def event(op: str, ident: int, cols: list, **row: Any) -> tuple[str, bytes, bytes | None]:
        nonlocal lsn
        lsn += 1
        after = None if op == "d" else {"id": ident, "name": f"n{ident}", "qty": ident, **row}
        return topic, builders.key(ident), builders.value(op, lsn, after, cols)

    first = [event("c", i, COLS_V1) for i in range(1, 121)]
    first += [event("u", i, COLS_V1, qty=i * 10) for i in range(1, 41)]
    first += [event("d", i, COLS_V1) for i in range(41, 51)]
    produce_messages(broker.bootstrap_servers, first)
    Replicator(cfg, spark=spark).run(until_caught_up=True)

    lsn = int(time.time() * 1000) - 1_700_000_000_000 - 2_000
    second = [event("c", i, COLS_V2, color="red") for i in range(200, 240)]
    second += [event("u", i, COLS_V2, color="blue") for i in range(1, 30)]
    produce_messages(broker.bootstrap_servers, second)
    Replicator(cfg, spark=spark).run(until_caught_up=True)

    lsn = int(time.time() * 1000) - 1_700_000_000_000 - 1_000
    third = [event("u", i, COLS_V2, color="green") for i in range(1, 81)]
    third += [event("c", i, COLS_BAD, qty=f"{i} pcs") for i in range(300, 305)]
    produce_messages(broker.bootstrap_servers, third)
    Replicator(cfg, spark=spark).run(until_caught_up=True)
    return cfg, topic
