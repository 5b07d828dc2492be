"""Apache Hudi's own Spark reader, as a long-lived child process of the test session.

Run with the interop/spark3.5 virtualenv's Python (pyspark 3.5) and one argument: the
folder of a resolved Hudi bundle set (``~/.cache/cdcctl/interop/hudi-<...>/lib``), then
any more folders of jars for the class path (``os.pathsep``-separated: the S3A file
system of ``interop/hadoop-aws``). One
local SparkSession is started with the settings of Hudi's quick start (Kryo with Hudi's
registrar, ``HoodieSparkSessionExtension``, ``HoodieCatalog``) and every other option
left at Hudi's defaults; then each line of stdin is one JSON request and gets one JSON
line on stdout:

``{"op": "read", "path": P, "query": Q, ...}`` with Q one of
  ``snapshot``, ``read_optimized``, ``incremental`` (``begin``, optional ``end``),
  ``time_travel`` (``as_of``), each with optional extra reader ``options``;
  ``parquet`` (plain ``spark.read.parquet`` of ``files``, no Hudi involved)
  -> ``{"ok": true, "rows": [...], "schema": [[name, type], ...]}``
``{"op": "timeline", "path": P}`` -> the active and archived timelines as Hudi's
  ``HoodieTableMetaClient`` loads them, and the commit metadata of every archived write
``{"op": "version"}`` -> Spark and Hudi versions
``{"op": "hadoop", "conf": {key: value}}`` -> Hadoop settings for the reads that follow
  (``fs.s3a.*``: a bucket's endpoint and credentials)
``{"op": "plan", ...a read request...}`` -> ``{"ok": true, "handle": N}``: the query is
  loaded and planned now (Hudi lists the files of the instant it reads) and its rows are
  read only by a later ``{"op": "collect", "handle": N}`` (the same answer as ``read``):
  a long query, whose files must outlive whatever the writer does in between

A failure answers ``{"ok": false, "error": <Java or Python error text>}``; the process
keeps serving. Values are made JSON-safe: timestamps as ISO text in UTC, dates ISO,
decimals as text, binary as hex.

Nothing here is imported by cdcctl: it is a test peer (tests/peers/hudi_reader.py).
"""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import json
import os
import sys
import traceback


def _session(libs: list[str]):
    from pyspark.sql import SparkSession

    jars = ",".join(j for lib in libs for j in sorted(glob.glob(os.path.join(lib, "*.jar"))))
    return (
        SparkSession.builder.master("local[1]")
        .appName("hudi-peer-reader")
        .config("spark.jars", jars)
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog"
        )
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )


def _plain(value):
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def _frame(spark, req):
    query = req["query"]
    if query == "parquet":
        return spark.read.parquet(*req["files"])
    reader = spark.read.format("hudi")
    if query == "snapshot":
        reader = reader.option("hoodie.datasource.query.type", "snapshot")
    elif query == "read_optimized":
        reader = reader.option("hoodie.datasource.query.type", "read_optimized")
    elif query == "incremental":
        reader = reader.option("hoodie.datasource.query.type", "incremental").option(
            "hoodie.datasource.read.begin.instanttime", req["begin"]
        )
        if req.get("end"):
            reader = reader.option("hoodie.datasource.read.end.instanttime", req["end"])
    elif query == "time_travel":
        reader = reader.option("as.of.instant", req["as_of"])
    else:
        raise ValueError(f"unknown query type {query!r}")
    for key, value in (req.get("options") or {}).items():
        reader = reader.option(key, value)
    return reader.load(req["path"])


def _read(spark, req, frame=None):
    frame = _frame(spark, req) if frame is None else frame
    rows = [{k: _plain(v) for k, v in r.asDict(recursive=True).items()} for r in frame.collect()]
    schema = [[f.name, f.dataType.simpleString()] for f in frame.schema.fields]
    return {"ok": True, "rows": rows, "schema": schema}


def _storage_conf(jvm, hadoop_conf):
    """Hudi 0.15+ builds its meta client on a StorageConfiguration wrapping Hadoop's."""
    return jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(hadoop_conf)


def _instants(timeline):
    out = []
    for inst in timeline.getInstants():
        # 0.15: getTimestamp(); 1.x: requestedTime() (getTimestamp kept on some lines).
        try:
            ts = inst.requestedTime()
        except Exception:
            ts = inst.getTimestamp()
        out.append([str(ts), str(inst.getAction()), str(inst.getState().name())])
    return out


def _timeline(spark, req):
    jvm = spark.sparkContext._jvm
    conf = _storage_conf(jvm, spark.sparkContext._jsc.hadoopConfiguration())
    client = (
        jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder()
        .setConf(conf)
        .setBasePath(req["path"])
        .build()
    )
    active = _instants(client.getActiveTimeline())
    archived_timeline = client.getArchivedTimeline()
    # Hudi loads archived instants lazily; ask for their metadata too.
    try:
        archived_timeline.loadCompletedInstantDetailsInMemory()
    except Exception:
        pass
    archived = _instants(archived_timeline)
    details = {}
    for inst in archived_timeline.getInstants():
        if str(inst.getState().name()) != "COMPLETED" or str(inst.getAction()) not in (
            "commit",
            "deltacommit",
            "replacecommit",
        ):
            continue
        try:
            ts = str(inst.requestedTime())
        except Exception:
            ts = str(inst.getTimestamp())
        try:
            # 0.15: Option<byte[]> of the JSON; 1.x: the layout's serde (commit metadata).
            raw = archived_timeline.getInstantDetails(inst)
            data = bytes(raw.get()) if raw.isPresent() else b""
            meta = json.loads(data.decode()) if data else {}
            details[ts] = sorted((meta.get("extraMetadata") or {}).keys())
        except Exception as exc:
            try:
                meta = archived_timeline.readCommitMetadata(inst)
                details[ts] = sorted(str(k) for k in meta.getExtraMetadata().keySet())
            except Exception:
                details[ts] = f"error: {exc}"
    return {"ok": True, "active": active, "archived": archived, "archived_extra_keys": details}


def _version(spark, lib):
    # The bundle's version, from the jar Spark loaded (hudi-spark<v>-bundle_<scala>-<hudi>.jar).
    bundles = sorted(glob.glob(os.path.join(lib, "hudi-spark*-bundle_*.jar")))
    hudi = os.path.basename(bundles[0]).rsplit("-", 1)[1][: -len(".jar")] if bundles else "?"
    return {"ok": True, "spark": spark.version, "hudi": hudi}


def _hadoop(spark, req):
    # Hadoop settings for the reads that follow (the S3A file system's endpoint and
    # credentials): set before a path of that bucket is first read.
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in req["conf"].items():
        conf.set(key, value)
    return {"ok": True}


def main() -> int:
    libs = sys.argv[1].split(os.pathsep)
    lib = libs[0]
    # Answers go to the original stdout; everything else (the JVM's and Spark's chatter,
    # which inherit file descriptor 1) to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    spark = _session(libs)
    spark.sparkContext.setLogLevel("ERROR")
    planned = {}
    print(json.dumps({"ok": True, "ready": True, "spark": spark.version}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "read":
                answer = _read(spark, req)
            elif op == "timeline":
                answer = _timeline(spark, req)
            elif op == "version":
                answer = _version(spark, lib)
            elif op == "hadoop":
                answer = _hadoop(spark, req)
            elif op == "plan":
                frame = _frame(spark, req)
                frame._jdf.queryExecution().executedPlan()  # the file listing happens here
                planned[len(planned)] = frame
                answer = {"ok": True, "handle": len(planned) - 1}
            elif op == "collect":
                answer = _read(spark, req, planned.pop(req["handle"]))
            elif op == "quit":
                break
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # a Java error comes as Py4JJavaError with its text
            text = str(exc)
            if "Py4JJavaError" not in type(exc).__name__ and not text:
                text = traceback.format_exc()
            answer = {"ok": False, "error": f"{type(exc).__name__}: {text}"}
        print(json.dumps(answer, default=str), file=out, flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    # Spark's own chatter goes to stderr; stdout carries only the answers.
    raise SystemExit(main())
