"""Tables cdcctl did not write: found before a single byte is written into a table folder.

cdcctl writes a table only if it made it and no other writer changed it since. A table a
Hudi writer made or touched has state cdcctl's writer does not keep up to date or does
not understand, and writing on would lose data silently: log files named after a base
instant a pending compaction replaces are lost to every reader, a metadata table goes
stale (readers that use it miss the new files), a pending clustering would be rolled
back as if it were a crashed write of ours, and commits without cdcctl's bookkeeping have
no tombstones or checkpoint to go on from.

:func:`findings` lists what in a folder shows another writer, reading only
``hoodie.properties``, the names in ``.hoodie/`` and the completed commit files:

* a table version other than 6, or another timeline layout;
* a metadata table (``hoodie.table.metadata.partitions`` or its inflight twin non-empty,
  or a ``.hoodie/metadata`` folder);
* a partitioned table, or ``hoodie.properties`` without cdcctl's own keys;
* an instant of an action cdcctl never writes: a ``compaction`` or ``logcompaction``
  (pending, or completed as a ``commit`` on a Merge-on-Read table), a pending
  ``replacecommit`` with a plan (clustering; cdcctl's own requested files are empty),
  ``savepoint``, ``restore``, ``indexing``;
* a completed commit whose extra metadata lacks ``cdcctl.arrow_schema``, which every
  commit cdcctl ever made carries.

:func:`check` raises :class:`~engine.errors.ForeignTableError` naming them and what to
do. The replicator calls it before taking a table's writer lock (the lock is a file in
the folder), and so do the offline commands that write or remove a table (resync,
dead-letter replay, ``delete --purge``). Readers (query, validate, status) do not.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.errors import ForeignTableError
from engine.hudi import options as o
from engine.hudi import timeline as tl
from engine.hudi.layout import HOODIE_DIR, PROPERTIES_FILE, parse_properties
from engine.hudi.options import HoodieOption as H
from engine.storage import LocalStorage, Storage, StorageError, StoreUnavailable

#: Actions of the timeline that only another Hudi writer makes.
FOREIGN_ACTIONS = ("compaction", "logcompaction", "savepoint", "restore", "indexing")
#: How many commits without cdcctl's bookkeeping a message names.
NAMED = 3


def _properties(store: Storage) -> dict[str, str] | None:
    try:
        text = store.read(f"{HOODIE_DIR}/{PROPERTIES_FILE}").decode("utf-8")
    except StoreUnavailable:
        raise  # the store, not the table: retried
    except (OSError, UnicodeDecodeError):
        return None  # missing or unreadable: what opens the table says so
    return parse_properties(text)


def findings(path: Path | Storage) -> list[str]:
    """What in the table folder ``path`` (or a store rooted at the table) shows another
    Hudi writer made or changed it, in words (empty: nothing; a table without
    ``hoodie.properties`` is not looked at)."""
    store = path if isinstance(path, Storage) else LocalStorage(Path(path))
    props = _properties(store)
    if props is None:
        return []
    found: list[str] = []
    version = props.get(H.TABLE_VERSION.value, "")
    if version != o.TABLE_VERSION:
        found.append(f"table version {version or '(none)'} (cdcctl writes version 6)")
    layout = props.get(H.TIMELINE_LAYOUT_VERSION.value, "")
    if layout and layout != o.TIMELINE_LAYOUT_VERSION:
        found.append(f"timeline layout version {layout}")
    mdt = [
        key
        for key in (H.METADATA_PARTITIONS.value, f"{H.METADATA_PARTITIONS.value}.inflight")
        if props.get(key, "").strip()
    ]
    if mdt:
        found.append(f"a metadata table ({mdt[0]}={props[mdt[0]]})")
    elif _has_metadata_table(store):
        found.append("a metadata table (.hoodie/metadata)")
    if props.get(H.PARTITION_FIELDS.value, "").strip():
        found.append(f"a partitioned table ({H.PARTITION_FIELDS.value})")
    if not any(k.startswith("cdcctl.") for k in props):
        found.append("hoodie.properties without cdcctl's keys (another writer created the table)")
    found += _timeline_findings(store, props.get(H.TABLE_TYPE.value, "").upper())
    return found


def _has_metadata_table(store: Storage) -> bool:
    local = store.local_path(f"{HOODIE_DIR}/metadata")
    if local is not None:
        return local.exists()
    return bool(store.entries(f"{HOODIE_DIR}/metadata/{HOODIE_DIR}"))


def _timeline_findings(store: Storage, table_type: str) -> list[str]:
    try:
        listed = store.entries(HOODIE_DIR)
    except StoreUnavailable:
        raise  # the store, not the table: retried
    except (OSError, StorageError):
        return []
    sizes = {o.path.rsplit("/", 1)[-1]: o.size for o in listed}
    names = sorted(n for n in sizes if tl.INSTANT_RE.match(n))
    found: list[str] = []
    completed: dict[str, str] = {}
    requested_replace: dict[str, str] = {}
    for name in names:
        instant, rest = tl.INSTANT_RE.match(name).groups()  # type: ignore[union-attr]
        rest = rest or ""
        action = rest.split(".", 1)[0]
        if action in FOREIGN_ACTIONS:
            state = rest.partition(".")[2] or "completed"
            found.append(f"a {'pending ' if state != 'completed' else ''}{action} ({name})")
        elif rest in tl.WRITE_ACTIONS:
            completed[instant] = rest
        elif rest == "replacecommit.requested":
            requested_replace[instant] = name
    for instant, name in requested_replace.items():
        if instant in completed:
            continue
        if sizes[name] > 0:  # cdcctl's own requested files are empty; clustering writes its plan
            found.append(f"a pending clustering ({name})")
    strangers: list[str] = []
    for instant, action in sorted(completed.items()):
        if action == "commit" and table_type == o.TABLE_TYPE_MOR:
            found.append(f"a compaction ({instant}.commit on a Merge-on-Read table)")
            continue
        try:
            meta = json.loads(store.read(f"{HOODIE_DIR}/{instant}.{action}"))
        except StoreUnavailable:
            raise
        except (OSError, ValueError):
            continue  # damaged: the consistency check says so
        extra = meta.get("extraMetadata") if isinstance(meta, dict) else None
        if not isinstance(extra, dict) or o.ARROW_SCHEMA_KEY not in extra:
            strangers.append(f"{instant}.{action}")
    if strangers:
        more = f" and {len(strangers) - NAMED} more" if len(strangers) > NAMED else ""
        found.append(
            f"{'commits' if len(strangers) > 1 else 'a commit'} without cdcctl's bookkeeping "
            f"({', '.join(strangers[:NAMED])}{more})"
        )
    return found


def advice(table: str) -> str:
    """What to do about a table cdcctl will not write."""
    return (
        "cdcctl writes only tables it made and no other writer changed, and never removes "
        "them: move the folder out of target.path to keep it (or delete it yourself); the "
        f"next start then creates {table} anew from its topic's start (events Kafka's "
        "retention already deleted cannot come back). Or point target.path elsewhere. "
        "Reading it (cdcctl query, validate) still works"
    )


def check(path: Path | Storage, table: str) -> None:
    """Raise :class:`ForeignTableError` if another Hudi writer made or changed the table
    in ``path`` (see :func:`findings`); nothing is written either way."""
    found = findings(path)
    if found:
        where = path.url if isinstance(path, Storage) else path
        raise ForeignTableError(
            f"table {table}: {where} holds a table another Hudi writer made or changed: "
            f"{'; '.join(found)}; cdcctl will not write into it",
            advice(table),
        )
