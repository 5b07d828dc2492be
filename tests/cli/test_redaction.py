"""Log records through the CLI's real handlers: a registered secret becomes ``***`` in
the message, its arguments and an exception's traceback, in both log file formats."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

from cdcctl.console import configure_logging, log_to_file
from engine.redaction import MIN_LENGTH, redact, register


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_log_lines_and_tracebacks_are_redacted(tmp_path: Path, fmt: str, capsys) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    register(secret)
    configure_logging(verbose=False)
    log = tmp_path / "work" / "cdcctl.log"
    log_to_file(log, fmt, 1_000_000, 2)
    logger = logging.getLogger("cdcctl.test")
    try:
        logger.warning("login as %s failed", secret)
        try:
            raise RuntimeError(f"broker said: bad password {secret}")
        except RuntimeError:
            logger.exception("retrying")
        for handler in logging.getLogger("cdcctl").handlers:
            handler.flush()
        text = log.read_text()
        assert secret not in text and "login as *** failed" in text
        assert "bad password ***" in (
            json.loads(text.splitlines()[-1])["exception"] if fmt == "json" else text
        )
        assert secret not in capsys.readouterr().err
        assert log.stat().st_mode & 0o777 == 0o600
        assert log.parent.stat().st_mode & 0o777 == 0o700
    finally:
        root = logging.getLogger("cdcctl")
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()


def test_short_secrets_are_not_registered() -> None:
    short = "x" * (MIN_LENGTH - 1)
    register(short)
    assert redact(f"a {short} b") == f"a {short} b"
