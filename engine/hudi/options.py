"""String constants of the Hudi configuration and commit metadata we read or write.

Hudi identifies every setting by a dotted ``hoodie.*`` key; keeping them in one Enum
avoids typos that Java would silently ignore (an unknown key is not an error there).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class HoodieOption(StrEnum):
    """``hoodie.*`` keys of ``hoodie.properties`` and of the writer configuration."""

    # hoodie.properties (table config)
    TABLE_NAME = "hoodie.table.name"
    DATABASE_NAME = "hoodie.database.name"
    TABLE_TYPE = "hoodie.table.type"
    TABLE_VERSION = "hoodie.table.version"
    TIMELINE_LAYOUT_VERSION = "hoodie.timeline.layout.version"
    TABLE_CHECKSUM = "hoodie.table.checksum"
    RECORD_KEY_FIELDS = "hoodie.table.recordkey.fields"
    PARTITION_FIELDS = "hoodie.table.partition.fields"
    KEYGENERATOR_CLASS = "hoodie.table.keygenerator.class"
    PRECOMBINE_FIELD = "hoodie.table.precombine.field"
    BASE_FILE_FORMAT = "hoodie.table.base.file.format"
    POPULATE_META_FIELDS = "hoodie.populate.meta.fields"
    HIVE_STYLE_PARTITIONING = "hoodie.datasource.write.hive_style_partitioning"
    PARTITIONPATH_URLENCODE = "hoodie.datasource.write.partitionpath.urlencode"
    DROP_PARTITION_COLUMNS = "hoodie.datasource.write.drop.partition.columns"
    TIMELINE_TIMEZONE = "hoodie.table.timeline.timezone"
    ARCHIVELOG_FOLDER = "hoodie.archivelog.folder"
    CREATE_SCHEMA = "hoodie.table.create.schema"
    METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
    PAYLOAD_CLASS = "hoodie.compaction.payload.class"
    RECORD_MERGER_STRATEGY = "hoodie.compaction.record.merger.strategy"
    CDC_ENABLED = "hoodie.table.cdc.enabled"
    PARTITION_METAFILE_BASE_FORMAT = "hoodie.partition.metafile.use.base.format"

    # Writer settings of the bucket index. Nothing on disk records them (format doc 8.1),
    # so we repeat them in every commit's extra metadata under the cdcctl.* keys below.
    INDEX_TYPE = "hoodie.index.type"
    BUCKET_INDEX_ENGINE = "hoodie.index.bucket.engine"
    BUCKET_INDEX_NUM_BUCKETS = "hoodie.bucket.index.num.buckets"
    BUCKET_INDEX_HASH_FIELD = "hoodie.bucket.index.hash.field"


#: Streamer checkpoint key of table version 6 (format doc 11).
CHECKPOINT_KEY: Final = "deltastreamer.checkpoint.key"
#: Commit extra-metadata key of the Avro writer schema (``HoodieCommitMetadata.SCHEMA_KEY``).
SCHEMA_KEY: Final = "schema"

# Extra-metadata keys only cdcctl writes.
#: Number of buckets, a decimal int as string. Must never change on an existing table.
BUCKET_NUM_KEY: Final = "cdcctl.bucket.num"
#: Comma list of the bucket hash fields (equal to the record key fields).
BUCKET_HASH_FIELD_KEY: Final = "cdcctl.bucket.hash.field"
#: How keys containing ':' are hashed (``engine.hudi.bucket_index``): "java" for tables
#: created since cdcctl follows Hudi 0.14/0.15; absent (= "legacy") on older tables.
BUCKET_HASH_RULE_KEY: Final = "cdcctl.bucket.hash.rule"
#: Base64 of the Arrow IPC-serialized data schema: Avro cannot express every Arrow type
#: (int8, large_string, naive timestamps), so this is what makes types round-trip exactly.
ARROW_SCHEMA_KEY: Final = "cdcctl.arrow_schema"
#: File ids whose slice this instant gave a tombstone sidecar (comma-separated; a slice
#: of a commit without the key predates it: its sidecar may or may not exist).
TOMBSTONES_KEY: Final = "cdcctl.tombstones"
#: The epoch of the writer's lease that committed the instant (a table on object
#: storage, engine/storage/lease.py); absent on a local disk, where ``flock`` serves.
LEASE_EPOCH_KEY: Final = "cdcctl.lease.epoch"

#: JSON object of what the instant applied: net row effects (inserts, updates, deletes,
#: truncated), source events applied by op (events_r, events_c, events_u, events_d,
#: events_t), late, bad, ddl, toast_filled, toast_unresolved. Counters kept with the
#: commit are never counted twice after a crash (the state store reconciles from them).
COUNTS_KEY: Final = "cdcctl.counts"

#: JSON object naming the replica's source table, from the Debezium ``source`` block of
#: its events: ``connector``, ``db``, ``schema`` (PostgreSQL), ``table``. Absent on
#: commits made before it was recorded (the topic name ``cdcctl.source.topic`` says it).
SOURCE_TABLE_KEY: Final = "cdcctl.source_table"
#: JSON object of the schema changes seen in events (engine/replicator/schema_changes.py):
#: ``kept``, the columns the source no longer sends that the replica keeps (validate does
#: not count them as differences); ``dropped``, those it removed; ``pos``, the newest
#: source position whose event schema was judged.
SCHEMA_STATE_KEY: Final = "cdcctl.schema.state"

# Fixed values we write.
TABLE_VERSION: Final = "6"
TIMELINE_LAYOUT_VERSION: Final = "1"
TABLE_TYPE_COW: Final = "COPY_ON_WRITE"
TABLE_TYPE_MOR: Final = "MERGE_ON_READ"
TABLE_TYPES: Final = (TABLE_TYPE_COW, TABLE_TYPE_MOR)
NONPARTITIONED_KEYGEN: Final = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"

#: Keys Hudi 0.15.0's Spark writer puts in the ``hoodie.properties`` of a new
#: non-partitioned table (observed: a table it created, default options), with its
#: values. Without the payload class Hudi's log reader fails (a null class name in
#: ``HoodieRecordUtils.loadPayload``), and Hudi 1.x infers the merge mode of a version-6
#: table from it: ``OverwriteWithLatestAvroPayload`` -> ``COMMIT_TIME_ORDERING``, the
#: newest write wins, which is what cdcctl's log files mean (the merge already chose the
#: newest event per key). The merger strategy id is Hudi's default
#: (``HoodieRecordMerger.DEFAULT_MERGER_STRATEGY_UUID``).
HUDI_015_DEFAULTS: Final = {
    HoodieOption.PAYLOAD_CLASS.value: "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
    HoodieOption.RECORD_MERGER_STRATEGY.value: "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
    HoodieOption.CDC_ENABLED.value: "false",
    HoodieOption.PARTITION_METAFILE_BASE_FORMAT.value: "false",
    HoodieOption.PARTITION_FIELDS.value: "",
}
