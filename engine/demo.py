"""`cdcctl demo`: an embedded broker, a realistic Debezium workload, a replication run."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engine.broker import EmbeddedBroker, produce_messages
from engine.config import config_from_dict
from engine.demo_workload import InventoryWorkload
from engine.query import list_tables, query
from engine.replicator import BatchReport, Replicator

SAMPLE_SQL = (
    "SELECT o.status, count(*) AS orders, sum(o.quantity) AS items, "
    "sum(o.quantity * p.price) AS revenue "
    "FROM inventory_orders o JOIN inventory_products p ON p.id = o.product_id "
    "GROUP BY o.status ORDER BY orders DESC"
)


@dataclass
class DemoReport:
    """What the demo did."""

    target: Path
    events: int
    seconds: float
    row_counts: dict[str, int]
    sample_sql: str
    sample: pa.Table


def run_demo(
    events: int = 50_000,
    target: Path | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> DemoReport:
    """Start a broker, write the workload, replicate it to ``target``, query it."""
    target = target or Path(tempfile.mkdtemp(prefix="cdcctl-demo-")) / "lake"
    with EmbeddedBroker() as broker:
        workload = InventoryWorkload(seed=7, prefix="dbserver1", schemas=True)
        topics = [f"dbserver1.inventory.{t}" for t in ("customers", "products", "orders")]
        broker.create_topics(topics)
        produced = produce_messages(broker.bootstrap_servers, workload.events(events))
        cfg = config_from_dict(
            {
                "source": {
                    "bootstrap_servers": broker.bootstrap_servers,
                    "topics": r"^dbserver1\.inventory\..*",
                },
                "target": {"path": str(target)},
                "replicator": {"work_dir": str(target.parent / ".cdcctl")},
            }
        )
        started = time.monotonic()
        Replicator(cfg, on_batch=on_batch, log=log).run(until_caught_up=True)
        seconds = time.monotonic() - started
    counts = {
        name: query(target, f'SELECT count(*) FROM "{name}"').column(0)[0].as_py()
        for name in list_tables(target)
    }
    return DemoReport(target, produced, seconds, counts, SAMPLE_SQL, query(target, SAMPLE_SQL))
