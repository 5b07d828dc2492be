"""Named fault points: where the crash and retry tests may break the engine, and nothing else.

The engine calls :func:`point` at the moments that matter for exactly-once recovery
(``consumed``, ``task_written``, ``files_written``, ``before_commit``, ``after_commit``,
and ``lease_swapped`` on object storage: a commit decided by its lease, its completed
file not yet created).
Normally that is one environment lookup and nothing happens. The injector itself — what
a point does when a test asks for a fault there (a SIGKILL, an I/O error) — lives apart
from the engine, in
:mod:`engine.playground.faults`, and is loaded only when ``CDCCTL_CRASH_AT`` is set.
"""

from __future__ import annotations

import os

#: The environment variable that arms the injector (see engine.playground.faults).
CRASH_AT_ENV = "CDCCTL_CRASH_AT"


def point(name: str, pid: int | None = None) -> None:
    """Mark a fault point; ``pid`` is the process a crash there should kill (default: this one)."""
    if not os.environ.get(CRASH_AT_ENV):
        return
    from engine.playground import faults  # only under test: the injector is not engine code

    faults.reached(name, pid)
