"""Write small Hudi tables with Apache Hudi's own Spark writer (the tests' foreign tables).

Run with the spark3.5 virtualenv's Python (``tests.peers.jars.venv_python("spark3.5")``)::

    python interop/spark3.5/hudi_write.py --jars DIR KIND=PATH [KIND=PATH ...]

``DIR`` holds a Hudi Spark bundle (``tests.peers.jars.lib_dir("hudi-0.15")``). Each
``KIND=PATH`` writes one non-partitioned table at ``PATH`` (its folder name is the table
name; record key ``id``, ordering field ``ts``), all in one Spark session:

- ``mdt``: Merge-on-Read, bucket index, metadata table on (Hudi's default), two upserts;
- ``compaction``: Merge-on-Read, bucket index, metadata table off, three upserts and a
  compaction scheduled after them but never run (``hoodie.compact.inline=false``);
- ``clustering``: Copy-on-Write, metadata table off, three inserts (a file group each)
  with Hudi's inline clustering scheduling on and its execution off: a clustering
  (``replacecommit.requested`` with its plan) pending;
- ``plain``: Merge-on-Read, bucket index, metadata table off, two upserts.

The script checks that what each kind is about is on disk (the metadata folder, the
pending ``compaction.requested``, the pending ``replacecommit.requested``) and exits 1
with a message otherwise. It prints one JSON line per table: kind, path, instants.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

KINDS = ("mdt", "compaction", "clustering", "plain")


def _session(jars: str):
    from pyspark.sql import SparkSession

    bundle = sorted(glob.glob(os.path.join(jars, "*.jar")))
    if not any("hudi-spark" in os.path.basename(j) for j in bundle):
        sys.exit(f"hudi_write: no Hudi Spark bundle in {jars}")
    return (
        SparkSession.builder.master("local[1]")
        .appName("cdcctl-hudi-write")
        .config("spark.jars", ",".join(bundle))
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog"
        )
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )


def _options(kind: str, name: str) -> dict[str, str]:
    opts = {
        "hoodie.table.name": name,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "",
        "hoodie.datasource.write.keygenerator.class": (
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        ),
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.metadata.enable": "true" if kind == "mdt" else "false",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
    }
    if kind == "clustering":
        opts.update(
            {
                "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
                "hoodie.datasource.write.operation": "insert",
                # Every insert a new file group, so there is something to cluster.
                "hoodie.parquet.small.file.limit": "0",
                "hoodie.clustering.inline": "false",
                "hoodie.clustering.schedule.inline": "true",
                "hoodie.clustering.inline.max.commits": "3",
            }
        )
    else:
        opts.update(
            {
                "hoodie.datasource.write.table.type": "MERGE_ON_READ",
                "hoodie.index.type": "BUCKET",
                "hoodie.index.bucket.engine": "SIMPLE",
                "hoodie.bucket.index.num.buckets": "4",
                "hoodie.bucket.index.hash.field": "id",
            }
        )
    if kind == "compaction":
        opts.update(
            {
                "hoodie.compact.inline": "false",
                "hoodie.compact.schedule.inline": "true",
                "hoodie.compact.inline.max.delta.commits": "3",
            }
        )
    return opts


def _rows(spark, first: int, count: int, ts: int):
    data = [(i, f"name {i} at {ts}", ts) for i in range(first, first + count)]
    return spark.createDataFrame(data, "id long, name string, ts long")


def _instants(path: str) -> list[str]:
    hoodie = os.path.join(path, ".hoodie")
    return sorted(n for n in os.listdir(hoodie) if n[:1].isdigit())


def write(spark, kind: str, path: str) -> dict:
    name = os.path.basename(os.path.normpath(path))
    opts = _options(kind, name)
    rounds = 3 if kind in ("compaction", "clustering") else 2
    for r in range(rounds):
        first = 100 * r if kind == "clustering" else 0  # clustering: new keys, new groups
        mode = "overwrite" if r == 0 else "append"
        _rows(spark, first, 20, 1000 + r).write.format("hudi").options(**opts).mode(mode).save(path)
    names = _instants(path)
    hoodie = os.path.join(path, ".hoodie")
    if kind == "mdt" and not os.path.isdir(os.path.join(hoodie, "metadata")):
        sys.exit(f"hudi_write: {path}: no .hoodie/metadata although the metadata table is on")
    if kind == "compaction" and not any(n.endswith(".compaction.requested") for n in names):
        sys.exit(f"hudi_write: {path}: no compaction was scheduled: {names}")
    if kind == "clustering" and not any(n.endswith(".replacecommit.requested") for n in names):
        sys.exit(f"hudi_write: {path}: no clustering was scheduled: {names}")
    if kind in ("plain", "compaction", "clustering") and os.path.exists(
        os.path.join(hoodie, "metadata")
    ):
        sys.exit(f"hudi_write: {path}: a metadata table although it is off")
    return {"kind": kind, "path": path, "instants": names}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jars", required=True, help="folder of the Hudi Spark bundle")
    parser.add_argument("tables", nargs="+", metavar="KIND=PATH")
    args = parser.parse_args()
    jobs = []
    for item in args.tables:
        kind, sep, path = item.partition("=")
        if not sep or kind not in KINDS or not path:
            parser.error(f"{item!r}: expected KIND=PATH with KIND one of {', '.join(KINDS)}")
        jobs.append((kind, path))
    spark = _session(args.jars)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for kind, path in jobs:
            print(json.dumps(write(spark, kind, path)), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
