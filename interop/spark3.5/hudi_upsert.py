"""Apache Hudi's own Spark datasource writer, timed, as a long-lived child process of
``bench/hudi_upsert.py``.

Run with the spark3.5 virtualenv's Python (pyspark 3.5) and three arguments: the folder
of a resolved Hudi bundle set (``tests.peers.jars.lib_dir("hudi-0.15")``), the Spark
master (``local[2]``, as cdcctl's merge runs) and the driver memory; a fourth, optional,
is a folder for Spark's event log (where Hudi's time goes, by job and stage). One
SparkSession is started with the settings of Hudi's quick start; then each line of stdin
is one JSON request and gets one JSON line on stdout:

``{"op": "write", "path": P, "parquet": F, "operation": O, "options": {...}}``
  Reads the Parquet file ``F`` (the rows to write), caches and counts it (not timed), then
  writes it to the Hudi table at ``P`` with ``hoodie.datasource.write.operation`` ``O``
  and the given writer options, mode ``overwrite`` for ``bulk_insert``, else ``append``.
  Only the write (the upsert and its commit, with whatever Hudi runs inline after it) is
  timed: -> ``{"ok": true, "seconds": S, "rows": N, "window_ms": [start, end]}`` (the
  write's wall-clock window, epoch milliseconds, to find its jobs in the event log)
``{"op": "compare", "a": P, "b": Q, "columns": [...]}``
  Reads both tables with Hudi's snapshot query and compares the named columns as
  multisets (``exceptAll`` both ways): -> ``{"ok": true, "rows_a": N, "rows_b": M,
  "only_a": X, "only_b": Y, "sample_a": [...], "sample_b": [...]}``
``{"op": "version"}`` -> Spark and Hudi versions

A failure answers ``{"ok": false, "error": <Java or Python error text>}``.
Nothing here is imported by cdcctl: it is a benchmark peer.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
import traceback


def _session(lib: str, master: str, memory: str, event_log: str):
    from pyspark.sql import SparkSession

    jars = sorted(glob.glob(os.path.join(lib, "*.jar")))
    if not any("hudi-spark" in os.path.basename(j) for j in jars):
        sys.exit(f"hudi_upsert: no Hudi Spark bundle in {lib}")
    builder = SparkSession.builder
    if event_log:  # where Hudi's time goes: its Spark jobs and stages, for profiling
        builder = builder.config("spark.eventLog.enabled", "true").config(
            "spark.eventLog.dir", event_log
        )
    return (
        builder.master(master)
        .appName("hudi-peer-upsert")
        .config("spark.jars", ",".join(jars))
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog"
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .getOrCreate()
    )


def _write(spark, req):
    frame = spark.read.parquet(req["parquet"]).cache()
    rows = frame.count()  # read and cached before the clock starts
    operation = req["operation"]
    mode = "overwrite" if operation == "bulk_insert" else "append"
    writer = (
        frame.write.format("hudi")
        .options(**req["options"])
        .option("hoodie.datasource.write.operation", operation)
        .mode(mode)
    )
    started_ms = time.time() * 1000
    t0 = time.perf_counter()
    writer.save(req["path"])
    seconds = time.perf_counter() - t0
    ended_ms = time.time() * 1000
    frame.unpersist()
    return {"ok": True, "seconds": seconds, "rows": rows, "window_ms": [started_ms, ended_ms]}


def _compare(spark, req):
    cols = req["columns"]

    def read(path):
        return (
            spark.read.format("hudi")
            .option("hoodie.datasource.query.type", "snapshot")
            .load(path)
            .select(*cols)
            .cache()
        )

    a, b = read(req["a"]), read(req["b"])
    only_a, only_b = a.exceptAll(b), b.exceptAll(a)
    answer = {
        "ok": True,
        "rows_a": a.count(),
        "rows_b": b.count(),
        "only_a": only_a.count(),
        "only_b": only_b.count(),
        "sample_a": [r.asDict() for r in only_a.limit(3).collect()],
        "sample_b": [r.asDict() for r in only_b.limit(3).collect()],
    }
    a.unpersist()
    b.unpersist()
    return answer


def _version(spark, lib):
    bundles = sorted(glob.glob(os.path.join(lib, "hudi-spark*-bundle_*.jar")))
    hudi = os.path.basename(bundles[0]).rsplit("-", 1)[1][: -len(".jar")] if bundles else "?"
    return {"ok": True, "spark": spark.version, "hudi": hudi}


def main() -> int:
    lib, master, memory = sys.argv[1], sys.argv[2], sys.argv[3]
    event_log = sys.argv[4] if len(sys.argv) > 4 else ""
    # Answers go to the original stdout; the JVM's and Spark's chatter to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    spark = _session(lib, master, memory, event_log)
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"ok": True, "ready": True}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "write":
                answer = _write(spark, req)
            elif op == "compare":
                answer = _compare(spark, req)
            elif op == "version":
                answer = _version(spark, lib)
            elif op == "quit":
                break
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # a Java error comes as Py4JJavaError with its text
            text = str(exc) or traceback.format_exc()
            answer = {"ok": False, "error": f"{type(exc).__name__}: {text}"}
        print(json.dumps(answer, default=str), file=out, flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
