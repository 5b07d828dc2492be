"""Apache Hudi table writer: Copy-on-Write and Merge-on-Read (table version 6, layout 1).

The package writes Hudi tables without a JVM: ``options`` holds the config key strings,
``bucket_index`` the bucket hashing Hudi's SIMPLE bucket index uses, ``schema`` the
Arrow -> Avro schema mapping stored in commits, ``log_file`` the log files of
Merge-on-Read slices (Parquet data blocks, delete blocks), and ``table`` the on-disk
table (properties, timeline, file groups, commit, rollback and clean). The on-disk format
follows ``docs/hudi-format.md`` of the shared documentation.
"""

from __future__ import annotations
