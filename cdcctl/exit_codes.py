"""Named exit codes of every cdcctl command, and the fast exit after a run."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

OK = 0
CHECK_FAILED = 1  # a check found a problem (validate, test-connection, query)
USAGE = 2  # bad usage or bad config: nothing was started
RUNTIME = 3  # a runtime failure: broker, Spark, storage, missing Java


def exit_now(code: int) -> NoReturn:
    """End the process without tearing the interpreter down.

    Everything is committed, closed and printed by now; unloading Spark's gateway,
    pyarrow and polars would only cost ~0.5 s more. The Spark JVM and its Python workers
    exit by themselves when this process's pipes close.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
