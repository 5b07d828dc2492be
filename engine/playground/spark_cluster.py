"""A Spark standalone cluster on this machine: a master and N workers, started from the
pyspark installation's own ``spark-class`` (``org.apache.spark.deploy.master.Master`` and
``...worker.Worker``) on free loopback ports, for the tests and benchmarks that run
``spark.master = "spark://..."``. Nothing is downloaded: pyspark's jars hold both.

Each worker gets ``cores`` cores and ``memory`` for executors and a work folder of its
own (``<folder>/worker-<n>``), where it starts one executor per application
(``app-<id>/<executor>/``, with the executor's stdout and stderr). Master and workers run
in process groups of their own; :meth:`StandaloneCluster.stop` ends each group, the
executors the workers started included.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from engine.errors import EnvironmentProblem
from engine.playground.children import Service, free_port


class StandaloneCluster(Service):
    """``spark://127.0.0.1:<port>`` with ``workers`` workers."""

    def __init__(
        self,
        folder: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        start_timeout: float = 90.0,
    ) -> None:
        self.folder = Path(folder)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port: int | None = None
        self.ui_port: int | None = None
        self._timeout = start_timeout
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The ``spark.master`` value."""
        if self.port is None:
            raise RuntimeError("the cluster is not running; call start() first")
        return f"spark://127.0.0.1:{self.port}"

    @property
    def pids(self) -> list[int]:
        """The master's and the workers' processes (executors are their children)."""
        return [p.pid for p in self._procs]

    def worker_dir(self, n: int) -> Path:
        """Worker ``n``'s work folder (1-based), where its executors run."""
        return self.folder / f"worker-{n}"

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, running and completed applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            state: dict[str, Any] = json.loads(r.read())
            return state

    def _spawn(self, name: str, cls: str, *args: str) -> None:
        home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # The daemons only schedule: a small heap each.
            "SPARK_DAEMON_MEMORY": "256m",
        }
        log = open(self.folder / f"{name}.log", "wb")  # noqa: SIM115 - the child writes it
        try:
            proc = subprocess.Popen(
                [str(home / "bin" / "spark-class"), cls, *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        finally:
            log.close()
        self._procs.append(proc)

    def start(self) -> StandaloneCluster:
        """Start the master and the workers; wait until every worker is registered.

        Raises:
            EnvironmentProblem: A daemon exited or the workers did not register in time.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        atexit.register(self.stop)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for n in range(1, self.workers + 1):
            self.worker_dir(n).mkdir(parents=True, exist_ok=True)
            self._spawn(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.worker_dir(n)),
                self.url,
            )  # fmt: skip
        deadline = time.monotonic() + self._timeout
        while True:
            dead = [p for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "; ".join(
                    f"{log.name}: {log.read_bytes()[-300:].decode('utf-8', 'replace')}"
                    for log in sorted(self.folder.glob("*.log"))
                )
                self.stop()
                raise EnvironmentProblem(
                    f"the Spark standalone cluster did not start: {logs}",
                    "check Java (cdcctl test-connection) and the pyspark installation",
                )
            try:
                if self.state().get("aliveworkers", 0) >= self.workers:
                    return self
            except (OSError, ValueError):
                # Not up yet, or its web UI is: while it starts, /json/ may answer with
                # the HTML page (seen in CI), which is no JSON.
                pass
            time.sleep(0.3)

    def stop(self) -> None:
        """Stop the workers (and their executors), then the master; idempotent."""
        procs, self._procs = self._procs, []
        for proc in reversed(procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in reversed(procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        atexit.unregister(self.stop)
