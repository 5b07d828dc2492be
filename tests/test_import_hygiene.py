"""engine/ stays headless: importing any of its modules pulls in no CLI or TUI package."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_no_front_end() -> None:
    code = (
        "import importlib, pkgutil, sys, engine\n"
        "names = [m.name for m in pkgutil.walk_packages(engine.__path__, 'engine.')"
        " if not m.name.endswith('__main__')]\n"
        "for name in names: importlib.import_module(name)\n"
        "assert len(names) > 40, names\n"
        "bad = [m for m in ('typer', 'textual', 'rich', 'cdcctl', 'tui') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_every_configurable_format_has_a_decoder() -> None:
    # config validation accepts SUPPORTED_FORMATS; the decode stage registers FORMATS.
    from engine.config import SUPPORTED_FORMATS
    from engine.decode import FORMATS

    assert set(FORMATS) == set(SUPPORTED_FORMATS)
