"""Engine checks: Java, Spark (started as ``cdcctl start`` starts it) and the work folder."""

from __future__ import annotations

import time

from engine.checks.result import Check, failed, passed
from engine.checks.target import folder_check
from engine.config import Config
from engine.errors import CdcError
from engine.spark import SPARK_LOG, check_java, get_spark


def check_java_version() -> Check:
    """A Java of version 17 or newer runs."""
    try:
        version = check_java()
    except CdcError as exc:
        return failed("engine.java", exc.message, exc.hint)
    return passed("engine.java", version)


def _one_task(_: object) -> int:
    return 1


def check_spark(cfg: Config) -> Check:
    """Spark starts with the configured settings and runs a Python task.

    The process-wide SparkContext stays up afterwards (what ``cdcctl start`` would use).
    """
    log_path = cfg.work_path() / SPARK_LOG
    started = time.monotonic()
    try:
        context = get_spark(cfg.spark.master, cfg.spark.driver_memory, cfg.spark.options, log_path)
        booted = time.monotonic() - started
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
