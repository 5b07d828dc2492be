"""``cdcctl deadletters`` and ``cdcctl deadletters replay``: reading and re-applying dead letters.

Only one process may write a table. When a replicator runs on the work folder, a replay
is a control request it carries out between two batches (``ControlPlane.replay``); when
none runs, the replay runs in the calling process, holding the work folder's and the
table's writer locks (:meth:`Replicator.replay`), so that no replicator starts meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import Config
from engine.replicator.deadletter import DeadLetters
from engine.state.control import send_request

#: Outcomes of a replay request that mean it did not (fully) succeed.
_NOT_DONE = ("error", "not picked", "withdrawn", "incomplete")


def dead_letter_folder(cfg: Config) -> DeadLetters:
    """The dead-letter files of a config's work folder."""
    return DeadLetters(cfg.work_path() / "deadletter")


def list_dead_letters(cfg: Config, table: str | None = None) -> list[dict[str, Any]]:
    """Pending dead letters (not yet applied by a replay), per table in source order.

    Reads the files only: works whether a replicator runs or not.
    """
    letters = dead_letter_folder(cfg)
    names = [table] if table else letters.tables()
    return [d.record() for name in names for d in letters.pending(name)]


@dataclass(frozen=True)
class ReplayResult:
    """How a replay went: through the running replicator or in this process."""

    via: str
    ok: bool
    message: str


def replay_dead_letters(
    cfg: Config,
    table: str,
    *,
    config_path: str | None = None,
    wait_seconds: float = 600.0,
    spark: Any = None,
) -> ReplayResult:
    """Re-apply a table's dead letters, through the running replicator if there is one.

    Raises:
        WriterLockError: a replicator started while the offline replay began.
        TableNameError: the table has no dead letters, or it is not replicated.
    """
    answers = send_request(cfg.work_path(), "replay", [table], wait_seconds)
    if answers is not None:
        answer = answers[0]
        outcome = answer.outcome or "no answer"
        ok = answer.done_at is not None and not outcome.startswith(_NOT_DONE)
        return ReplayResult("replicator", ok, outcome)
    # Imported here: listing dead letters needs neither the loop nor the decoders.
    from engine.replicator.loop import Replicator

    outcome_ = Replicator(cfg, config_path=config_path, spark=spark).replay(table)
    return ReplayResult("offline", not outcome_.failed, outcome_.describe())
