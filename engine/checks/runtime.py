"""Engine checks: Java, Spark (started as ``cdcctl start`` starts it) and the work folder."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from engine.checks.common import in_thread
from engine.checks.result import Check, failed, passed
from engine.checks.target import folder_check
from engine.config import Config, folder_problem
from engine.errors import CdcError
from engine.spark import SPARK_LOG, check_java, get_spark
from engine.storage import Storage


def check_java_version() -> Check:
    """A Java of version 17 or newer runs."""
    try:
        version = check_java()
    except CdcError as exc:
        return failed("engine.java", exc.message, exc.hint)
    return passed("engine.java", version)


def _one_task(_: object) -> int:
    return 1


def _package_version() -> str:
    try:
        return version("cdcctl")
    except PackageNotFoundError:
        return "unknown"


#: Seconds the executors have to answer (they start on the first task).
EXECUTOR_WAIT_S = 15.0
#: The probe file the driver leaves in each folder for the executors to find.
PROBE_NAME = ".cdcctl-executor-probe"


def _executor_probe(
    folders: dict[str, str | None], bucket: Storage | None, token: str
) -> Iterator[dict[str, Any]]:
    """Run on an executor: where it runs, its cdcctl, and for the target (a folder, or a
    bucket whose store the task carries) whether it sees the driver's probe there (the
    same folder or bucket, not one of its own at the same path) and can write it
    (``None``: yes; else why not)."""
    problems: dict[str, str | None] = {}
    for folder, seen_token in folders.items():
        found = folder_problem(Path(folder))
        problem = None if found is None else found[0]
        if problem is None and seen_token is not None:
            try:
                seen: str | None = (Path(folder) / PROBE_NAME).read_text()
            except OSError:
                seen = None
            if seen != seen_token:
                problem = f"{folder} here is not the driver's (its probe file is not there)"
        problems[folder] = problem
    if bucket is not None:
        problems[bucket.url] = _bucket_problem(bucket, token)
    yield {
        "host": socket.gethostname(),
        "executor": os.environ.get("SPARK_EXECUTOR_ID") or f"pid {os.getpid()}",
        "version": _package_version(),
        "problems": problems,
    }


def _bucket_problem(bucket: Storage, token: str) -> str | None:
    """Whether this executor reads the driver's probe object in ``bucket`` and can put
    and delete one of its own (None), else why not."""
    try:
        try:
            seen = bucket.read(f"{PROBE_NAME}/{token}").decode()
        except FileNotFoundError:
            seen = None
        if seen != token:
            return f"{bucket.url} from here is not the driver's (its probe object is not there)"
        mine = f"{PROBE_NAME}/{token}-{uuid.uuid4().hex[:8]}"
        bucket.write(mine, b"executor probe")
        bucket.delete(mine)
    except CdcError as exc:
        return exc.message
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return None


def _master_address(master: str) -> tuple[str, int] | None:
    """``host, port`` of a ``spark://host:port`` master (the first of several); None for
    ``local[...]`` and other masters."""
    match = re.fullmatch(r"spark://([^:,/]+):(\d+)(?:,.*)?", master.strip())
    return (match.group(1), int(match.group(2))) if match else None


def _loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() in ("localhost", "localhost.localdomain")


def _check_cluster(cfg: Config, context: Any, booted: float) -> Check:
    """On a standalone cluster: every executor that answers runs this cdcctl and can
    write the target: its folder at the same path here, or its bucket (with the
    credentials each task carries). The work folder stays the driver's: each batch
    travels with its tasks."""
    token = uuid.uuid4().hex
    bucket: Storage | None = None
    paths: list[Path] = []
    folders: dict[str, str | None] = {}
    if cfg.target_on_object_storage():
        try:
            bucket = cfg.target_store(patient=False)
            bucket.write(f"{PROBE_NAME}/{token}", token.encode())
        except (CdcError, OSError):
            bucket = None  # target.bucket says why
    else:
        path = cfg.target_path()
        paths.append(path)
        folders[str(path)] = None  # not there yet: created by start, nothing to compare
        if path.is_dir():
            try:
                (path / PROBE_NAME).write_text(token)
                folders[str(path)] = token
            except OSError:
                pass  # the folder checks say why
    slots = max(int(context.defaultParallelism), 1)
    job = context.parallelize(range(slots), slots).mapPartitions(
        lambda _: _executor_probe(folders, bucket, token)
    )
    try:
        found = in_thread("executors", job.collect).result(timeout=EXECUTOR_WAIT_S)
    except FutureTimeout:
        context.cancelAllJobs()
        return failed(
            "engine.spark",
            f"{cfg.spark.master} started, but no executor ran a task within {EXECUTOR_WAIT_S:g} s",
            "the cluster has no free cores or not enough memory for this application: see "
            "its master's page; lower spark.executor.memory or free a worker",
        )
    finally:
        for path in paths:
            (path / PROBE_NAME).unlink(missing_ok=True)
        if bucket is not None:
            try:
                bucket.delete(f"{PROBE_NAME}/{token}")
            except (CdcError, OSError):
                pass  # a probe object left behind is harmless; target.bucket says why
    executors = {(f["host"], f["executor"]): f for f in found}
    here = _package_version()
    for (host, executor), f in sorted(executors.items()):
        where = f"executor {executor} on {host}"
        if f["version"] != here:
            return failed(
                "engine.spark",
                f"{where} runs cdcctl {f['version']}, this driver {here}",
                "install the same cdcctl version, in the same Python path, on every worker",
            )
        for folder, problem in f["problems"].items():
            if problem is not None:
                return failed(
                    "engine.spark",
                    f"{where} cannot use {folder}: {problem}",
                    "the merge tasks read and write the target on every worker: a folder at "
                    "the same path (mount it there), or a bucket they reach with the same "
                    "endpoint (docs/guide/operating.md#spark-cluster)",
                )
    hosts = sorted({host for host, _ in executors})
    if bucket is not None:
        reach = f"reach and can write {bucket.url}"
    elif folders:
        reach = f"see and can write {' and '.join(folders)}"
    else:
        reach = "the bucket was not probed (see target.bucket)"
    return passed(
        "engine.spark",
        f"{cfg.spark.master} started in {booted:.1f} s; {len(executors)} executors on "
        f"{', '.join(hosts)} answered, run cdcctl {here} and {reach}",
    )


def check_spark(cfg: Config) -> Check:
    """Spark starts with the configured settings and runs a Python task.

    The process-wide SparkContext stays up afterwards (what ``cdcctl start`` would use).
    """
    log_path = cfg.work_path() / SPARK_LOG
    address = _master_address(cfg.spark.master)
    if address is not None:
        driver = cfg.spark.options.get("spark.driver.host", "127.0.0.1")
        if _loopback(driver) and not _loopback(address[0]):
            return failed(
                "engine.spark",
                f"executors of {cfg.spark.master} on other machines cannot reach this driver "
                f"at {driver} (spark.driver.host)",
                'set [spark.options] "spark.driver.host" and "spark.driver.bindAddress" to '
                "this machine's address the workers reach",
            )
        try:
            socket.create_connection(address, timeout=5).close()
        except OSError as exc:
            return failed(
                "engine.spark",
                f"cannot reach the Spark master {cfg.spark.master}: "
                f"{exc.strerror or type(exc).__name__}",
                "start the cluster's master, or fix spark.master",
            )
    started = time.monotonic()
    try:
        context = get_spark(cfg.spark.master, cfg.spark.driver_memory, cfg.spark.options, log_path)
        booted = time.monotonic() - started
        if address is not None:
            return _check_cluster(cfg, context, booted)
        context.parallelize([0], 1).map(_one_task).collect()
    except CdcError as exc:
        return failed("engine.spark", f"Spark did not start: {exc.message}", exc.hint)
    except Exception as exc:  # noqa: BLE001 - py4j and PySpark raise many types here
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return failed(
            "engine.spark",
            f"Spark did not start or run a task: {reason}",
            f"see {log_path}; check spark.master, spark.driver_memory and spark.options",
        )
    ran = time.monotonic() - started - booted
    return passed(
        "engine.spark",
        f"{cfg.spark.master} started in {booted:.1f} s, ran a Python task in {ran:.1f} s "
        f"(its output: {log_path})",
    )


def check_work_dir(cfg: Config) -> Check:
    """``replicator.work_dir`` exists or can be created, and is writable."""
    return folder_check("engine.work_dir", "replicator.work_dir", cfg.work_path())
