"""The tables a replicator knows, and the one check of a table name a command is given.

A table is known when the state store has a row for it, its folder under the target is
a Hudi table, or it has dead letters: whichever of these a command reads, an unknown
name is the same error (:func:`engine.naming.unknown_table`) on every command.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.config import Config
from engine.hudi import HudiView
from engine.naming import unknown_table
from engine.replicator.replay import dead_letter_folder
from engine.state.control import open_store


def known_tables(cfg: Config) -> list[str]:
    """Names of the tables of a config's state store, target folder and dead letters."""
    names: set[str] = set()
    store = open_store(cfg.work_path())
    if store is not None:
        try:
            names.update(t["name"] for t in store.tables())
        finally:
            store.close()
    names.update(HudiView.tables_under(cfg.target_store(patient=False)))
    names.update(dead_letter_folder(cfg).tables())
    return sorted(names)


def require_tables(cfg: Config, names: Iterable[str]) -> None:
    """Nothing when every name is a known table.

    Raises:
        UnknownTableError: the first name that is not, naming the known ones.
    """
    wanted = list(names)
    if not wanted:
        return
    known = known_tables(cfg)
    for name in wanted:
        if name not in known:
            raise unknown_table(name, known)
