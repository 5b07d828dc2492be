"""A scratch PostgreSQL cluster with logical decoding on, started by the tests.

The machine's PostgreSQL runs with ``wal_level = replica`` and the tests must not
reconfigure it, so tests that need logical decoding (test-connection's passing case,
changes read through a replication slot) get their own cluster: ``initdb`` into a
temporary folder, ``pg_ctl start`` on a free loopback port with ``wal_level = logical``,
stopped at the end of the session. PostgreSQL refuses to run as root, so when the tests
run as root the cluster runs as the ``postgres`` user.

Use the ``scratch_postgres`` fixture (tests/conftest.py): it yields a
:class:`ScratchPostgres` with a ``dsn`` for the superuser ``postgres`` (trust auth on
loopback) and a ``connect()`` helper.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg


def _bin(name: str) -> str:
    """A PostgreSQL server program: on PATH, else in Debian's versioned folder."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not candidates:
        raise FileNotFoundError(
            f"{name} not found: install PostgreSQL's server package (postgresql) to run the "
            "tests that need logical decoding"
        )
    return candidates[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ScratchPostgres:
    """A running scratch cluster."""

    folder: Path
    port: int
    user: str | None  # the OS user it runs as (None: the current one)

    @property
    def dsn(self) -> str:
        """Superuser DSN of the ``postgres`` database over loopback TCP."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def connect(self, dbname: str = "postgres") -> psycopg.Connection:
        """An autocommit connection as the superuser."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True
        )

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    def start(self) -> None:
        """initdb (once) and start the server; wait until it accepts connections."""
        data = self.folder / "data"
        if not data.exists():
            init = self._run(
                _bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
            )
            if init.returncode:
                raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
        options = (
            f"-c port={self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.folder} -c wal_level=logical "
            "-c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off "
            "-c shared_buffers=32MB"
        )
        started = self._run(
            _bin("pg_ctl"), "-D", str(data), "-l", str(self.folder / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        if started.returncode:
            log = (self.folder / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {started.stderr[-1000:]}\n{log}")
        deadline = time.monotonic() + 30
        while True:
            try:
                with self.connect():
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        self._run(_bin("pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


def start_scratch_postgres() -> ScratchPostgres:
    """Create and start a scratch cluster in a new temporary folder."""
    user = None
    folder = Path(tempfile.mkdtemp(prefix="cdcctl-pg-"))
    if os.geteuid() == 0:
        user = "postgres"
        entry = pwd.getpwnam(user)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        folder.chmod(0o700)
    cluster = ScratchPostgres(folder, _free_port(), user)
    cluster.start()
    return cluster
