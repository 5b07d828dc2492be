"""``cdcctl demo``: an embedded broker, a realistic Debezium workload, a replication run.

The demo starts a Kafka-compatible broker on a free loopback port, writes the inventory
workload (:mod:`engine.playground.workload`) to it as Debezium's JsonConverter would,
replicates it into Hudi tables until caught up, and queries the replicas with DuckDB.
With ``keep`` it then stops its Spark JVM (nothing is replicated in this process any
more: an idle JVM held ~240 MB), leaves the broker running with a config file next to
the replicas, and goes on writing a trickle of live changes, so that ``cdcctl start``
and ``cdcctl query`` can be tried against it until the demo is stopped (Ctrl-C).

The demo has no database: its events are generated (:mod:`engine.playground.workload`),
so ``cdcctl validate``, which compares replicas with the database Debezium read, has
nothing to compare them with here.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engine.config import Config, config_from_dict, load_config, render_config
from engine.playground.broker import EmbeddedBroker, produce_messages
from engine.playground.workload import InventoryWorkload
from engine.query import list_tables, query
from engine.replicator import BatchReport, Replicator
from engine.spark import stop_jvm

SAMPLE_SQL = (
    "SELECT o.status, count(*) AS orders, sum(o.quantity) AS items, "
    "sum(o.quantity * p.price) AS revenue "
    "FROM inventory_orders o JOIN inventory_products p ON p.id = o.product_id "
    "GROUP BY o.status ORDER BY orders DESC"
)
TOPICS = r"^dbserver1\.inventory\."
#: Name of the config file ``keep`` writes next to the replicas.
CONFIG_NAME = "cdcctl.toml"


@dataclass
class DemoReport:
    """What the demo did."""

    target: Path
    events: int
    seconds: float
    row_counts: dict[str, int]
    sample_sql: str
    sample: pa.Table
    #: With ``keep``: the broker's address and the config file written for ``cdcctl start``.
    bootstrap_servers: str = ""
    config: Path | None = None


def run_demo(
    events: int = 50_000,
    target: Path | None = None,
    on_batch: Callable[[BatchReport], None] | None = None,
    *,
    keep: bool = False,
    live_rate: int = 50,
    on_ready: Callable[[DemoReport], None] | None = None,
) -> DemoReport:
    """Start a broker, write the workload, replicate it to ``target``, query it.

    Args:
        events: Debezium messages to write before replicating.
        target: Folder of the replicas (default: a temporary folder); relative paths are
            relative to the current directory.
        on_batch: Called with each batch's report.
        keep: After the run, keep the broker running, write ``cdcctl.toml`` next to the
            replicas, call ``on_ready`` and write ``live_rate`` changes per second until
            interrupted (Ctrl-C).
        live_rate: Live changes per second while kept.
        on_ready: Called once the kept demo is ready for ``cdcctl start``.
    """
    target = (target or Path(tempfile.mkdtemp(prefix="cdcctl-demo-")) / "lake").resolve()
    folder = target.parent
    with EmbeddedBroker() as broker:
        workload = InventoryWorkload(seed=7, prefix="dbserver1", schemas=True, clock=time.time)
        topics = [f"dbserver1.inventory.{t}" for t in ("customers", "products", "orders")]
        broker.create_topics(topics)
        produced = produce_messages(broker.bootstrap_servers, workload.events(events))
        cfg = config_from_dict(
            {
                "source": {"bootstrap_servers": broker.bootstrap_servers, "topics": TOPICS},
                "target": {"path": str(target)},
                "replicator": {"work_dir": str(folder / ".cdcctl")},
            }
        )
        started = time.monotonic()
        Replicator(cfg, on_batch=on_batch).run(until_caught_up=True)
        seconds = time.monotonic() - started
        counts = {
            name: query(target, f'SELECT count(*) FROM "{name}"').column(0)[0].as_py()
            for name in list_tables(target)
        }
        report = DemoReport(
            target, produced, seconds, counts, SAMPLE_SQL, query(target, SAMPLE_SQL)
        )
        if keep:
            stop_jvm()  # its replication is over: the JVM would only sit idle
            report.bootstrap_servers = broker.bootstrap_servers
            report.config = _write_config(folder, broker.bootstrap_servers, target)
            if on_ready is not None:
                on_ready(report)
            try:
                _write_live_changes(broker.bootstrap_servers, workload, live_rate)
            except KeyboardInterrupt:
                pass
    return report


@contextmanager
def live_demo(
    events: int = 50_000, target: Path | None = None, *, live_rate: int = 50
) -> Iterator[tuple[Config, Path]]:
    """The demo's source, for a replicator to follow (``cdcctl demo --tui``).

    Starts a broker, writes ``events`` messages of the inventory workload and a config
    file next to ``target`` (default: a temporary folder), and writes ``live_rate``
    changes per second in a thread until the block ends. Yields the config and its path;
    nothing is replicated here.
    """
    target = (target or Path(tempfile.mkdtemp(prefix="cdcctl-demo-")) / "lake").resolve()
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker() as broker:
        workload = InventoryWorkload(seed=7, prefix="dbserver1", schemas=True, clock=time.time)
        broker.create_topics(
            [f"dbserver1.inventory.{t}" for t in ("customers", "products", "orders")]
        )
        produce_messages(broker.bootstrap_servers, workload.events(events))
        path = _write_config(folder, broker.bootstrap_servers, target)
        stop = threading.Event()
        writer = threading.Thread(
            target=_write_live_changes,
            args=(broker.bootstrap_servers, workload, live_rate, stop),
            name="demo-live-changes",
            daemon=True,
        )
        writer.start()
        try:
            yield load_config(path), path
        finally:
            stop.set()
            writer.join(timeout=10)


def _write_config(folder: Path, bootstrap_servers: str, target: Path) -> Path:
    """The config ``cdcctl start`` uses against the kept demo (paths relative to it)."""
    text = render_config(
        bootstrap_servers=bootstrap_servers,
        topics=TOPICS,
        target=str(target.relative_to(folder)),
        base_dir=folder,
    )
    path = folder / CONFIG_NAME
    path.write_text(text)
    return path


def _write_live_changes(
    bootstrap: str, workload: InventoryWorkload, rate: int, stop: threading.Event | None = None
) -> None:
    """Write ``rate`` changes per second (inserts, updates, deletes) until interrupted
    (or ``stop`` is set)."""
    while stop is None or not stop.is_set():
        tick = time.monotonic()
        produce_messages(bootstrap, workload.stream(rate), create_topics=False)
        pause = max(0.0, 1.0 - (time.monotonic() - tick))
        if stop is None:
            time.sleep(pause)
        else:
            stop.wait(pause)
