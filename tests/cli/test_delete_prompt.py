"""`cdcctl delete` on a terminal: it lists what it removes and asks first."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from engine.state import StateStore, store_path
from tests.integration.replicas import write_config


@pytest.mark.parametrize("answer", ["n", "y"])
def test_delete_asks_on_a_terminal(tmp_path: Path, answer: str) -> None:
    config = write_config(tmp_path / "cdcctl.toml", "127.0.0.1:1", "^x\\.", tmp_path / "lake")
    work = tmp_path / "work"
    StateStore(store_path(work)).close()
    main, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdcctl", "delete", "--config", str(config)],
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(main, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main)
        os.close(secondary)
    assert "This removes:" in err and str(work / "state.db") in err and "Delete these?" in err
    if answer == "n":
        assert proc.returncode == 1 and "nothing deleted" in err
        assert (work / "state.db").exists()
    else:
        assert proc.returncode == 0, err
        assert out == f"removed {work / 'state.db'}\n" and not work.exists()
