"""How much history a table keeps readable: the earliest commit the cleaner retains.

Two policies, Hudi's own (``HoodieCleaningPolicy``), as Hudi 0.14/0.15's
``CleanerUtils.getEarliestCommitToRetain`` computes them:

* ``KEEP_LATEST_BY_HOURS`` (``hoodie.cleaner.hours.retained``; cdcctl's default): the
  earliest commit retained is the oldest completed write instant at or after *now minus
  the window* (instants are UTC times, the replicas' ``hoodie.table.timeline.timezone``).
  None when every commit is older than the window: nothing is cleaned then (Hudi plans no
  clean either), so an idle table keeps its history until it commits again.
* ``KEEP_LATEST_COMMITS`` (``hoodie.cleaner.commits.retained``): the N-th newest
  completed write instant; None while there are N or fewer (Hudi cleans nothing then).

Every instant at or after the earliest commit retained stays readable: the cleaner
(``HudiTable.clean``) deletes a file slice only if a newer slice of its group was
already committed at that instant, archiving (``HudiTable.archive``) never moves it or a
later instant off the active timeline, and delete tombstones created after it are kept.
A reader pinned at an instant therefore keeps its files for the window after that
instant was committed, however many commits, cleans and compactions happen meanwhile.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from engine.errors import HudiError
from engine.hudi.timeline import instant_at

KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"
KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"


@dataclass(frozen=True)
class Retention:
    """A cleaning policy: ``hours`` (by time) or ``commits`` (by count), exactly one."""

    hours: float | None = None
    commits: int | None = None

    def __post_init__(self) -> None:
        if (self.hours is None) == (self.commits is None):
            raise HudiError("a retention is by hours or by commits, exactly one of them")
        if self.hours is not None and not self.hours > 0:
            raise HudiError(f"retained hours must be positive, got {self.hours}")
        if self.commits is not None and self.commits < 1:
            raise HudiError(f"retain_commits must be at least 1, got {self.commits}")

    @property
    def policy(self) -> str:
        """Hudi's name of the policy, as recorded in clean plans and metadata."""
        return KEEP_LATEST_BY_HOURS if self.hours is not None else KEEP_LATEST_COMMITS

    def cutoff(self, now: datetime | None = None) -> str | None:
        """By hours: the instant ``hours`` before ``now`` (default: the clock); else None."""
        if self.hours is None:
            return None
        return instant_at((now or datetime.now(UTC)) - timedelta(hours=self.hours))

    def earliest_retained(
        self, completed: Sequence[str], now: datetime | None = None
    ) -> str | None:
        """The earliest commit retained among ``completed`` (sorted completed write
        instants), None when the policy retains all of them."""
        if self.commits is not None:
            return completed[-self.commits] if len(completed) > self.commits else None
        cutoff = self.cutoff(now) or ""
        i = bisect.bisect_left(completed, cutoff)
        return completed[i] if i < len(completed) else None

    def describe(self) -> str:
        """The policy in words (``1 hour``, ``10 commits``) for messages."""
        if self.commits is not None:
            return f"{self.commits} commit{'s' if self.commits != 1 else ''}"
        hours = f"{self.hours:g}"
        return f"{hours} hour{'s' if hours != '1' else ''}"
