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
    return sorted(_local_names(cfg) | set(HudiView.tables_under(cfg.target_store(patient=False))))


def _local_names(cfg: Config) -> set[str]:
    """The tables the work folder knows: its state store's and its dead letters'."""
    names: set[str] = set()
    store = open_store(cfg.work_path())
    if store is not None:
        try:
            names.update(t["name"] for t in store.tables())
        finally:
            store.close()
    names.update(dead_letter_folder(cfg).tables())
    return names


def require_tables(cfg: Config, names: Iterable[str]) -> None:
    """Nothing when every name is a known table.

    Raises:
        UnknownTableError: the first name that is not, naming the known ones.
    """
    wanted = list(names)
    if not wanted or set(wanted) <= _local_names(cfg):
        return  # the target (maybe a bucket) is listed only for a name the work folder lacks
    known = known_tables(cfg)
    for name in wanted:
        if name not in known:
            raise unknown_table(name, known)
