"""One writer: an exclusive OS lock on the work folder and on each table it writes.

Two replicators on one target would roll back each other's in-flight files and commit
over each other. ``cdcctl start`` therefore holds, for as long as it runs, an exclusive
``flock`` on ``<work_dir>/writer.lock`` and on ``<table>/.hoodie/.cdcctl/writer.lock``
of every table it writes (taken before the table's unfinished instants are rolled back).
Each lock file names its holder (pid, host, start time), so a second replicator is
refused with who holds it. The kernel drops the lock when its process dies, however it
dies, so a stale lock of a killed replicator is simply taken over; its file still names
the dead holder, which is logged.

``flock`` is reliable on local file systems; on network file systems it may not exclude
writers on other machines (a documented limit).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from engine.errors import WriterLockError
from engine.hudi import LEASE_FILE, own_dir
from engine.storage import Storage
from engine.storage.lease import DEFAULT_TTL, PIDNS, Lease, describe_holder, holder_ended

log = logging.getLogger("cdcctl.lock")

#: The lock file's name, in the work folder and in each table's ``.hoodie/.cdcctl``.
LOCK_NAME = "writer.lock"


def table_lock_path(table: Path) -> Path:
    """Where a table's writer lock lives (Hudi readers skip ``.hoodie``)."""
    return own_dir(table) / LOCK_NAME


def _holder(data: bytes) -> dict[str, Any]:
    try:
        holder = json.loads(data)
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def held(path: Path) -> bool:
    """Whether a live process holds the lock at ``path`` (the file is left as it is)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def holder(path: Path) -> dict[str, Any]:
    """Who last held the lock at ``path`` (pid, host, started), or {}."""
    try:
        return _holder(path.read_bytes())
    except FileNotFoundError:
        return {}


class WriterLock:
    """An exclusive lock held through an open file descriptor until :meth:`release`."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> WriterLock:
        """Take the lock or raise :class:`WriterLockError` naming its holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(os.pread(fd, 4096, 0))
            os.close(fd)
            raise WriterLockError(
                f"{self.what} is being written by {describe_holder(holder)}",
                hint=f"stop that replicator first; one replicator writes a target "
                f"(lock: {self.path})",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        previous = _holder(os.pread(fd, 4096, 0))
        # Only a holder that ended without releasing (killed, crashed) is taken over.
        if previous.get("pid") not in (None, os.getpid()) and not previous.get("released"):
            log.info(
                "%s: taking over the lock of %s, %s",
                self.what,
                describe_holder(previous),
                "which has ended" if holder_ended(previous) else "which no longer holds it",
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "pidns": PIDNS,
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays, naming its last holder and when it let go)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                previous = _holder(os.pread(fd, 4096, 0))
                released = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps({**previous, "released": released}).encode(), 0)
            except OSError:  # best effort: the next holder then says it took over
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class Locks:
    """The writer locks one replicator run holds; released together."""

    def __init__(self, lease_ttl: float = DEFAULT_TTL) -> None:
        self._held: dict[Path, WriterLock] = {}
        self._leases: dict[str, Lease] = {}
        #: Seconds a table's lease outlives its holder's last renewal.
        self.lease_ttl = lease_ttl

    def take(self, path: Path, what: str) -> None:
        """Hold the lock at ``path`` (a no-op when this run holds it already)."""
        if path not in self._held:
            self._held[path] = WriterLock(path, what).acquire()

    def take_table(self, table: Storage, what: str) -> Lease | None:
        """Hold a table's writer lock: the ``flock`` in its folder (None), or the lease of
        a table on object storage, renewed until released (returned: the table's commits
        go through it)."""
        local = table.local_path("")
        if local is not None:
            self.take(table_lock_path(local), what)
            return None
        lease = self._leases.get(table.url)
        if lease is None or lease.lost is not None:
            lease = Lease.acquire(table, LEASE_FILE, what, ttl=self.lease_ttl)
            lease.keep_alive()
            self._leases[table.url] = lease
        return lease

    def release_all(self) -> None:
        for lock in self._held.values():
            lock.release()
        self._held.clear()
        for lease in self._leases.values():
            lease.release()
        self._leases.clear()
