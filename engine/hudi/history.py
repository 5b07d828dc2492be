"""One record key's history in a table: its row after each retained commit that changed it.

What ``cdcctl explain`` shows of the replica side. The key's file group is found by its
bucket (Hudi's hashing, :meth:`HudiView.bucket_of`); every completed write instant a
reader can still be given (:meth:`HudiView.oldest_readable` on) whose write stats name
that group is read *as of that instant* by hudi-rs, only that group's slice (a base file
merged with its logs, so a Merge-on-Read delete not yet compacted shows as a missing
row), and the key's row compared with the one before. A row whose commit time and
sequence number did not move was carried over (a compaction, another key's change): no
version. A row gone at an instant is a delete; the group's tombstone sidecar of that
instant (:mod:`.tombstones`) says at which source position, when the writer kept one
(a truncate keeps none: the commit's extra metadata records its position instead).

The first readable instant gives the baseline: the row as it stood then, when an instant
that may be cleaned or archived by now wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.hudi import tombstones
from engine.hudi.schema import HOODIE_META_COLUMNS, HOODIE_RECORD_KEY, conform
from engine.hudi.view import HudiView
from engine.model import KEY, POS, POS_SUB, SOURCE_TS

_COMMIT_TIME = "_hoodie_commit_time"
_SEQNO = "_hoodie_commit_seqno"


@dataclass(frozen=True)
class KeyVersion:
    """The key after one instant.

    Attributes:
        instant: The completed write instant.
        action: ``commit``, ``deltacommit`` or ``replacecommit``.
        operation: The commit's ``operationType`` (``UPSERT``, ...), None when absent.
        row: The key's row after it (meta columns included), None when it has none.
        tombstone: ``(position, sub-position, source ts ms)`` of the key's delete
            tombstone in the group's sidecar of this instant, None when there is none.
        baseline: The row as the oldest readable instant holds it (not a change made by
            that instant unless its commit time says so).
    """

    instant: str
    action: str
    operation: str | None
    row: dict[str, Any] | None
    tombstone: tuple[int, int | None, int | None] | None = None
    baseline: bool = False
    extra: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def written_at(self) -> str | None:
        """The commit time of the row (the instant that wrote it), None without a row."""
        return None if self.row is None else self.row.get(_COMMIT_TIME)


@dataclass(frozen=True)
class KeyHistory:
    """The versions of one key, oldest first, and what bounded the look."""

    key: str
    file_group: str | None
    oldest_readable: str | None
    versions: list[KeyVersion]
    #: The key's row as the newest commit holds it (a later schema change included).
    current: dict[str, Any] | None = None
    #: Every commit of the table was read (none cleaned or archived before the first).
    complete: bool = True


def _stats_name(meta: dict[str, Any], prefix: str) -> str | None:
    """The file id of the group with ``prefix`` the commit wrote, None when it wrote none."""
    for stats in (meta.get("partitionToWriteStats") or {}).values():
        for stat in stats or []:
            file_id = str(stat.get("fileId") or "")
            if file_id.startswith(prefix):
                return file_id
    return None


def _row_at(
    view: HudiView, reader: Any, instant: str, prefix: str, key: str
) -> tuple[str | None, dict | None]:
    """The group's file id and the key's row as of ``instant`` (hudi-rs, one slice)."""
    import hudi

    options = hudi.HudiReadOptions().with_as_of_timestamp(instant)
    chosen = [fs for fs in reader.get_file_slices(options) if fs.file_id.startswith(prefix)]
    if not chosen:
        return None, None
    group_reader = reader.create_file_group_reader_with_options(options)
    rows = pa.Table.from_batches([group_reader.read_file_slice(chosen[0], options)])
    rows = rows.filter(pc.equal(rows.column(HOODIE_RECORD_KEY), key))
    if rows.num_rows == 0:
        return chosen[0].file_id, None
    schema = view.schema_at(instant) or view.arrow_schema()
    if schema is not None:
        meta = [pa.field(n, pa.string()) for n in HOODIE_META_COLUMNS]
        data = [f for f in schema if f.name not in HOODIE_META_COLUMNS]
        rows = conform(rows, pa.schema(meta + data))
    return chosen[0].file_id, rows.slice(rows.num_rows - 1).to_pylist()[0]


def _tombstone(
    view: HudiView, file_id: str, instant: str, key: str, latest: str | None
) -> tuple | None:
    """The key's tombstone made at ``instant``: in the group's sidecar of that instant, or
    (a clean swept that one) in the group's latest sidecar, which keeps each tombstone
    with the instant that made it. None: none kept (expired, or a truncate)."""
    for state in dict.fromkeys([instant, latest]):
        if state is None:
            continue
        found = tombstones.read(tombstones.sidecar(view.store, file_id, state))
        if found is None or found.num_rows == 0:
            continue
        mine = pc.and_(
            pc.equal(found.column(KEY), key),
            pc.equal(found.column(tombstones.INSTANT), instant),
        )
        rows = found.filter(mine).to_pylist()
        if rows and rows[-1][POS] is not None:
            last = rows[-1]
            return (last[POS], last[POS_SUB], last[SOURCE_TS])
    return None


def _same(a: dict | None, b: dict | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.get(_COMMIT_TIME), a.get(_SEQNO)) == (b.get(_COMMIT_TIME), b.get(_SEQNO))


def key_history(view: HudiView, key: str) -> KeyHistory:
    """The versions of record key ``key`` in ``view`` (module docstring), oldest first."""
    prefix = f"{view.bucket_of(key):08d}"
    reader = view.reader()  # one hudi-rs table for every instant read
    timeline = view.timeline()
    oldest = view.oldest_readable()
    instants = [i for i in sorted(timeline.completed) if oldest is None or i >= oldest]
    latest = {fs.file_id: fs.state_instant for fs in view.file_groups().values()}
    versions: list[KeyVersion] = []
    file_group: str | None = None
    last: dict | None = None
    for n, instant in enumerate(instants):
        meta = view.commit_metadata(instant)
        wrote = _stats_name(meta, prefix)
        if n > 0 and wrote is None:
            continue
        group, row = _row_at(view, reader, instant, prefix, key)
        file_group = group or file_group
        if _same(row, last):  # carried over (or, at the first instant, never there)
            continue
        tomb = None
        if row is None and group is not None and wrote is not None:
            tomb = _tombstone(view, group, instant, key, latest.get(group))
        versions.append(
            KeyVersion(
                instant,
                timeline.completed[instant],
                meta.get("operationType"),
                row,
                tomb,
                baseline=n == 0 and row is not None and row.get(_COMMIT_TIME) != instant,
                extra=dict(meta.get("extraMetadata") or {}),
            )
        )
        last = row
    current = last
    if last is not None and instants and versions[-1].instant != instants[-1]:
        current = _row_at(view, reader, instants[-1], prefix, key)[1]
    complete = bool(instants) and instants[0] == min(timeline.completed)
    complete = complete and not view.has_archive()
    return KeyHistory(key, file_group, oldest, versions, current, complete)
