"""The documentation's links and the code's pointers into it resolve.

Every relative link in README.md and the Markdown under docs/ and examples/ must name a
file that exists and, with ``#anchor``, a heading of that file (GitHub's anchors). Every
pointer the code gives users or readers, ``docs/guide/formats.md "Flattened events"`` or
``README "Quick start"``, must name a file that exists and a section it has.
"""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$")
#: A pointer in code: a document, then a section name in quotes or after a colon.
POINTER = re.compile(
    r"(README(?:\.md)?|docs/[\w/.-]+\.md)[,:]?\s*\(?(?:\"([^\"\n]+)\"|: ([A-Z][\w /-]+?)\))"
)
CODE_FOLDERS = ("engine", "cdcctl", "tui", "tests", "bench", "examples")


def documents() -> list[Path]:
    found = [REPOSITORY / "README.md"]
    for folder in ("docs", "examples"):
        found += sorted((REPOSITORY / folder).rglob("*.md"))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    found, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            found.append(match.group(1).strip())
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    for match in LINK.finditer(path.read_text(encoding="utf-8")):
        url = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", url):  # https:, mailto:
            continue
        target, _, anchor = url.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        where = f"{path.relative_to(REPOSITORY)}: ({url})"
        if not resolved.exists():
            problems.append(f"{where}: no file {target}")
        elif anchor and resolved.suffix == ".md":
            if anchor not in {slug(h) for h in headings(resolved)}:
                problems.append(f"{where}: {target or path.name} has no heading #{anchor}")
    return problems


def test_documents_are_found() -> None:
    names = {p.relative_to(REPOSITORY).as_posix() for p in documents()}
    assert {"README.md", "docs/guide/index.md", "docs/troubleshooting.md"} <= names, names


def test_every_relative_link_resolves() -> None:
    problems = [p for doc in documents() for p in broken_links(doc)]
    assert problems == [], "broken links:\n" + "\n".join(problems)


def test_broken_links_are_reported(tmp_path: Path) -> None:
    # The check itself can fail: a missing file and a missing heading are both found.
    doc = REPOSITORY / "docs" / "guide" / "index.md"
    text = doc.read_text(encoding="utf-8")
    assert "](commands.md)" in text
    probe = doc.with_name("_link_probe.md")
    probe.write_text("# Probe\n[a](commands.md#no-such-heading) [b](no-such-file.md)\n")
    try:
        problems = broken_links(probe)
    finally:
        probe.unlink()
    assert len(problems) == 2, problems
    assert "no heading #no-such-heading" in problems[0] and "no file" in problems[1]


def pointers() -> list[tuple[str, str, str]]:
    found = []
    for folder in CODE_FOLDERS:
        for path in sorted((REPOSITORY / folder).rglob("*")):
            if path.suffix not in (".py", ".toml") or "__snapshots__" in path.parts:
                continue
            if path == Path(__file__).resolve():  # its docstring shows the forms
                continue
            text = path.read_text(encoding="utf-8")
            for match in POINTER.finditer(text):
                section = match.group(2) or match.group(3)
                found.append((str(path.relative_to(REPOSITORY)), match.group(1), section))
    return found


def test_pointers_in_code_name_a_section_of_an_existing_document() -> None:
    found = pointers()
    assert len(found) >= 10, found  # the pattern still finds the pointers
    problems = []
    for source, doc, section in found:
        path = REPOSITORY / ("README.md" if doc.startswith("README") else doc)
        if not path.is_file():
            problems.append(f"{source}: {doc} does not exist")
            continue
        names = {slug(h) for h in headings(path)}
        if slug(section.replace("\n", " ")) not in names:
            problems.append(f"{source}: {doc} has no section {section!r}")
    assert problems == [], "pointers to missing sections:\n" + "\n".join(problems)
