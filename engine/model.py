"""Shared vocabulary of the pipeline: operation codes, column names, source positions.

A decoded micro-batch ("change batch") is a ``pyarrow.Table`` per source table with the
control columns below followed by the row image (the Debezium ``after`` fields, typed).

Source positions are encoded as two signed 64-bit integers ``(_cdc_pos, _cdc_pos_sub)``
compared lexicographically, so that ordering is a plain integer comparison everywhere
(Arrow, Polars, Spark, DuckDB):

* PostgreSQL: ``_cdc_pos = STREAMED_BIT | (commit_lsn or lsn)``, ``_cdc_pos_sub = lsn``.
  ``commit_lsn`` is element 0 of ``source.sequence`` when present (events of one
  transaction share it, so concurrent transactions order by commit); otherwise the
  event's own LSN. WAL positions stay far below 2**62, which leaves bit 62 free.
* MySQL: ``_cdc_pos = STREAMED_BIT | file_index << 32 | pos``, ``_cdc_pos_sub = row``.
* ``STREAMED_BIT`` (``1 << 62``) is set for every streamed change and clear for
  snapshot reads, so a snapshot row orders before any streamed change of the same key.
* Generic CDC JSON: the configured order field, ``(n, 0)`` for an integer,
  ``(floor(x), fraction * 10**18)`` for a decimal, ``(µs since the epoch, digits past
  the sixth)`` for a timestamp (:mod:`engine.decode.cdc_json.order`); no STREAMED_BIT.

Equal positions mean one of two things (:mod:`engine.merge.positions`). A Debezium
position (LSN, binlog coordinates) names one change: an event at a position already seen
for its key is a replay and is dropped. An order value (generic CDC JSON's
``order_field``, a flattened event's ``source.flattened.order_field`` or its Kafka
offset with ``arrival_order``) does not: two changes in one millisecond share it, and the
later Kafka offset wins. Decoders mark the events whose position is an order value in the
optional column ``_cdc_by_field`` (true; absent or null: a Debezium position). Other ties
(events of one key in different partitions) are broken by Kafka partition, then offset.
The stored table keeps the position of the event that produced each row (``_cdc_pos``,
``_cdc_pos_sub``), so a replayed or late event can be recognised in any later batch.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

STREAMED_BIT: Final = 1 << 62

# Operation codes carried in ``_cdc_op``.
OP_READ: Final = "r"
OP_CREATE: Final = "c"
OP_UPDATE: Final = "u"
OP_DELETE: Final = "d"
OP_TRUNCATE: Final = "t"
#: A Kafka tombstone (null value): a delete of its key whose position is taken from
#: the event that precedes it for the same key in the same partition.
OP_TOMBSTONE: Final = "x"

# Control columns of a change batch.
KEY: Final = "_cdc_key"  # Hudi record key string
OP: Final = "_cdc_op"
POS: Final = "_cdc_pos"
POS_SUB: Final = "_cdc_pos_sub"
SOURCE_TS: Final = "_cdc_source_ts_ms"  # source.ts_ms (database time)
PARTITION: Final = "_cdc_partition"
OFFSET: Final = "_cdc_offset"
TX_ID: Final = "_cdc_tx_id"
GTID: Final = "_cdc_gtid"  # MySQL/MariaDB source.gtid, for GTID ordering where configured

#: The control columns of a change batch (its first columns, in this order), typed as the
#: decoders type them.
CONTROL_SCHEMA: Final = pa.schema(
    [
        (KEY, pa.string()),
        (OP, pa.string()),
        (POS, pa.int64()),
        (POS_SUB, pa.int64()),
        (SOURCE_TS, pa.int64()),
        (PARTITION, pa.int32()),
        (OFFSET, pa.int64()),
        (TX_ID, pa.string()),
        (GTID, pa.string()),
    ]
)
CONTROL_COLUMNS: Final = tuple(CONTROL_SCHEMA.names)
#: Optional control column (bool, after the row image): the event's position is an order
#: value, so an equal position is a different change (the later Kafka offset wins), not a
#: replay. Only the decoders of order-field formats add it; never a replica column.
BY_FIELD: Final = "_cdc_by_field"

# Columns kept in every replica next to the source columns (after the Hudi meta columns).
ROW_OP: Final = OP
ROW_POS: Final = POS
ROW_POS_SUB: Final = POS_SUB
ROW_SOURCE_TS: Final = SOURCE_TS
#: The stored ``_cdc_pos`` of a row whose events never had a position (incremental
#: snapshot reads, events without a ``source`` block). ``_cdc_pos`` is the table's Hudi
#: ordering (precombine) field, and Hudi's readers refuse a null one ("Ordering value is
#: null", ``BaseAvroPayload``), so rows are written with Java's ``Long.MIN_VALUE``: older
#: than every real position, which is how the merge treats an unknown one.
NO_POS: Final = -(2**63)
REPLICA_CDC_COLUMNS: Final = (ROW_OP, ROW_POS, ROW_POS_SUB, ROW_SOURCE_TS)

# Partial images (generic CDC JSON with ``images = "partial"``): hidden columns of the
# replica. Each non-key column ``c`` keeps the position of the event its value came from
# in ``_cdc_pos__c`` / ``_cdc_sub__c`` (null: never set since the row's last delete);
# ``_cdc_floor_pos`` / ``_cdc_floor_sub`` hold the newest delete older than the row's
# values, so that a late event older than that delete changes nothing. In a change batch
# the same per-column columns mark which columns an event carries (null: absent).
FLOOR_POS: Final = "_cdc_floor_pos"
FLOOR_SUB: Final = "_cdc_floor_sub"
COLUMN_POS_PREFIX: Final = "_cdc_pos__"
COLUMN_SUB_PREFIX: Final = "_cdc_sub__"


def column_pos(name: str) -> str:
    """The hidden position column of row column ``name`` (partial images)."""
    return COLUMN_POS_PREFIX + name


def column_sub(name: str) -> str:
    """The hidden sub-position column of row column ``name`` (partial images)."""
    return COLUMN_SUB_PREFIX + name


# Columns of tables configured ``keyless = "full-row"`` (docs/guide/tables.md
# "Tables without a primary key"): the record key is a hash of the row's values, and one
# stored row stands for ``_cdc_copies`` identical source rows. In a change batch
# ``_cdc_copies`` is the event's delta (+1 insert, -1 delete, 0 an update that changes
# nothing); the merge adds the deltas to the stored count.
ROW_HASH: Final = "_cdc_row_hash"
COPIES: Final = "_cdc_copies"
