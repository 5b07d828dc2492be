"""Spark's Python worker daemon, with PySpark imported from the installed package.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the Python
workers' ``PYTHONPATH``. Modules imported from a zip are compiled from source in every
new process (zipimport cannot cache bytecode): ~0.6 CPU-s per daemon, more for each
worker's imports. With PySpark installed as a package, the same modules are on
``sys.path`` with cached bytecode, so this daemon (``spark.python.daemon.module``)
drops the zips before importing PySpark and then runs Spark's own daemon unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def _without_spark_zips() -> None:
    zips = [p for p in sys.path if p.endswith(".zip") and os.sep + "pyspark" + os.sep in p]
    if not zips:
        return
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if p not in zips]
    spec = importlib.util.find_spec("pyspark")
    home = os.path.dirname(spec.origin) if spec and spec.origin else None
    # Only when the zips are the installed package's own copies (same version as the JVM).
    if (
        home is None
        or importlib.util.find_spec("py4j") is None
        or not all(os.path.realpath(z).startswith(os.path.realpath(home) + os.sep) for z in zips)
    ):
        sys.path[:] = saved


def _quiet_when_the_jvm_is_gone(worker):
    """Wrap Spark's per-connection worker: a JVM that exits (the driver finished or
    failed) closes the workers' sockets, and Spark's daemon would print a
    ``BrokenPipeError`` traceback for a worker that was still answering. Nothing is lost
    (the driver no longer waits for that answer), so the worker just ends."""

    def worker_or_quiet_exit(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return worker_or_quiet_exit


if __name__ == "__main__":
    _without_spark_zips()
    from pyspark import daemon

    daemon.worker = _quiet_when_the_jvm_is_gone(daemon.worker)
    daemon.manager()
