"""The Avro structures of Hudi's log format that the writer emits, as Hudi publishes them.

Table version 6 (Hudi 0.14/0.15) writes a delete block's content as a
``HoodieDeleteRecordList`` (``hudi-common/src/main/avro/HoodieDeleteRecordList.avsc``):
per deleted record its key, its partition path and an ordering value, a union of null
and wrapper records (``BooleanWrapper``, ``IntWrapper``, ``LongWrapper``, ...; a 1.x
reader appends ``ArrayWrapper`` for several ordering fields, after these, so the
branch numbers below stay valid).

The ordering value decides whether a delete beats a record of the same key: Java's
``DeleteRecord.create(key)`` uses the integer 0, and the log scanners treat only that
value as "natural order", i.e. the delete wins over every earlier record. Hudi's Java
writer therefore writes ``IntWrapper{value: 0}`` (checked against a delete block Hudi
0.15 wrote, from hudi-rs's test tables); any other value, a ``LongWrapper`` 0 included,
is compared with the record's precombine value and can bring a deleted row back.

:func:`decode_delete_list` reads any such list with fastavro; the log-file module keeps a
vectorised encoder for the hot path whose bytes tests compare with
:func:`encode_delete_list`.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro

NAMESPACE = "org.apache.hudi.avro.model"


def _wrapper(name: str, value_type: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": NAMESPACE,
        "fields": [{"name": "value", "type": value_type}],
    }


#: The ordering-value union of table version 6, in Hudi's branch order.
ORDERING_VALUE_BRANCHES: list[Any] = [
    "null",
    _wrapper("BooleanWrapper", "boolean"),
    _wrapper("IntWrapper", "int"),
    _wrapper("LongWrapper", "long"),
    _wrapper("FloatWrapper", "float"),
    _wrapper("DoubleWrapper", "double"),
    _wrapper("BytesWrapper", "bytes"),
    _wrapper("StringWrapper", "string"),
    _wrapper("DateWrapper", "int"),
    _wrapper(
        "DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}
    ),
    _wrapper("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    _wrapper("TimestampMicrosWrapper", "long"),
]

#: ``HoodieDeleteRecordList`` of table version 6.
DELETE_RECORD_LIST: dict[str, Any] = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": NAMESPACE,
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "namespace": NAMESPACE,
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {"name": "orderingVal", "type": ORDERING_VALUE_BRANCHES, "default": None},
                    ],
                },
            },
        }
    ],
}

_PARSED = fastavro.parse_schema(DELETE_RECORD_LIST)

#: Java's default ordering value of a delete (``DeleteRecord.create``): natural order.
NATURAL_ORDER = (f"{NAMESPACE}.IntWrapper", {"value": 0})


def encode_delete_list(keys: list[str], partition_path: str = "") -> bytes:
    """The Avro binary ``HoodieDeleteRecordList`` of ``keys``, each in natural order."""
    records = [
        {"recordKey": key, "partitionPath": partition_path, "orderingVal": NATURAL_ORDER}
        for key in keys
    ]
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _PARSED, {"deleteRecordList": records})
    return out.getvalue()


def decode_delete_list(data: bytes) -> list[dict[str, Any]]:
    """The records of an Avro binary ``HoodieDeleteRecordList``, ordering values unwrapped."""
    datum: Any = fastavro.schemaless_reader(io.BytesIO(data), _PARSED, return_record_name=True)
    records: list[dict[str, Any]] = datum["deleteRecordList"]
    for record in records:
        value = record["orderingVal"]
        if isinstance(value, tuple):  # (record name, {"value": ...})
            record["orderingVal"] = (value[0].rsplit(".", 1)[-1], value[1]["value"])
    return records


# ---------------------------------------------------------------------------- timeline
#
# The timeline's Avro structures of table version 6 (Hudi 0.14/0.15,
# ``hudi-common/src/main/avro/*.avsc``) as Java embeds them in the files it writes: the
# generated classes' schemas, where every string (and every map's keys) carries
# ``"avro.java.string": "String"``. The rollback schemas equal, field by field, the ones
# embedded in the rollback files Hudi 0.15 wrote in hudi-rs's ``v6_nonpartitioned_rollback``
# table (a test checks it). Clean and rollback instants are Avro object container files of
# one record, without compression (``TimelineMetadataUtils.serializeAvroMetadata``).

_STR: dict[str, Any] = {"type": "string", "avro.java.string": "String"}
_OPT_STR: list[Any] = ["null", _STR]


def _map(values: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "map", "values": values, "avro.java.string": "String", **extra}


def _array(items: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, **extra}


def _version_field() -> dict[str, Any]:
    return {"name": "version", "type": ["int", "null"], "default": 1}


def _instant_info() -> dict[str, Any]:
    """``HoodieInstantInfo``: an instant and its action."""
    return {
        "type": "record",
        "name": "HoodieInstantInfo",
        "fields": [{"name": "commitTime", "type": _STR}, {"name": "action", "type": _STR}],
    }


#: ``HoodieRollbackPlan`` (``R.rollback.requested``), with ``HoodieRollbackRequest``.
ROLLBACK_PLAN: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackPlan",
    "namespace": NAMESPACE,
    "fields": [
        {
            "name": "instantToRollback",
            "type": ["null", _instant_info()],
            "doc": "Hoodie instant that needs to be rolled back",
            "default": None,
        },
        {
            "name": "RollbackRequests",
            "type": [
                "null",
                _array(
                    {
                        "type": "record",
                        "name": "HoodieRollbackRequest",
                        "fields": [
                            {"name": "partitionPath", "type": _STR},
                            {"name": "fileId", "type": _OPT_STR, "default": None},
                            {"name": "latestBaseInstant", "type": _OPT_STR, "default": None},
                            {
                                "name": "filesToBeDeleted",
                                "type": _array(_STR, default=[]),
                                "default": [],
                            },
                            {
                                "name": "logBlocksToBeDeleted",
                                "type": ["null", _map("long")],
                                "default": None,
                            },
                        ],
                    }
                ),
            ],
            "default": None,
        },
        _version_field(),
    ],
}

#: ``HoodieRollbackMetadata`` (``R.rollback``), with ``HoodieRollbackPartitionMetadata``.
ROLLBACK_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "startRollbackTime", "type": _STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": _array(_STR)},
        {
            "name": "partitionMetadata",
            "type": _map(
                {
                    "type": "record",
                    "name": "HoodieRollbackPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": _STR},
                        {"name": "successDeleteFiles", "type": _array(_STR)},
                        {"name": "failedDeleteFiles", "type": _array(_STR)},
                        {
                            "name": "rollbackLogFiles",
                            "type": ["null", _map("long")],
                            "default": None,
                        },
                        {
                            "name": "logFilesFromFailedCommit",
                            "type": ["null", _map("long")],
                            "default": None,
                        },
                    ],
                }
            ),
        },
        _version_field(),
        {
            "name": "instantsRollback",
            "type": _array(_instant_info(), default=[]),
            "default": [],
        },
    ],
}

#: ``HoodieCleanerPlan`` (``C.clean.requested`` and ``C.clean.inflight``) of the 0.14/0.15
#: line: with ``lastCompletedCommitTimestamp``, without 1.x's ``extraMetadata``.
CLEANER_PLAN: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanerPlan",
    "namespace": NAMESPACE,
    "fields": [
        {
            "name": "earliestInstantToRetain",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "HoodieActionInstant",
                    "fields": [
                        {"name": "timestamp", "type": _STR},
                        {"name": "action", "type": _STR},
                        {"name": "state", "type": _STR},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "lastCompletedCommitTimestamp", "type": _STR, "default": ""},
        {"name": "policy", "type": _STR},
        {
            "name": "filesToBeDeletedPerPartition",
            "type": ["null", _map(_array(_STR))],
            "default": None,
        },
        _version_field(),
        {
            "name": "filePathsToBeDeletedPerPartition",
            "type": [
                "null",
                _map(
                    _array(
                        {
                            "type": "record",
                            "name": "HoodieCleanFileInfo",
                            "fields": [
                                {"name": "filePath", "type": _OPT_STR, "default": None},
                                {
                                    "name": "isBootstrapBaseFile",
                                    "type": ["null", "boolean"],
                                    "default": None,
                                },
                            ],
                        }
                    )
                ),
            ],
            "doc": "This field replaces the field filesToBeDeletedPerPartition",
            "default": None,
        },
        {
            "name": "partitionsToBeDeleted",
            "type": ["null", _array(_STR)],
            "doc": "partitions to be deleted",
            "default": None,
        },
    ],
}

#: ``HoodieCleanPartitionMetadata``.
CLEAN_PARTITION_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanPartitionMetadata",
    "fields": [
        {"name": "partitionPath", "type": _STR},
        {"name": "policy", "type": _STR},
        {"name": "deletePathPatterns", "type": _array(_STR)},
        {"name": "successDeleteFiles", "type": _array(_STR)},
        {"name": "failedDeleteFiles", "type": _array(_STR)},
        {"name": "isPartitionDeleted", "type": ["null", "boolean"], "default": None},
    ],
}

#: ``HoodieCleanMetadata`` (``C.clean``) of the 0.14/0.15 line (no 1.x ``extraMetadata``).
CLEAN_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "startCleanTime", "type": _STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": _STR},
        {"name": "lastCompletedCommitTimestamp", "type": _STR, "default": ""},
        {"name": "partitionMetadata", "type": _map(CLEAN_PARTITION_METADATA)},
        _version_field(),
        {
            "name": "bootstrapPartitionMetadata",
            "type": ["null", _map("HoodieCleanPartitionMetadata", default=None)],
            "default": None,
        },
    ],
}

#: Clean plan and clean metadata versions Hudi 0.14/0.15 write (``CleanPlanner``,
#: ``CleanerUtils``: version 2, paths per partition as ``HoodieCleanFileInfo``).
CLEAN_VERSION = 2
#: Rollback plan and metadata version of Hudi 0.14/0.15.
ROLLBACK_VERSION = 1


def _opt(name: str, typ: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", typ], "default": None}


_WRITE_STAT_FIELDS = (
    ("fileId", _STR),
    ("path", _STR),
    ("prevCommit", _STR),
    ("numWrites", "long"),
    ("numDeletes", "long"),
    ("numUpdateWrites", "long"),
    ("totalWriteBytes", "long"),
    ("totalWriteErrors", "long"),
    ("partitionPath", _STR),
    ("totalLogRecords", "long"),
    ("totalLogFiles", "long"),
    ("totalUpdatedRecordsCompacted", "long"),
    ("numInserts", "long"),
    ("totalLogBlocks", "long"),
    ("totalCorruptLogBlock", "long"),
    ("totalRollbackBlocks", "long"),
    ("fileSizeInBytes", "long"),
)
#: Field names of the Avro ``HoodieWriteStat`` (0.14/0.15): a subset of the JSON stat's.
WRITE_STAT_FIELDS = tuple(name for name, _ in _WRITE_STAT_FIELDS)

#: Avro ``HoodieCommitMetadata`` (0.14/0.15), what the archive holds for a commit.
COMMIT_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCommitMetadata",
    "namespace": NAMESPACE,
    "fields": [
        _opt(
            "partitionToWriteStats",
            _map(
                _array(
                    {
                        "type": "record",
                        "name": "HoodieWriteStat",
                        "fields": [_opt(name, typ) for name, typ in _WRITE_STAT_FIELDS],
                    }
                )
            ),
        ),
        _opt("extraMetadata", _map(_STR, default=None)),
        _version_field(),
        _opt("operationType", _STR),
    ],
}

#: Avro ``HoodieReplaceCommitMetadata`` (0.14/0.15).
REPLACE_COMMIT_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieReplaceCommitMetadata",
    "namespace": NAMESPACE,
    "fields": [
        _opt("partitionToWriteStats", _map(_array("HoodieWriteStat"))),
        _opt("extraMetadata", _map(_STR)),
        _version_field(),
        _opt("operationType", _STR),
        _opt("partitionToReplaceFileIds", _map(_array(_STR))),
    ],
}


#: ``HoodieArchivedMetaEntry``: one record per archived instant file, in archive log
#: files' Avro data blocks. Hudi's fields in Hudi's order, except the members of the
#: actions cdcctl never writes (``hoodieCompactionMetadata``, ``hoodieSavePointMetadata``,
#: ``hoodieCompactionPlan``, ``hoodieRequestedReplaceMetadata``,
#: ``hoodieIndexCommitMetadata``): a writer schema may leave out fields whose reader
#: default is null, and Avro's resolution fills them in. Declaring them as unions of
#: ``null`` alone made Hudi's archived timeline fail to load ("Not a record: null", in
#: ``HoodieAvroUtils.recordNeedsRewriteForExtendedAvroTypePromotion``, Hudi 0.15.0 and
#: 1.0.2 alike).
ARCHIVED_META_ENTRY: dict[str, Any] = {
    "type": "record",
    "name": "HoodieArchivedMetaEntry",
    "namespace": NAMESPACE,
    "fields": [
        _opt("hoodieCommitMetadata", COMMIT_METADATA),
        _opt("hoodieCleanMetadata", CLEAN_METADATA),
        _opt("hoodieRollbackMetadata", ROLLBACK_METADATA),
        _opt("commitTime", _STR),
        _opt("actionType", _STR),
        _version_field(),
        _opt("hoodieCleanerPlan", CLEANER_PLAN),
        _opt("actionState", _STR),
        _opt("hoodieReplaceCommitMetadata", REPLACE_COMMIT_METADATA),
        _opt("HoodieInflightReplaceMetadata", "HoodieCommitMetadata"),
        _opt("stateTransitionTime", _STR),
    ],
}

_PARSED_TIMELINE: dict[str, Any] = {}


def parsed(schema: dict[str, Any]) -> Any:
    """fastavro's parsed form of one of the schemas above (cached)."""
    name = schema["name"]
    found = _PARSED_TIMELINE.get(name)
    if found is None:
        found = _PARSED_TIMELINE[name] = fastavro.parse_schema(schema)
    return found


def serialize_avro_metadata(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """An Avro object container file of one record, no codec (as Hudi writes instants);
    the container's schema is ``schema`` as given (Java's rendering of Hudi's schema)."""
    out = io.BytesIO()
    fastavro.writer(out, schema, [record], codec="null")
    return out.getvalue()


def deserialize_avro_metadata(data: bytes, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The one record of an instant's Avro container (read with ``schema`` if given)."""
    reader = fastavro.reader(io.BytesIO(data), parsed(schema) if schema else None)
    for record in reader:
        return record  # type: ignore[return-value]
    raise ValueError("an empty Avro container")


def encode_record(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """Avro binary of one record (no container)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed(schema), record)
    return out.getvalue()


def decode_record(data: bytes, writer_schema: Any, reader_schema: Any | None = None) -> Any:
    """One Avro binary record, written with ``writer_schema``."""
    return fastavro.schemaless_reader(io.BytesIO(data), writer_schema, reader_schema)
