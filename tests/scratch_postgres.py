"""Scratch PostgreSQL clusters started by the tests (no server of the machine is used).

``initdb`` into a temporary folder, ``pg_ctl start`` on a free loopback port (its unix
socket in that folder too), stopped and removed at the end of the session. PostgreSQL
refuses to run as root, so when the tests run as root the cluster runs as the
``postgres`` user. The programs come from Debian's ``postgresql`` package
(``/usr/lib/postgresql/<major>/bin``, the highest major installed) unless ``initdb`` is on
PATH; ``./bootstrap.sh peers`` installs the package.

Fixtures (tests/conftest.py): ``scratch_postgres`` (``wal_level = logical``: test-connection's
passing case, changes read through a replication slot, every other test that needs a
PostgreSQL) and ``scratch_postgres_replica`` (``wal_level = replica``, what a server that
was never set up for change capture has). Each yields a :class:`ScratchPostgres` with a
``dsn`` for the superuser ``postgres`` (trust auth on loopback) and a ``connect()`` helper.
"""

from __future__ import annotations

import functools
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.waiting import wait_until

DEBIAN_ROOT = "/usr/lib/postgresql"


def _version_key(folder: str) -> tuple[int, ...]:
    """``/usr/lib/postgresql/9.6/bin`` -> (9, 6): majors compare as numbers (16 > 9.6)."""
    major = Path(folder).parent.name
    return tuple(int(p) for p in major.split(".") if p.isdigit()) or (-1,)


def find_bindir(path: str | None = None, debian_root: str = DEBIAN_ROOT) -> Path:
    """The folder of the PostgreSQL server programs (``initdb``, ``pg_ctl``, ``postgres``).

    ``initdb`` on ``path`` (default: PATH), the folder it really lives in; else the highest
    major version under Debian's ``/usr/lib/postgresql/<major>/bin``. Every program is
    taken from that one folder, so ``initdb`` and ``pg_ctl`` are of the same version.
    """
    found = shutil.which("initdb", path=path)
    if found:
        return Path(os.path.realpath(found)).parent
    folders = [
        os.path.dirname(p)
        for p in glob.glob(os.path.join(debian_root, "*", "bin", "initdb"))
        if os.access(p, os.X_OK)
    ]
    if not folders:
        raise FileNotFoundError(
            f"PostgreSQL's initdb is neither on PATH nor in {debian_root}/<version>/bin: "
            "run ./bootstrap.sh peers (it installs Debian's postgresql package)"
        )
    return Path(max(folders, key=_version_key))


@functools.cache
def _bin(name: str) -> str:
    program = find_bindir() / name
    if not os.access(program, os.X_OK):
        raise FileNotFoundError(f"{program} is missing: run ./bootstrap.sh peers")
    return str(program)


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
    wal_level: str = "logical"

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
        owner = {"user": self.user, "group": self.user, "extra_groups": []} if self.user else {}
        return subprocess.run(
            args, capture_output=True, text=True, timeout=120, check=False, cwd=self.folder, **owner
        )

    def start(self) -> None:
        """initdb (once) and start the server; wait until it accepts connections.

        The free port was free a moment ago only: another process (another xdist worker's
        server) may take it first, then the start is tried again on another port."""
        data = self.folder / "data"
        if not data.exists():
            init = self._run(
                _bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
            )
            if init.returncode:
                raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
        log = self.folder / "server.log"
        for attempt in range(5):
            if attempt:
                self.port = _free_port()
            options = (
                f"-c port={self.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={self.folder} -c wal_level={self.wal_level} "
                "-c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off "
                "-c shared_buffers=32MB"
            )
            seen = log.stat().st_size if log.exists() else 0
            started = self._run(
                _bin("pg_ctl"), "-D", str(data), "-l", str(log),
                "-o", options, "-w", "-t", "60", "start",
            )  # fmt: skip
            if not started.returncode:
                break
            with log.open("rb") as f:
                f.seek(seen)
                text = f.read().decode(errors="replace")
            if "could not bind" not in text and "already in use" not in text:
                raise RuntimeError(f"pg_ctl start failed: {started.stderr[-1000:]}\n{text[-2000:]}")
        else:
            raise RuntimeError(f"pg_ctl start failed: no free loopback port after 5 tries\n{text}")

        def answers() -> bool:
            with self.connect():
                return True

        wait_until(
            answers, "the scratch PostgreSQL to answer", 30, retry_on=(psycopg.OperationalError,)
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        self._run(_bin("pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


def start_scratch_postgres(wal_level: str = "logical") -> ScratchPostgres:
    """Create and start a scratch cluster in a new temporary folder."""
    _bin("initdb")  # a missing package is named before anything is made
    user = None
    folder = Path(tempfile.mkdtemp(prefix="cdcctl-pg-"))
    if os.geteuid() == 0:
        user = "postgres"
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            shutil.rmtree(folder, ignore_errors=True)
            raise RuntimeError(
                "the tests run as root and PostgreSQL refuses root: they run it as the "
                "postgres user, which does not exist: run ./bootstrap.sh peers"
            ) from None
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        folder.chmod(0o700)
    cluster = ScratchPostgres(folder, _free_port(), user, wal_level)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def create_postgis(conn: psycopg.Connection) -> None:
    """``CREATE EXTENSION postgis`` in ``conn``'s database; without Debian's PostGIS
    package for the server's major, an error saying how to get it."""
    available = conn.execute(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'postgis'"
    ).fetchone()
    if not available:
        raise RuntimeError(
            f"PostGIS is not installed for PostgreSQL {conn.info.server_version // 10000}: run "
            "./bootstrap.sh peers (it installs Debian's postgresql-<major>-postgis-3)"
        )
    conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
