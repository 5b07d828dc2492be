"""Deterministic crash injection for the crash-recovery tests.

``CDCCTL_CRASH_AT=point[:n]`` makes the process SIGKILL itself (or the process a point
names) the n-th time (default 1) it passes the named fault point of
:mod:`engine.faults`. Points: ``consumed`` (batch read, nothing written),
``task_written`` (inside a Spark task, after its file is written: the task kills the
driver, so some files of the instant exist and others do not), ``files_written`` (all
files written, no commit), ``before_commit``, ``after_commit`` (one table committed,
others maybe not).
"""

from __future__ import annotations

import os
import signal

from engine.faults import CRASH_AT_ENV

_hits: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = os.environ.get(CRASH_AT_ENV)
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n or 1)


def reached(name: str, pid: int | None = None) -> None:
    """SIGKILL ``pid`` (default: this process) if the configured crash point is reached."""
    target = _target()
    if target is None or target[0] != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= target[1]:
        os.kill(pid or os.getpid(), signal.SIGKILL)
