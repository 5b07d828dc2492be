"""The source stage: Debezium topics in Kafka, read from each table's checkpoint.

In: the ``[source]`` config. Out: batches of raw records per topic (``records``), end
offsets, and the END records of Debezium's transaction topic (``transactions``), which
decide where a batch may be cut without splitting a source transaction. ``kafka`` holds
the consumer (explicit assignment, seek to the checkpoint, group offsets for lag tools).
"""

from __future__ import annotations

from engine.source.kafka import KafkaSource, kafka_reason
from engine.source.records import Record, TopicRecords, collector_paused, group_by_topic
from engine.source.transactions import (
    TransactionTracker,
    apply_cuts,
    data_collection,
    transaction_topic,
)

__all__ = [
    "KafkaSource",
    "Record",
    "TopicRecords",
    "TransactionTracker",
    "apply_cuts",
    "collector_paused",
    "data_collection",
    "group_by_topic",
    "kafka_reason",
    "transaction_topic",
]
