"""Helpers shared by the checks."""

from __future__ import annotations

import fnmatch
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from engine.config import Config
from engine.errors import TableNameError

T = TypeVar("T")

#: Items shown in one line before the rest is counted.
LIST_MAX = 8


def plural(n: int, word: str) -> str:
    """``1 topic``, ``2 topics``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def listing(items: list[str]) -> str:
    """The first few items, comma-separated, and how many more there are."""
    shown = ", ".join(items[:LIST_MAX])
    return shown + (f" and {len(items) - LIST_MAX} more" if len(items) > LIST_MAX else "")


def topic_selected(cfg: Config, topic: str) -> bool:
    """Whether the replicator replicates ``topic``: it matches ``source.topics``, not
    ``exclude_topics``, and its table name passes ``include_tables``/``exclude_tables``."""
    src = cfg.source
    if not re.search(src.kafka.topics, topic):
        return False
    if src.kafka.exclude_topics and re.search(src.kafka.exclude_topics, topic):
        return False
    try:
        name = cfg.table_name(topic)
    except TableNameError:
        return False
    if src.include_tables and not any(fnmatch.fnmatchcase(name, p) for p in src.include_tables):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in src.exclude_tables)


def in_thread(name: str, work: Callable[[], T]) -> Future[T]:
    """Run ``work`` in a daemon thread: a check still stuck when its time is up must
    not keep the process alive (a thread pool's workers would be joined at exit)."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 - reported as a failed check
            future.set_exception(exc)

    threading.Thread(target=run, name=f"check-{name}", daemon=True).start()
    return future
