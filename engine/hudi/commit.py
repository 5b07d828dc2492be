"""Commit metadata: the write statistics and the source checkpoint a commit carries.

A completed instant's file is ``HoodieCommitMetadata`` as Jackson writes it (format doc
section 7): per partition the write stat of every file the instant wrote, the operation
type, and ``extraMetadata``, where the streamer checkpoint (section 11) records the Kafka
positions that produced the instant. That checkpoint is what makes a commit the single
point of recovery: on restart the consumer is positioned at it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Relative partition path of a non-partitioned table (section 5.2).
PARTITION_PATH = ""


@dataclass
class WriteStat:
    """Write statistics of one base or log file written by a commit (section 7.1)."""

    file_id: str
    path: str  # relative to the table base path
    prev_commit: str  # base instant of the replaced slice, or the string "null"
    num_writes: int  # rows in the new file
    num_deletes: int
    num_update_writes: int
    num_inserts: int
    total_write_bytes: int
    file_size_in_bytes: int
    partition_path: str = PARTITION_PATH
    #: For a log file (MOR): its slice's base file name; None for a base file.
    base_file: str | None = None
    #: For a log file: its version (the ``.log.<n>`` of its name).
    log_version: int = 1

    def to_json(self) -> dict[str, Any]:
        """Return the stat as Jackson writes ``HoodieWriteStat`` (all fields Spark writes).

        Returns:
            A JSON-ready dict.
        """
        return {
            "fileId": self.file_id,
            "path": self.path,
            "cdcStats": None,
            "prevCommit": self.prev_commit,
            "numWrites": self.num_writes,
            "numDeletes": self.num_deletes,
            "numUpdateWrites": self.num_update_writes,
            "numInserts": self.num_inserts,
            "totalWriteBytes": self.total_write_bytes,
            "totalWriteErrors": 0,
            "tempPath": None,
            "partitionPath": self.partition_path,
            "totalLogRecords": 0,
            "totalLogFilesCompacted": 0,
            "totalLogSizeCompacted": 0,
            "totalUpdatedRecordsCompacted": 0,
            "totalLogBlocks": 0,
            "totalCorruptLogBlock": 0,
            "totalRollbackBlocks": 0,
            "fileSizeInBytes": self.file_size_in_bytes,
            "minEventTime": None,
            "maxEventTime": None,
            "runtimeStats": {"totalScanTime": 0, "totalUpsertTime": 0, "totalCreateTime": 0},
        } | (
            # HoodieDeltaWriteStat, fields in Jackson's order: readers rebuild file slices
            # from these (incremental queries). No column statistics: recordsStats empty.
            {
                "logVersion": self.log_version,
                "logOffset": 0,
                "baseFile": self.base_file,
                "logFiles": [self.path],
                "recordsStats": {"val": None},
            }
            if self.base_file is not None
            else {}
        )


def format_checkpoint(topic: str, offsets: dict[int, int]) -> str:
    """The streamer checkpoint of one topic: ``topic,0:1200,1:877`` (next offsets),
    partitions ascending (Hudi's ``KafkaOffsetGen`` format)."""
    return topic + "," + ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def parse_checkpoint(value: str | None, topic: str) -> dict[int, int]:
    """The next offset per partition of ``topic`` in a checkpoint ({} for another topic)."""
    if not value:
        return {}
    head, _, rest = value.partition(",")
    if head != topic:
        return {}
    out = {}
    for item in rest.split(","):
        if item:
            part, _, off = item.partition(":")
            out[int(part)] = int(off)
    return out


def to_json_bytes(obj: Any) -> bytes:
    """Serialize commit metadata as UTF-8 JSON, as Jackson would read it back."""
    return json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8")
