"""The lease with fencing (engine/storage/lease.py) on a folder and on a real S3 server
(moto's): a live holder is not taken over, a released or silent one is, a holder whose
lease was taken over commits nothing, a commit decided by the lease's CAS is completed by
the next holder if its writer died before creating the file, and a writer frozen with
SIGSTOP past its lease, in a real child process, commits nothing after it resumes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.playground.objectstore import S3Server
from engine.storage import Storage, open_storage
from engine.storage.lease import Lease, LeaseHeld, LeaseLost, LeaseState
from tests.s3_support import race, s3_settings
from tests.waiting import wait_until

LEASE = "t/.hoodie/.cdcctl/lease"
TTL = 0.6


def _state(store: Storage) -> LeaseState:
    return LeaseState.decode(store.read(LEASE))


def test_first_holder_and_a_live_one_refused(store: Storage) -> None:
    first = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    assert first.epoch == 1 and _state(store).holder == first.state.holder
    first.keep_alive()  # renews every TTL/3: the second sees it change and gives up
    started = time.monotonic()
    with pytest.raises(LeaseHeld, match="is being written by cdcctl pid") as info:
        Lease.acquire(store, LEASE, "table t", ttl=TTL)
    assert time.monotonic() - started < TTL + 1
    assert "stop that replicator first" in info.value.hint
    first.release()
    # Released: taken at once, with the next epoch.
    started = time.monotonic()
    second = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    assert time.monotonic() - started < TTL / 2
    assert second.epoch == 2 and _state(store).epoch == 2
    second.release()


def test_silent_holder_is_taken_over_and_fenced(store: Storage) -> None:
    first = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    first.commit("t/.hoodie/001.commit", b"first 1", "t/.hoodie/.temp/001")
    # No renewal from here on: as if its process froze.
    started = time.monotonic()
    second = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    waited = time.monotonic() - started
    assert TTL <= waited < TTL + 2, waited
    assert second.epoch == 2
    second.commit("t/.hoodie/002.commit", b"second 2", "t/.hoodie/.temp/002")
    # The first resumes: its commit is refused and leaves nothing behind.
    with pytest.raises(LeaseLost, match="was taken over") as info:
        first.commit("t/.hoodie/003.commit", b"first 3", "t/.hoodie/.temp/003")
    assert "committed nothing since" in info.value.message
    with pytest.raises(LeaseLost):
        first.renew()
    assert [o.path for o in store.list("t/.hoodie") if o.path.endswith(".commit")] == [
        "t/.hoodie/001.commit",
        "t/.hoodie/002.commit",
    ]
    assert store.head("t/.hoodie/.temp/003") is None
    # Its release does not free the second's lease.
    first.release()
    assert _state(store).epoch == 2 and not _state(store).released
    second.release()


def test_a_decided_commit_is_completed_by_the_next_holder(store: Storage) -> None:
    first = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    # The commit's first two steps (stage, CAS), then the writer dies before the create.
    store.write("t/.hoodie/.temp/005", b"decided")
    s = first.state
    first._cas(  # noqa: SLF001 - the middle of Lease.commit, as a crash would leave it
        LeaseState(s.epoch, s.holder, s.ttl, completing={
            "path": "t/.hoodie/005.commit", "staged": "t/.hoodie/.temp/005"
        }, beats=s.beats + 1)
    )  # fmt: skip
    assert store.head("t/.hoodie/005.commit") is None
    second = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    assert store.read("t/.hoodie/005.commit") == b"decided"
    assert store.head("t/.hoodie/.temp/005") is None
    # The frozen writer resumes and creates the same file: already there, same bytes, fine.
    assert store.create("t/.hoodie/005.commit", b"decided") is None
    second.release()


def test_concurrent_acquirers_of_a_released_lease_one_wins(store: Storage) -> None:
    Lease.acquire(store, LEASE, "table t", ttl=TTL).release()
    # The winner does not renew: the losers watch it for TTL and then one takes over
    # from it, so the epochs are distinct and each taker held it in turn.
    results = race(4, lambda _: Lease.acquire(store, LEASE, "table t", ttl=TTL))
    assert all(isinstance(r, (Lease, LeaseHeld)) for r in results.values()), results
    leases = [r for r in results.values() if isinstance(r, Lease)]
    assert len({lease.epoch for lease in leases}) == len(leases) >= 1
    assert _state(store).epoch == max(lease.epoch for lease in leases)


def _child(server: S3Server, url: str, name: str, count: int, pause: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.lease_child", server.endpoint, url, name, "1.5",
         str(count), str(pause)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_writer_frozen_past_its_lease_commits_nothing_after(s3: S3Server, tmp_path: Path) -> None:
    url = f"s3://lake/{tmp_path.name}"
    store = open_storage(s3_settings(s3, url))
    a = _child(s3, url, "A", 1000, 0.05)
    lines: list[str] = []

    def read() -> None:
        for line in a.stdout or ():
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: sum(x.startswith("committed") for x in lines) >= 3,
            "A's first three commits",
            timeout=60,
        )
        a.send_signal(signal.SIGSTOP)
        time.sleep(0.5)  # the reader thread takes what A printed before it froze
        frozen = [x.split()[1] for x in lines if x.startswith("committed")]
        b = _child(s3, url, "B", 3, 0.0)
        out, err = b.communicate(timeout=120)
        assert b.returncode == 0, err
        assert "acquired epoch 2" in out
        b_instants = [x.split()[1] for x in out.splitlines() if x.startswith("committed")]
        assert len(b_instants) == 3
        a.send_signal(signal.SIGCONT)
        assert a.wait(timeout=60) == 3, a.stderr.read() if a.stderr else ""
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
    reader.join(timeout=10)
    assert any(x.startswith("lost: the lease") for x in lines), lines
    a_instants = [x.split()[1] for x in lines if x.startswith("committed")]
    commits = {
        o.path.rsplit("/", 1)[1].split(".")[0]: store.read(o.path)
        for o in store.list("t/.hoodie")
        if o.path.endswith(".commit")
    }
    # A committed what it printed before the freeze (and at most the one it was inside
    # of: decided before the freeze, printed after); nothing of A after B's first commit.
    assert set(frozen) <= set(a_instants)
    assert len(a_instants) <= len(frozen) + 1
    assert sorted(commits) == sorted(a_instants + b_instants)
    assert all(commits[i].startswith(b"A epoch 1") for i in a_instants)
    assert all(commits[i].startswith(b"B epoch 2") for i in b_instants)
    assert max(a_instants) < min(b_instants)
    assert [o.path for o in store.list("t/.hoodie/.temp")] == []
    assert _state(store).epoch == 2 and _state(store).released


def test_a_renewal_between_a_commits_swap_and_its_create_keeps_the_record(
    store: Storage,
) -> None:
    first = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    store.write("t/.hoodie/.temp/006", b"decided")
    s = first.state
    first._cas(  # noqa: SLF001 - Lease.commit's swap, as in the test above
        LeaseState(s.epoch, s.holder, s.ttl, completing={
            "path": "t/.hoodie/006.commit", "staged": "t/.hoodie/.temp/006"
        }, beats=s.beats + 1)
    )  # fmt: skip
    first.renew()  # the keep-alive thread fires before the create; then the writer dies
    assert _state(store).completing == {
        "path": "t/.hoodie/006.commit",
        "staged": "t/.hoodie/.temp/006",
    }
    second = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    assert store.read("t/.hoodie/006.commit") == b"decided"
    second.release()


def test_a_swap_whose_answer_was_lost_is_still_ours(store: Storage) -> None:
    lease = Lease.acquire(store, LEASE, "table t", ttl=TTL)
    s = lease.state
    # The request reached the store, its answer did not (a timeout): the lease moved on
    # with our own next state while this holder still has the old version.
    landed = LeaseState(s.epoch, s.holder, s.ttl, beats=s.beats + 1)
    assert store.replace(LEASE, landed.encode(), lease.version) is not None
    lease.renew()  # not "taken over": it is ours
    lease.commit("t/.hoodie/007.commit", b"mine", "t/.hoodie/.temp/007")
    assert store.read("t/.hoodie/007.commit") == b"mine"
    assert _state(store).epoch == 1
    lease.release()


def test_a_lease_released_while_watched_is_taken_at_once(store: Storage) -> None:
    first = Lease.acquire(store, LEASE, "table t", ttl=3.0)
    taken: list[object] = []

    def take() -> None:
        try:
            taken.append(Lease.acquire(store, LEASE, "table t", ttl=3.0, poll=0.05))
        except LeaseHeld as exc:
            taken.append(exc)

    started = time.monotonic()
    waiter = threading.Thread(target=take)
    waiter.start()
    time.sleep(0.5)
    first.release()  # a clean stop while the next replicator waits: no refusal, no wait
    waiter.join(timeout=10)
    assert isinstance(taken[0], Lease) and taken[0].epoch == 2, taken
    assert time.monotonic() - started < 2.5
    taken[0].release()


def test_a_holder_in_another_pid_namespace_is_not_called_ended() -> None:
    import socket

    from engine.storage.lease import PIDNS, holder_ended

    dead = {"host": socket.gethostname(), "pid": 2**22 + 12345}
    assert holder_ended(dead) and holder_ended({**dead, "pidns": PIDNS})
    assert not holder_ended({**dead, "pidns": "pid:[1]"})  # a container with our host name
