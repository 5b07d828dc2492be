"""A non-partitioned Hudi table (Copy-on-Write or Merge-on-Read) on the local file system.

This module owns everything under the table folder except the *contents* of the data
files (the merge writes those): ``hoodie.properties``, the timeline of instant files in
``.hoodie/`` (table version 6, layout 1), the bucket -> file slice view, the commit
protocol, rollback of failed writes and cleaning of old slices. Section numbers in
comments refer to the shared ``docs/hudi-format.md``.

Commit protocol of one micro-batch (section 15)::

    table.rollback_pending()                 # once, at start-up
    t = table.new_instant_time()
    table.start_commit(t)                    # T.commit.requested + T.inflight
    ... write <fileId>_<token>_<t>.parquet files via table.base_file_path(...) ...
    table.commit(t, stats, schema, {CHECKPOINT_KEY: "..."})   # T.commit: now visible

A Merge-on-Read table uses the ``deltacommit`` action instead (``T.deltacommit.requested``,
``T.deltacommit.inflight``, ``T.deltacommit``). A delta commit either appends one new log
file to a group's current slice (``engine.hudi.log_file``) or starts a new slice with a
base file (first write of a group, truncate, schema change, or compaction of a slice
whose logs grew); log files are never appended to, so a failed delta commit is undone by
deleting the files it wrote.

One process writes a table at a time; nothing here locks against a second writer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zlib
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from engine.errors import HudiError
from engine.files import atomic_write, fsync
from engine.hudi import archive as ar
from engine.hudi import avro_models as am
from engine.hudi import options as o
from engine.hudi import timeline as tl
from engine.hudi.bucket_index import RULE_JAVA, bucket_of_file_id
from engine.hudi.commit import PARTITION_PATH, WriteStat, to_json_bytes
from engine.hudi.file_slice import BASE_FILE_RE, FileSlice
from engine.hudi.log_file import LogFileName, log_instant
from engine.hudi.options import HoodieOption as H
from engine.hudi.retention import Retention
from engine.hudi.schema import arrow_schema_from_b64, arrow_schema_to_b64, avro_schema_json

HOODIE_DIR = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
#: Entries kept by the per-table caches of parsed commit metadata and schemas.
CACHE_ENTRIES = 256
#: Hudi's ``hoodie.compact.inline.max.delta.commits`` default: the archiver keeps that many
#: delta commits since the last compaction for the compaction trigger to count (MOR).
MAX_DELTA_COMMITS = 5


def _parse_properties(text: str) -> dict[str, str]:
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


def _table_checksum(name: str, database: str = "") -> str:
    """Return ``hoodie.table.checksum``: CRC32 of ``"<database>.<table>"`` (section 2.2)."""
    return str(zlib.crc32(f"{database}.{name}".encode()))


class HudiTable:
    """A non-partitioned, bucket-indexed Hudi COW or MOR table (table version 6)."""

    def __init__(self, base_path: Path, properties: dict[str, str]) -> None:
        """Wrap an existing table; use :meth:`open` or :meth:`create` instead."""
        self.base_path = Path(base_path)
        self.properties = properties
        self._hoodie = self.base_path / HOODIE_DIR
        self._temp = self._hoodie / ".temp"
        # Completed commit files never change: their parsed JSON and schemas are cached,
        # the most recently used CACHE_ENTRIES of each.
        self._metadata_cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._schema_cache: OrderedDict[str, pa.Schema | None] = OrderedDict()
        # The instant file names of .hoodie, listed once and then kept up to date by this
        # object's own writes (one writer per table); start_commit lists again.
        self._names: set[str] | None = None
        # Archive file name -> the (instant, action, state) it holds; read on demand.
        self._archive_index: dict[str, list[tuple[str, str, str]]] = {}
        # Last instant handed out, so two calls in one millisecond still differ.
        self._last_instant = ""

    # ----------------------------------------------------------------- create / open

    @classmethod
    def create(
        cls,
        base_path: Path,
        name: str,
        record_key_fields: list[str],
        precombine_field: str,
        num_buckets: int,
        arrow_schema: pa.Schema,
        table_type: str = o.TABLE_TYPE_COW,
    ) -> HudiTable:
        """Create an empty table: ``.hoodie/hoodie.properties`` and the meta folders.

        Args:
            base_path: Table folder; created if missing, must not hold a table yet.
            name: Table name (a valid Avro name).
            record_key_fields: Record key columns, in key order.
            precombine_field: The single ordering column.
            num_buckets: Buckets of the bucket index; never changes afterwards.
            arrow_schema: Data schema (without ``_hoodie_*`` columns).
            table_type: ``COPY_ON_WRITE`` (default) or ``MERGE_ON_READ``.

        Returns:
            The opened table.

        Raises:
            HudiError: If a table exists there or an argument is invalid.
        """
        base_path = Path(base_path)
        if cls.exists(base_path):
            raise HudiError(f"a Hudi table already exists at {base_path}")
        if not record_key_fields or any("," in f or not f for f in record_key_fields):
            raise HudiError(f"invalid record key fields {record_key_fields!r}")
        if "," in precombine_field or not precombine_field:
            # hudi-rs rejects a comma list (section 2.1).
            raise HudiError(f"precombine field must be one column, got {precombine_field!r}")
        if num_buckets <= 0:
            raise HudiError(f"number of buckets must be positive, got {num_buckets}")
        if table_type not in o.TABLE_TYPES:
            raise HudiError(
                f"table type must be one of {', '.join(o.TABLE_TYPES)}, got {table_type!r}"
            )
        create_schema = avro_schema_json(arrow_schema, name)  # also validates names/types

        props = {
            H.TABLE_NAME.value: name,
            H.TABLE_TYPE.value: table_type,
            H.TABLE_VERSION.value: o.TABLE_VERSION,
            H.TIMELINE_LAYOUT_VERSION.value: o.TIMELINE_LAYOUT_VERSION,
            H.TIMELINE_TIMEZONE.value: "UTC",
            H.RECORD_KEY_FIELDS.value: ",".join(record_key_fields),
            H.PRECOMBINE_FIELD.value: precombine_field,
            H.KEYGENERATOR_CLASS.value: o.NONPARTITIONED_KEYGEN,
            H.BASE_FILE_FORMAT.value: "PARQUET",
            H.POPULATE_META_FIELDS.value: "true",
            H.HIVE_STYLE_PARTITIONING.value: "true",
            H.PARTITIONPATH_URLENCODE.value: "false",
            H.DROP_PARTITION_COLUMNS.value: "false",
            H.ARCHIVELOG_FOLDER.value: "archived",
            H.CREATE_SCHEMA.value: create_schema,
            **o.HUDI_015_DEFAULTS,
            # Unknown keys are ignored by Java and hudi-rs; they keep our settings from
            # create time until the first commit repeats them in its metadata.
            o.BUCKET_NUM_KEY: str(num_buckets),
            o.BUCKET_HASH_FIELD_KEY: ",".join(record_key_fields),
            o.BUCKET_HASH_RULE_KEY: RULE_JAVA,
            o.ARROW_SCHEMA_KEY: arrow_schema_to_b64(arrow_schema),
            # Java validates the checksum on load and writes it last (section 2.2).
            H.TABLE_CHECKSUM.value: _table_checksum(name),
        }
        hoodie = base_path / HOODIE_DIR
        for sub in (
            ".temp",
            ".aux/.bootstrap/.partitions",
            ".aux/.bootstrap/.fileids",
            ".schema",
            "archived",
        ):
            (hoodie / sub).mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        atomic_write(hoodie / PROPERTIES_FILE, text.encode("ascii"))
        return cls(base_path, props)

    @classmethod
    def open(cls, base_path: Path) -> HudiTable:
        """Open an existing table written by this module (or a compatible v6 writer).

        Args:
            base_path: Table folder.

        Returns:
            The table.

        Raises:
            HudiError: If there is no table or it is not a v6 COW/MOR table.
        """
        base_path = Path(base_path)
        path = base_path / HOODIE_DIR / PROPERTIES_FILE
        try:
            props = _parse_properties(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise HudiError(
                f"{base_path} is not a Hudi table ({path} is missing)",
                "point the target at a table folder, or let cdcctl create the table",
            ) from None
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
                    f"{base_path}: {key}={props.get(key)!r}, expected {' or '.join(want)}",
                    "only non-partitioned Copy-on-Write or Merge-on-Read tables of version 6 "
                    "are supported",
                )
        if not props.get(H.TABLE_NAME.value):
            raise HudiError(f"{path} has no {H.TABLE_NAME.value}")
        if props.get(H.PARTITION_FIELDS.value):
            raise HudiError(
                f"{base_path} is partitioned; only non-partitioned tables are supported"
            )
        return cls(base_path, props)

    @staticmethod
    def exists(base_path: Path) -> bool:
        """Return whether ``base_path`` holds a Hudi table (has ``hoodie.properties``)."""
        return (Path(base_path) / HOODIE_DIR / PROPERTIES_FILE).is_file()

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
    def write_action(self) -> str:
        """The action of an ordinary write: ``commit`` (COW) or ``deltacommit`` (MOR)."""
        return "deltacommit" if self.is_mor else "commit"

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
            raise HudiError(f"{self.base_path}: the number of buckets is not recorded")
        return int(value)

    # ----------------------------------------------------------------- timeline

    def _timeline(self) -> tl.Timeline:
        """The timeline: listed once, then kept current by this object's writes."""
        if self._names is None:
            return self._rescan()
        return tl.build(self._names)

    def _rescan(self) -> tl.Timeline:
        timeline = tl.scan(self._hoodie)
        self._names = {n for names in timeline.files.values() for n in names}
        return timeline

    def _added(self, *names: str) -> None:
        if self._names is not None:
            self._names.update(names)

    def _removed(self, *names: str) -> None:
        if self._names is not None:
            self._names.difference_update(names)

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
        for action in tl.WRITE_ACTIONS:
            path = self._hoodie / f"{instant}.{action}"
            try:
                meta = json.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                raise HudiError(f"unreadable commit file {path}: {exc}") from exc
            break
        if meta is None:
            # Archived: a live slice may still refer to it (its state or base instant).
            meta = self._archived_commit_metadata(instant)
        if meta is None:
            raise HudiError(f"{self.base_path}: no completed instant {instant}")
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

    def new_instant_time(self) -> str:
        """Return a new instant time: now in UTC, greater than every instant seen.

        The instant is ``yyyyMMddHHmmssSSS`` and strictly greater than every instant file
        in ``.hoodie`` (any action or state) and than the last one this object handed out;
        if the clock is not ahead, the greatest of those plus 1 ms is used (section 3.1).

        Returns:
            A 17-digit instant.
        """
        candidate = tl.now_instant()
        # The one listing of .hoodie a batch makes: every instant file on disk counts.
        floor = max(self._rescan().latest, self._last_instant)
        if candidate <= floor:
            candidate = tl.instant_plus_1ms(floor)
        self._last_instant = candidate
        return candidate

    # ----------------------------------------------------------------- writing

    def start_commit(
        self,
        instant: str,
        planned: dict[str, dict[str, Any]] | None = None,
        *,
        replace: bool = False,
    ) -> None:
        """Mark ``instant`` as requested and inflight, before any data file is written.

        Args:
            instant: From :meth:`new_instant_time`.
            planned: Optional plan per file id, e.g. ``{file_id: {"numInserts": 3,
                "numUpdateWrites": 1, "prevCommit": "2025..."}}``; it becomes the
                inflight file's write stats (with ``path`` null), as Java records it.
            replace: Start a ``replacecommit`` (for :meth:`commit` with
                ``replaced_file_ids``) instead of a ``commit``.

        Raises:
            HudiError: If the instant is not newer than every instant of the timeline.
        """
        timeline = self._timeline()  # as listed by new_instant_time()
        if not tl.INSTANT_RE.match(instant) or instant <= timeline.latest:
            raise HudiError(
                f"instant {instant} is not newer than the timeline's latest {timeline.latest}",
                "take instants from HudiTable.new_instant_time()",
            )
        stats = []
        for file_id, plan in (planned or {}).items():
            stat = WriteStat(file_id, "", "null", 0, 0, 0, 0, 0, 0).to_json()
            stat["path"] = None
            stat.update(plan)
            stats.append(stat)
        inflight = {
            "partitionToWriteStats": {PARTITION_PATH: stats} if stats else {},
            "compacted": False,
            "extraMetadata": {},
            "operationType": "INSERT_OVERWRITE" if replace else "UPSERT",
        }
        action = "replacecommit" if replace else self.write_action
        if replace:
            inflight["partitionToReplaceFileIds"] = {}
        requested = f"{instant}.{action}.requested"
        inflight_name = tl.inflight_name(instant, action)
        # An empty requested file is what Spark writes for commits, and Java accepts it
        # for replacecommits of non-clustering operations.
        atomic_write(self._hoodie / requested, b"", tmp_dir=self._temp)
        atomic_write(self._hoodie / inflight_name, to_json_bytes(inflight), tmp_dir=self._temp)
        self._added(requested, inflight_name)
        self._last_instant = max(self._last_instant, instant)

    def base_file_path(self, file_name: str) -> Path:
        """Return the absolute path of a base file of this (non-partitioned) table."""
        return self.base_path / file_name

    def commit(
        self,
        instant: str,
        write_stats: list[WriteStat],
        arrow_schema: pa.Schema,
        extra_metadata: dict[str, str],
        operation_type: str = "UPSERT",
        replaced_file_ids: list[str] | None = None,
    ) -> None:
        """Complete ``instant``: its files become visible to every reader at once.

        The data files of ``write_stats`` are fsynced, the partition marker is written
        on the first commit, then ``<T>.commit`` (or ``<T>.replacecommit``) appears by
        an atomic rename: the single visibility point. Finally ``.hoodie/.temp/<T>/`` is
        removed.

        Args:
            instant: An instant started with :meth:`start_commit`.
            write_stats: One stat per base file written by this instant.
            arrow_schema: Data schema (without ``_hoodie_*`` columns) of the files.
            extra_metadata: Extra entries, e.g. the checkpoint under ``CHECKPOINT_KEY``;
                ``schema``, ``cdcctl.arrow_schema`` and the bucket settings are added.
            operation_type: A ``WriteOperationType`` name (``UPSERT``, ``INSERT``, ...).
            replaced_file_ids: File ids this instant replaces (truncate); makes it a
                replacecommit, which needs ``start_commit(..., replace=True)``.

        Raises:
            HudiError: If the instant was not started, a data file is missing, or the
                metadata would change the number of buckets.
        """
        action = self.write_action if replaced_file_ids is None else "replacecommit"
        timeline = self._timeline()
        if instant not in timeline.pending:
            timeline = self._rescan()
        started = timeline.pending.get(instant, [])
        inflight_name = tl.inflight_name(instant, action)
        if inflight_name not in started:
            raise HudiError(
                f"instant {instant} has no {inflight_name}",
                f"call start_commit({instant!r}{', replace=True' if replaced_file_ids else ''}) "
                "before writing data",
            )

        extra = {k: str(v) for k, v in extra_metadata.items()}
        bucket_num = self.properties.get(o.BUCKET_NUM_KEY)
        if bucket_num:
            if extra.setdefault(o.BUCKET_NUM_KEY, bucket_num) != bucket_num:
                raise HudiError(
                    f"commit would change the number of buckets {bucket_num} -> "
                    f"{extra[o.BUCKET_NUM_KEY]}",
                    "the bucket count of a table can never change",
                )
            extra.setdefault(o.BUCKET_HASH_FIELD_KEY, self.properties[o.BUCKET_HASH_FIELD_KEY])
        extra[o.SCHEMA_KEY] = avro_schema_json(arrow_schema, self.name)
        extra[o.ARROW_SCHEMA_KEY] = arrow_schema_to_b64(arrow_schema)
        metadata: dict[str, Any] = {
            "partitionToWriteStats": (
                {PARTITION_PATH: [s.to_json() for s in write_stats]} if write_stats else {}
            ),
            "compacted": False,
            "extraMetadata": extra,
            "operationType": operation_type,
        }
        if replaced_file_ids is not None:
            metadata["partitionToReplaceFileIds"] = (
                {PARTITION_PATH: list(replaced_file_ids)} if replaced_file_ids else {}
            )

        # Data must be durable before the commit that makes it visible.
        for stat in write_stats:
            path = self.base_path / stat.path
            if not path.is_file():
                raise HudiError(f"write stat names a missing data file {path}")
            fsync(path)
        marker = self.base_path / PARTITION_METADATA_FILE
        if not marker.exists():
            text = f"#partition metadata\ncommitTime={instant}\npartitionDepth=0\n"
            atomic_write(marker, text.encode("ascii"))
        if write_stats:
            fsync(self.base_path)

        tmp_dir = self._temp / instant
        atomic_write(self._hoodie / f"{instant}.{action}", to_json_bytes(metadata), tmp_dir=tmp_dir)
        self._added(f"{instant}.{action}")
        self._cache_metadata(instant, metadata)
        shutil.rmtree(tmp_dir, ignore_errors=True)

    # ----------------------------------------------------------------- file slices

    def _list_data_files(
        self,
    ) -> tuple[list[tuple[str, str, str, int]], list[tuple[LogFileName, int, str]]]:
        """Return every base file ``(file_id, instant, name, size)`` and every log file
        ``(name parts, size, instant that wrote it)`` of the table."""
        bases, logs = [], []
        with os.scandir(self.base_path) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(".parquet"):
                    m = BASE_FILE_RE.match(name)
                    if not m:
                        # hudi-rs fails every read on such a file (section 5.3): say so here.
                        raise HudiError(
                            f"{self.base_path / name} is not a Hudi base file name",
                            "remove or rename it: readers refuse tables with foreign parquet files",
                        )
                    bases.append((m.group(1), m.group(3), name, entry.stat().st_size))
                elif ".log." in name:
                    log = LogFileName.parse(name)
                    if log is not None:
                        st = entry.stat()
                        written = log_instant(self.base_path / name, log, st)
                        logs.append((log, st.st_size, written))
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
            result[bucket] = FileSlice(
                file_id,
                instant,
                self.base_file_path(name),
                name,
                log_files=tuple(log.name for log, _, _ in own),
                latest_instant=max([instant, *(written for _, _, written in own)]),
                base_size=size,
                log_size=sum(s for _, s, _ in own),
            )
        return result

    # ----------------------------------------------------------------- recovery

    def rollback_pending(self) -> list[str]:
        """Finish what a crashed writer left on the timeline, then undo every write instant
        that never completed (sections 12.2, 12.3), as Hudi 0.14/0.15 record it.

        First an interrupted rollback or clean is finished from its plan, under its own
        instant (as Hudi's writers resume pending table services), and an interrupted
        archiving run is completed. Then each pending write instant F gets a rollback
        instant R: ``R.rollback.requested`` (``HoodieRollbackPlan``: F and the files it
        wrote), an empty ``R.rollback.inflight``, the files deleted, F's instant files
        deleted (inflight before requested), then ``R.rollback``
        (``HoodieRollbackMetadata``). A crash anywhere leaves R pending, and the next
        start finishes it. Data files go before instant files: deleting the instant files
        first would make leftover files of an instant older than the first commit
        visible (12.1 trap).

        Returns:
            The rolled-back write instants, oldest first.
        """
        timeline = self._rescan()
        rolled: list[str] = []
        for r in timeline.pending_services("rollback"):
            plan = am.deserialize_avro_metadata(
                (self._hoodie / f"{r}.rollback.requested").read_bytes(), am.ROLLBACK_PLAN
            )
            self._execute_rollback(r, plan, timeline)
            rolled.append(plan["instantToRollback"]["commitTime"])
        for c in timeline.pending_services("clean"):
            plan = am.deserialize_avro_metadata(
                (self._hoodie / f"{c}.clean.requested").read_bytes(), am.CLEANER_PLAN
            )
            self._execute_clean(c, plan)
        self.repair_archive()
        timeline = self._timeline()
        if timeline.pending:
            files, logs = self._list_data_files()
            for instant in sorted(timeline.pending):
                names = timeline.pending[instant]
                action = _pending_action(names)
                requests = [
                    _rollback_request(str(self.base_path / f[2])) for f in files if f[1] == instant
                ]
                requests += [
                    _rollback_request(str(self.base_path / log.name))
                    for log, _, written in logs
                    if written == instant
                ]
                plan = {
                    "instantToRollback": {"commitTime": instant, "action": action},
                    "RollbackRequests": requests,
                    "version": am.ROLLBACK_VERSION,
                }
                r = self.new_instant_time()
                requested = f"{r}.rollback.requested"
                atomic_write(
                    self._hoodie / requested,
                    am.serialize_avro_metadata(am.ROLLBACK_PLAN, plan),
                    tmp_dir=self._temp,
                )
                self._added(requested)
                self._execute_rollback(r, plan, self._timeline())
                rolled.append(instant)
                files = [f for f in files if f[1] != instant]
        fsync(self._hoodie)
        return sorted(rolled)

    def _execute_rollback(self, r: str, plan: dict[str, Any], timeline: tl.Timeline) -> None:
        """Run the rollback plan of instant ``r`` (its requested file exists)."""
        started = time.monotonic()
        target = plan["instantToRollback"]
        instant, action = target["commitTime"], target["action"]
        inflight = f"{r}.rollback.inflight"
        if inflight not in timeline.files.get(r, []):
            atomic_write(self._hoodie / inflight, b"", tmp_dir=self._temp)  # empty, as Hudi's
            self._added(inflight)
        paths = [Path(p) for req in plan["RollbackRequests"] or [] for p in req["filesToBeDeleted"]]
        log_sizes: dict[str, int] = {}
        for path in paths:
            try:
                if LogFileName.parse(path.name) is not None:
                    log_sizes[str(path)] = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                pass
        marker = self.base_path / PARTITION_METADATA_FILE
        if (
            marker.exists()
            and _parse_properties(marker.read_text()).get("commitTime") == instant
            and not any(n.endswith(".parquet") for n in os.listdir(self.base_path))
        ):
            marker.unlink()  # the failed write created the partition (12.3 step 1)
        fsync(self.base_path)
        # Inflight before requested: an interrupted rollback still shows the instant as
        # pending, and R stays pending too, so the next start finishes it.
        for name in sorted(
            timeline.pending.get(instant, []), key=lambda n: n.endswith(".requested")
        ):
            (self._hoodie / name).unlink(missing_ok=True)
            self._removed(name)
        shutil.rmtree(self._temp / instant, ignore_errors=True)
        fsync(self._hoodie)
        deleted = [str(p) for p in paths]
        metadata = {
            "startRollbackTime": r,
            "timeTakenInMillis": int((time.monotonic() - started) * 1000),
            "totalFilesDeleted": len(deleted),
            "commitsRollback": [instant],
            "partitionMetadata": {
                PARTITION_PATH: {
                    "partitionPath": PARTITION_PATH,
                    "successDeleteFiles": deleted,
                    "failedDeleteFiles": [],
                    "rollbackLogFiles": {},
                    "logFilesFromFailedCommit": log_sizes,
                }
            },
            "version": am.ROLLBACK_VERSION,
            "instantsRollback": [{"commitTime": instant, "action": action}],
        }
        atomic_write(
            self._hoodie / f"{r}.rollback",
            am.serialize_avro_metadata(am.ROLLBACK_METADATA, metadata),
            tmp_dir=self._temp,
        )
        self._added(f"{r}.rollback")
        self._last_instant = max(self._last_instant, instant, r)

    def clean(self, retain: int | Retention, *, now: datetime | None = None) -> list[Path]:
        """Delete data files no query at an instant ``retain`` keeps readable can need.

        ``retain`` is a :class:`~engine.hudi.retention.Retention` (by hours: Hudi's
        ``KEEP_LATEST_BY_HOURS``; by commits: ``KEEP_LATEST_COMMITS``) or a number of
        commits. A slice is deleted only if a newer committed slice of its group already
        existed at the earliest commit retained (or its group was replaced by then). The
        latest slice of a group is never deleted. As Hudi 0.14/0.15 the clean is an
        instant C: ``C.clean.requested`` and ``C.clean.inflight`` hold the
        ``HoodieCleanerPlan`` (the policy, the earliest commit retained, the files), the
        files are deleted, then ``C.clean`` holds the ``HoodieCleanMetadata``. A clean
        with nothing to delete is not recorded (Hudi schedules none). A crash leaves C
        pending and a readable table; the next start finishes C.

        Args:
            retain: What to keep readable; an int is a number of newest commits (>= 1).
            now: The time the by-hours window ends (default: the clock).

        Returns:
            The deleted files.
        """
        retention = retain if isinstance(retain, Retention) else Retention(commits=retain)
        timeline = self._timeline()
        completed = sorted(timeline.completed)
        found = retention.earliest_retained(completed, now)
        if found is None:
            return []
        oldest_kept = found
        # Groups replaced at or before oldest_kept are invisible to every kept query.
        replaced = self._replaced_file_ids(timeline, upto=oldest_kept)

        doomed_names: list[str] = []
        groups, logs = self._committed_slices(timeline)
        logs_of: dict[tuple[str, str], list[str]] = {}
        for log, _, _ in logs:
            logs_of.setdefault((log.file_id, log.base_instant), []).append(log.name)
        for file_id, slices in groups.items():
            visible = [s for s in slices if s[0] <= oldest_kept]
            # A live group keeps the slice current at oldest_kept and everything newer,
            # so its latest slice always stays. A slice goes with its log files.
            doomed = visible if file_id in replaced else visible[:-1]
            for instant, name, _ in doomed:
                doomed_names += [*logs_of.get((file_id, instant), []), name]
        if not doomed_names:
            return []
        plan = {
            "earliestInstantToRetain": {
                "timestamp": oldest_kept,
                "action": timeline.completed[oldest_kept],
                "state": tl.COMPLETED,
            },
            "lastCompletedCommitTimestamp": completed[-1],
            "policy": retention.policy,
            "filesToBeDeletedPerPartition": {},
            "version": am.CLEAN_VERSION,
            "filePathsToBeDeletedPerPartition": {
                PARTITION_PATH: [
                    {"filePath": str(self.base_file_path(n)), "isBootstrapBaseFile": False}
                    for n in doomed_names
                ]
            },
            "partitionsToBeDeleted": [],
        }
        c = self.new_instant_time()
        content = am.serialize_avro_metadata(am.CLEANER_PLAN, plan)
        atomic_write(self._hoodie / f"{c}.clean.requested", content, tmp_dir=self._temp)
        self._added(f"{c}.clean.requested")
        return self._execute_clean(c, plan)

    def _execute_clean(self, c: str, plan: dict[str, Any]) -> list[Path]:
        """Run the cleaner plan of instant ``c`` (its requested file exists)."""
        started = time.monotonic()
        inflight = self._hoodie / f"{c}.clean.inflight"
        if not inflight.exists():
            # Hudi's inflight clean holds the plan again.
            content = am.serialize_avro_metadata(am.CLEANER_PLAN, plan)
            atomic_write(inflight, content, tmp_dir=self._temp)
            self._added(inflight.name)
        paths = [
            Path(info["filePath"])
            for infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).values()
            for info in infos
        ]
        for path in paths:
            path.unlink(missing_ok=True)
        if paths:
            fsync(self.base_path)
        names = [p.name for p in paths]
        ectr = plan.get("earliestInstantToRetain") or {}
        metadata = {
            "startCleanTime": c,
            "timeTakenInMillis": int((time.monotonic() - started) * 1000),
            "totalFilesDeleted": len(paths),
            "earliestCommitToRetain": ectr.get("timestamp") or "",
            "lastCompletedCommitTimestamp": plan.get("lastCompletedCommitTimestamp") or "",
            "partitionMetadata": {
                PARTITION_PATH: {
                    "partitionPath": PARTITION_PATH,
                    "policy": plan["policy"],
                    "deletePathPatterns": names,
                    "successDeleteFiles": names,
                    "failedDeleteFiles": [],
                    "isPartitionDeleted": False,
                }
            },
            "version": am.CLEAN_VERSION,
            "bootstrapPartitionMetadata": {},
        }
        atomic_write(
            self._hoodie / f"{c}.clean",
            am.serialize_avro_metadata(am.CLEAN_METADATA, metadata),
            tmp_dir=self._temp,
        )
        self._added(f"{c}.clean")
        self._last_instant = max(self._last_instant, c)
        return paths

    # ----------------------------------------------------------------- archiving

    def _clean_metadata(self, instant: str) -> dict[str, Any]:
        data = (self._hoodie / f"{instant}.clean").read_bytes()
        return am.deserialize_avro_metadata(data, am.CLEAN_METADATA)

    def instants_to_archive(
        self, keep_min: int, keep_max: int, retain_from: str | None = None
    ) -> list[str]:
        """The instants Hudi 0.14/0.15's ``HoodieTimelineArchiver`` would archive now.

        Completed write instants, when more than ``keep_max`` are active, oldest first and
        leaving ``keep_min``, but never at or after: the greatest completed write before
        the oldest pending write (or that pending write), the earliest commit the last
        clean retained (stricter than Hudi, which bounds only replacecommits by it), the
        oldest replacecommit not older than that (Hudi's clustering
        rule; the first replacecommit when nothing was cleaned), a replacecommit whose
        replaced file groups still have files, and (Merge-on-Read) the oldest of the
        delta commits Hudi's compaction trigger counts, and ``retain_from`` (the earliest
        commit the cleaning policy retains now: what the next clean keeps readable).
        Completed clean and rollback instants are archived by their own count: past
        ``keep_max`` of one action, all but the newest ``keep_min``.
        """
        timeline = self._timeline()
        writes = sorted(timeline.completed)
        chosen: list[str] = []
        for action in tl.SERVICE_ACTIONS:
            done = timeline.completed_services(action)
            if len(done) > keep_max:
                chosen += done[: len(done) - keep_min]
        if len(writes) > keep_max:
            bounds: list[str] = []
            if timeline.pending:
                oldest_pending = min(timeline.pending)
                before = [w for w in writes if w < oldest_pending]
                bounds.append(before[-1] if before else oldest_pending)
            cleans = timeline.completed_services("clean")
            ectr = self._clean_metadata(cleans[-1])["earliestCommitToRetain"] if cleans else ""
            if ectr:
                bounds.append(ectr)
            if retain_from:
                bounds.append(retain_from)
            replaces = [w for w in writes if timeline.completed[w] == "replacecommit"]
            if replaces:
                later = [w for w in replaces if w >= ectr] if cleans else replaces
                if later:
                    bounds.append(later[0])
                live = self._data_file_ids()
                for w in replaces:
                    ids = self._replaced_ids_of(w)
                    if ids & live:
                        bounds.append(w)
                        break
            if self.is_mor:
                bounds += _compaction_bound(timeline)
            limit = min(bounds, default=None)
            candidates = [w for w in writes if limit is None or w < limit]
            chosen += candidates[: len(writes) - keep_min]
        return sorted(chosen)

    def _data_file_ids(self) -> set[str]:
        bases, logs = self._list_data_files()
        return {b[0] for b in bases} | {log.file_id for log, _, _ in logs}

    def _replaced_ids_of(self, instant: str) -> set[str]:
        meta = self.commit_metadata(instant)
        return {i for ids in (meta.get("partitionToReplaceFileIds") or {}).values() for i in ids}

    def archive(
        self,
        keep_min: int,
        keep_max: int,
        retention_hours: float = 0,
        keep_instants: set[str] | frozenset[str] = frozenset(),
        retain_from: str | None = None,
    ) -> list[str]:
        """Move old instants into a new archive file, as Hudi 0.14/0.15 archive them.

        The instants of :meth:`instants_to_archive`, every file of each (requested,
        inflight, completed), become ``HoodieArchivedMetaEntry`` records of a new
        ``.hoodie/archived/.commits_.archive.<N>_1-0-1`` log file, written whole and
        fsynced before anything is deleted; then their files leave ``.hoodie/`` in Hudi's
        order: every requested and inflight file first, then the completed files oldest
        first (a crash between leaves a readable timeline; :meth:`repair_archive`
        finishes the deletion on the next start).

        Beyond Hudi: archive files whose newest instant is older than ``retention_hours``
        (0: keep forever) are deleted, unless they hold one of ``keep_instants`` (the
        instants live file slices refer to, whose metadata the writer reads back).

        Returns:
            The archived instants.
        """
        if not 1 <= keep_min < keep_max:
            raise HudiError(f"need 1 <= keep_min < keep_max, got {keep_min}, {keep_max}")
        instants = self.instants_to_archive(keep_min, keep_max, retain_from)
        if instants:
            timeline = self._timeline()
            names = [
                n for t in instants for n in sorted(timeline.files.get(t, []), key=_state_rank)
            ]
            records = [ar.meta_entry(self._hoodie / n) for n in names]
            archived = self._hoodie / ar.ARCHIVE_DIR
            archived.mkdir(exist_ok=True)
            versions = ar.list_archives(archived)
            name = ar.archive_file_name(1 + max((v for v, _, _ in versions), default=0))
            atomic_write(archived / name, ar.encode_archive(records), tmp_dir=self._temp)
            self._archive_index[name] = [(t, a, st) for t, a, st in _entries_of(records)]
            self._delete_instant_files(names)
        if retention_hours > 0:
            self._expire_archives(retention_hours, keep_instants)
        return instants

    def _delete_instant_files(self, names: list[str]) -> None:
        pending = [n for n in names if n.endswith((".requested", ".inflight"))]
        completed = sorted((n for n in names if n not in pending), key=lambda n: n.split(".")[0])
        for name in [*pending, *completed]:
            (self._hoodie / name).unlink(missing_ok=True)
            self._removed(name)
        fsync(self._hoodie)

    def repair_archive(self) -> list[str]:
        """Finish an archiving run a crash interrupted: instants the newest archive file
        holds that still have files in ``.hoodie/`` lose them (Hudi's order). Returns the
        file names deleted."""
        archived = self._hoodie / ar.ARCHIVE_DIR
        for stale in self._temp.glob(".*.tmp") if self._temp.is_dir() else []:
            stale.unlink(missing_ok=True)
        versions = ar.list_archives(archived)
        if not versions:
            return []
        entries = self._archive_entries(versions[-1][1])
        instants = {t for t, _, _ in entries}
        timeline = self._timeline()
        names = [n for t in sorted(instants) for n in timeline.files.get(t, [])]
        if names:
            self._delete_instant_files(names)
        return names

    def _archive_entries(self, name: str) -> list[tuple[str, str, str]]:
        found = self._archive_index.get(name)
        if found is None:
            path = self._hoodie / ar.ARCHIVE_DIR / name
            found = [(e.instant, e.action, e.state) for e in ar.read_archive(path)]
            self._archive_index[name] = found
        return found

    def _archived_commit_metadata(self, instant: str) -> dict[str, Any] | None:
        """The commit metadata of an archived completed write instant (None if absent)."""
        archived = self._hoodie / ar.ARCHIVE_DIR
        for _, name, _ in reversed(ar.list_archives(archived)):
            entries = self._archive_entries(name)
            if not any(t == instant and st == tl.COMPLETED for t, _, st in entries):
                continue
            for entry in ar.read_archive(archived / name):
                if entry.instant != instant or entry.state != tl.COMPLETED:
                    continue
                record = entry.record
                avro = record.get("hoodieReplaceCommitMetadata") or record.get(
                    "hoodieCommitMetadata"
                )
                if avro is not None:
                    return ar.commit_from_avro(avro)
        return None

    def _expire_archives(self, retention_hours: float, keep: set[str] | frozenset[str]) -> None:
        cutoff = tl.instant_at(datetime.now(UTC) - timedelta(hours=retention_hours))
        archived = self._hoodie / ar.ARCHIVE_DIR
        removed = False
        for _, name, _ in ar.list_archives(archived):
            instants = {t for t, _, _ in self._archive_entries(name)}
            if not instants or max(instants) >= cutoff:
                break  # files are in time order: the rest is newer
            if instants & keep:
                continue
            (archived / name).unlink(missing_ok=True)
            self._archive_index.pop(name, None)
            removed = True
        if removed:
            fsync(archived)


def _state_rank(name: str) -> int:
    return 0 if name.endswith(".requested") else 1 if name.endswith(".inflight") else 2


def _entries_of(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["commitTime"], r["actionType"], r["actionState"]) for r in records]


def _pending_action(names: list[str]) -> str:
    for name in names:
        rest = tl.INSTANT_RE.match(name).group(2) or ""  # type: ignore[union-attr]
        if rest == "inflight":
            return "commit"
        return rest.rsplit(".", 1)[0]
    return "commit"


def _rollback_request(path: str) -> dict[str, Any]:
    """A ``HoodieRollbackRequest`` deleting one file, the shape Hudi 0.15 gives a base
    file of a failed write (empty file id and base instant)."""
    return {
        "partitionPath": PARTITION_PATH,
        "fileId": "",
        "latestBaseInstant": "",
        "filesToBeDeleted": [path],
        "logBlocksToBeDeleted": {},
    }


def _compaction_bound(timeline: tl.Timeline) -> list[str]:
    """Hudi's ``CompactionUtils.getOldestInstantToRetainForCompaction`` with its default
    trigger (``NUM_COMMITS``, ``MAX_DELTA_COMMITS``): keep the delta commits since the
    last compaction (a ``commit`` or ``replacecommit``) that its trigger counts."""
    compactions = [t for t, a in timeline.completed.items() if a != "deltacommit"]
    deltas = sorted(
        [t for t, a in timeline.completed.items() if a == "deltacommit"]
        + [t for t, names in timeline.pending.items() if _pending_action(names) == "deltacommit"]
    )
    if compactions:
        last = max(compactions)
        deltas = [t for t in deltas if t > last]
        latest = last
    elif deltas:
        latest = deltas[0]
    else:
        return []
    if len(deltas) < MAX_DELTA_COMMITS:
        return [latest]
    return [deltas[len(deltas) - MAX_DELTA_COMMITS]]
