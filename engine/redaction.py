"""Redaction of secrets: the one place that knows which strings must never be shown.

:mod:`engine.config` registers every secret it resolves (SASL password, TLS key
password, database password, schema registry password); log handlers
(:class:`RedactFilter`), the CLI's error printing and the state store's error text and
event log pass text through :func:`redact`, which replaces each registered secret with
``***``. Secrets shorter than :data:`MIN_LENGTH` characters are not registered
(replacing them would mangle every line); use real passwords.
"""

from __future__ import annotations

import logging
import threading

#: Shorter secrets are not redacted (a one-letter password would blank every line).
MIN_LENGTH = 4
MASK = "***"

_lock = threading.Lock()
_secrets: set[str] = set()


def register(secret: str) -> None:
    """Redact ``secret`` from now on in this process."""
    if len(secret) >= MIN_LENGTH:
        with _lock:
            _secrets.add(secret)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***`` (longest first)."""
    if not _secrets or not text:
        return text
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactFilter(logging.Filter):
    """A handler filter that redacts a record's message and exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            record.msg = redact(record.getMessage())
            record.args = None
            if record.exc_info:
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True
