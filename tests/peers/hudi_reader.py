"""Apache Hudi's own Spark reader as a test peer: one child process per Hudi version.

:class:`HudiReader` starts ``interop/spark3.5/hudi_read.py`` with the pinned pyspark 3.5
virtualenv and one resolved Hudi bundle set (``interop/hudi-0.15``, ``interop/hudi-1.0``)
and talks JSON lines to it; the Spark session inside is started once and serves every
read of the test session. A missing virtualenv or bundle raises
:class:`tests.peers.jars.PeerMissing` ("run ./bootstrap.sh peers"), which the fixtures
turn into a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.peers.jars import INTEROP, lib_dir, venv_python

SCRIPT = INTEROP / "spark3.5" / "hudi_read.py"
#: The Hudi bundle sets the tier reads with, by version.
VERSIONS = {"0.15.0": "hudi-0.15", "1.0.2": "hudi-1.0"}
#: Seconds a Spark session may take to start, and one read to answer.
START_TIMEOUT = 300
READ_TIMEOUT = 600


class ReaderError(RuntimeError):
    """Hudi's reader answered with an error (its Java or Python text)."""


class HudiReader:
    """One long-lived Spark 3.5 session with one Hudi bundle on its class path."""

    def __init__(self, version: str, script: Path = SCRIPT, args: tuple[str, ...] = ()) -> None:
        """``script``/``args``: another JSON-line script of the set run the same way
        (``interop/spark3.5/hudi_upsert.py``, the upsert benchmark's writer)."""
        self.version = version
        python = venv_python("spark3.5")
        # Hudi's bundle, and for the reader Hadoop's S3A file system (replicas in a bucket).
        sets = (VERSIONS[version], "hadoop-aws") if script == SCRIPT else (VERSIONS[version],)
        lib = os.pathsep.join(str(lib_dir(n)) for n in sets)
        env = {**os.environ, "TZ": "UTC", "PYSPARK_PYTHON": str(python)}
        env.pop("SPARK_HOME", None)  # the venv's pyspark, not the engine's
        env.pop("PYTHONPATH", None)
        self._log = Path(tempfile.gettempdir()) / f"{script.stem}-{version}-{os.getpid()}.log"
        self._stderr = open(self._log, "wb")  # noqa: SIM115 - lives as long as the process
        self._proc = subprocess.Popen(
            [str(python), str(script), lib, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        ready = self._answer(START_TIMEOUT)
        if not ready.get("ready"):
            raise RuntimeError(f"Hudi {version} reader did not start: {ready}")
        about = self.request({"op": "version"})
        self.spark_version = about["spark"]
        self.hudi_version = about["hudi"]

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _answer(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(
                f"Hudi {self.version} reader gave no answer in {timeout} s; log: {self._tail()}"
            ) from None
        if line is None:
            raise RuntimeError(f"Hudi {self.version} reader exited; log: {self._tail()}")
        return json.loads(line)

    def _tail(self) -> str:
        self._stderr.flush()
        try:
            return self._log.read_text(errors="replace")[-4000:]
        except OSError:
            return "(no log)"

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        """Send one request; return the answer, or raise :class:`ReaderError`."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        answer = self._answer(READ_TIMEOUT)
        if not answer.get("ok"):
            raise ReaderError(answer.get("error", "unknown error"))
        return answer

    def hadoop(self, conf: dict[str, str]) -> None:
        """Hadoop settings for the reads that follow (``fs.s3a.bucket.<b>.endpoint``...)."""
        self.request({"op": "hadoop", "conf": conf})

    def read(
        self, path: Path | str, query: str = "snapshot", **options: Any
    ) -> list[dict[str, Any]]:
        """Rows of ``path`` read with Hudi's datasource (``query``: snapshot,
        read_optimized, incremental with ``begin``/``end``, time_travel with ``as_of``)."""
        return self.request({"op": "read", "path": str(path), "query": query, **options})["rows"]

    def plan(self, path: Path, query: str = "snapshot", **options: Any) -> int:
        """A query loaded and planned now (Hudi lists its files), read by :meth:`collect`."""
        req = {"op": "plan", "path": str(path), "query": query, **options}
        return int(self.request(req)["handle"])

    def collect(self, handle: int) -> list[dict[str, Any]]:
        """The rows of a query :meth:`plan` made, read now."""
        return self.request({"op": "collect", "handle": handle})["rows"]

    def read_parquet(self, files: list[Path]) -> list[dict[str, Any]]:
        """Rows of parquet files read by plain ``spark.read.parquet`` (no Hudi schema)."""
        req = {"op": "read", "query": "parquet", "files": [str(f) for f in files]}
        return self.request(req)["rows"]

    def timeline(self, path: Path) -> dict[str, Any]:
        """Active and archived timelines as Hudi's ``HoodieTableMetaClient`` loads them."""
        return self.request({"op": "timeline", "path": str(path)})

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()
