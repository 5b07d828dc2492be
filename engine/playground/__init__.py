"""The playground: what ``cdcctl demo``, the tests and the benchmarks run the engine with.

Not part of the replication engine: an embedded Kafka-compatible broker (``broker``), a
deterministic Debezium PostgreSQL workload (``workload``), the demo (``demo``) and the
crash injector behind the engine's fault points (``faults``).
"""
