"""A class-data archive of Spark's classes for this Java: Spark starts ~3 s sooner.

The driver JVM maps the archive instead of loading and verifying Spark's classes one by
one (~1.7 s to start instead of ~4.5 s, on ~2 CPU-s instead of ~8). Setup builds it once
(``python -m engine.spark build-class-archive``, ~15 s); without it everything works,
only slower to start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from engine.errors import EnvironmentProblem
from engine.spark.session import (
    _base_java_options,
    _java_binary,
    _start,
    _warm_worker,
    check_java,
    warm_up,
)


def class_archive() -> Path:
    """Where the class-data archive for this Java and this Spark lives (it may not exist).

    The name carries a digest of the Java binary, its version and Spark's jars — where
    they are and when they were written, which the JVM checks before it maps an archive —
    so an upgrade, a reinstall or a second virtualenv simply looks for (and, at the next
    setup, builds) its own archive instead of silently starting without one.
    """
    import pyspark

    java = _java_binary() or "java"
    jars = (Path(pyspark.__file__).parent / "jars").resolve()
    listing = (
        sorted(f"{p.name} {p.stat().st_mtime_ns}" for p in jars.glob("*.jar"))
        if jars.is_dir()
        else []
    )
    parts = [
        os.path.realpath(shutil.which(java) or java),
        check_java(),
        pyspark.__version__,
        str(jars),
    ]
    digest = hashlib.sha256("\n".join([*parts, *listing]).encode()).hexdigest()[:16]
    return cache_dir() / f"spark-classes-{digest}.jsa"


def cache_dir() -> Path:
    """cdcctl's cache folder: ``$CDCCTL_CACHE_DIR``, else ``cdcctl`` under
    ``$XDG_CACHE_HOME`` or ``~/.cache`` (the class archive here; the tests' fetched
    inputs and JVM peers too)."""
    base = os.environ.get("CDCCTL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cdcctl"
    )
    return Path(base)


def build_class_archive() -> Path:
    """Build the class-data archive for this Java and Spark (setup runs this; ~15 s).

    A JVM started with ``-XX:ArchiveClassesAtExit`` runs a few representative jobs and
    writes the classes it loaded when it exits. The archive is written under a temporary
    name, checked by starting a JVM on it (a damaged archive crashes the JVM), and only
    then moved into place, so a concurrent or interrupted build never leaves a bad one.
    The JVM's own output goes to a temporary log, not to the terminal; its last lines
    are in the error if the build fails.
    """
    target = class_archive()
    logs = tempfile.TemporaryDirectory(prefix="cdcctl-archive-")
    log_path = Path(logs.name) / "jvm.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.stem + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.unlink(tmp_name)  # the JVM creates it at exit
    tmp = Path(tmp_name)
    options = " ".join([*_base_java_options(), f"-XX:ArchiveClassesAtExit={tmp}", "-Xlog:cds*=off"])
    try:
        context = _start("local[2]", "1g", {}, options, log_path)
        warm_up(context).join()
        for _ in range(3):
            context.parallelize(range(4), 2).map(_warm_worker).collect()
        gateway = context._gateway
        if gateway is None:
            raise EnvironmentProblem("Spark started without its Java gateway")
        proc = gateway.proc
        context.stop()
        gateway.shutdown()
        proc.stdin.close()  # the gateway JVM exits when its stdin closes, dumping the archive
        proc.wait(timeout=300)
        with tempfile.TemporaryDirectory() as scratch:  # a crash report goes there
            check = subprocess.run(
                [
                    _java_binary() or "java",
                    f"-XX:SharedArchiveFile={tmp}",
                    "-Xlog:cds*=off",
                    f"-XX:ErrorFile={scratch}/hs_err_%p.log",
                    "-version",
                ],
                capture_output=True,
                timeout=60,
                cwd=scratch,
            )
        if not tmp.is_file() or check.returncode != 0:
            raise EnvironmentProblem(
                f"could not build the Spark class archive at {target}{_tail(log_path)}",
                hint="Spark still works without it, only its start-up is slower",
            )
        os.replace(tmp, target)
        return target
    finally:
        tmp.unlink(missing_ok=True)
        logs.cleanup()


def _tail(log_path: Path, lines: int = 3) -> str:
    """The last lines of the build JVM's output, as the end of an error message."""
    try:
        text = log_path.read_text("utf-8", "replace")
    except OSError:
        return ""
    last = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return f"; the JVM's output ends with: {' | '.join(last)}" if last else ""
