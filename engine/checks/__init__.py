"""Checks of everything replication needs, for ``cdcctl test-connection``.

One module per area, each check a function returning :class:`Check` records (name,
``pass``/``warn``/``fail``, what was found, the exact fix): ``kafka`` (brokers, topics,
offsets and waiting messages, a decoded sample, transaction topics), ``target`` (the
folder, free space, the tables already in it), ``runtime`` (Java, Spark, the work
folder) and ``database`` (the PostgreSQL or MySQL/MariaDB source behind the topics).
:func:`run_checks` runs them, the independent ones at the same time, within a bounded time.
"""

from __future__ import annotations

from engine.checks.result import FAIL, PASS, WARN, Check
from engine.checks.run import run_checks

__all__ = ["FAIL", "PASS", "WARN", "Check", "run_checks"]
