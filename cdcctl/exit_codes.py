"""Named exit codes of every cdcctl command, the one mapping of errors to them, and the
fast exit after a run.

A command returns its exit code (or None: 0, the usual way out) or raises an engine
error; :func:`cdcctl.main.main` ends the process with it (:func:`exit_now`) or with the
error's code (:func:`code_for`).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import engine

OK = 0
CHECK_FAILED = 1  # a check found a problem, or a request cannot be carried out as asked
USAGE = 2  # bad usage, bad config or an unknown table name: nothing was started
RUNTIME = 3  # a runtime failure: broker, Spark, storage, missing Java


class UsageError(engine.CdcError):
    """The command line asks for what cannot be asked (e.g. a missing argument)."""


#: The exit code of each kind of error (the first class it is an instance of); any other
#: engine error is a runtime failure. A state request that cannot be carried out as asked
#: (a replicator running where none may) and a name that is no table name answer like a
#: failed check; a table name no table of the replicator has is bad usage, on every
#: command (docs/guide/commands.md "Commands").
ERROR_CODES: tuple[tuple[type[engine.CdcError], int], ...] = (
    (engine.ConfigError, USAGE),
    (UsageError, USAGE),
    (engine.UnknownTableError, USAGE),
    (engine.QueryError, CHECK_FAILED),
    (engine.RepairError, CHECK_FAILED),
    (engine.StateError, CHECK_FAILED),
    (engine.TableNameError, CHECK_FAILED),
)


def code_for(exc: engine.CdcError) -> int:
    """The exit code of an engine error."""
    return next((code for kind, code in ERROR_CODES if isinstance(exc, kind)), RUNTIME)


def exit_now(code: int) -> NoReturn:
    """End the process without tearing the interpreter down.

    Everything is committed, closed and printed by now; unloading Spark's gateway,
    pyarrow and polars would only cost ~0.5 s more. The Spark JVM and its Python workers
    exit by themselves when this process's pipes close.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # its reader has gone (a pipe that Ctrl-C closed): nothing to tell
            pass
    os._exit(code)
