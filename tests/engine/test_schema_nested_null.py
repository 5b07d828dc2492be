"""A schemaless (``schemas.enable=false``) field only ever seen null inside a struct,
list or map: Debezium's PostgreSQL connector sends a ``point`` column as
``{"x": 1.0, "y": 2.0, "wkb": "...", "srid": null}``, so ``srid`` parses as Arrow's null
type. The ``peers`` tier (tests/peers/test_debezium_postgres.py, schemas off) found the
table FAILED with "column type null has no Hudi (Avro) mapping"; such fields are stored
as ``string``, as a top-level column only ever seen null is."""

from __future__ import annotations

import pyarrow as pa

from engine.hudi.schema import avro_schema_json
from engine.merge.evolution import evolve_schema

POINT = pa.struct(
    [
        pa.field("x", pa.float64()),
        pa.field("y", pa.float64()),
        pa.field("wkb", pa.string()),
        pa.field("srid", pa.null()),
    ]
)


def test_nested_null_fields_become_string() -> None:
    batch = pa.schema(
        [
            pa.field("id", pa.int32()),
            pa.field("pt", POINT),
            pa.field("empty", pa.list_(pa.null())),
            pa.field("tags", pa.map_(pa.string(), pa.null())),
            pa.field("never", pa.null()),
        ]
    )
    schema = evolve_schema(None, batch)
    assert schema.field("pt").type.field("srid").type == pa.string()
    assert schema.field("empty").type == pa.list_(pa.string())
    assert schema.field("tags").type.item_type == pa.string()
    assert schema.field("never").type == pa.string()
    avro_schema_json(schema, "t")  # Hudi (Avro) can hold it: no error
    # A later batch still sending null there changes nothing.
    assert evolve_schema(schema, batch) == schema
