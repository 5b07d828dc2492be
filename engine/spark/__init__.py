"""The local-mode SparkContext: the only place Spark is configured.

``session`` starts it (Java check, JVM flags, the JVM's output in a log file, Python
workers warmed in the background); ``archive`` builds the class-data archive that makes
it start faster; ``daemon`` is the Python worker daemon Spark runs. Importing this
package does not import PySpark.
"""

from __future__ import annotations

from engine.spark.session import (
    SPARK_LOG,
    check_java,
    get_spark,
    start_for,
    start_in_background,
    stop_jvm,
    stop_spark,
)

__all__ = [
    "SPARK_LOG",
    "check_java",
    "get_spark",
    "start_for",
    "start_in_background",
    "stop_jvm",
    "stop_spark",
]
