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
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from engine.errors import HudiError
from engine.files import atomic_write, fsync
from engine.hudi import options as o
from engine.hudi import timeline as tl
from engine.hudi.bucket_index import RULE_JAVA, bucket_of_file_id
from engine.hudi.commit import PARTITION_PATH, WriteStat, to_json_bytes
from engine.hudi.file_slice import BASE_FILE_RE, FileSlice
from engine.hudi.log_file import LogFileName, log_instant
from engine.hudi.options import HoodieOption as H
from engine.hudi.schema import arrow_schema_from_b64, arrow_schema_to_b64, avro_schema_json

HOODIE_DIR = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"


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
        # Completed commit files never change, so their parsed JSON is cached forever.
        self._metadata_cache: dict[str, dict[str, Any]] = {}
        self._schema_cache: dict[str, pa.Schema | None] = {}
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

    def completed_instants(self) -> list[str]:
        """Return the completed commit/deltacommit/replacecommit instants, oldest first."""
        return sorted(tl.scan(self._hoodie).completed)

    def pending_instants(self) -> list[str]:
        """Return write instants that have requested/inflight files but no completed file."""
        return sorted(tl.scan(self._hoodie).pending)

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
            return cached
        for action in tl.WRITE_ACTIONS:
            path = self._hoodie / f"{instant}.{action}"
            try:
                meta = json.loads(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                raise HudiError(f"unreadable commit file {path}: {exc}") from exc
            self._metadata_cache[instant] = meta
            return meta
        raise HudiError(f"{self.base_path}: no completed instant {instant}")

    def latest_extra_metadata(self) -> dict[str, str]:
        """Return ``extraMetadata`` of the newest completed commit ({} if none)."""
        completed = self.completed_instants()
        if not completed:
            return {}
        return dict(self.commit_metadata(completed[-1]).get("extraMetadata") or {})

    def checkpoint(self) -> str | None:
        """Return the source checkpoint of the newest completed commit carrying one.

        Returns:
            The ``deltastreamer.checkpoint.key`` value, or None if no commit has one.
        """
        for instant in reversed(self.completed_instants()):
            value = (self.commit_metadata(instant).get("extraMetadata") or {}).get(o.CHECKPOINT_KEY)
            if value:
                return value
        return None

    def arrow_schema(self) -> pa.Schema | None:
        """Return the data schema of the newest completed commit, else the create schema."""
        for instant in reversed(self.completed_instants()):
            b64 = (self.commit_metadata(instant).get("extraMetadata") or {}).get(o.ARROW_SCHEMA_KEY)
            if b64:
                return arrow_schema_from_b64(b64)
        b64 = self.properties.get(o.ARROW_SCHEMA_KEY)
        return arrow_schema_from_b64(b64) if b64 else None

    def schema_at(self, instant: str) -> pa.Schema | None:
        """Return the data schema recorded by a completed instant (None if it has none)."""
        if instant not in self._schema_cache:
            try:
                extra = self.commit_metadata(instant).get("extraMetadata") or {}
            except HudiError:  # archived or foreign: unknown
                extra = {}
            b64 = extra.get(o.ARROW_SCHEMA_KEY)
            self._schema_cache[instant] = arrow_schema_from_b64(b64) if b64 else None
        return self._schema_cache[instant]

    def new_instant_time(self) -> str:
        """Return a new instant time: now in UTC, greater than every instant seen.

        The instant is ``yyyyMMddHHmmssSSS`` and strictly greater than every instant file
        in ``.hoodie`` (any action or state) and than the last one this object handed out;
        if the clock is not ahead, the greatest of those plus 1 ms is used (section 3.1).

        Returns:
            A 17-digit instant.
        """
        candidate = tl.now_instant()
        floor = max(tl.scan(self._hoodie).latest, self._last_instant)
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
        timeline = tl.scan(self._hoodie)
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
        timeline = tl.scan(self._hoodie)
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
        self._metadata_cache[instant] = metadata
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

    def file_groups(self) -> dict[int, FileSlice]:
        """Return the latest committed slice of every live file group, by bucket.

        As readers do (section 4.2), slices of pending instants and of unknown instants
        not older than the whole write timeline are ignored, and so are file groups
        replaced by a completed replacecommit. A slice's log files are those written by
        completed instants for its base instant. One listing of the table folder and one
        of ``.hoodie`` are made.

        Returns:
            Bucket number -> latest slice.

        Raises:
            HudiError: On a foreign parquet file, a non-bucket file id, or two live file
                groups in one bucket.
        """
        timeline = tl.scan(self._hoodie)
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
        """Undo every write instant that never completed (section 12.3).

        For each pending instant its data files are deleted first, then its instant
        files and ``.hoodie/.temp/<T>/``: deleting the instant files first would make
        leftover files of an instant older than the first commit visible (12.1 trap).

        Returns:
            The rolled-back instants, oldest first.
        """
        timeline = tl.scan(self._hoodie)
        if not timeline.pending:
            return []
        files, logs = self._list_data_files()
        marker = self.base_path / PARTITION_METADATA_FILE
        for instant in sorted(timeline.pending):
            doomed = [f[2] for f in files if f[1] == instant]
            doomed += [log.name for log, _, written in logs if written == instant]
            for name in doomed:
                (self.base_path / name).unlink(missing_ok=True)
            files = [f for f in files if f[1] != instant]
            if (
                not files
                and marker.exists()
                and _parse_properties(marker.read_text()).get("commitTime") == instant
            ):
                marker.unlink()  # the failed write created the partition (12.3 step 1)
            fsync(self.base_path)
            # Inflight before requested: an interrupted rollback still shows the instant
            # as pending (requested), so the next start rolls it back again.
            for name in sorted(timeline.pending[instant], key=lambda n: n.endswith(".requested")):
                (self._hoodie / name).unlink(missing_ok=True)
            shutil.rmtree(self._temp / instant, ignore_errors=True)
            self._last_instant = max(self._last_instant, instant)
        fsync(self._hoodie)
        return sorted(timeline.pending)

    def clean(self, retain_commits: int) -> list[Path]:
        """Delete data files no query at the last ``retain_commits`` commits can need.

        A slice is deleted only if a newer committed slice of its group already existed
        at the oldest retained commit (or its group was replaced by then). The latest
        slice of a group is never deleted, and no instant file is touched, so a crash
        mid-way leaves a readable table.

        Args:
            retain_commits: Number of newest completed commits to keep readable (>= 1).

        Returns:
            The deleted files.
        """
        if retain_commits < 1:
            raise HudiError(f"retain_commits must be at least 1, got {retain_commits}")
        timeline = tl.scan(self._hoodie)
        completed = sorted(timeline.completed)
        if len(completed) <= retain_commits:
            return []
        oldest_kept = completed[-retain_commits]
        # Groups replaced at or before oldest_kept are invisible to every kept query.
        replaced = self._replaced_file_ids(timeline, upto=oldest_kept)

        deleted: list[Path] = []
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
                for doomed_name in [*logs_of.get((file_id, instant), []), name]:
                    path = self.base_file_path(doomed_name)
                    path.unlink(missing_ok=True)
                    deleted.append(path)
        if deleted:
            fsync(self.base_path)
        return deleted
