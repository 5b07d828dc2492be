"""The one way tests wait: poll a condition until a deadline.

``wait_until(check, "what it waits for")`` calls ``check`` until it returns something
truthy and returns that; on timeout it fails saying what it waited for and the last value
``check`` returned (or the last exception it was allowed to raise, ``retry_on``). Given a
``child`` (a :class:`tests.integration.replicas.CliChild`, or anything with ``exited()`` and
``describe()``), it fails as soon as the child exits, showing the child's output.
``await_until`` is the same for async tests (the dashboard's pilot), pausing with the
awaitable the test gives.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


class Watched(Protocol):
    def exited(self) -> bool: ...

    def describe(self) -> str: ...


class _Poll:
    """One wait: its deadline, the last value seen, and the failure it ends with."""

    def __init__(
        self,
        what: str,
        timeout: float,
        child: Watched | None,
        retry_on: tuple[type[BaseException], ...],
    ) -> None:
        self.what, self.timeout, self.child, self.retry_on = what, timeout, child, retry_on
        self.deadline = time.monotonic() + timeout
        self.last: Any = None

    def attempt(self, check: Callable[[], Any]) -> bool:
        """True when ``check`` holds (its value in ``self.last``); raises at the deadline
        or when the watched child has exited."""
        try:
            self.last = check()
        except self.retry_on as error:
            self.last = error
        else:
            if self.last:
                return True
        if self.child is not None and self.child.exited():
            raise AssertionError(
                f"the child exited while waiting for {self.what} "
                f"(last value: {self.last!r})\n{self.child.describe()}"
            )
        if time.monotonic() >= self.deadline:
            shown = f"\n{self.child.describe()}" if self.child is not None else ""
            raise AssertionError(
                f"timed out after {self.timeout:g}s waiting for {self.what} "
                f"(last value: {self.last!r}){shown}"
            )
        return False


def wait_until(
    check: Callable[[], Any],
    what: str,
    timeout: float = 120.0,
    *,
    interval: float = 0.2,
    child: Watched | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """``check()``'s first truthy value, polled every ``interval`` seconds."""
    poll = _Poll(what, timeout, child, retry_on)
    while not poll.attempt(check):
        time.sleep(interval)
    return poll.last


async def await_until(
    check: Callable[[], Any],
    what: str,
    pause: Callable[[], Awaitable[Any]],
    timeout: float = 120.0,
    *,
    child: Watched | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """:func:`wait_until` for async tests: ``await pause()`` between polls."""
    poll = _Poll(what, timeout, child, retry_on)
    while not poll.attempt(check):
        await pause()
    return poll.last
