"""The records one batch is carried in, from intake to report.

A batch is polled and decoded into a :class:`PreparedBatch` (one :class:`TableShare` per
table it touches), planned into a :class:`PendingBatch` (its plans and Spark tasks; the
merge may still run), and committed into a :class:`BatchReport`. Schema changes ride in
the shares as :class:`DdlItem` records. No behaviour lives here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from engine.decode.ddl import SchemaChange, TableChange
from engine.merge import MergeTask, TaskResult

if TYPE_CHECKING:
    from engine.replicator.deadletter import Coordinates
    from engine.replicator.planning import TablePlan
    from engine.replicator.tables import TableRuntime


@dataclass
class BatchReport:
    """What one micro-batch did (printed by the CLI, asserted on by tests)."""

    number: int
    messages: int
    seconds: float
    tables: dict[str, dict[str, int]]
    lag_messages: int = 0
    #: seconds spent per phase: poll, decode, stage, merge (the Spark job's own time),
    #: waited (merged, until the main thread took the batch up), commit
    phases: dict[str, float] = field(default_factory=dict)
    #: partitions to re-read from an offset (events held back to keep transactions whole)
    rewind: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class DdlItem:
    """One table change of a schema change event, on its way to the table it names."""

    #: The schema change topic, and the event's coordinates in it.
    topic: str
    #: The parsed event and the change of one table it makes.
    change: SchemaChange
    table_change: TableChange
    partition: int
    offset: int
    #: Read while the table's rows waited for it: per partition, how far they had been
    #: read (then sought back); it is carried out once they are read again (see
    #: :meth:`engine.replicator.ddl_router.SchemaChangeRouter.route`).
    rows_to: dict[int, int] = field(default_factory=dict)


@dataclass
class TableShare:
    """One table's decoded share of a batch."""

    rt: TableRuntime
    batch: pa.Table | None
    key_fields: list[str]
    #: Next offset per partition after what this batch applies.
    read_to: dict[int, int]
    #: Undecodable messages of this share, quarantined (counted with its commit).
    bad: int = 0
    #: ``errors.tolerance = "none"``: why the table stops once this share is committed.
    fail: str | None = None
    #: A replay of dead letters: the ones this share applies (checkpoint unchanged).
    replayed: list[Coordinates] = field(default_factory=list)
    #: A repair's deletes (:mod:`engine.replicator.repairs`): from no topic, committed
    #: though no checkpoint moves.
    repair: bool = False
    #: Schema change events handled with this share, and the column drops and renames
    #: they apply (``source.ddl = "apply"``).
    ddl_events: int = 0
    drop_columns: list[str] = field(default_factory=list)
    renames: dict[str, str] = field(default_factory=dict)
    #: Those schema change events (see ``TableRuntime.uncommitted_ddl``).
    ddl_items: list[DdlItem] = field(default_factory=list)
    #: The share holds the table's last snapshot record (DecodeResult.snapshot_ended).
    snapshot_ended: bool = False
    #: The value schemas of its events (DecodeResult.row_schemas).
    row_schemas: list = field(default_factory=list)


@dataclass
class PreparedBatch:
    """A decoded batch waiting to be planned."""

    count: int
    started: float
    tables: list[TableShare] = field(default_factory=list)
    rewind: dict[tuple[str, int], int] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)

    def share(self, rt: TableRuntime) -> TableShare | None:
        """The share of table ``rt`` (None: the batch has none yet)."""
        return next((d for d in self.tables if d.rt is rt), None)

    def timed(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` to a phase's time."""
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds


@dataclass
class PendingBatch:
    """A planned batch whose Spark job may still be running."""

    prepared: PreparedBatch
    number: int = 0
    plans: list[TablePlan] = field(default_factory=list)
    results: list[TaskResult] = field(default_factory=list)
    thread: threading.Thread | None = None
    error: BaseException | None = None
    merge_started: float = 0.0
    #: When the Spark job ended (None: it has not, or the batch had no tasks).
    merge_ended: float | None = None
    #: Per table: undecodable messages, and a sample of its events' source times.
    bad: dict[str, int] = field(default_factory=dict)
    source_ts: dict[str, np.ndarray] = field(default_factory=dict)
    #: Per table: why it stops once this batch is committed (``errors.tolerance``).
    fail: dict[str, str] = field(default_factory=dict)

    def merged(self) -> bool:
        """Its merge job has ended (or it had none)."""
        return self.thread is None or not self.thread.is_alive()

    @property
    def tasks(self) -> list[MergeTask]:
        return [t for plan in self.plans for t in plan.tasks]
