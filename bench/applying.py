"""What the apply benchmarks share: the decoded change batches, the change sets, the
in-process replicator that applies them, and the machine line.

``bench/apply_vs_delta.py`` (vs delta-rs) and ``bench/hudi_upsert.py`` (vs Hudi's own Spark
upsert) build the same starting table and the same change sets from here.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np
import pyarrow as pa

from engine.config import config_from_dict
from engine.model import STREAMED_BIT
from engine.replicator import Replicator
from engine.spark import get_spark

TOPIC = "bench.app.items"
#: The row image's columns (the record key is ``id``).
DATA_COLUMNS = ("id", "name", "qty", "price", "status")


def change_batch(ids: np.ndarray, ops: np.ndarray, pos0: int, rng: np.random.Generator) -> pa.Table:
    """A decoded change batch (control columns + row image), as the decoder emits it."""
    n = len(ids)
    deleted = ops == "d"
    return pa.table(
        {
            "_cdc_key": pa.array(ids.astype(str)),
            "_cdc_op": pa.array(ops),
            "_cdc_pos": pa.array(STREAMED_BIT + pos0 + np.arange(n), pa.int64()),
            "_cdc_pos_sub": pa.array(pos0 + np.arange(n), pa.int64()),
            "_cdc_source_ts_ms": pa.array(np.full(n, 1_700_000_000_000), pa.int64()),
            "_cdc_partition": pa.array(np.zeros(n, np.int32)),
            "_cdc_offset": pa.array(pos0 + np.arange(n), pa.int64()),
            "_cdc_tx_id": pa.nulls(n, pa.string()),
            "id": pa.array(ids, pa.int64()),
            "name": pa.array(np.char.add("name-", rng.integers(0, 10**9, n).astype(str))),
            "qty": pa.array(np.where(deleted, 0, rng.integers(0, 1000, n)), pa.int32()),
            "price": pa.array(rng.random(n) * 100),
            "status": pa.array(rng.choice(["NEW", "PAID", "SHIPPED"], n)),
        }
    )


class ChangeSets:
    """Deduplicated change sets over a table of ``rows`` rows (ids ``0..rows-1``):
    80% updates, 10% inserts (new ids), 10% deletes, existing keys uniform over every id
    handed out so far (a key deleted earlier may be updated or deleted again: the change
    is then an insert or a no-op delete, the same for every engine)."""

    def __init__(self, rows: int, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.rows = rows
        self.next_id = rows
        self.pos = rows

    def base(self) -> pa.Table:
        """The starting table: ``rows`` snapshot rows."""
        return change_batch(np.arange(self.rows), np.full(self.rows, "r"), 0, self.rng)

    def next(self, size: int) -> pa.Table:
        """The next change set of ``size`` distinct keys."""
        kinds = self.rng.choice(["u", "c", "d"], size, p=[0.8, 0.1, 0.1])
        existing = self.rng.choice(self.next_id, size, replace=False)
        ids = np.where(kinds == "c", np.arange(self.next_id, self.next_id + size), existing)
        self.next_id += size
        batch = change_batch(ids, kinds, self.pos, self.rng)
        self.pos += size
        return batch


def in_process_replicator(
    root: Path, buckets: int, clean_retain_commits: int = 10, table_type: str = "MERGE_ON_READ"
) -> Replicator:
    """A replicator writing under ``root``, merging with a local Spark session (no Kafka)."""
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(root / "lake")},
            "hudi": {
                "num_buckets": buckets,
                "clean_retain_commits": clean_retain_commits,
                "table_type": table_type,
            },
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    return Replicator(cfg, spark=get_spark("local[2]", "1g"))


def machine() -> str:
    """The machine line every apply benchmark prints: host, cores, load average, Python."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: {platform.node()} {os.cpu_count()} cores, load average {load}, "
        f"Python {platform.python_version()}"
    )


def load_average() -> str:
    """The 1-minute load average, for lines printed between rounds."""
    return f"{os.getloadavg()[0]:.2f}"
