"""Where the dashboard's figures come from: a work folder's state store, through the engine.

:class:`StatusSource` is the dashboard's one door to the engine: it reads the status
``cdcctl status`` prints (:func:`engine.read_status`), files the control requests the
CLI files (:func:`engine.send_request`) and lists dead letters
(:func:`engine.list_dead_letters`). Its calls block (SQLite, waiting for the
replicator's answer): the app makes them in worker threads, never in the UI thread.
A missing or unreadable store is a :class:`Snapshot` with a ``problem``, not an error.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import engine


@dataclass(frozen=True)
class Snapshot:
    """One reading of the state store: the status record, or why there is none."""

    #: What :func:`engine.read_status` returned (None: see ``problem``).
    status: engine.StatusRecord | None
    #: Why there is no status: no store yet, or one that cannot be read.
    problem: str | None
    #: When it was read (the app's clock).
    read_at: float


class StatusSource:
    """A work folder's state, read and steered the way the CLI does."""

    def __init__(
        self,
        work_dir: Path,
        config: engine.Config | None = None,
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.work_dir = work_dir
        self.config = config
        self.now = now

    @property
    def broker(self) -> str | None:
        return self.config.source.kafka.bootstrap_servers if self.config is not None else None

    @property
    def target(self) -> str | None:
        return self.config.target_store(patient=False).url if self.config is not None else None

    def read(self) -> Snapshot:
        """The status as last recorded (blocks: call it from a worker)."""
        try:
            status = engine.read_status(self.work_dir)
        except (sqlite3.Error, OSError, ValueError, KeyError) as exc:
            problem = f"cannot read the state store in {self.work_dir}: {exc}"
            return Snapshot(None, problem, self.now())
        except Exception as exc:  # noqa: BLE001 - a screen line, never a traceback
            problem = f"cannot read the state store in {self.work_dir}: {type(exc).__name__}: {exc}"
            return Snapshot(None, problem, self.now())
        if status is None:
            problem = (
                f"no state store in {self.work_dir}: `cdcctl start` has not run with this "
                "work folder (replicator.work_dir)"
            )
            return Snapshot(None, problem, self.now())
        return Snapshot(status, None, self.now())

    def request(
        self, kind: str, tables: Sequence[str], wait_seconds: float = 5.0
    ) -> list[engine.Request] | None:
        """File a control request as `cdcctl pause/resume/stop/resync` do; None when no
        replicator runs (blocks until answered or ``wait_seconds``)."""
        return engine.send_request(self.work_dir, kind, tables, wait_seconds)

    def wait_stopped(self, timeout: float) -> bool:
        return engine.wait_stopped(self.work_dir, timeout)

    def resync_offline(self, table: str) -> list[str]:
        """`cdcctl resync` without a running replicator: drop the replica now."""
        if self.config is None:
            raise engine.StateError(
                f"no replicator runs on {self.work_dir}, and without its config the "
                "replica cannot be dropped here",
                hint=f"`cdcctl resync {table} --config FILE`",
            )
        return list(engine.resync_offline(self.config, table))

    def dead_letters(self, table: str) -> list[dict[str, Any]]:
        """A table's pending dead letters (reads files only)."""
        if self.config is None:
            raise engine.StateError(
                "dead letters are listed from the config's work folder: start the "
                "dashboard with --config"
            )
        return engine.list_dead_letters(self.config, table)
