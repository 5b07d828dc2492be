"""A read-only view of a non-partitioned Hudi table (Copy-on-Write or Merge-on-Read).

:class:`HudiView` is what readers get: ``hoodie.properties`` (name, keys, type), the
timeline of instants (listed once, :meth:`HudiView.rescan` lists again), each completed
commit's metadata and extra metadata (cdcctl's checkpoint and bookkeeping), the schema of
an instant, the latest file slice of every file group (as Hudi's readers see them), the
oldest instant still readable after cleaning and archiving, and the metadata of archived
commits. It writes nothing. The writer's table (:class:`~engine.hudi.table.HudiTable`) is
this view plus the commit protocol and the table services; only
:class:`~engine.hudi.writer.HudiWriter` holds one. Section numbers in comments refer to
the shared ``docs/hudi-format.md``.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import numpy as np
import pyarrow as pa

from engine.errors import HudiError
from engine.hudi import archive as ar
from engine.hudi import avro_models as am
from engine.hudi import options as o
from engine.hudi import timeline as tl
from engine.hudi.bucket_index import RULE_LEGACY, bucket_ids, bucket_of_file_id
from engine.hudi.file_slice import BASE_FILE_RE, FileSlice
from engine.hudi.layout import HOODIE_DIR, PROPERTIES_FILE, parse_properties
from engine.hudi.log_file import LogFileName, log_instant, log_instant_in
from engine.hudi.options import HoodieOption as H
from engine.hudi.schema import arrow_schema_from_b64
from engine.storage import LocalStorage, ObjectInfo, Storage, StoreUnavailable

#: Entries kept by the per-table caches of parsed commit metadata and schemas.
CACHE_ENTRIES = 256


class HudiView:
    """A non-partitioned, bucket-indexed Hudi COW or MOR table (version 6), read-only."""

    def __init__(self, base_path: Path | Storage, properties: dict[str, str]) -> None:
        """Wrap an existing table; use :meth:`open` instead."""
        if isinstance(base_path, Storage):
            #: The table's files (a store rooted at the table's folder).
            self.store: Storage = base_path
            self._local = base_path.root if isinstance(base_path, LocalStorage) else None
        else:
            self._local = Path(base_path)
            self.store = LocalStorage(self._local)
        self.properties = properties
        # Completed commit files never change: their parsed JSON and schemas are cached,
        # the most recently used CACHE_ENTRIES of each.
        self._metadata_cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._schema_cache: OrderedDict[str, pa.Schema | None] = OrderedDict()
        # The instant file names of .hoodie, listed once and then kept up to date by this
        # object's own writes if it is the writer's table (one writer per table);
        # rescan() and new_instant_time() list again.
        self._names: set[str] | None = None
        # Archive file name -> the (instant, action, state) it holds; read on demand.
        self._archive_index: dict[str, list[tuple[str, str, str]]] = {}
        # On object storage: each data file's version (ETag) as last listed.
        self._versions: dict[str, str] = {}
        self.timeline_written: datetime | None = None

    @property
    def base_path(self) -> Path:
        """The table's folder (a table on object storage has none: see :attr:`store`)."""
        if self._local is None:
            raise HudiError(
                f"{self.store.url} is on object storage: its files are read through the "
                "table's store, not as a local folder"
            )
        return self._local

    @property
    def _hoodie(self) -> Path:
        return self.base_path / HOODIE_DIR

    @property
    def location(self) -> str:
        """Where the table is, for messages: its folder or its ``s3://`` URL."""
        return self.store.url

    # ----------------------------------------------------------------- open

    @classmethod
    def open(cls, base_path: Path | Storage) -> Self:
        """Open an existing table written by this module (or a compatible v6 writer).

        Args:
            base_path: Table folder, or a store rooted at the table (object storage).

        Returns:
            The table.

        Raises:
            HudiError: If there is no table or it is not a v6 COW/MOR table.
        """
        store = base_path if isinstance(base_path, Storage) else LocalStorage(Path(base_path))
        where = store.url
        path = f"{where}/{HOODIE_DIR}/{PROPERTIES_FILE}"
        try:
            text = store.read(f"{HOODIE_DIR}/{PROPERTIES_FILE}").decode("utf-8")
            props = parse_properties(text)
        except FileNotFoundError:
            raise HudiError(
                f"{where} is not a Hudi table ({path} is missing)",
                "point the target at a table folder, or let cdcctl create the table",
            ) from None
        except StoreUnavailable:
            raise  # the store, not the table: retried
        except (OSError, UnicodeDecodeError) as exc:
            raise HudiError(f"cannot read {path}: {exc}") from exc
        expected = {
            H.TABLE_TYPE.value: o.TABLE_TYPES,
            H.TABLE_VERSION.value: (o.TABLE_VERSION,),
            H.TIMELINE_LAYOUT_VERSION.value: (o.TIMELINE_LAYOUT_VERSION,),
        }
        for key, want in expected.items():
            if props.get(key, "").upper() not in want:
                raise HudiError(
                    f"{where}: {key}={props.get(key)!r}, expected {' or '.join(want)}",
                    "only non-partitioned Copy-on-Write or Merge-on-Read tables of version 6 "
                    "are supported",
                )
        if not props.get(H.TABLE_NAME.value):
            raise HudiError(f"{path} has no {H.TABLE_NAME.value}")
        if props.get(H.PARTITION_FIELDS.value):
            raise HudiError(f"{where} is partitioned; only non-partitioned tables are supported")
        return cls(base_path if isinstance(base_path, Storage) else Path(base_path), props)

    @staticmethod
    def exists(base_path: Path | Storage) -> bool:
        """Return whether ``base_path`` holds a Hudi table (has ``hoodie.properties``)."""
        if isinstance(base_path, Storage):
            return base_path.head(f"{HOODIE_DIR}/{PROPERTIES_FILE}") is not None
        return (Path(base_path) / HOODIE_DIR / PROPERTIES_FILE).is_file()

    @staticmethod
    def tables_under(target: Path | Storage) -> list[str]:
        """Names of the Hudi tables in ``target`` (a folder or a bucket's prefix), sorted;
        none when it is no folder."""
        store = target if isinstance(target, Storage) else LocalStorage(Path(target))
        return [name for name in store.folders() if HudiView.exists(store.under(name))]

    def reader(self) -> Any:
        """hudi-rs's reader of this table (``hudi.HudiTable``): an independent Hudi
        implementation, given the store's location and options."""
        import hudi

        return hudi.HudiTable(self.location, options=self.store.reader_options() or None)

    # ----------------------------------------------------------------- config

    @property
    def name(self) -> str:
        """The table name."""
        return self.properties[H.TABLE_NAME.value]

    @property
    def record_key_fields(self) -> list[str]:
        """Record key columns, in key order."""
        return self.properties.get(H.RECORD_KEY_FIELDS.value, "").split(",")

    @property
    def is_mor(self) -> bool:
        """Whether this is a Merge-on-Read table (delta commits, log files)."""
        return self.properties.get(H.TABLE_TYPE.value, "").upper() == o.TABLE_TYPE_MOR

    @property
    def table_type(self) -> str:
        """``COPY_ON_WRITE`` or ``MERGE_ON_READ``, as ``hoodie.properties`` says."""
        return self.properties.get(H.TABLE_TYPE.value, "")

    @property
    def precombine_field(self) -> str:
        """The ordering column."""
        return self.properties.get(H.PRECOMBINE_FIELD.value, "")

    @property
    def num_buckets(self) -> int:
        """Number of buckets of the bucket index."""
        value = self.latest_extra_metadata().get(o.BUCKET_NUM_KEY) or self.properties.get(
            o.BUCKET_NUM_KEY
        )
        if not value:
            raise HudiError(
                f"{self.location}: the number of buckets is not recorded",
                "a table cdcctl wrote records it in hoodie.properties and every commit; "
                "this one was written by another writer or its properties were edited",
            )
        return int(value)

    def bucket_ids(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The bucket of each record key (Hudi's hashing, so Java writers agree)."""
        fields = self.properties.get(o.BUCKET_HASH_FIELD_KEY) or ",".join(self.record_key_fields)
        rule = self.properties.get(o.BUCKET_HASH_RULE_KEY, RULE_LEGACY)
        return bucket_ids(keys, self.num_buckets, fields.split(","), rule)

    def bucket_of(self, key: str) -> int:
        """The bucket of one record key."""
        return int(self.bucket_ids(pa.array([key], pa.string()))[0])

    # ----------------------------------------------------------------- timeline

    def _timeline(self) -> tl.Timeline:
        """The timeline: listed once, then kept current by this object's writes."""
        if self._names is None:
            return self._rescan()
        return tl.build(self._names)

    def _rescan(self) -> tl.Timeline:
        if self._local is not None:
            timeline = tl.scan(self._hoodie)
        else:
            tl.SCANS += 1
            entries = self.store.entries(HOODIE_DIR)
            timeline = tl.build(o.path.rsplit("/", 1)[-1] for o in entries)
            #: When the store last wrote a timeline file (its clock, whole seconds on S3).
            self.timeline_written = max((o.modified for o in entries), default=None)
        self._names = {n for names in timeline.files.values() for n in names}
        return timeline

    def timeline(self) -> tl.Timeline:
        """The table's timeline as this object knows it (listed on first use)."""
        return self._timeline()

    def rescan(self) -> tl.Timeline:
        """List ``.hoodie`` again: the timeline as it is now (a reader of a table another
        process writes calls this before each look)."""
        return self._rescan()

    def completed_instants(self) -> list[str]:
        """Return the completed commit/deltacommit/replacecommit instants, oldest first
        (listing ``.hoodie``; :meth:`timeline` gives this object's current view)."""
        return sorted(self._rescan().completed)

    def pending_instants(self) -> list[str]:
        """Return write instants that have requested/inflight files but no completed file."""
        return sorted(self._rescan().pending)

    def commit_metadata(self, instant: str) -> dict[str, Any]:
        """Return the parsed JSON of a completed commit or replacecommit.

        Args:
            instant: A completed instant.

        Returns:
            The commit metadata (``partitionToWriteStats``, ``extraMetadata``, ...).

        Raises:
            HudiError: If the instant is not completed or its file is unreadable.
        """
        cached = self._metadata_cache.get(instant)
        if cached is not None:
            self._metadata_cache.move_to_end(instant)
            return cached
        meta = None
        actions: tuple[str, ...] = tl.WRITE_ACTIONS
        names = self._names
        if names is not None:
            # The listed one first: one read instead of up to three (a request each on
            # object storage, where a miss costs as much as a hit).
            actions = tuple(sorted(actions, key=lambda a: f"{instant}.{a}" not in names))
        for action in actions:
            name = f"{HOODIE_DIR}/{instant}.{action}"
            try:
                meta = json.loads(self.store.read(name))
            except FileNotFoundError:
                continue
            except StoreUnavailable:
                raise
            except (OSError, ValueError) as exc:
                raise HudiError(f"unreadable commit file {self.location}/{name}: {exc}") from exc
            break
        if meta is None:
            # Archived: a live slice may still refer to it (its state or base instant).
            meta = self._archived_commit_metadata(instant)
        if meta is None:
            raise HudiError(f"{self.location}: no completed instant {instant}")
        self._cache_metadata(instant, meta)
        return meta

    def compacted_groups(self, instant: str) -> int:
        """File groups a completed write gave a new base file over an earlier slice of
        theirs (for a Merge-on-Read delta commit: the groups it compacted)."""
        stats = self.commit_metadata(instant).get("partitionToWriteStats") or {}
        return sum(
            1
            for group in stats.values()
            for stat in group or []
            if stat.get("baseFile") is None
            and str(stat.get("path") or "").endswith(".parquet")
            and stat.get("prevCommit") not in (None, "null")
        )

    def _cache_metadata(self, instant: str, meta: dict[str, Any]) -> None:
        self._metadata_cache[instant] = meta
        self._metadata_cache.move_to_end(instant)
        while len(self._metadata_cache) > CACHE_ENTRIES:
            self._metadata_cache.popitem(last=False)

    def extra_metadata(self, instant: str) -> dict[str, str]:
        """The ``extraMetadata`` of a completed write instant (cdcctl's bookkeeping
        lives there: checkpoint, counts, schema state, source table)."""
        return dict(self.commit_metadata(instant).get("extraMetadata") or {})

    def latest_extra_metadata(self) -> dict[str, str]:
        """Return ``extraMetadata`` of the newest completed commit ({} if none)."""
        completed = sorted(self._timeline().completed)
        if not completed:
            return {}
        return dict(self.commit_metadata(completed[-1]).get("extraMetadata") or {})

    def checkpoint(self) -> str | None:
        """Return the source checkpoint of the newest completed commit carrying one.

        Returns:
            The ``deltastreamer.checkpoint.key`` value, or None if no commit has one.
        """
        for instant in reversed(sorted(self._timeline().completed)):
            value = (self.commit_metadata(instant).get("extraMetadata") or {}).get(o.CHECKPOINT_KEY)
            if value:
                return value
        return None

    def arrow_schema(self) -> pa.Schema | None:
        """Return the data schema of the newest completed commit, else the create schema."""
        for instant in reversed(sorted(self._timeline().completed)):
            b64 = (self.commit_metadata(instant).get("extraMetadata") or {}).get(o.ARROW_SCHEMA_KEY)
            if b64:
                return arrow_schema_from_b64(b64)
        b64 = self.properties.get(o.ARROW_SCHEMA_KEY)
        return arrow_schema_from_b64(b64) if b64 else None

    def schema_at(self, instant: str) -> pa.Schema | None:
        """Return the data schema recorded by a completed instant (None if it has none)."""
        if instant in self._schema_cache:
            self._schema_cache.move_to_end(instant)
            return self._schema_cache[instant]
        try:
            extra = self.commit_metadata(instant).get("extraMetadata") or {}
        except HudiError:  # foreign, or archived and its archive expired: unknown
            extra = {}
        b64 = extra.get(o.ARROW_SCHEMA_KEY)
        schema = arrow_schema_from_b64(b64) if b64 else None
        self._schema_cache[instant] = schema
        while len(self._schema_cache) > CACHE_ENTRIES:
            self._schema_cache.popitem(last=False)
        return schema

    def base_file_path(self, file_name: str) -> Path:
        """Return the absolute path of a base file of this (non-partitioned) table."""
        return self.base_path / file_name

    # ----------------------------------------------------------------- file slices

    def _list_data_files(
        self,
    ) -> tuple[list[tuple[str, str, str, int]], list[tuple[LogFileName, int, str]]]:
        """Return every base file ``(file_id, instant, name, size)`` and every log file
        ``(name parts, size, instant that wrote it)`` of the table."""
        bases, logs = [], []
        found: list[tuple[str, int, os.DirEntry[str] | ObjectInfo]]
        if self._local is None:
            listed = self.store.entries()
            # What each object is as listed: a redo writes a rolled-back log's name again.
            self._versions = {o.path: o.version for o in listed}
            found = [(o.path, o.size, o) for o in listed]
        else:
            with os.scandir(self._local) as entries:
                found = [(e.name, 0, e) for e in entries]
        for name, size, entry in found:
            if name.endswith(".parquet"):
                m = BASE_FILE_RE.match(name)
                if not m:
                    # hudi-rs fails every read on such a file (section 5.3): say so here.
                    raise HudiError(
                        f"{self.location}/{name} is not a Hudi base file name",
                        "remove or rename it: readers refuse tables with foreign parquet files",
                    )
                if isinstance(entry, os.DirEntry):
                    size = entry.stat().st_size
                bases.append((m.group(1), m.group(3), name, size))
            elif ".log." in name:
                log = LogFileName.parse(name)
                if log is None:
                    continue
                if isinstance(entry, os.DirEntry):
                    st = entry.stat()
                    written = log_instant(self.base_path / name, log, st)
                    size = st.st_size
                else:
                    written = log_instant_in(self.store, entry, log)
                logs.append((log, size, written))
        return bases, logs

    def _replaced_file_ids(self, timeline: tl.Timeline, upto: str | None = None) -> set[str]:
        """Return file ids replaced by completed replacecommits (at or before ``upto``)."""
        replaced: set[str] = set()
        for instant, action in timeline.completed.items():
            if action == "replacecommit" and (upto is None or instant <= upto):
                meta = self.commit_metadata(instant)
                for ids in (meta.get("partitionToReplaceFileIds") or {}).values():
                    replaced.update(ids)
        return replaced

    def _committed_slices(
        self, timeline: tl.Timeline
    ) -> tuple[dict[str, list[tuple[str, str, int]]], list[tuple[LogFileName, int, str]]]:
        """Return file id -> committed ``(instant, name, size)`` base slices, oldest first,
        and the committed log files."""
        # Section 4.2: a slice counts if its instant completed, or if it predates the
        # whole write timeline: readers take it for archived history (a Java writer may
        # archive old instants). hudi-rs 0.5.0 starts that timeline at the earliest
        # commit/replacecommit/deltacommit in ANY state (probed: an old pending instant
        # hides archived slices). We follow it so the merge builds on what readers show.
        first = timeline.first
        bases, logs = self._list_data_files()
        groups: dict[str, list[tuple[str, str, int]]] = {}
        for file_id, instant, name, size in bases:
            if instant in timeline.completed or instant < first:
                groups.setdefault(file_id, []).append((instant, name, size))
        for slices in groups.values():
            slices.sort()
            for a, b in zip(slices, slices[1:], strict=False):
                if a[0] == b[0]:
                    # Fatal for hudi-rs (section 12.1); refuse to build on it.
                    raise HudiError(
                        f"two base files of one file group share instant {a[0]}: {a[1]}, {b[1]}",
                        "delete the file not named in that instant's commit metadata",
                    )
        committed_logs = [
            (log, size, instant)
            for log, size, instant in logs
            if instant in timeline.completed or instant < first
        ]
        return groups, committed_logs

    def file_groups(self, *, listed: bool = True) -> dict[int, FileSlice]:
        """Return the latest committed slice of every live file group, by bucket.

        As readers do (section 4.2), slices of pending instants and of unknown instants
        not older than the whole write timeline are ignored, and so are file groups
        replaced by a completed replacecommit. A slice's log files are those written by
        completed instants for its base instant. One listing of the table folder is made,
        and one of ``.hoodie`` unless ``listed`` is false (the writer's own view then).

        Returns:
            Bucket number -> latest slice.

        Raises:
            HudiError: On a foreign parquet file, a non-bucket file id, or two live file
                groups in one bucket.
        """
        timeline = self._rescan() if listed else self._timeline()
        replaced = self._replaced_file_ids(timeline)
        groups, logs = self._committed_slices(timeline)
        logs_of: dict[tuple[str, str], list[tuple[LogFileName, int, str]]] = {}
        for log, size, written in logs:
            logs_of.setdefault((log.file_id, log.base_instant), []).append((log, size, written))
        result: dict[int, FileSlice] = {}
        for file_id, slices in groups.items():
            if file_id in replaced:
                continue
            instant, name, size = slices[-1]
            bucket = bucket_of_file_id(file_id)
            if bucket in result:
                raise HudiError(
                    f"bucket {bucket} has two file groups: {result[bucket].file_id}, {file_id}",
                    "a bucket-indexed table allows one file group per bucket",
                )
            own = sorted(logs_of.get((file_id, instant), []), key=lambda x: x[0].version)
            logs_named = tuple(log.name for log, _, _ in own)
            result[bucket] = FileSlice(
                file_id,
                instant,
                None if self._local is None else self._local / name,
                name,
                log_files=logs_named,
                latest_instant=max([instant, *(written for _, _, written in own)]),
                base_size=size,
                log_size=sum(s for _, s, _ in own),
                versions=(
                    ()
                    if self._local is not None
                    else tuple((n, self._versions.get(n, "")) for n in (name, *logs_named))
                ),
            )
        return result

    # ----------------------------------------------------------------- cleaning, as read

    def _clean_metadata(self, instant: str) -> dict[str, Any]:
        """The ``HoodieCleanMetadata`` of a completed clean."""
        data = self.store.read(f"{HOODIE_DIR}/{instant}.clean")
        return am.deserialize_avro_metadata(data, am.CLEAN_METADATA)

    def _clean_plan(self, instant: str) -> dict[str, Any]:
        """The ``HoodieCleanerPlan`` of a clean (its requested file)."""
        data = self.store.read(f"{HOODIE_DIR}/{instant}.clean.requested")
        return am.deserialize_avro_metadata(data, am.CLEANER_PLAN)

    def oldest_readable(self) -> str | None:
        """The oldest instant a reader can still be given, None if there is none.

        The later of the first completed write instant on the active timeline (hudi-rs
        does not read the archived one) and the earliest commit retained by the newest
        clean, pending or completed (a pending clean may already have deleted files).
        """
        return self.readable_from()[0]

    def readable_from(self) -> tuple[str | None, str | None]:
        """:meth:`oldest_readable`, and the cleaning policy (Hudi's name, as the clean
        recorded it) when a clean's earliest commit retained is what bounds it."""
        timeline = self.timeline()
        if not timeline.completed:
            return None, None
        oldest, policy = min(timeline.completed), None
        for instant, (action, state) in timeline.services.items():
            if action != "clean":
                continue
            try:
                if state == tl.COMPLETED:
                    meta = self._clean_metadata(instant)
                    retained = meta.get("earliestCommitToRetain")
                    parts = list((meta.get("partitionMetadata") or {}).values())
                    used = parts[0].get("policy") if parts else None
                else:
                    plan = self._clean_plan(instant)
                    retained = (plan.get("earliestInstantToRetain") or {}).get("timestamp")
                    used = plan.get("policy")
            except FileNotFoundError:
                continue  # archived since the listing: a newer clean stays active
            except StoreUnavailable:
                raise
            except (OSError, ValueError) as exc:
                raise HudiError(f"{self.location}: unreadable clean {instant}: {exc}") from exc
            if retained and retained > oldest:
                oldest, policy = retained, used
        return oldest, policy

    # ----------------------------------------------------------------- archived instants

    def has_archive(self) -> bool:
        """Whether instants were archived (``.hoodie/archived`` holds files)."""
        return bool(self.store.entries(f"{HOODIE_DIR}/{ar.ARCHIVE_DIR}"))

    def _read_archive(self, name: str) -> Iterator[ar.ArchivedEntry]:
        path = f"{HOODIE_DIR}/{ar.ARCHIVE_DIR}/{name}"
        return ar.read_archive(f"{self.location}/{path}", self.store.read(path))

    def _archive_entries(self, name: str) -> list[tuple[str, str, str]]:
        found = self._archive_index.get(name)
        if found is None:
            found = [(e.instant, e.action, e.state) for e in self._read_archive(name)]
            self._archive_index[name] = found
        return found

    def _archived_commit_metadata(self, instant: str) -> dict[str, Any] | None:
        """The commit metadata of an archived completed write instant (None if absent)."""
        for _, name, _ in reversed(ar.archives_in(self.store)):
            entries = self._archive_entries(name)
            if not any(t == instant and st == tl.COMPLETED for t, _, st in entries):
                continue
            for entry in self._read_archive(name):
                if entry.instant != instant or entry.state != tl.COMPLETED:
                    continue
                record = entry.record
                avro = record.get("hoodieReplaceCommitMetadata") or record.get(
                    "hoodieCommitMetadata"
                )
                if avro is not None:
                    return ar.commit_from_avro(avro)
        return None
