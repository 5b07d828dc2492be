"""``cdcctl pause``, ``resume``, ``stop`` and ``resync``: requests to the running replicator
(``resync`` works without one too)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import engine
from cdcctl import exit_codes

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", metavar="FILE", help="replicator config file (TOML)")
]
TablesArg = Annotated[
    list[str] | None, typer.Argument(metavar="TABLE", help="tables (default: all)")
]
#: How long to wait for the replicator to pick a request up.
WAIT_SECONDS = 5.0


def _send(
    config: Path,
    kind: str,
    tables: list[str],
    stop_wait: float = 0.0,
    wait: float = WAIT_SECONDS,
) -> int:
    cfg = engine.load_config(config)
    engine.require_tables(cfg, tables)
    answers = engine.send_request(cfg.work_path(), kind, tables, wait)
    if answers is None and kind.startswith("resync"):
        return _resync_offline(cfg, tables[0], force=kind == "resync-force")
    if answers is None and kind == "epoch":
        return _accept_epoch(cfg, tables[0])
    if answers is None:
        raise engine.StateError(
            f"no replicator runs on {cfg.work_path()}: nothing to {kind}",
            hint="`cdcctl status` shows its last state",
        )
    failed = False
    for a in answers:
        outcome = a.outcome or "no answer"
        failed = failed or a.done_at is None or outcome.startswith(("error", "not picked"))
        print(f"{kind.split('-')[0]} {a.table or 'all tables'}: {outcome}")
    if kind == "stop" and not failed:
        if engine.wait_stopped(cfg.work_path(), stop_wait):
            print("stopped")
        else:
            print(f"still finishing its batch after {stop_wait:g} s; it stops after it")
    return exit_codes.CHECK_FAILED if failed else exit_codes.OK


def pause(config: ConfigOpt = Path("cdcctl.toml"), tables: TablesArg = None) -> int:
    """Pause tables of the running replicator.

    A paused table is not read: its replica and checkpoint stay where they are while the
    other tables go on. Without TABLE every table is paused.
    """
    return _send(config, "pause", tables or [])


def resume(config: ConfigOpt = Path("cdcctl.toml"), tables: TablesArg = None) -> int:
    """Resume paused tables (default: all).

    A resumed table is read again from its last commit.
    """
    return _send(config, "resume", tables or [])


def stop(
    config: ConfigOpt = Path("cdcctl.toml"),
    wait: Annotated[
        float,
        typer.Option("--wait", metavar="SECONDS", help="how long to wait for it to exit"),
    ] = 60.0,
) -> int:
    """Stop the running replicator cleanly.

    It finishes the batch in flight, commits it and exits 0; this waits for that.
    """
    return _send(config, "stop", [], wait)


def _resync_offline(cfg: engine.Config, table: str, force: bool) -> int:
    removed = engine.resync_offline(cfg, table, force)
    for path in removed:
        print(f"removed {path}")
    if not removed:
        print(f"resync {table}: no replica to drop (none under {cfg.target_store().url})")
    print(f"resync {table}: no replicator runs; `cdcctl start` reads its topic from the beginning")
    return exit_codes.OK


def resync(
    table: Annotated[str, typer.Argument(metavar="TABLE", hidden=True)],  # described below
    config: ConfigOpt = Path("cdcctl.toml"),
    new_epoch: Annotated[
        bool,
        typer.Option(
            "--new-epoch",
            help="instead: keep the replica and accept the new position epoch TABLE stopped "
            "at (a restored cluster, a failover without GTIDs): its snapshot becomes the "
            "table, or its changes count newer than every row",
        ),
    ] = False,
    wait: Annotated[
        float,
        typer.Option("--wait", metavar="SECONDS", help="how long to wait for the batch in flight"),
    ] = 60.0,
    force: Annotated[
        bool,
        typer.Option("--force", help="resync even if the rebuilt table will be partial"),
    ] = False,
) -> int:
    """Rebuild a table: drop its replica, re-read its topic.

    TABLE's replica is dropped and its topic read again from the beginning. The running
    replicator does it between batches (the other tables go on); without one, the
    replica is dropped now and the next `cdcctl start` re-reads the topic. Refused,
    nothing dropped, when retention deleted the start of the topic and what remains
    holds no complete snapshot; --force goes on and says the table will be partial.
    """
    kind = "epoch" if new_epoch else "resync-force" if force else "resync"
    return _send(config, kind, [table], wait=wait)


def _accept_epoch(cfg: engine.Config, table: str) -> int:
    print(f"resync {table}: {engine.accept_epoch(cfg, table)}")
    return exit_codes.OK
