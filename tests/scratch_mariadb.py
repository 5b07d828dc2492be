"""Scratch MariaDB servers started by the tests (no server of the machine is used).

``mariadb-install-db`` into a temporary folder, then ``mariadbd`` on a free loopback port
with its own unix socket, pid file and log in that folder and ``--no-defaults`` (the
machine's ``/etc/mysql`` is never read, so a packaged server running beside it does not
matter). When the tests run as root the server runs as the ``mysql`` user (MariaDB
refuses root). It is stopped and its folder removed at the end of the session; the server
also gets SIGTERM from the kernel if the test process dies first. ``./bootstrap.sh peers``
installs Debian's ``mariadb-server`` package, which brings both programs.

``binlog=True`` (the ``scratch_mariadb`` fixture) is a server a binlog reader such as
Debezium's MySQL/MariaDB connector can stream from: ``log_bin``, ``binlog_format = ROW``,
``binlog_row_image = FULL``, a ``server_id``. ``binlog=False`` (``scratch_mariadb_no_binlog``)
is a server never set up for change capture. Both use utf8mb4 as Debian's packaged server
does, and ``root`` has no password over loopback TCP (``dsn``); :meth:`create_replication_user`
makes an account with the grants a binlog reader needs.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from engine.playground.children import die_with_parent_hook
from tests.waiting import wait_until

#: Where Debian puts the programs when /usr/sbin is not on PATH.
_SBIN = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")

#: The grants Debezium's MySQL/MariaDB connector documents for its user (snapshot + binlog).
REPLICATION_GRANTS = (
    "SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, REPLICATION CLIENT"
)


def _program(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for folder in _SBIN:
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        f"MariaDB's {name} is not installed: run ./bootstrap.sh peers (it installs Debian's "
        "mariadb-server package)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ScratchMariaDB:
    """A running scratch server."""

    folder: Path
    port: int
    user: str | None  # the OS user it runs as (None: the current one)
    binlog: bool = True
    server_id: int = 1
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def dsn(self) -> str:
        """``root`` (no password) over loopback TCP, as ``source.database_dsn`` takes it."""
        return f"mysql://root@127.0.0.1:{self.port}"

    @property
    def socket_path(self) -> Path:
        return self.folder / "mysqld.sock"

    @property
    def log(self) -> Path:
        return self.folder / "server.log"

    def connect(self, database: str | None = None, **options) -> pymysql.Connection:
        """An autocommit utf8mb4 connection as ``root`` over loopback TCP."""
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **options,
        )

    def create_replication_user(self, name: str, password: str, host: str = "%") -> None:
        """An account a binlog reader (Debezium) can snapshot and stream with."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE OR REPLACE USER %s@%s IDENTIFIED BY %s", (name, host, password))
            cur.execute(f"GRANT {REPLICATION_GRANTS} ON *.* TO %s@%s", (name, host))

    def _as_owner(self) -> dict:
        """``subprocess`` arguments that run a program as the server's OS user."""
        if not self.user:
            return {}
        return {"user": self.user, "group": self.user, "extra_groups": []}

    def _install(self) -> None:
        data = self.folder / "data"
        done = subprocess.run(
            [
                _program("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                "--innodb-log-file-size=16M",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=self.folder,
            **self._as_owner(),
        )
        if done.returncode:
            raise RuntimeError(
                f"mariadb-install-db failed ({done.returncode}): "
                f"{(done.stdout + done.stderr)[-3000:]}"
            )

    def _arguments(self) -> list[str]:
        args = [
            _program("mariadbd"),
            "--no-defaults",
            f"--datadir={self.folder / 'data'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket_path}",
            f"--pid-file={self.folder / 'mysqld.pid'}",
            f"--log-error={self.log}",
            f"--tmpdir={self.folder}",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=2",
            f"--server-id={self.server_id}",
        ]
        if self.binlog:
            args += [
                f"--log-bin={self.folder / 'binlog' / 'mysql-bin'}",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
            ]
        return args

    def start(self) -> None:
        """Install (once) and start the server; wait until it accepts connections.

        The free port was free a moment ago only: another process (another xdist worker's
        server) may take it first, then the start is tried again on another port."""
        if not (self.folder / "data").exists():
            self._install()
        (self.folder / "binlog").mkdir(exist_ok=True)
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder / "binlog", entry.pw_uid, entry.pw_gid)
        for attempt in range(5):
            if attempt:
                self.port = _free_port()
            seen = self.log.stat().st_size if self.log.exists() else 0
            self.process = subprocess.Popen(
                self._arguments(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=self.folder,
                preexec_fn=die_with_parent_hook(),
                **self._as_owner(),
            )
            error = self._wait_ready(seen)
            if error is None:
                return
            if "Address already in use" not in error and "Bind on TCP/IP port" not in error:
                raise RuntimeError(f"mariadbd did not start:\n{error}")
        raise RuntimeError(f"mariadbd did not start: no free loopback port after 5 tries\n{error}")

    def _log_since(self, seen: int) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as f:
            f.seek(seen)
            return f.read().decode(errors="replace")

    def _wait_ready(self, seen: int, timeout: float = 90) -> str | None:
        """None once the server answers; the log's new lines if it exited or never did."""
        process = self.process
        assert process is not None

        def answers_or_exited() -> bool:
            if process.poll() is not None:
                return True
            self.connect(connect_timeout=2).close()
            return True

        try:
            wait_until(
                answers_or_exited,
                "the scratch MariaDB to answer",
                timeout,
                retry_on=(pymysql.err.OperationalError,),
            )
        except AssertionError as waited:
            self._terminate()
            return f"{waited}\n" + self._log_since(seen)[-3000:]
        if process.poll() is not None:
            return self._log_since(seen)[-3000:] or f"exit code {process.returncode}"
        return None

    def _terminate(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()  # a clean shutdown
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        self._terminate()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_scratch_mariadb(binlog: bool = True, server_id: int = 1) -> ScratchMariaDB:
    """Create and start a scratch server in a new temporary folder."""
    for program in ("mariadb-install-db", "mariadbd"):
        _program(program)  # a missing package is named before anything is made
    user = None
    folder = Path(tempfile.mkdtemp(prefix="cdcctl-mariadb-"))
    if os.geteuid() == 0:
        user = "mysql"
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            shutil.rmtree(folder, ignore_errors=True)
            raise RuntimeError(
                "the tests run as root and MariaDB refuses root: they run it as the mysql "
                "user, which does not exist: run ./bootstrap.sh peers"
            ) from None
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        folder.chmod(0o700)
    server = ScratchMariaDB(folder, _free_port(), user, binlog, server_id)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server
