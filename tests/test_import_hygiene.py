"""engine/ stays headless: importing it pulls in no CLI or TUI package."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_no_front_end() -> None:
    code = (
        "import sys, engine, engine.replicator, engine.demo, engine.query;"
        "bad = [m for m in ('typer', 'textual', 'rich', 'cdcctl', 'tui') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
