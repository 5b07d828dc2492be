"""What a topic's schemaless buffers teach the reading of its next one.

A topic's schemaless buffers are read with the schema inference gave its previous one
(one explicit-schema read, about a quarter cheaper than inferring again, and one read
where inference fails on a ``before`` that is null first and an object later), kept only
where :func:`engine.decode.debezium_json.inferred.as_inferred` proves the read equal to a
full inference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from engine.decode.debezium_json.reader import BulkReader, envelope_retry_schema

__all__ = ["LEARNED", "before_as_after", "remember", "schemaless_reader"]

#: Per topic, the schema inference gave the last schemaless buffer (the next one is
#: read with it first, a quarter cheaper than inferring again) and how many buffers in a
#: row it failed to read exactly; bounded like the plan cache.
LEARNED: dict[str, tuple[pa.Schema | None, int]] = {}
MAX_TOPICS = 1024
#: Misses in a row after which a topic's buffers are inferred without trying its learned
#: schema first (members that come and go between batches make every try a wasted read).
MISSES = 3
#: Envelope members read the same way whatever their type: ``before`` only for the
#: Avro-rendering check (a one-member struct), ``transaction`` only for its string ``id``.
EXEMPT = frozenset({"before", "transaction"})


def before_as_after(explicit: pa.Schema) -> pa.Schema:
    """The learned parse schema with ``before`` typed as ``after`` (Debezium gives both
    one row type): inference cannot type a ``before`` that is null in a buffer's first
    blocks and an object later (see :func:`envelope_retry_schema`)."""
    if "after" not in explicit.names or not pa.types.is_struct(explicit.field("after").type):
        return explicit
    row = explicit.field("after").type
    return pa.schema([pa.field("before", row), *(f for f in explicit if f.name != "before")])


def schemaless_reader(topic: str, py_build: Callable[[list[Any]], pa.Table]) -> BulkReader:
    """The reader of a topic's schemaless values: full inference, after the learned
    schema of the topic's previous buffer where that is certain to read the same."""
    learned, misses = LEARNED.get(topic, (None, 0))
    return BulkReader(
        [None],
        infer=True,
        py_build=py_build,
        retry_schema=envelope_retry_schema,
        learned=learned if misses < MISSES else None,
        exempt=EXEMPT,
        explicit_hook=before_as_after,
    )


def remember(topic: str, reader: BulkReader) -> None:
    """Keep what a schemaless read learned for the topic's next buffer."""
    learned, misses = LEARNED.get(topic, (None, 0))
    if reader.learned is not None:
        misses = misses + 1 if reader.learned_missed else 0
    if reader.inferred is not None and misses < MISSES:
        learned = reader.inferred
    if len(LEARNED) >= MAX_TOPICS and topic not in LEARNED:
        LEARNED.clear()
    LEARNED[topic] = (learned, misses)
