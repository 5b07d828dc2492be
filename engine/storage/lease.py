"""The one-writer rule where there is no ``flock``: a lease object, with fencing.

On a local disk one replicator per table is enforced with ``flock`` (:mod:`engine.lock`).
Object storage has no locks, only conditional writes, so a table there has a *lease*
object: a small JSON document naming its holder and an **epoch** that grows by one at
every takeover. Every change to it is a compare-and-swap on the version (ETag) the
changer last read (:meth:`~engine.storage.base.Storage.replace`), so of two writers that
both read version V only one can move it on.

**Liveness without clocks.** The holder renews the lease (a CAS that changes its
version) every ``ttl / 3`` seconds. Another writer that finds it held watches it: if its
version has not changed for ``ttl`` seconds *by the watcher's own monotonic clock*, the
holder is presumed dead and the watcher takes the lease over by a CAS from that very
version (epoch + 1). No two machines' wall clocks are compared. A holder that released
the lease (a clean stop), or whose process on this same host has ended, is taken over at
once.

**Fencing: the lease is the commit point.** A holder can stall past its lease (a long
GC, a frozen VM, SIGSTOP) and resume believing it still holds it. So an instant is not
committed by writing its completed file but by :meth:`Lease.commit`'s CAS of the lease
from the version this holder last wrote, recording "completing <path> from <staged>";
only then is the completed file created (create-if-absent) from the staged content. A
holder whose lease was taken over fails that CAS (:class:`LeaseLost`) and commits
nothing; whatever data files it wrote belong to no completed instant and no reader
sees them. A commit whose CAS succeeded is committed, even if its holder dies before
creating the completed file: the next holder finds the record in the lease it takes
over and creates that file first (:meth:`Lease.acquire`), before anything of its own.
So each completed file is created exactly once, by one of the two, with the same bytes,
and always before any later instant.

Requests: a commit costs one extra conditional PUT (the CAS, which also renews), the
staged copy's PUT and DELETE; a renewal one conditional PUT.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from engine import faults
from engine.errors import WriterLockError
from engine.storage.base import ObjectInfo, Storage, StorageError

#: Seconds without a renewal after which a holder is presumed dead, by default.
DEFAULT_TTL = 30.0


class LeaseHeld(WriterLockError):
    """Another writer holds the lease and is alive (it renewed while we watched)."""


class LeaseLost(WriterLockError):
    """This writer's lease was taken over: it must stop writing (nothing was committed)."""


def _pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``), which tells two containers
    that share a host name apart; empty where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


#: This process's PID namespace (recorded by lock and lease holders).
PIDNS = _pid_namespace()


def _me() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "pidns": PIDNS,
        "pid": os.getpid(),
        "run": uuid.uuid4().hex[:12],
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def describe_holder(holder: dict[str, Any]) -> str:
    """A lock's or lease's holder for messages: pid, host and since when."""
    if not holder:
        return "another process"
    return (
        f"cdcctl pid {holder.get('pid', '?')} on host {holder.get('host', '?')} "
        f"(since {holder.get('started', '?')})"
    )


def holder_ended(holder: dict[str, Any]) -> bool:
    """Whether a holder's process is known to have ended: it ran on this host and no
    process has its pid now. A pid that runs again (reused, or a holder that let go
    without saying so) or one of another host is not called ended."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    if holder.get("pidns", PIDNS) != PIDNS:
        return False  # another container with this host name: its processes are not ours
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, as another user's process
        return False
    return False


def lease_holder(store: Storage, path: str) -> str | None:
    """Who holds the lease at ``path`` (a running replicator, for messages), or None: no
    lease, released, its holder ran on this host and has ended, or it was not renewed
    for three times its time to live by the store's clock (a holder that died on another
    host). Read once, without watching it (the renewal time says how fresh it is)."""
    try:
        data = store.read(path)
    except FileNotFoundError:
        return None
    state = LeaseState.decode(data)
    if state.released or holder_ended(state.holder):
        return None
    info = store.head(path)
    if info is not None and (dt.datetime.now(dt.UTC) - info.modified).total_seconds() > (
        3 * state.ttl
    ):
        return None
    try:
        renewed = json.loads(data).get("renewed")
    except ValueError:
        renewed = None
    said = f", lease renewed at {renewed}" if renewed else ""
    return f"{describe_holder(state.holder)}{said}"


@dataclass
class LeaseState:
    """The lease object's content."""

    epoch: int
    holder: dict[str, Any]
    ttl: float
    released: bool = False
    #: A commit decided but maybe not yet materialised: {"path": ..., "staged": ...}.
    completing: dict[str, str] | None = None
    #: Renewals and commits by this holder (makes every CAS change the bytes).
    beats: int = 0

    def encode(self) -> bytes:
        body = {
            "epoch": self.epoch,
            "holder": self.holder,
            "ttl": self.ttl,
            "released": self.released,
            "completing": self.completing,
            "beats": self.beats,
            "renewed": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> LeaseState:
        try:
            body = json.loads(data)
            return cls(
                int(body["epoch"]),
                dict(body.get("holder") or {}),
                float(body.get("ttl") or DEFAULT_TTL),
                bool(body.get("released")),
                body.get("completing"),
                int(body.get("beats") or 0),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(
                f"the lease object is not cdcctl's ({exc})",
                hint="another program wrote it: move it away only if no replicator runs",
            ) from None


class Lease:
    """A held lease; :meth:`acquire` returns one."""

    def __init__(self, store: Storage, path: str, state: LeaseState, version: str) -> None:
        self.store, self.path = store, path
        self.state, self.version = state, version
        self._lock = threading.Lock()
        self._lost: LeaseLost | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def epoch(self) -> int:
        return self.state.epoch

    # ------------------------------------------------------------------ acquire

    @classmethod
    def acquire(
        cls,
        store: Storage,
        path: str,
        what: str,
        *,
        ttl: float = DEFAULT_TTL,
        poll: float | None = None,
    ) -> Lease:
        """Take the lease at ``path`` (``what`` names the table in messages).

        A free, released or visibly dead holder's lease is taken at once; a held one is
        watched for ``ttl`` seconds and taken over only if it did not change meanwhile.

        Raises:
            LeaseHeld: The holder renewed while we watched.
        """
        me = _me()
        poll = poll if poll is not None else max(ttl / 10, 0.05)
        while True:
            head = store.head(path)
            if head is None:
                state = LeaseState(1, me, ttl)
                created = store.create(path, state.encode())
                if created is not None:
                    return cls(store, path, state, created.version)
                continue  # another creator won: look again
            seen = cls._read(store, path, head)
            if seen is None:
                continue  # changed under us
            current, info = seen
            if not (current.released or holder_ended(current.holder)):
                if not cls._silent(store, path, info, ttl, poll, what, current):
                    continue  # released or gone meanwhile: look again
            state = LeaseState(current.epoch + 1, me, ttl, completing=current.completing)
            taken = store.replace(path, state.encode(), info.version)
            if taken is None:
                continue  # someone else moved first: look again
            lease = cls(store, path, state, taken.version)
            lease._roll_forward()
            return lease

    @staticmethod
    def _read(store: Storage, path: str, head: ObjectInfo) -> tuple[LeaseState, ObjectInfo] | None:
        try:
            data = store.read(path)
        except FileNotFoundError:
            return None
        info = store.head(path)
        if info is None or info.version != head.version:
            return None
        return LeaseState.decode(data), info

    @classmethod
    def _silent(
        cls,
        store: Storage,
        path: str,
        info: ObjectInfo,
        ttl: float,
        poll: float,
        what: str,
        current: LeaseState,
    ) -> bool:
        """Watch the lease ``max(ttl, the holder's ttl)`` seconds: True if it stayed as
        it was (its holder is presumed dead), False if it was released or deleted
        meanwhile (look again); LeaseHeld if its holder renewed it."""
        deadline = time.monotonic() + max(ttl, current.ttl)
        while time.monotonic() < deadline:
            time.sleep(poll)
            now = store.head(path)
            if now is None:
                return False
            if now.version != info.version:
                seen = cls._read(store, path, now)
                if seen is None or seen[0].released or seen[0].epoch != current.epoch:
                    return False
                raise LeaseHeld(
                    f"{what} is being written by {describe_holder(current.holder)} (it renewed "
                    "its lease while this replicator waited)",
                    hint=f"stop that replicator first; one replicator writes a table "
                    f"(lease: {store.url}/{path})",
                )
        return True

    def _roll_forward(self) -> None:
        """Create the completed file a previous holder committed but did not create."""
        completing = self.state.completing
        if not completing:
            return
        if self.store.head(completing["path"]) is None:
            try:
                content = self.store.read(completing["staged"])
            except FileNotFoundError:
                # The completed file existed (its creator deleted the staged copy after).
                if self.store.head(completing["path"]) is None:
                    raise StorageError(
                        f"{self.store.url}/{completing['path']} was committed but neither it "
                        f"nor its staged copy {completing['staged']} exists",
                        hint="the table's storage lost an object: check the bucket's "
                        "lifecycle rules and versioning",
                    ) from None
            else:
                self.store.create(completing["path"], content)
        self.store.delete(completing["staged"])

    # ------------------------------------------------------------------ hold

    def _cas(self, state: LeaseState) -> None:
        """Move the lease on from the version this holder last wrote, or LeaseLost."""
        with self._lock:
            if self._lost is not None:
                raise self._lost
            written = self.store.replace(self.path, state.encode(), self.version)
            if written is None and self._adopt_own_write():
                # An earlier request of ours landed though its answer was lost (a
                # timeout): the lease is still ours, at the version that write made.
                written = self.store.replace(self.path, state.encode(), self.version)
            if written is None:
                holder = "another writer"
                try:
                    taker = LeaseState.decode(self.store.read(self.path)).holder
                    holder = describe_holder(taker)
                except (StorageError, FileNotFoundError):
                    pass
                self._lost = LeaseLost(
                    f"the lease on {self.store.url}/{self.path} (epoch {self.state.epoch}) "
                    f"was taken over by {holder}: this replicator stalled longer than the "
                    f"lease's {self.state.ttl:g} s and has committed nothing since",
                    hint="nothing is lost: the other replicator continues from the last "
                    "commit; start this one again only after stopping that one",
                )
                raise self._lost
            self.state, self.version = state, written.version

    def _adopt_own_write(self) -> bool:
        """Whether the lease as stored is still this holder's (same run and epoch, a
        later beat): then take its version as ours."""
        head = self.store.head(self.path)
        if head is None:
            return False
        seen = self._read(self.store, self.path, head)
        if seen is None:
            return False
        stored, info = seen
        if (
            stored.holder.get("run") == self.state.holder.get("run")
            and stored.epoch == self.state.epoch
            and not stored.released
            and stored.beats > self.state.beats
        ):
            self.state, self.version = stored, info.version
            return True
        return False

    def settle(self) -> None:
        """Make the commit this lease records as completing whole (its completed file
        created from the staged copy, if not yet), then clear the record: what a
        holder does before it rolls anything back, so that a decided commit whose file
        could not be created (a store error) is never rolled back and later rolled
        forward over the rollback (LeaseLost if taken over)."""
        if not self.state.completing:
            return
        self._roll_forward()
        s = self.state
        self._cas(LeaseState(s.epoch, s.holder, s.ttl, completing=None, beats=s.beats + 1))

    def renew(self) -> None:
        """Show this holder is alive (LeaseLost if it was taken over)."""
        s = self.state
        # The commit record stays until the next commit replaces it: a renewal between a
        # commit's swap and its create must not hide that commit from a taker.
        self._cas(LeaseState(s.epoch, s.holder, s.ttl, completing=s.completing, beats=s.beats + 1))

    def commit(self, completed: str, content: bytes, staged: str) -> ObjectInfo:
        """Commit: stage ``content``, decide by the lease's CAS, then create ``completed``.

        Raises:
            LeaseLost: Another writer holds the lease; nothing was committed.
            StorageError: ``completed`` exists with other content (a second writer that
                bypassed the lease).
        """
        self.store.write(staged, content)
        s = self.state
        completing = {"path": completed, "staged": staged}
        try:
            self._cas(
                LeaseState(s.epoch, s.holder, s.ttl, completing=completing, beats=s.beats + 1)
            )
        except LeaseLost:
            if not self._named_by_lease(staged):
                self.store.delete(staged)
            raise
        faults.point("lease_swapped")  # committed, its file not yet made: rolled forward
        made = self.store.create(completed, content)
        if made is None:
            # A takeover rolled it forward while we stalled: it must be ours, byte for byte.
            if self.store.read(completed) != content:
                raise StorageError(
                    f"{self.store.url}/{completed} exists with other content than this commit's",
                    hint="two writers wrote this table: stop every replicator and check it",
                )
            made = self.store.head(completed)
            assert made is not None
        self.store.delete(staged)
        return made

    def _named_by_lease(self, staged: str) -> bool:
        """Whether the lease as stored records ``staged`` as a commit to complete (a
        taker will create that commit from it)."""
        try:
            stored = LeaseState.decode(self.store.read(self.path))
        except (FileNotFoundError, StorageError):
            return True  # unknown: keep it (a stray staged copy costs nothing)
        return (stored.completing or {}).get("staged") == staged

    def keep_alive(self) -> None:
        """Renew every ``ttl / 3`` seconds in a daemon thread until :meth:`release`."""

        def beat() -> None:
            while not self._stop.wait(self.state.ttl / 3):
                try:
                    self.renew()
                except LeaseLost:
                    return
                except StorageError:
                    continue  # transient: the next beat tries again

        self._renewer = threading.Thread(target=beat, name="lease-renewer", daemon=True)
        self._renewer.start()

    @property
    def lost(self) -> LeaseLost | None:
        """Why this lease is no longer held, once a CAS found it taken over."""
        return self._lost

    def release(self) -> None:
        """Let go (the next writer takes it at once). A lost lease is left alone."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        s = self.state
        try:
            self._cas(LeaseState(s.epoch, s.holder, s.ttl, released=True, beats=s.beats + 1))
        except LeaseLost:
            pass
