"""The writer lock's take-over line names a holder as ended only when its pid runs no
more on this host (issue 24 item 4: it once named a process that was still running)."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
from pathlib import Path

import pytest

from engine.lock import WriterLock


def _left_by(path: Path, pid: int, **extra) -> None:
    """A lock file as a holder with ``pid`` on this host left it (not released)."""
    holder = {"pid": pid, "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
    path.write_text(json.dumps({**holder, **extra}))


def _take(path: Path, caplog: pytest.LogCaptureFixture) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cdcctl.lock"):
        WriterLock(path, "the work folder").acquire().release()
    return caplog.text


def test_a_holder_whose_pid_still_runs_is_not_called_ended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "writer.lock"
    running = subprocess.Popen(["sleep", "60"])
    try:
        _left_by(path, running.pid)
        said = _take(path, caplog)
        assert f"taking over the lock of cdcctl pid {running.pid}" in said
        assert "which no longer holds it" in said and "which has ended" not in said
    finally:
        running.kill()
        running.wait()
    _left_by(path, running.pid)  # now it has ended
    said = _take(path, caplog)
    assert f"cdcctl pid {running.pid}" in said and "which has ended" in said


def test_another_hosts_holder_and_a_released_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "writer.lock"
    path.write_text(json.dumps({"pid": 1, "host": "elsewhere.invalid", "started": "x"}))
    assert "which no longer holds it" in _take(path, caplog)
    _left_by(path, 1, released="2026-01-01T00:00:01+00:00")
    assert "taking over" not in _take(path, caplog)
