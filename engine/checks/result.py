"""What every check returns: one :class:`Check` record per thing looked at."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Status = Literal["pass", "warn", "fail"]
PASS: Status = "pass"
WARN: Status = "warn"
FAIL: Status = "fail"


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one check.

    Attributes:
        name: What was checked, ``<area>.<thing>`` (``kafka.brokers``,
            ``postgres.table public.orders``).
        status: ``pass``, ``warn`` (works, but should be fixed) or ``fail`` (will not
            work as it is).
        detail: What was found, in one line.
        fix: For a warning or a failure, the exact fix: a command, a config key or an
            SQL statement. Empty for a pass.
    """

    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        """The record as a JSON object."""
        return asdict(self)


def passed(name: str, detail: str) -> Check:
    """A passing check."""
    return Check(name, PASS, detail)


def warned(name: str, detail: str, fix: str) -> Check:
    """A check that found something to fix that does not stop replication."""
    return Check(name, WARN, detail, fix)


def failed(name: str, detail: str, fix: str) -> Check:
    """A check that found something replication cannot work with."""
    return Check(name, FAIL, detail, fix)


def verdict(name: str, ok: bool, good: str, bad: str, fix: str) -> Check:
    """``passed(name, good)`` when ``ok``, else ``failed(name, bad, fix)``."""
    return passed(name, good) if ok else failed(name, bad, fix)
