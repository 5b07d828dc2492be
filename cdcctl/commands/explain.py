"""``cdcctl explain TABLE KEY...``: one key's story, from its topic to its replica row."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

import engine
from cdcctl.console import out, print_json, print_rows


def _when(ms: int | None) -> str:
    import datetime as dt

    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _value(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _row_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    return ", ".join(f"{k}={_value(v)}" for k, v in row.items() if not k.startswith("_"))


def _timeline_rows(story: Any) -> list[list[Any]]:
    rows = []
    for kind, item in story.timeline():
        if kind == "commit":
            where = "" if item.partition is None else f"from {item.partition}:{item.offset}"
            what = item.change + (f" ({item.operation.lower()})" if item.operation else "")
            shown = _row_text(item.row) if item.row is not None else ""
            rows.append(
                [f"commit {item.instant}", what, item.position_text, where, item.tx_id or "", shown]
            )
            continue
        verdict = item.verdict + (" (wrote it)" if item.wrote else "")
        if item.toast:
            verdict += f": {', '.join(item.toast)} kept"
        where = f"{item.partition}:{item.offset} {_when(item.kafka_ts_ms)}".rstrip()
        rows.append(
            ["event", f"{item.op or '-'} {verdict}", item.position_text, where,
             item.tx_id or "", item.note or ("" if item.wrote else _row_text(item.row))]
        )  # fmt: skip
    return rows


def explain(
    table: Annotated[str, typer.Argument(metavar="TABLE", help="the replica")],
    keys: Annotated[
        list[str],
        typer.Argument(
            metavar="KEY",
            help="record keys as the replica stores them (_hoodie_record_key): the value, or "
            "a=1,b=2 for a composite key",
        ),
    ],
    config: Annotated[
        Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
    ] = Path("cdcctl.toml"),
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="read the topic from this time: 30m, 2h, 7d back, or an ISO time "
            "(default: the newest --max-messages)",
        ),
    ] = None,
    max_messages: Annotated[
        int,
        typer.Option(
            "--max-messages",
            metavar="N",
            min=0,
            help="read at most this many messages of the topic (0: the replica only)",
        ),
    ] = 100_000,
    json_out: Annotated[bool, typer.Option("--json", help="print the story as JSON")] = False,
) -> None:
    """Explain a key: its row, commits and Kafka events.

    The row as the replica holds it; each retained Hudi commit that changed it (instant,
    operation, source position, and the Kafka event it came from); the key's events
    still in the topic, each marked applied, superseded, replay, late, toast-filled,
    tombstone, dead-letter or pending, in one timeline. Reads only: works while the
    replicator runs.
    """
    cfg = engine.load_config(config)
    since_ms = engine.parse_since(since) if since else None
    found = engine.explain_keys(cfg, table, keys, since_ms=since_ms, max_messages=max_messages)
    if json_out:
        print_json(found.to_dict())
        return
    head = f"{found.table} ({found.table_type.lower()})"
    if found.source_table:
        head += f" from {found.source_table}"
    if found.topic:
        head += f", topic {found.topic}"
    kafka = found.kafka
    if kafka.get("read"):
        head += f"; {kafka['messages']} message(s) read"
    out.print(head, markup=False, highlight=False)
    for story in found.keys:
        now = _row_text(story.row) if story.row is not None else "no row"
        out.print(f"\nkey {story.key}: {now}", markup=False, highlight=False)
        rows = _timeline_rows(story)
        if rows:
            columns = ["what", "op / verdict", "position", "kafka", "tx", "row / note"]
            if not any(r[4] for r in rows):  # no transaction metadata: no column for it
                columns, rows = columns[:4] + columns[5:], [r[:4] + r[5:] for r in rows]
            print_rows(None, columns, rows)
        else:
            out.print("  nothing found: not in the replica's history nor in what was read")
        for note in story.notes:
            out.print(f"  note: {note}", markup=False, highlight=False)
