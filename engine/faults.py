"""Deterministic crash injection for the crash-recovery tests.

``CDCCTL_CRASH_AT=point[:n]`` makes the process SIGKILL itself the n-th time (default 1)
it passes the named point. Unset (the normal case) it costs one dict lookup. Points:
``consumed`` (batch read, nothing written), ``task_written`` (inside a Spark task, after
its base file is written: the task kills the driver, so some files of the instant exist
and others do not), ``files_written`` (all base files written, no commit),
``before_commit``, ``after_commit`` (one table committed, others maybe not).
"""

from __future__ import annotations

import os
import signal

_hits: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("CDCCTL_CRASH_AT")
    if not spec:
        return None
    point, _, n = spec.partition(":")
    return point, int(n or 1)


def maybe_crash(point: str, pid: int | None = None) -> None:
    """SIGKILL ``pid`` (default: this process) if the configured crash point is reached."""
    target = _target()
    if target is None or target[0] != point:
        return
    _hits[point] = _hits.get(point, 0) + 1
    if _hits[point] >= target[1]:
        os.kill(pid or os.getpid(), signal.SIGKILL)
