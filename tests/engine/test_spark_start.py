"""The Spark driver JVM: light flags, and a class-data archive that Spark really maps.

Runs real JVMs in subprocesses (the archive is written when a JVM exits, so it cannot be
built inside the test session's own Spark).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import sys
    from engine.spark import get_spark
    from engine.spark.archive import class_archive
    from engine.spark.session import _java_options
    log = sys.argv[1]
    print(class_archive())
    java = _java_options(f"-Xlog:class+load=info:file={log}")
    spark = get_spark(options={"spark.driver.extraJavaOptions": java})
    assert spark.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
    """
)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _classes_from_archive(log: Path) -> tuple[int, int]:
    lines = log.read_text().splitlines()
    top = sum("shared objects file (top)" in line for line in lines)
    return top, len(lines)


def test_built_archive_is_mapped_by_spark(tmp_path: Path) -> None:
    env = {**os.environ, "CDCCTL_CACHE_DIR": str(tmp_path / "cache")}

    before = _run(env, "-c", PROBE, str(tmp_path / "before.log"))
    assert before.returncode == 0, before.stderr
    archive = Path(before.stdout.splitlines()[0])
    assert not archive.exists()
    top, total = _classes_from_archive(tmp_path / "before.log")
    assert top == 0 and total > 1000

    built = _run(env, "-m", "engine.spark", "build-class-archive")
    assert built.returncode == 0, built.stderr
    assert archive.is_file(), built.stdout
    assert not list(archive.parent.glob("*.tmp")), "the temporary archive was left behind"

    after = _run(env, "-c", PROBE, str(tmp_path / "after.log"))
    assert after.returncode == 0, after.stderr
    top, total = _classes_from_archive(tmp_path / "after.log")
    # Most of Spark's classes now come from the archive instead of the jars.
    assert top > 0.5 * total, (top, total)


def test_damaged_archive_is_never_installed(tmp_path: Path) -> None:
    """A truncated archive crashes the JVM, so the build checks before it moves one in."""
    env = {**os.environ, "CDCCTL_CACHE_DIR": str(tmp_path / "cache")}
    code = textwrap.dedent(
        """
        import subprocess
        import engine.spark.archive as s
        real_run = subprocess.run
        def run(cmd, *a, **k):
            if any(str(c).startswith("-XX:SharedArchiveFile=") for c in cmd):
                flag = next(c for c in cmd if str(c).startswith("-XX:SharedArchiveFile="))
                archive = flag.split("=", 1)[1]
                with open(archive, "r+b") as f:
                    f.truncate(100_000)
            return real_run(cmd, *a, **k)
        s.subprocess.run = run
        try:
            s.build_class_archive()
        except s.EnvironmentProblem as e:
            print("refused:", e)
        print("exists:", s.class_archive().exists())
        """
    )
    out = _run(env, "-c", code)
    assert out.returncode == 0, out.stderr
    assert "refused: could not build the Spark class archive" in out.stdout
    assert "exists: False" in out.stdout
    assert not list((tmp_path / "cache").glob("*")), "nothing may be left in the cache"
    assert not list(ROOT.glob("hs_err_pid*.log")), "the crashed check JVM left a report behind"


def test_worker_daemon_ends_quietly_when_the_jvm_is_gone() -> None:
    """A JVM that exits mid-task closes the workers' sockets; Spark's daemon would print
    a BrokenPipeError traceback under the CLI's error message. Other errors still raise."""
    from engine.spark.daemon import _quiet_when_the_jvm_is_gone

    def closed(sock: object, authenticated: bool) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def reset(sock: object, authenticated: bool) -> int:
        raise ConnectionResetError(104, "reset")

    def broken(sock: object, authenticated: bool) -> int:
        raise ValueError("a real bug")

    assert _quiet_when_the_jvm_is_gone(closed)(None, True) == 1
    assert _quiet_when_the_jvm_is_gone(reset)(None, True) == 1
    assert _quiet_when_the_jvm_is_gone(lambda s, a: 0)(None, True) == 0
    with pytest.raises(ValueError):
        _quiet_when_the_jvm_is_gone(broken)(None, True)


def test_user_jvm_options_are_added_to_the_engines(tmp_path: Path) -> None:
    """``spark.driver.extraJavaOptions`` from the config is appended, so the engine's
    light-JVM flags and logging setup stay; the JVM's output goes to the given log."""
    probe = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from engine.spark import get_spark
        spark = get_spark(options={"spark.driver.extraJavaOptions": "-Dcdcctl.probe=yes"},
                          log_path=Path(sys.argv[1]))
        bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        print("\\n".join(bean.getInputArguments()))
        """
    )
    log = tmp_path / "work" / "spark.log"
    run = _run(dict(os.environ), "-c", probe, str(log))
    assert run.returncode == 0, run.stderr
    args = run.stdout.splitlines()
    assert "-Dcdcctl.probe=yes" in args and "-XX:TieredStopAtLevel=1" in args
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args)
    assert "incubator" in log.read_text() and "incubator" not in run.stderr


def test_each_spark_install_has_its_own_archive_name(tmp_path, monkeypatch) -> None:
    # The JVM maps an archive only for the jars it was built from (path and mtime): two
    # virtualenvs, or a reinstall, must not share one name and silently start without it.
    import types

    from engine.spark.archive import class_archive

    def install(folder: Path) -> None:
        (folder / "jars").mkdir(parents=True)
        (folder / "jars" / "spark-core.jar").write_bytes(b"jar")
        fake = types.ModuleType("pyspark")
        fake.__file__ = str(folder / "__init__.py")
        fake.__version__ = "4.0.0"
        monkeypatch.setitem(sys.modules, "pyspark", fake)

    install(tmp_path / "venv-a")
    first = class_archive()
    assert class_archive() == first  # stable for one install
    install(tmp_path / "venv-b")
    second = class_archive()
    assert second != first
    jar = tmp_path / "venv-b" / "jars" / "spark-core.jar"
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 10**9))
    assert class_archive() != second  # reinstalled in place


def test_stop_jvm_ends_the_jvm_and_a_later_context_starts_a_new_one() -> None:
    """``stop_jvm`` (the kept demo, once its replication is over) ends the JVM that
    ``stop_spark`` leaves running, with its Python workers; Spark starts again after."""
    probe = textwrap.dedent(
        """
        import psutil
        from pyspark import SparkContext
        from engine.spark import get_spark, stop_jvm
        spark = get_spark()
        assert spark.parallelize(range(10), 2).map(lambda x: x * 2).sum() == 90
        jvm = SparkContext._gateway.proc.pid
        below = [p.pid for p in psutil.Process(jvm).children(recursive=True)]
        assert below, "no Python worker under the JVM"
        stop_jvm()
        print("jvm alive:", psutil.pid_exists(jvm) and psutil.Process(jvm).status() != "zombie")
        psutil.wait_procs([psutil.Process(p) for p in below if psutil.pid_exists(p)], 10)
        print("workers alive:", [p for p in below if psutil.pid_exists(p)])
        spark = get_spark()
        assert SparkContext._gateway.proc.pid != jvm
        print("again:", spark.parallelize(range(4), 2).sum())
        """
    )
    run = _run(dict(os.environ), "-c", probe)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["jvm alive: False", "workers alive: []", "again: 6"]


def test_a_jvm_run_with_xrs_starts_with_one_warning(tmp_path: Path) -> None:
    """With ``-Xrs`` (the JVM leaves SIGTERM alone) Spark's JVM refuses to ignore SIGTERM;
    Spark still starts, with one warning saying so, and runs jobs (before the fix the
    refusal failed the start with the context already made)."""
    probe = textwrap.dedent(
        """
        import logging, sys
        from pathlib import Path
        from engine.spark import get_spark
        logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
        spark = get_spark(options={"spark.driver.extraJavaOptions": "-Xrs"},
                          log_path=Path(sys.argv[1]))
        print("sum:", spark.parallelize(range(10), 2).map(lambda x: x * 2).sum())
        """
    )
    run = _run(dict(os.environ), "-c", probe, str(tmp_path / "spark.log"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "sum: 90"
    warned = [line for line in run.stderr.splitlines() if line.startswith("cdcctl.spark ")]
    assert len(warned) == 1, run.stderr
    assert "does not ignore SIGTERM" in warned[0] and "IllegalArgumentException" in warned[0]
    assert "Traceback" not in run.stderr


@pytest.mark.spark
def test_the_driver_and_spark_workers_allocate_arrow_memory_with_jemalloc(spark) -> None:
    """The session's start makes jemalloc Arrow's pool in the driver and, through the
    inherited environment, in Spark's Python workers (faster and leaner than pyarrow's
    default mimalloc on the catch-up benchmark): asked of a real worker by a job."""
    import pyarrow as pa

    def pool(_: object) -> str:
        import pyarrow as worker_pa

        return worker_pa.default_memory_pool().backend_name

    assert pa.default_memory_pool().backend_name == "jemalloc"
    assert os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "jemalloc"
    assert set(spark.parallelize(range(2), 2).map(pool).collect()) == {"jemalloc"}


def test_a_chosen_arrow_pool_is_kept() -> None:
    """A user's ARROW_DEFAULT_MEMORY_POOL wins (a fresh interpreter: the pool is chosen
    once per process)."""
    code = "from engine.arrow_memory import use_jemalloc; print(use_jemalloc())"
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "system"


def test_modules_with_fork_hooks_are_imported_before_the_jvm_is_launched() -> None:
    # PySpark launches the JVM with a preexec_fn, in cdcctl's start-up thread: a fork
    # that runs the at-fork "before" hooks and only then takes the import lock. A module
    # whose import registers hooks in that gap (concurrent.futures.thread, first
    # imported by the main thread while the JVM starts) has its "after" hook run alone:
    # CPython then prints "release unlocked lock" with a traceback on the replicator's
    # stderr (seen in CI). Importing the Spark session module must register them.
    probe = textwrap.dedent(
        """
        import os, sys
        hooks, real = [], os.register_at_fork
        def spy(**kw):
            hooks.append(sys._getframe(1).f_globals["__name__"])
            real(**kw)
        os.register_at_fork = spy
        import engine.spark.session
        print("concurrent.futures.thread" in sys.modules, ",".join(hooks))
        """
    )
    out = _run(dict(os.environ), "-c", probe)
    assert out.returncode == 0, out.stderr
    loaded, hooked = out.stdout.split()
    assert loaded == "True", "engine.spark.session must import concurrent.futures.thread"
    assert "concurrent.futures.thread" in hooked.split(",")


def test_a_clusters_executors_get_the_engines_jvm_flags() -> None:
    from engine.spark.session import JVM_OPTIONS, spark_settings

    local = spark_settings("local[2]", "1g", {}, "-Dx=1")
    assert "spark.executor.extraJavaOptions" not in local
    assert local["spark.driver.extraJavaOptions"] == "-Dx=1"
    for master, options in (
        ("spark://10.0.0.5:7077", {}),
        # spark.master given as an option wins over the [spark] master
        ("local[2]", {"spark.master": "spark://10.0.0.5:7077"}),
    ):
        found = spark_settings(master, "1g", options, "-Dx=1")
        assert found["spark.executor.extraJavaOptions"] == " ".join(JVM_OPTIONS)
    mine = spark_settings(
        "spark://h:7077", "1g", {"spark.executor.extraJavaOptions": "-XX:+UseG1GC"}, ""
    )
    # The user's collector replaces ours (the JVM refuses two); the rest stay first.
    assert mine["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseG1GC"
    other = spark_settings(
        "spark://h:7077", "1g", {"spark.executor.extraJavaOptions": "-Xss4m"}, ""
    )
    assert other["spark.executor.extraJavaOptions"] == " ".join([*JVM_OPTIONS, "-Xss4m"])
