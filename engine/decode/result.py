"""What every decoder returns: a change batch, and every record accounted for.

Each input record ends up in exactly one of: a row of :attr:`DecodeResult.batch` (see
:mod:`engine.model` for its columns), :attr:`DecodeResult.bad` (with its Kafka
coordinates and raw bytes, to be quarantined), or the :attr:`DecodeResult.ignored` count
(valid records that are not row changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class BadMessage:
    """A record that could not be decoded; it must be quarantined, never dropped.

    Attributes:
        topic: Kafka topic.
        partition: Kafka partition.
        offset: Kafka offset.
        key: Raw key bytes (None for a null key).
        value: Raw value bytes (None for a null value).
        reason: What is wrong with the record.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str


@dataclass(slots=True)
class DecodeResult:
    """Outcome of decoding the records of one topic from one micro-batch.

    Attributes:
        batch: One row per row-level event (and tombstone) in consumption order: the
            control columns of :data:`engine.model.CONTROL_COLUMNS`, then the row
            columns. None if there is no such event.
        key_fields: Record-key field names in key order (union over the batch rows).
        bad: Undecodable records, in consumption order.
        ignored: Valid non-row records skipped (``op=m``, heartbeats, transaction
            BEGIN/END, MySQL schema changes).
        value_schema_fingerprints: Distinct Connect value schemas seen (short hashes), in
            order of first appearance; more than one means the table schema changed.
        key_field_sets: Distinct record-key field lists of the batch rows; more than one
            means the key changed (a table redefinition).
        notes: Non-fatal remarks (e.g. a schemaless column whose JSON type varies).
        source_table: Where the row events come from, from the ``source`` block of one of
            them: ``connector``, ``db``, ``schema`` (PostgreSQL) and ``table`` (members
            that are absent are left out); None without a row event or ``source`` block.
    """

    batch: pa.Table | None
    key_fields: list[str]
    bad: list[BadMessage]
    ignored: int
    value_schema_fingerprints: list[str] = field(default_factory=list)
    key_field_sets: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source_table: dict[str, str] | None = None
    #: A table's last snapshot record is among the rows (``source.snapshot`` ``last`` or
    #: ``last_in_data_collection``): its initial snapshot has been read to its end.
    snapshot_ended: bool = False
    #: The value schemas of the row events (formats whose events carry schemas): their
    #: columns, defaults and offsets (:mod:`engine.decode.row_schemas`).
    row_schemas: list = field(default_factory=list)
