"""The playground: what ``cdcctl demo``, the tests and the benchmarks run the engine with.

Not part of the replication engine: an embedded Kafka-compatible broker (``broker``), a
deterministic Debezium PostgreSQL workload (``workload``) over a simulated ``inventory``
database (``inventory``), the demo (``demo``), the crash injector behind the engine's
fault points (``faults``), and local servers the tests need (``objectstore``,
``registry``, ``gate``, ``tls``; what they share in ``children``).
"""
