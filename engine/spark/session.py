"""The local-mode SparkContext: the only place Spark is configured.

Spark needs Java 17 or newer. :func:`check_java` says so in one line when none is found,
before the JVM is started, instead of letting py4j fail with a long traceback.

The driver JVM only orchestrates here (the merge runs in Python workers), so it is started
for a short, light life: C1 compiler only and the serial collector (about half the JVM's
CPU time at start-up), and, when setup has built one, an application class-data archive
(:func:`build_class_archive`) that maps Spark's classes instead of loading and verifying
them: Spark starts in ~1.7 s instead of ~4.5 s, on ~2 CPU-s instead of ~8.
"""

from __future__ import annotations

# Imported before the JVM is launched in a thread: PySpark launches it with a
# ``preexec_fn``, so that fork runs the at-fork hooks, the "before" ones ahead of taking
# the import lock. A module registering hooks while that thread forks (this one, when
# the main thread first imports it meanwhile) gets its "after" hook run alone, and
# CPython prints "Exception ignored ... RuntimeError: release unlocked lock" with a
# traceback on stderr. Imported here, it has registered before any launch.
import concurrent.futures.thread  # noqa: F401
import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.arrow_memory import use_jemalloc
from engine.config.sections import is_local_master
from engine.errors import EnvironmentProblem
from engine.files import private_dir, private_file

if TYPE_CHECKING:
    from pyspark import SparkContext

    from engine.config import Config

MIN_JAVA = 17
log = logging.getLogger("cdcctl.spark")

_context: SparkContext | None = None
_booting: Future[SparkContext] | None = None
_boot_lock = threading.Lock()
_java_version: dict[str, str] = {}

#: JVM flags for a driver that orchestrates and holds little: C1 only, one GC thread.
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: File name, in the work directory, of the Spark JVM's output when the replicator runs.
SPARK_LOG = "spark.log"


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
        out = (
            _java_version.get(java)
            or subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"Java at {java} does not run ({exc})", hint=hint) from None
    _java_version[java] = out
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise EnvironmentProblem(f"cannot tell the version of Java at {java}", hint=hint)
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise EnvironmentProblem(f"Java {major} at {java} is too old for Spark", hint=hint)
    return out.splitlines()[0] if out else f"java {major}"


def _base_java_options() -> list[str]:
    log4j = Path(__file__).with_name("log4j2.properties")
    return [f"-Dlog4j2.configurationFile=file:{log4j}", *JVM_OPTIONS]


def _java_options(extra: str = "") -> str:
    from engine.spark.archive import class_archive

    options = _base_java_options()
    archive = class_archive()
    if archive.is_file():
        # cds logging off: a stale archive is skipped quietly instead of warning on stdout.
        options += [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", "-Xlog:cds*=off"]
    return " ".join([*options, extra]).strip()


def get_spark(
    master: str = "local[2]",
    driver_memory: str = "1g",
    options: dict[str, str] | None = None,
    log_path: Path | None = None,
) -> SparkContext:
    """Return the process-wide SparkContext, starting it on first use (~1.5 s).

    The merge is RDD work (a job of Python tasks), so no SQL session is created: a
    plain SparkContext starts ~0.6 s sooner on ~0.9 CPU-s less.

    With ``log_path`` the JVM's output (and its Python workers') goes to that file
    instead of this process's stdout/stderr. Besides a quiet terminal, this lets a
    caller that reads our output see it end when we exit: the JVM takes ~0.5 s more to
    shut down and, writing to the same pipes, would hold them open until it has.
    """
    global _context
    if _context is not None:
        return _context
    _context = _start(master, driver_memory, options or {}, _java_options(), log_path)
    return _context


def spark_settings(
    master: str, driver_memory: str, options: dict[str, str], java_options: str
) -> dict[str, str]:
    """The Spark settings of the engine's context: the engine's, the user's ``options``
    over them, and the JVM flags of the driver (and of a cluster's executors), to which
    the user's are appended."""
    settings = {
        "spark.driver.memory": driver_memory,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.python.daemon.module": "engine.spark.daemon",
        # The JVM talks to Python workers over Unix sockets: over loopback TCP each job
        # with Python tasks waited ~40 ms on delayed ACKs (a 1-task job: 65 -> 18 ms).
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        **options,
        # The user's JVM options come after (and so override) the engine's, never instead.
        "spark.driver.extraJavaOptions": " ".join(
            filter(None, [java_options, options.get("spark.driver.extraJavaOptions", "")])
        ),
    }
    if not is_local_master(settings.get("spark.master", master)):
        # A cluster's executor JVMs only relay rows to their Python workers: the same two
        # flags (not the driver's class archive, a file of this machine). A catch-up of
        # 1M events on two one-core workers: 54-56k -> 67-69k events/s, the cluster's CPU
        # 17.3-18.3 -> 11.5-11.8 s (docs/performance.md).
        mine = options.get("spark.executor.extraJavaOptions", "")
        # A collector of the user's replaces ours (two would stop the JVM at start).
        ours = [
            f for f in JVM_OPTIONS if not (f.endswith("GC") and re.search(r"-XX:\+Use\w+GC", mine))
        ]
        settings["spark.executor.extraJavaOptions"] = " ".join([*ours, mine]).strip()
    return settings


def _start(
    master: str,
    driver_memory: str,
    options: dict[str, str],
    java_options: str,
    log_path: Path | None = None,
) -> SparkContext:
    check_java()
    # Workers must run this interpreter, which has pyarrow/polars and the engine installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode talks over loopback only; this also avoids Spark's hostname warning.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Before the JVM starts: its Python workers inherit the pool's setting.
    use_jemalloc()
    from pyspark import SparkConf, SparkContext

    settings = spark_settings(master, driver_memory, options, java_options)
    conf = SparkConf().setMaster(master).setAppName("cdcctl").setAll(list(settings.items()))
    if log_path is None:
        context = SparkContext(conf=conf)
    else:
        context = SparkContext(conf=conf, gateway=_gateway_logging_to(conf, log_path))
        _ignore_stop_signals(context)
    context.setLogLevel("ERROR")
    return context


def _ignore_stop_signals(context: SparkContext) -> None:
    """Let the driver stop Spark's JVM in order: it ignores SIGTERM (PySpark has it
    ignore SIGINT) as a service manager sends it to every process of the service
    (systemd's KillMode=control-group). It still ends with the driver, whose pipe to it
    closes however the driver ends (SIGKILL included). A group's signal (Ctrl-C,
    ``timeout``) does not reach it at all: it runs in a process group of its own."""
    jvm = context._jvm
    assert jvm is not None  # a started context has its gateway
    signals = jvm.sun.misc
    try:  # best effort: a JVM run with -Xrs refuses ("Signal already used by VM or OS")
        signals.Signal.handle(signals.Signal("TERM"), signals.SignalHandler.SIG_IGN)
    except Exception as exc:  # noqa: BLE001 - any refusal leaves the JVM as it was
        log.warning(
            "Spark's JVM does not ignore SIGTERM (%s): a service manager's stop that "
            "signals every process of the service may fail the batch in flight",
            _java_reason(exc),
        )


def _java_reason(exc: Exception) -> str:
    """The Java exception's line of a failed Py4J call (its first line says only which
    call failed)."""
    found = re.search(r"[\w.$]+(?:Exception|Error): [^\n]+", str(exc))
    return found.group(0).strip() if found else (str(exc).strip() or type(exc).__name__)


def _gateway_logging_to(conf: Any, log_path: Path) -> Any:
    """Launch Spark's JVM with its stdout and stderr in ``log_path`` (truncated), in a
    process group of its own: a signal to the driver's group (Ctrl-C on a terminal,
    ``timeout -s TERM``) is the driver's to handle, which then stops the JVM in order
    (the JVM killed under a merging batch failed it, with an ``EOFError`` traceback from
    PySpark's accumulator server)."""
    from pyspark.java_gateway import launch_gateway

    private_dir(log_path.parent)
    private_file(log_path)
    with open(log_path, "wb") as log:  # the JVM keeps a descriptor of its own
        try:
            return launch_gateway(
                conf, {"stdout": log, "stderr": subprocess.STDOUT, "process_group": 0}
            )
        except Exception as exc:  # noqa: BLE001 - PySpark raises several types here
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise EnvironmentProblem(
                f"Spark's JVM did not start ({reason})",
                hint=f"its output is in {log_path}",
            ) from None


def _warm_worker(_: object) -> int:
    # Importing the merge stack once per Python worker moves ~2 s off the first batch.
    from engine.merge.job import freeze_imported_objects

    freeze_imported_objects()
    return os.getpid()


def warm_up(spark: SparkContext) -> threading.Thread:
    """Start the Python workers and import the merge code in them, in the background."""
    parallelism = spark.defaultParallelism

    def run() -> None:
        try:
            spark.parallelize(range(parallelism), parallelism).map(_warm_worker).collect()
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first batch time
            pass

    thread = threading.Thread(target=run, name="spark-warm-up", daemon=True)
    thread.start()
    return thread


def start_in_background(
    master: str = "local[2]",
    driver_memory: str = "1g",
    options: dict[str, str] | None = None,
    log_path: Path | None = None,
) -> Future[SparkContext]:
    """Start the process-wide SparkContext and warm its Python workers, in a thread.

    Idempotent: every call returns the same future. ``cdcctl start`` calls it as soon as
    the config is read, so the JVM boots while the rest of the engine is imported and
    the first batch is read and decoded.
    """
    global _booting
    with _boot_lock:
        if _booting is None:
            booting: Future[SparkContext] = Future()

            def boot() -> None:
                try:
                    context = get_spark(master, driver_memory, options, log_path)
                    warm_up(context)
                    booting.set_result(context)
                except BaseException as exc:  # noqa: BLE001 - raised by whoever waits for it
                    booting.set_exception(exc)

            threading.Thread(target=boot, name="spark-start", daemon=True).start()
            _booting = booting
        return _booting


def start_for(cfg: Config) -> Future[SparkContext]:
    """:func:`start_in_background` with a replicator config's Spark settings, the JVM's
    output going to ``spark.log`` in its work directory."""
    spark = cfg.spark
    return start_in_background(
        spark.master, spark.driver_memory, spark.options, cfg.work_path() / SPARK_LOG
    )


def stop_spark() -> None:
    """Stop the SparkContext if one was started."""
    global _context, _booting
    context, _context, _booting = _context, None, None
    if context is not None:
        context.stop()  # may raise when its JVM is gone; it is forgotten either way


#: How long a JVM whose stdin closed may take to exit before it is killed.
JVM_EXIT_SECONDS = 10.0


def stop_jvm() -> None:
    """Stop the SparkContext and end its JVM, which :func:`stop_spark` leaves running
    (PySpark keeps one gateway JVM per process for the next context). The JVM exits when
    its stdin closes; a later :func:`get_spark` launches a new one."""
    from pyspark import SparkContext

    stop_spark()
    gateway, SparkContext._gateway, SparkContext._jvm = SparkContext._gateway, None, None
    if gateway is None:
        return
    with contextlib.suppress(Exception):  # a gateway already gone has nothing to close
        gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(JVM_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
