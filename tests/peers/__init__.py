"""The real peers of the tier marked ``peers``: Apache Kafka, Kafka Connect with Debezium's
connectors, and Apache Hudi's own Spark readers, all resolved once by ``./bootstrap.sh
peers`` from the pinned poms under ``interop/`` (never at the product's run time)."""
