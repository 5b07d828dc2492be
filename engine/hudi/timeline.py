"""The timeline of a table: instant files in ``.hoodie/`` (table version 6, layout 1).

An instant is a 17-digit UTC time ``yyyyMMddHHmmssSSS`` (older tables may have 14
digits). Each write action (``commit`` for Copy-on-Write, ``deltacommit`` for
Merge-on-Read, ``replacecommit`` for truncates written as overwrites) goes through the
states requested -> inflight -> completed, one file per state (format doc section 3).
Java compares instants as strings, so the string order is the timeline order.

The table services ``clean`` and ``rollback`` go through the same three states
(``T.clean.requested``, ``T.clean.inflight``, ``T.clean``); they carry no data files, so a
pending clean or rollback is not a pending write: readers and the slice view ignore it,
and the writer finishes it on its next start.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: Write actions whose instants carry data files (section 3.2): COW writes the first two,
#: MOR the last two.
WRITE_ACTIONS = ("commit", "replacecommit", "deltacommit")
#: Table services recorded on the timeline (Avro plan and metadata files).
SERVICE_ACTIONS = ("clean", "rollback")
REQUESTED, INFLIGHT, COMPLETED = "REQUESTED", "INFLIGHT", "COMPLETED"
#: An instant time: 17 digits ``yyyyMMddHHmmssSSS`` (UTC), or 14 in older tables.
_TIME_RE = re.compile(r"\d{17}|\d{14}")
INSTANT_RE = re.compile(rf"({_TIME_RE.pattern})(?:\.(.+))?\Z")
_INSTANT_FORMAT = "%Y%m%d%H%M%S"


@dataclass
class Timeline:
    """One listing of ``.hoodie/``: which instants exist in which state."""

    completed: dict[str, str]  # instant -> action (write actions only)
    pending: dict[str, list[str]]  # instant -> its requested/inflight file names
    latest: str  # greatest instant of any action and state, "" if none
    #: clean/rollback instant -> (action, newest state)
    services: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: every instant file name, by instant (any action and state)
    files: dict[str, list[str]] = field(default_factory=dict)

    def pending_services(self, action: str) -> list[str]:
        """Clean or rollback instants of ``action`` that never completed, oldest first."""
        return sorted(
            t for t, (a, state) in self.services.items() if a == action and state != COMPLETED
        )

    def completed_services(self, action: str) -> list[str]:
        """Completed clean or rollback instants of ``action``, oldest first."""
        return sorted(
            t for t, (a, state) in self.services.items() if a == action and state == COMPLETED
        )

    def entries(self) -> list[tuple[str, str, str]]:
        """Every instant as ``(instant, action, state)``, newest first: completed and
        pending writes, and the clean and rollback services."""
        out = [(t, a, COMPLETED) for t, a in self.completed.items()]
        for t, names in self.pending.items():
            rest = [(INSTANT_RE.match(n).group(2) or "") for n in names]  # type: ignore[union-attr]
            state = INFLIGHT if any(r.endswith("inflight") for r in rest) else REQUESTED
            actions = [r.rsplit(".", 1)[0] for r in rest if r != "inflight"]
            out.append((t, actions[0] if actions else "commit", state))
        out += [(t, a, st) for t, (a, st) in self.services.items()]
        return sorted(out, reverse=True)

    @property
    def first(self) -> str:
        """The earliest write instant in any state ("" if none): older slices are archived."""
        return min([*self.completed, *self.pending], default="")


_STATE_RANK = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2}

#: Listings of ``.hoodie`` made so far by :func:`scan` (the tests count them per batch).
SCANS = 0


def scan(hoodie: Path) -> Timeline:
    """List the instants of a table's ``.hoodie`` folder (one directory listing)."""
    global SCANS
    SCANS += 1
    with os.scandir(hoodie) as entries:
        names = [entry.name for entry in entries if INSTANT_RE.match(entry.name)]
    return build(names)


def build(names: Iterable[str]) -> Timeline:
    """The timeline of these ``.hoodie`` file names (other names are ignored)."""
    completed: dict[str, str] = {}
    pending: dict[str, list[str]] = {}
    services: dict[str, tuple[str, str]] = {}
    files: dict[str, list[str]] = {}
    latest = ""
    for name in names:
        m = INSTANT_RE.match(name)
        if not m:
            continue
        instant, rest = m.group(1), m.group(2) or ""
        latest = max(latest, instant)
        files.setdefault(instant, []).append(name)
        action, _, state = rest.partition(".")
        if action in SERVICE_ACTIONS and state in ("", "requested", "inflight"):
            state = state.upper() or COMPLETED
            old = services.get(instant)
            if old is None or _STATE_RANK[state] > _STATE_RANK[old[1]]:
                services[instant] = (action, state)
        elif rest in WRITE_ACTIONS:
            completed[instant] = rest
        elif rest == "inflight" or rest.rsplit(".", 1)[0] in WRITE_ACTIONS:
            # "T.inflight" is the inflight state of a commit in layout 1 (section 3.2).
            pending.setdefault(instant, []).append(name)
    for instant in completed:
        pending.pop(instant, None)
    return Timeline(completed, pending, latest, services, files)


def instant_at(when: datetime) -> str:
    """``when`` as a 17-digit instant (millisecond precision): an aware time in UTC, a
    naive one taken as UTC already. This module is the one home of the instant-time
    format: it is written here and read by :func:`instant_datetime`."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime(_INSTANT_FORMAT) + f"{when.microsecond // 1000:03d}"


def now_instant() -> str:
    """The current UTC time as a 17-digit instant."""
    return instant_at(datetime.now(UTC))


def instant_datetime(instant: str) -> datetime:
    """An instant as an aware UTC time (14-digit instants count as .000)."""
    when = datetime.strptime(instant[:14], _INSTANT_FORMAT).replace(tzinfo=UTC)
    return when + timedelta(milliseconds=int(instant[14:17] or "0"))


def instant_iso(instant: str) -> str:
    """An instant as ISO 8601 UTC text (``2024-05-01T12:00:00.123Z``)."""
    when = instant_datetime(instant)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{when.microsecond // 1000:03d}Z"


def as_instant(text: str) -> str | None:
    """``text`` as a 17-digit instant if it is an instant time (14 digits: ``.000``),
    else None."""
    if not _TIME_RE.fullmatch(text):
        return None
    return text if len(text) == 17 else text + "000"


def instant_plus_1ms(instant: str) -> str:
    """Return the instant 1 ms after ``instant`` (14-digit instants count as .000)."""
    return instant_at(instant_datetime(instant) + timedelta(milliseconds=1))


def inflight_name(instant: str, action: str) -> str:
    """The inflight file of an instant: layout 1 names a commit's ``T.inflight`` (3.2)."""
    return f"{instant}.inflight" if action == "commit" else f"{instant}.{action}.inflight"
