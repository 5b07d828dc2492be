"""What the playground's local servers share: a free loopback port, a child process
that dies with us, and start/stop as a context manager (:class:`Service`).

Used by the embedded broker (:mod:`.broker`), the S3-compatible store
(:mod:`.objectstore`), the schema registry (:mod:`.registry`) and the TCP gate
(:mod:`.gate`).
"""

from __future__ import annotations

import ctypes
import signal
import socket
import sys
import threading
from types import TracebackType
from typing import Any, Self


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def die_with_parent_hook() -> Any:
    """Return a ``preexec_fn`` that makes the child receive SIGTERM when we die, or None.

    ``atexit`` does not run when the interpreter is killed with SIGKILL (a crash test, an
    OOM kill); ``PR_SET_PDEATHSIG`` lets the kernel stop the child in that case too. The
    signal fires when the *thread* that forked exits, so it is only armed when the child
    is started from the main thread, whose end is the end of the process.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)

    def hook() -> None:
        # Runs in the forked child before exec: keep it to one pre-resolved C call.
        prctl(pr_set_pdeathsig, sigterm, 0, 0, 0)

    return hook


class Service:
    """A local server with ``start() -> self`` and ``stop()``; ``with`` starts and stops it."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
