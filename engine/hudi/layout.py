"""Where things live in a table folder: the one home of its layout (table version 6).

``<table>/.hoodie/`` holds ``hoodie.properties`` and the timeline (instant files,
``archived/``, ``.temp/``); cdcctl keeps its own files (the writer lock, delete
tombstones) in ``.hoodie/.cdcctl/``, which Hudi's readers skip. Code outside
``engine.hudi`` asks these functions for a path instead of naming ``.hoodie`` itself
(``tests/test_hudi_boundary.py`` checks that).
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.storage import Storage

HOODIE_DIR = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
#: cdcctl's own folder inside ``.hoodie``.
OWN_DIR = ".cdcctl"


#: Where a table's files are staged on a local disk before their rename, relative to
#: the table (:func:`temp_dir`).
TEMP_DIR = f"{HOODIE_DIR}/.temp"
#: cdcctl's own folder, relative to the table.
OWN_PATH = f"{HOODIE_DIR}/{OWN_DIR}"
#: Where a fenced commit stages its completed file's content (object storage).
STAGED_DIR = f"{OWN_PATH}/staged"
#: The writer's lease of a table on object storage (engine/storage/lease.py).
LEASE_FILE = f"{OWN_PATH}/lease.json"


def meta_dir(table: Path) -> Path:
    """A table's ``.hoodie`` folder."""
    return Path(table) / HOODIE_DIR


def own_dir(table: Path) -> Path:
    """The folder of cdcctl's own files in a table (writer lock, tombstones); Hudi's
    readers skip it."""
    return meta_dir(table) / OWN_DIR


def temp_dir(table: Path) -> Path:
    """Where a table's files are staged before their atomic rename (``.hoodie/.temp``).

    Not beside the data files: a log file's name starts with ``.`` as a temporary name
    does, so hudi-rs lists a staged ``..<log name>.<random>.tmp`` as a log file and fails
    when the rename takes it away under the reader.
    """
    return Path(table) / TEMP_DIR


def has_meta_dir(path: Path | Storage) -> bool:
    """Whether ``path`` (a folder or a store) has a ``.hoodie`` folder: a table, or what
    is left of one (on object storage: ``.hoodie`` holds an object besides the lease)."""
    if isinstance(path, Storage):
        local = path.local_path("")
        if local is None:  # the lease outlives a dropped table: epochs only grow
            return any(o.path != LEASE_FILE for o in path.list(HOODIE_DIR))
        path = local
    return meta_dir(path).is_dir()


def parse_properties(text: str) -> dict[str, str]:
    """Parse a Java properties file as written by Hudi (key=value lines, # comments)."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        # Java escapes ':' '=' '#' '!' with a backslash; we never write escapes ourselves.
        value = re.sub(r"\\([:=#!\\ ])", r"\1", value.strip())
        props[key.strip()] = value
    return props


def has_own_dir(table: Path | Storage) -> bool:
    """Whether cdcctl's own folder (``.hoodie/.cdcctl``) is in a table: cdcctl wrote it."""
    if isinstance(table, Storage):
        local = table.local_path("")
        if local is None:
            return bool(table.list(OWN_PATH))
        table = local
    return own_dir(table).is_dir()


def drop_objects(table: Storage) -> bool:
    """Delete every object of a table on object storage but its lease; whether there
    was any. ``hoodie.properties`` goes first, so a drop cut short leaves no table (only
    leftovers the stray-timeline check names), never a table missing its files."""
    properties = f"{HOODIE_DIR}/{PROPERTIES_FILE}"
    objects = [o.path for o in table.list() if o.path != LEASE_FILE]
    for path in sorted(objects, key=lambda p: p != properties):
        table.delete(path)
    return bool(objects)
