"""``cdcctl deadletters [TABLE]`` and ``cdcctl deadletters replay TABLE``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

import engine
from cdcctl import exit_codes
from cdcctl.console import out, print_json

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]
ArgsArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="[TABLE | replay TABLE]", help="a table to list, or: replay TABLE"),
]
#: Columns of the listing: heading, field.
_COLUMNS = (
    ("table", "table"),
    ("topic", "topic"),
    ("partition", "partition"),
    ("offset", "offset"),
    ("time", "time"),
    ("error", "error"),
    ("key", "key"),
)
#: Characters of a key shown in the listing.
KEY_PREVIEW = 40


def _key_preview(letter: dict[str, Any]) -> str:
    """The key's payload when it is a JsonConverter wrapper, else its text (or base64)."""
    text = letter["key"] if letter["key"] is not None else letter["key_b64"]
    if text is None:
        return "-"
    try:
        key = json.loads(text)
    except ValueError:
        key = None
    if isinstance(key, dict) and "payload" in key:
        text = json.dumps(key["payload"], separators=(",", ":"))
    return text if len(text) <= KEY_PREVIEW else text[: KEY_PREVIEW - 1] + "…"


def _cell(letter: dict[str, Any], field: str) -> str:
    if field == "key":
        return _key_preview(letter)
    value = letter[field]
    return "-" if value is None else str(value)


def _list(cfg: Any, table: str | None, json_out: bool) -> None:
    engine.require_tables(cfg, [table] if table else [])
    letters = engine.list_dead_letters(cfg, table)
    if json_out:
        print_json({"deadletters": letters})
        return
    if not letters:
        print(f"no dead letters{f' for {table}' if table else ''} in {cfg.work_path()}")
        return
    headings = [h for h, _ in _COLUMNS]
    rows = [[_cell(d, f) for _, f in _COLUMNS] for d in letters]
    if sys.stdout.isatty():
        view = Table(*headings, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for row in rows:
            view.add_row(*row)
        out.print(view)
    else:
        widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headings)]
        for row in [headings, *rows]:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _replay(cfg: Any, config: Path, table: str) -> int:
    engine.require_tables(cfg, [table])
    result = engine.replay_dead_letters(cfg, table, config_path=str(config.resolve()))
    where = "by the running replicator" if result.via == "replicator" else "offline"
    print(f"replay {table} ({where}): {result.message}")
    return exit_codes.OK if result.ok else exit_codes.CHECK_FAILED


def deadletters(
    args: ArgsArg = None,
    config: ConfigOpt = Path("cdcctl.toml"),
    json_out: Annotated[bool, typer.Option("--json", help="print the list as JSON")] = False,
) -> int | None:
    """List dead letters, or replay a table's: replay TABLE.

    Dead letters are messages that could not be decoded (see errors.tolerance). The list
    shows those not yet applied by a replay, whether the replicator runs or not. `replay
    TABLE` decodes them again with the current config and applies those that decode, in
    source order and through the usual rules (a stale one counts as late), without moving
    the table's checkpoint; through the running replicator if there is one.
    """
    words = list(args or [])
    cfg = engine.load_config(config)
    if words[:1] == ["replay"] and len(words) == 2:
        return _replay(cfg, config, words[1])
    if len(words) > 1 or words == ["replay"]:
        raise exit_codes.UsageError(
            "usage: cdcctl deadletters [TABLE] | cdcctl deadletters replay TABLE"
        )
    _list(cfg, words[0] if words else None, json_out)
    return None
