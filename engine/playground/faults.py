"""Deterministic fault injection for the crash-recovery and retry tests.

``CDCCTL_CRASH_AT=point[:n[:action]]`` acts the n-th time (default 1) this process passes
the named fault point of :mod:`engine.faults`. Points: ``consumed`` (batch read, nothing
written), ``task_written`` (inside a Spark task, after its file is written),
``files_written`` (all files written, no commit), ``before_commit``, ``after_commit``
(one table committed, others maybe not). Actions:

* ``kill`` (default): SIGKILL the process the point names (``task_written`` names the
  driver: some files of the instant exist and others do not), else this one;
* ``kill-self``: SIGKILL this process even where the point names another (inside a Spark
  task: a Python worker that dies);
* ``oserror``: raise an ``OSError`` (EIO) here, as a failing disk would; its message
  ends with ``CDCCTL_CRASH_DETAIL`` when set (the secrets test plants a secret there).

With ``CDCCTL_CRASH_ONCE=PATH`` the fault happens once in all processes (the first to
create PATH acts): Spark starts new workers after one dies, and each counts anew.
"""

from __future__ import annotations

import errno
import os
import signal

from engine.faults import CRASH_AT_ENV

#: The environment variable naming the file that makes a fault happen only once.
ONCE_ENV = "CDCCTL_CRASH_ONCE"
#: Text added to an injected error's message.
DETAIL_ENV = "CDCCTL_CRASH_DETAIL"

_hits: dict[str, int] = {}


def _target() -> tuple[str, int, str] | None:
    spec = os.environ.get(CRASH_AT_ENV)
    if not spec:
        return None
    name, _, rest = spec.partition(":")
    n, _, action = rest.partition(":")
    return name, int(n or 1), action or "kill"


def _first_time() -> bool:
    marker = os.environ.get(ONCE_ENV)
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def reached(name: str, pid: int | None = None) -> None:
    """Act as configured if the configured fault point is reached."""
    target = _target()
    if target is None or target[0] != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] != target[1] or not _first_time():
        return
    action = target[2]
    if action == "oserror":
        detail = os.environ.get(DETAIL_ENV)
        raise OSError(
            errno.EIO, f"injected I/O error at {name}" + (f" ({detail})" if detail else "")
        )
    if action == "kill-self":
        pid = None
    os.kill(pid or os.getpid(), signal.SIGKILL)
