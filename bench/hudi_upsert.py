"""Apply benchmark: the engine's merge+commit vs Apache Hudi's own Spark upsert, same
starting table, same change sets, one run.

Usage:  .venv/bin/python bench/hudi_upsert.py [--rows 2000000] [--changes 10000,200000]
            [--repeat 3] [--table-type both|MERGE_ON_READ|COPY_ON_WRITE] [--buckets 8]
            [--hudi 0.15.0|1.0.2]

Needs the peers tier (``./bootstrap.sh peers``): Hudi's Spark bundle and the pyspark 3.5
virtualenv (``tests/peers/jars.py``); without it the benchmark fails and says so.

For each table type, two tables start from the same ``--rows`` rows (ids ``0..rows-1``):
the engine's (one merge of snapshot rows, as ``bench/apply_vs_delta.py``) and Hudi's
(``bulk_insert`` with Hudi's Spark datasource, in its own process:
``interop/spark3.5/hudi_upsert.py``). Both are bucket-indexed (SIMPLE engine, ``--buckets``
buckets, hashed on ``id``), record key ``id``, precombine field ``_cdc_pos``, payload
``OverwriteWithLatestAvroPayload``, non-partitioned, no metadata table (the engine writes
none), the same stored columns; Hudi's rows carry ``_hoodie_is_deleted`` for the deletes,
so a change set is one upsert and one commit on both sides. One untimed change set of
1,000 warms both (each JVM is already warm from the load); then each change set (80%
updates, 10% inserts, 10% deletes, keys uniform; ``bench/applying.py``) is applied by
both, ``--repeat`` times per size, the side going first alternating. Timed: the engine's
``merge_batch`` (plan, merge, commit) and Hudi's ``save`` (index, merge, commit and what
Hudi runs inline after it: clean, archive); not timed: Spark start-up, decoding, and Hudi
reading its Parquet input (cached before the clock starts). Medians are printed with the
range, and the ratio Hudi / engine (of the medians, and the median of each round's own
ratio). At the end Hudi's own snapshot reader reads both tables back and compares them
(record key and every stored column): the benchmark prints "equal" or exits 1.
``--hudi-jobs`` prints where each Hudi write went by Spark job (Spark's event log).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from applying import (  # noqa: E402
    DATA_COLUMNS,
    TOPIC,
    ChangeSets,
    in_process_replicator,
    load_average,
    machine,
)

#: The engine's stored columns besides the row image (its table's schema).
CONTROL_COLUMNS = ("_cdc_op", "_cdc_pos", "_cdc_pos_sub", "_cdc_source_ts_ms")
COMPARED = ("_hoodie_record_key", *DATA_COLUMNS, *CONTROL_COLUMNS)
WARMUP = 1_000


def hudi_options(name: str, table_type: str, buckets: int) -> dict[str, str]:
    """Hudi's writer options for the table the engine writes (``hoodie.properties`` of
    an engine table: record key, precombine field, key generator, payload; the bucket
    index settings the engine repeats in its commits)."""
    return {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "_cdc_pos",
        "hoodie.datasource.write.partitionpath.field": "",
        "hoodie.datasource.write.keygenerator.class": (
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        ),
        "hoodie.datasource.write.payload.class": (
            "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
        ),
        "hoodie.index.type": "BUCKET",
        "hoodie.index.bucket.engine": "SIMPLE",
        "hoodie.bucket.index.num.buckets": str(buckets),
        "hoodie.bucket.index.hash.field": "id",
        "hoodie.metadata.enable": "false",
    }


def hudi_rows(batch: pa.Table) -> pa.Table:
    """The rows Hudi upserts for a change batch: the engine's stored columns, and
    ``_hoodie_is_deleted`` true for the deletes."""
    rows = batch.select([*DATA_COLUMNS, *CONTROL_COLUMNS])
    return rows.append_column("_hoodie_is_deleted", pc.equal(batch["_cdc_op"], "d"))


def fail(message: str) -> None:
    print(f"hudi_upsert: {message}", file=sys.stderr)
    raise SystemExit(1)


def hudi_jobs(folder: Path, windows: list[tuple[str, float, float]]) -> list[str]:
    """Where each timed Hudi write went: its Spark jobs by description (Hudi names them,
    e.g. "Doing partition and writing data"), from the event log in ``folder``."""
    jobs: dict[int, list] = {}
    for log in folder.iterdir():
        for line in log.open():
            event = json.loads(line)
            if event["Event"] == "SparkListenerJobStart":
                props = event.get("Properties") or {}
                what = props.get("spark.job.description") or props.get("callSite.short", "?")
                what = what.split(" file:")[0][:60]  # listing jobs name every path
                jobs[event["Job ID"]] = [event["Submission Time"], None, what]
            elif event["Event"] == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                jobs[event["Job ID"]][1] = event["Completion Time"]
    lines = []
    for label, start, end in windows:
        spent: dict[str, float] = defaultdict(float)
        for begun, ended, what in jobs.values():
            if ended is not None and start <= begun <= end:
                spent[what] += (ended - begun) / 1000
        top = sorted(spent.items(), key=lambda kv: -kv[1])[:5]
        lines.append(
            f"  {label}: {(end - start) / 1000:.2f}s, {len(spent)} kinds of Spark job "
            f"{sum(spent.values()):.2f}s: " + "; ".join(f"{w} {s:.2f}s" for w, s in top)
        )
    return lines


def start_hudi(version: str, event_log: Path | None) -> object:
    """Hudi's writer process (warm after its first write); fails loudly without peers."""
    from tests.peers.hudi_reader import VERSIONS, HudiReader
    from tests.peers.jars import INTEROP, PeerMissing

    if version not in VERSIONS:
        fail(f"--hudi must be one of {', '.join(VERSIONS)}")
    try:
        extra = (str(event_log),) if event_log else ()
        script = INTEROP / "spark3.5" / "hudi_upsert.py"
        return HudiReader(version, script, ("local[2]", "2g", *extra))
    except PeerMissing as exc:
        fail(f"the peers tier is not set up: {exc}")
    raise AssertionError("unreachable")


def run_type(
    args: argparse.Namespace, hudi, table_type: str, root: Path, windows: list
) -> list[str]:
    """Both sides over one table type; returns the result lines (``windows`` gets each
    timed Hudi write's wall-clock window)."""
    changes = ChangeSets(args.rows)
    rep = in_process_replicator(root, args.buckets, table_type=table_type)
    phases: list[dict[str, float]] = []
    finish = rep.committer.finish

    def finish_recorded(pending):  # merge_batch drops its report; keep the phases
        report = finish(pending)
        phases.append(report.phases)
        return report

    rep.committer.finish = finish_recorded  # type: ignore[method-assign]
    hudi_path = root / "hudi" / "app_items"
    options = hudi_options("app_items", table_type, args.buckets)
    live = np.zeros(args.rows + WARMUP + args.repeat * sum(args.sizes), bool)

    def both(batch: pa.Table, operation: str, engine_first: bool) -> tuple[float, float]:
        staged = root / f"changes-{changes.pos}.parquet"
        pq.write_table(hudi_rows(batch), staged)
        ids = batch["id"].to_numpy()
        live[ids] = pc.not_equal(batch["_cdc_op"], "d").to_numpy(zero_copy_only=False)
        timings = {}
        for side in ("engine", "hudi") if engine_first else ("hudi", "engine"):
            if side == "engine":
                t0 = time.perf_counter()
                rep.merge_batch(TOPIC, batch, ["id"], {0: changes.pos})
                timings[side] = time.perf_counter() - t0
            else:
                req = {"op": "write", "path": str(hudi_path), "parquet": str(staged)}
                got = hudi.request({**req, "operation": operation, "options": options})
                timings[side] = got["seconds"]
                label = f"{table_type} {operation} of {len(batch):,} rows"
                windows.append((label, *got["window_ms"]))
        staged.unlink()
        return timings["engine"], timings["hudi"]

    engine_load, hudi_load = both(changes.base(), "bulk_insert", True)
    print(
        f"{table_type}: {args.rows:,} rows, {args.buckets} buckets; initial load: engine "
        f"{engine_load:.2f}s, Hudi bulk_insert {hudi_load:.2f}s",
        flush=True,
    )
    both(changes.next(WARMUP), "upsert", True)
    lines = []
    for size in args.sizes:
        engine_times, hudi_times = [], []
        for i in range(args.repeat):
            e, h = both(changes.next(size), "upsert", i % 2 == 0)
            engine_times.append(e)
            hudi_times.append(h)
            where = ", ".join(f"{k} {v:.2f}" for k, v in phases[-1].items())
            print(
                f"  {size:,} changes, round {i + 1}: engine {e:.2f}s ({where}), Hudi {h:.2f}s "
                f"(load average {load_average()})",
                flush=True,
            )
        e, h = float(np.median(engine_times)), float(np.median(hudi_times))
        # Each round's own ratio (both sides under the same load), then their median.
        paired = float(np.median(np.array(hudi_times) / np.array(engine_times)))
        e_range = f"({min(engine_times):.2f}-{max(engine_times):.2f})"
        h_range = f"({min(hudi_times):.2f}-{max(hudi_times):.2f})"
        lines.append(
            f"{table_type:>14} {size:>9,} {e:>6.2f} {e_range} {h:>7.2f} {h_range} {h / e:>9.2f}x"
            f" {paired:>8.2f}x"
        )
    rt = rep.tables.get(TOPIC)
    assert rt is not None
    got = hudi.request(
        {"op": "compare", "a": str(rt.path), "b": str(hudi_path), "columns": list(COMPARED)}
    )
    expected = int(live.sum())
    if got["only_a"] or got["only_b"] or not got["rows_a"] == got["rows_b"] == expected:
        fail(
            f"{table_type}: the tables differ: engine {got['rows_a']:,} rows, Hudi "
            f"{got['rows_b']:,}, expected {expected:,}; only in the engine's "
            f"{got['only_a']:,} (e.g. {got['sample_a']}), only in Hudi's {got['only_b']:,} "
            f"(e.g. {got['sample_b']})"
        )
    print(
        f"{table_type}: equal (Hudi's snapshot reader: {expected:,} rows, every stored "
        "column and the record key)",
        flush=True,
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--changes", default="10000,200000")
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--table-type", default="both", choices=["both", "MERGE_ON_READ", "COPY_ON_WRITE"]
    )
    ap.add_argument("--hudi", default="0.15.0", help="Hudi version (0.15.0 or 1.0.2)")
    ap.add_argument(
        "--hudi-jobs",
        action="store_true",
        help="print where each Hudi write went, by Spark job (from Spark's event log)",
    )
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.changes.split(",")]
    types = ["MERGE_ON_READ", "COPY_ON_WRITE"] if args.table_type == "both" else [args.table_type]
    print(machine(), flush=True)
    events = Path(tempfile.mkdtemp(prefix="hudi-events-")) if args.hudi_jobs else None
    windows: list[tuple[str, float, float]] = []
    hudi = start_hudi(args.hudi, events)
    try:
        print(
            f"Hudi {hudi.hudi_version} on Spark {hudi.spark_version} (local[2], own process); "
            "engine: Spark local[2]",
            flush=True,
        )
        lines = []
        for table_type in types:
            with tempfile.TemporaryDirectory() as tmp:
                lines += run_type(args, hudi, table_type, Path(tmp), windows)
    finally:
        hudi.close()
    if events is not None:
        print("Hudi's writes by Spark job (the rest of each write is its driver's own work):")
        print("\n".join(hudi_jobs(events, windows)))
        shutil.rmtree(events)
    print(f"{machine()}")
    print(
        f"{'table type':>14} {'changes':>9} {'engine s (range)':>17} {'Hudi s (range)':>18} "
        f"{'Hudi/engine':>10} {'(by round)':>9}"
    )
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
