"""Only ``engine/hudi`` knows the table folder's layout: no other source names ``.hoodie``.

An import contract (pyproject.toml, ``lint-imports``) keeps other code out of the Hudi
package's internal modules, but it cannot see strings: a path built from ``".hoodie"``
elsewhere would go unnoticed. This test reads the source of ``engine/``, ``cdcctl/`` and
``tui/`` and fails naming each ``file:line`` outside ``engine/hudi`` whose code holds a
string naming ``.hoodie`` (comments and docstrings may mention it; code may not).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "cdcctl", "tui")
OWNER = ROOT / "engine" / "hudi"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def hoodie_strings(path: Path) -> list[int]:
    """The lines of ``path`` where code (not a docstring or comment) names ``.hoodie``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skip = _docstrings(tree)
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and ".hoodie" in node.value
        and id(node) not in skip
    )


def test_scanner_finds_a_hoodie_path(tmp_path: Path) -> None:
    # The scan itself works: a literal, an f-string part and a joined path are found, a
    # docstring and a comment are not.
    source = tmp_path / "sample.py"
    source.write_text(
        '"""Module doc naming .hoodie."""\n'
        "# a comment naming .hoodie\n"
        'a = "x/.hoodie"\n'
        'b = f"{a}/.hoodie/{a}"\n'
        'c = ("x", ".hoodie")\n',
        encoding="utf-8",
    )
    assert hoodie_strings(source) == [3, 4, 5]


def test_only_engine_hudi_names_hoodie_paths() -> None:
    found = []
    for package in PACKAGES:
        sources = sorted((ROOT / package).rglob("*.py"))
        assert sources, f"no source under {ROOT / package}"
        for path in sources:
            if path.is_relative_to(OWNER):
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in hoodie_strings(path)]
    assert not found, (
        "only engine/hudi may name .hoodie paths; ask engine.hudi for the path instead: "
        + ", ".join(found)
    )
