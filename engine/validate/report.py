"""What a validation reports, per table (plain records: the CLI renders them, ``--json``
prints them as they are)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Example keys kept per kind of difference.
MAX_EXAMPLES = 10


@dataclass
class ColumnDiff:
    """One column of a differing row: the canonical text on each side."""

    column: str
    source: Any
    replica: Any


@dataclass
class RowDiff:
    """A key present on both sides whose rows differ."""

    key: str
    columns: list[ColumnDiff]


@dataclass
class Recheck:
    """The second look at the differing keys (``--recheck``)."""

    #: The source's position when the recheck started.
    source_position: str | None
    #: The replica's position when the keys were read again.
    replica_position: str | None
    #: Whether the replica had reached the source position (else the wait ran out, or
    #: no replicator was running to move it).
    reached: bool
    waited_seconds: float
    #: Keys that were equal on the second look (they were in flight).
    resolved: list[str] = field(default_factory=list)
    #: Still differing on the second look.
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    differing: list[RowDiff] = field(default_factory=list)


@dataclass
class TableReport:
    """The comparison of one replica with its source table."""

    table: str
    #: The source table, ``db.schema.table`` (PostgreSQL) or ``db.table`` (MySQL).
    source_table: str
    #: ``equal``, ``different``, or ``error`` (not compared: see ``error``).
    status: str
    #: Where the source table's identity came from: ``commit`` (cdcctl.source_table) or
    #: ``topic`` (parsed from the topic name).
    identity: str = "commit"
    source_rows: int = 0
    replica_rows: int = 0
    #: Rows compared row by row (the rest were proven equal by range hashes).
    rows_compared_row_by_row: int = 0
    missing: int = 0  # in the source, not in the replica
    extra: int = 0  # in the replica, not in the source
    differing: int = 0
    missing_keys: list[str] = field(default_factory=list)
    extra_keys: list[str] = field(default_factory=list)
    differing_rows: list[RowDiff] = field(default_factory=list)
    #: Columns on one side only.
    source_only_columns: list[str] = field(default_factory=list)
    replica_only_columns: list[str] = field(default_factory=list)
    #: Columns without a canonical text shared by both sides: compared value by value,
    #: only where the whole table or a differing range is compared row by row.
    row_only_columns: list[str] = field(default_factory=list)
    #: ``ranges`` (integer key split into key ranges), ``key-hash`` (rows bucketed by a
    #: hash of the key), or ``rows`` (small table: row by row at once).
    method: str = "rows"
    ranges: int = 0
    ranges_differing: int = 0
    #: The newest source position applied to the replica (rows and commit).
    replica_position: str | None = None
    #: The source's position when it was read.
    source_position: str | None = None
    replica_instant: str | None = None
    #: A replicator holding the table's writer lock while validating.
    replicator: str | None = None
    seconds: float = 0.0
    rows_per_second: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    recheck: Recheck | None = None

    @property
    def equal(self) -> bool:
        return self.status == "equal"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
