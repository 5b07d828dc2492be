"""A reader pinned at an instant outlives dozens of commits, cleans and compactions.

A busy Merge-on-Read table: a real replicator (``cdcctl start``, a child process) applies
a stream of changes as fast as it comes, a commit every fraction of a second, compacting
file groups every two log files, cleaning every ten commits by time
(``hudi.clean_retain_hours`` of 40 seconds here) and archiving past six commits. Once
cleans have deleted slices older than the window, readers pin the newest instant P:

* a DuckDB connection through the engine's query path (``engine.connect(as_of=P)``),
  whose view reads its rows only when first scanned;
* a hudi-rs table object made then, read as of P at the end;
* Apache Hudi's own Spark readers (0.15.0 and 1.0.2): a time-travel query at P loaded
  and planned then (Hudi lists P's files), its rows collected only at the end.

While they wait, the table moves on by at least two dozen commits, several compactions
and cleans that delete files. Then both read, and ``cdcctl query --as-of P`` too: each
equals what a reader saw of P right after P committed. P is by then older than the
newest ten commits, so the count-based retention this replaced (``clean_retain_commits
= 10``) would have let the cleaner delete its slices.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

import engine
from engine.config import load_config
from engine.hudi import avro_models as am
from engine.hudi import timeline as tl
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.integration.replicas import run_cli, write_config
from tests.waiting import wait_until

# The Hudi reader sessions are shared with test_hudi_readers: one worker runs both.
pytestmark = [
    pytest.mark.peers,
    pytest.mark.kafka,
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.xdist_group("hudi_readers"),
]

WINDOW_SECONDS = 40
ORDERS_ONLY = {"orders": {"insert": 0.3, "update": 0.6, "delete": 0.1}}


def _cleans(hoodie: Path) -> list[tuple[str, str, int]]:
    """Completed cleans: (instant, earliest commit retained, files deleted)."""
    out = []
    for c in tl.scan(hoodie).completed_services("clean"):
        try:
            data = (hoodie / f"{c}.clean").read_bytes()
        except FileNotFoundError:
            continue  # archived since the listing
        meta = am.deserialize_avro_metadata(data, am.CLEAN_METADATA)
        out.append((c, meta["earliestCommitToRetain"], meta["totalFilesDeleted"]))
    return out


def _base_instants(table: Path) -> set[str]:
    """Instants that wrote a base file (first writes and compactions)."""
    return {p.name.rsplit("_", 1)[1].split(".")[0] for p in table.glob("*.parquet")}


def _hudi_rs(reader: hudi.HudiTable, instant: str) -> list[dict]:
    batches = reader.read(hudi.HudiReadOptions().with_as_of_timestamp(instant))
    rows = pa.Table.from_batches(batches).to_pylist()
    return sorted(rows, key=lambda r: r["_hoodie_record_key"])


def test_a_pinned_reader_keeps_its_files_while_a_busy_table_moves_on(
    broker, hudi_readers, topic_prefix: str, tmp_path: Path, replicator
) -> None:
    workload = InventoryWorkload(seed=41, prefix=topic_prefix, schemas=True)
    produce_messages(broker.bootstrap_servers, list(workload.snapshot(5, 5, 400)))
    target, work = tmp_path / "lake", tmp_path / "work"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.",
        target,
        source={"include_tables": ["inventory_orders"]},
        hudi={
            "num_buckets": 2,
            "compaction_max_log_files": 2,
            "clean_retain_hours": WINDOW_SECONDS / 3600,
            "keep_min_commits": 4,
            "keep_max_commits": 6,
        },
        work_dir=work,
        max_batch_seconds=0.2,
    )
    table = target / table_name_for_topic(workload.topic("orders"))
    hoodie = table / ".hoodie"
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            produce_messages(broker.bootstrap_servers, list(workload.stream(60, ORDERS_ONLY)))
            time.sleep(0.2)

    producer = threading.Thread(target=produce, daemon=True)
    proc = replicator(config)
    producer.start()
    try:
        # Phase 1: commits for longer than the window, until a clean deleted slices
        # older than it (the cleaner is at work before the readers come).
        wait_until(
            lambda: hoodie.is_dir() and any(n for _, _, n in _cleans(hoodie)),
            "a clean",
            300,
            interval=0.5,
            child=proc,
        )
        first_clean = _cleans(hoodie)[-1][0]

        # The readers pin the newest instant P.
        completed = sorted(tl.scan(hoodie).completed)
        p = completed[-1]
        pinned_at = time.monotonic()
        seen = engine.connect(load_config(config), as_of=p)  # scanned now: P as it is
        expected = seen.sql("SELECT * FROM inventory_orders ORDER BY id").fetchall()
        waiting = engine.connect(load_config(config), as_of=p)  # scanned only at the end
        pinned_reader = hudi.HudiTable(str(table))
        expected_rs = _hudi_rs(hudi.HudiTable(str(table)), p)
        assert expected and len(expected) == len(expected_rs) > 300
        bases_at_p = _base_instants(table)
        spark_queries = {
            version: reader.plan(table, "time_travel", as_of=p)
            for version, reader in hudi_readers.items()
        }

        # Phase 2: the table moves on.
        def moved_on() -> bool:
            after = [t for t in tl.scan(hoodie).completed if t > p]
            cleans = [c for c, _, n in _cleans(hoodie) if c > first_clean and n]
            compactions = {b for b in _base_instants(table) - bases_at_p if b > p}
            return len(after) >= 24 and len(cleans) >= 2 and bool(compactions)

        wait_until(
            moved_on,
            "two dozen commits, two cleans and a compaction after P",
            240,
            interval=0.5,
            child=proc,
        )
        waited = time.monotonic() - pinned_at
        assert waited < WINDOW_SECONDS - 5, (
            f"the table took {waited:.0f} s to move on: too slow for a {WINDOW_SECONDS} s "
            "window (the premise of this test)"
        )
        completed = sorted(tl.scan(hoodie).completed)
        assert p < completed[-10], "P must be older than the newest ten commits"
        # Cleans since the readers came deleted files, and none retained an instant after P.
        after = [(c, e, n) for c, e, n in _cleans(hoodie) if c > first_clean]
        assert sum(n for _, _, n in after) > 0 and all(e <= p for _, e, _ in after), after

        # Every reader reads P whole.
        assert waiting.sql("SELECT * FROM inventory_orders ORDER BY id").fetchall() == expected
        assert _hudi_rs(pinned_reader, p) == expected_rs
        versions_of_rows = sorted(
            (r["_hoodie_record_key"], r["_hoodie_commit_time"]) for r in expected_rs
        )
        for version, handle in spark_queries.items():
            rows = hudi_readers[version].collect(handle)
            got = sorted((r["_hoodie_record_key"], r["_hoodie_commit_time"]) for r in rows)
            assert got == versions_of_rows, f"Hudi {version}'s long query at {p}"
        out = run_cli(
            "query",
            "SELECT count(*) AS n, sum(id) AS s FROM inventory_orders",
            "--config",
            str(config),
            "--as-of",
            p,
            "--json",
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == [
            {"n": len(expected), "s": sum(r["id"] for r in expected_rs)}
        ]
    finally:
        stop.set()
        producer.join(timeout=30)
        run_cli("stop", "--config", str(config), timeout=60)
        proc.wait(120)
    assert proc.returncode == 0, proc.describe()
