"""The local-mode SparkSession: the only place Spark is configured.

Spark needs Java 17 or newer. :func:`check_java` says so in one line when none is found,
before the JVM is started, instead of letting py4j fail with a long traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import EnvironmentProblem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA = 17
_session: SparkSession | None = None


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def check_java() -> str:
    """Return the Java version string, or raise EnvironmentProblem in one clear line."""
    java = _java_binary()
    hint = "install Java 17+: sudo apt-get install -y openjdk-17-jre-headless (or set JAVA_HOME)"
    if java is None:
        raise EnvironmentProblem("no Java found: Spark needs Java 17 or newer", hint=hint)
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"Java at {java} does not run ({exc})", hint=hint) from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise EnvironmentProblem(f"cannot tell the version of Java at {java}", hint=hint)
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise EnvironmentProblem(f"Java {major} at {java} is too old for Spark", hint=hint)
    return out.splitlines()[0] if out else f"java {major}"


def get_spark(
    master: str = "local[2]", driver_memory: str = "1g", options: dict[str, str] | None = None
) -> SparkSession:
    """Return the process-wide SparkSession, starting it on first use (a few seconds)."""
    global _session
    if _session is not None:
        return _session
    check_java()
    # Workers must run this interpreter, which has pyarrow/polars and the engine installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode talks over loopback only; this also avoids Spark's hostname warning.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).with_name("log4j2.properties")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("cdcctl")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    )
    for key, value in (options or {}).items():
        builder = builder.config(key, value)
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def _warm_worker(_: object) -> int:
    # Importing the merge stack once per Python worker moves ~2 s off the first batch.
    import engine.merge  # noqa: F401

    return os.getpid()


def warm_up(spark: SparkSession) -> threading.Thread:
    """Start the Python workers and import the merge code in them, in the background."""
    parallelism = spark.sparkContext.defaultParallelism

    def run() -> None:
        try:
            spark.sparkContext.parallelize(range(parallelism), parallelism).map(
                _warm_worker
            ).collect()
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first batch time
            pass

    thread = threading.Thread(target=run, name="spark-warm-up", daemon=True)
    thread.start()
    return thread


def stop_spark() -> None:
    """Stop the session if one was started."""
    global _session
    if _session is not None:
        _session.stop()
        _session = None
