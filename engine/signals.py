"""Stop signals: SIGINT (Ctrl-C) and SIGTERM (``kill``, ``timeout``, systemd) ask a run
to stop after the batch in flight instead of ending the process where it is.

Both usually reach the whole process group (a terminal's Ctrl-C, ``timeout -s TERM``),
or every process of a service (systemd's ``KillMode=control-group``): Spark's JVM runs
in a process group of its own and ignores SIGTERM (:mod:`engine.spark.session`), so it
is still there to finish the batch in flight when the driver stops, and ends with it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM call ``stop``; the previous handlers come back
    after it. Only the main thread can set handlers: elsewhere (the dashboard's replicator
    thread) nothing changes and the caller stops the run itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: stop()) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
