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
