"""Where cdcctl writes: data on stdout, diagnostics on stderr, engine logs to stderr.

stdout carries only data (tables, JSON) so that output can be piped; everything else —
progress, the engine's log lines, errors — goes to stderr. ``cdcctl start`` also writes
every log line (its per-batch progress lines included) to the rotating log file in the
work folder (:func:`log_to_file`), as plain text or one JSON object a line.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import json
import logging
import logging.handlers
import os
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

import engine


def drop_output(stream: IO[str]) -> None:
    """Send what is still written to ``stream`` to /dev/null: its reader has gone (a pipe
    whose reader ended, as Ctrl-C ends ``cdcctl start | tee f``). Nothing is left to
    tell it, and a replicator that is stopping cleanly must not fail for it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


class _Console(Console):
    """A console that goes quiet when its reader has gone, instead of Rich's
    ``SystemExit(1)`` (which, raised by a progress line, failed a stopping run)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        drop_output(self.file)


# Piped output is not squeezed to 80 columns (tables would be truncated).
out = _Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = _Console(stderr=True, soft_wrap=True, highlight=False)


class _EngineLogHandler(logging.Handler):
    """Engine log records as plain lines on stderr ("warning: ..." for warnings)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "file_only", False):  # said on the terminal another way
            return
        try:
            message = record.getMessage()
            if record.levelno >= logging.ERROR:
                message = f"error: {message}"
            elif record.levelno >= logging.WARNING:
                message = f"warning: {message}"
            err.print(message, markup=False)
        except Exception:  # noqa: BLE001 - logging must never break the command
            self.handleError(record)


def configure_logging(verbose: bool) -> None:
    """Send the engine's ``cdcctl`` logger tree to stderr.

    librdkafka's own lines (``cdcctl.kafka``: one per failed connection attempt, every
    few milliseconds while a broker is down) are shown only with ``--verbose``: the
    engine reports broker problems itself, once, with what to do.
    """
    root = logging.getLogger("cdcctl")
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = _EngineLogHandler()
    handler.addFilter(engine.RedactFilter())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
    logging.getLogger("cdcctl.kafka").setLevel(logging.DEBUG if verbose else logging.CRITICAL)


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, and the
    table when the record names one (``record.table``, set by the engine)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        table = getattr(record, "table", None)
        if table is not None:
            entry["table"] = table
        if record.exc_info:  # exc_text: set (redacted) by engine.RedactFilter
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def _plain_formatter() -> logging.Formatter:
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)-7s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    return formatter


def quiet_terminal_logging() -> None:
    """Stop writing engine log lines to the terminal (a full-screen dashboard owns it);
    the log file, when set up, keeps them all."""
    root = logging.getLogger("cdcctl")
    for handler in list(root.handlers):
        if isinstance(handler, _EngineLogHandler):
            root.removeHandler(handler)


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file created owner-only (0600), also after each rotation.

    A line it cannot write (its disk full or read-only) is said once on stderr, in one
    line, instead of logging's "--- Logging error ---" and a traceback per line; the
    lines still reach stderr, and writing resumes when it can."""

    _failing = False
    _failed_now = False

    def _open(self) -> Any:
        engine.private_file(Path(self.baseFilename))
        return super()._open()

    def emit(self, record: logging.LogRecord) -> None:
        self._failed_now = False
        super().emit(record)
        if self._failing and not self._failed_now:
            self._failing = False
            err.print(f"the log file {self.baseFilename} is written again", markup=False)

    def handleError(self, record: logging.LogRecord) -> None:
        self._failed_now = True
        if not self._failing:
            self._failing = True
            exc = sys.exc_info()[1]
            cause = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            err.print(
                f"warning: the log file {self.baseFilename} cannot be written ({cause}): "
                "log lines go to stderr only until it can",
                markup=False,
            )


def log_to_file(path: Path, fmt: str, max_bytes: int, backups: int) -> None:
    """Also write the ``cdcctl`` logger tree to ``path``, rotated past ``max_bytes``
    (``backups`` older files kept as ``path.1``, ``path.2``, ...)."""
    engine.private_dir(path.parent)
    engine.private_file(path)
    handler = _PrivateRotatingFileHandler(
        path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
    )
    handler.addFilter(engine.RedactFilter())
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else _plain_formatter())
    logging.getLogger("cdcctl").addHandler(handler)


def print_rows(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """A table of rows on stdout."""
    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    out.print(table)


def _json_value(value: Any) -> Any:
    """JSON for what SQL results hold beyond JSON's own types, without losing digits.

    Decimals are numbers when that is exact (DuckDB's ``sum`` of integers is a 38-digit
    decimal), else their exact text; times are ISO 8601; bytes are base64.
    """
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return int(value)
        as_float = float(value)
        return as_float if Decimal(repr(as_float)) == value else str(value)
    if isinstance(value, dt.date | dt.time | dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    print(json.dumps(value, default=_json_value, indent=2))


def csv_text(value: Any) -> str:
    """One CSV field: the text of the value's ``--json`` rendering (strings unquoted,
    numbers exact, ISO times, base64 bytes, lists and structs as JSON); NULL is empty."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    plain = isinstance(value, bool | int | float | list | dict)
    rendered = value if plain else _json_value(value)
    if isinstance(rendered, str):
        return rendered
    return json.dumps(rendered, default=_json_value)


def print_csv(columns: list[str], rows: list[list[Any]]) -> None:
    """Rows as CSV on stdout: a header line, then one line per row (RFC 4180 quoting)."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_text(v) for v in row])
