"""A non-partitioned Hudi table (Copy-on-Write or Merge-on-Read) on the local file system.

:class:`HudiTable` is the writer's table: the read-only view (:mod:`engine.hudi.view`:
properties, timeline, commit metadata, file slices), the table services
(:mod:`engine.hudi.services`: new instants, rollback, clean, archive) and, here, table
creation and the commit protocol. Only :class:`~engine.hudi.writer.HudiWriter` holds one;
readers open a :class:`~engine.hudi.view.HudiView`. Section numbers in comments refer to
the shared ``docs/hudi-format.md``.

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

import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from engine.errors import HudiError
from engine.hudi import options as o
from engine.hudi import timeline as tl
from engine.hudi.bucket_index import RULE_JAVA
from engine.hudi.commit import PARTITION_PATH, WriteStat, to_json_bytes
from engine.hudi.layout import (
    HOODIE_DIR,
    PARTITION_METADATA_FILE,
    PROPERTIES_FILE,
    STAGED_DIR,
    TEMP_DIR,
)
from engine.hudi.options import HoodieOption as H
from engine.hudi.schema import arrow_schema_to_b64, avro_schema_json
from engine.hudi.services import TableServices
from engine.storage import LocalStorage, Storage


def _table_checksum(name: str, database: str = "") -> str:
    """Return ``hoodie.table.checksum``: CRC32 of ``"<database>.<table>"`` (section 2.2)."""
    return str(zlib.crc32(f"{database}.{name}".encode()))


class HudiTable(TableServices):
    """A non-partitioned, bucket-indexed Hudi COW or MOR table (table version 6)."""

    # ----------------------------------------------------------------- create

    @classmethod
    def create(
        cls,
        base_path: Path | Storage,
        name: str,
        record_key_fields: list[str],
        precombine_field: str,
        num_buckets: int,
        arrow_schema: pa.Schema,
        table_type: str = o.TABLE_TYPE_COW,
    ) -> HudiTable:
        """Create an empty table: ``.hoodie/hoodie.properties`` and the meta folders.

        Args:
            base_path: Table folder (created if missing) or a store rooted at the
                table; must not hold a table yet.
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
        store = base_path if isinstance(base_path, Storage) else LocalStorage(Path(base_path))
        if cls.exists(store):
            raise HudiError(f"a Hudi table already exists at {store.url}")
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
        # What Hudi's writers make (an object store has no empty folders: none is needed).
        store.make_folders(
            *(
                f"{HOODIE_DIR}/{sub}"
                for sub in (
                    ".temp",
                    ".aux/.bootstrap/.partitions",
                    ".aux/.bootstrap/.fileids",
                    ".schema",
                    "archived",
                )
            )
        )
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        store.write(f"{HOODIE_DIR}/{PROPERTIES_FILE}", text.encode("ascii"))
        return cls(base_path if isinstance(base_path, Storage) else Path(base_path), props)

    @property
    def write_action(self) -> str:
        """The action of an ordinary write: ``commit`` (COW) or ``deltacommit`` (MOR)."""
        return "deltacommit" if self.is_mor else "commit"

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
        self._put_meta(requested, b"")
        self._put_meta(inflight_name, to_json_bytes(inflight))
        self._last_instant = max(self._last_instant, instant)

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

        The data files of ``write_stats`` are made durable (on a local disk), the
        partition marker is written on the first commit, then ``<T>.commit`` (or
        ``<T>.replacecommit``) appears: renamed into place in a folder (whose one writer
        holds its ``flock``), decided by the writer's lease and then created if absent on
        object storage. That is the single visibility point.

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
            HudiError: If the instant was not started, a data file is missing (on a local
                disk), the metadata would change the number of buckets, or the instant
                was completed already (by another writer).
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
        if self._fencing is not None:
            extra[o.LEASE_EPOCH_KEY] = str(self._fencing.epoch)
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

        # Data must be durable before the commit that makes it visible (a finished put
        # to object storage is).
        if write_stats:
            try:
                self.store.sync("", [stat.path for stat in write_stats])
            except FileNotFoundError as exc:
                raise HudiError(f"write stat names a missing data file {exc.filename}") from None
        if not self._has_marker:
            if self.store.head(PARTITION_METADATA_FILE) is None:
                text = f"#partition metadata\ncommitTime={instant}\npartitionDepth=0\n"
                self.store.write(PARTITION_METADATA_FILE, text.encode("ascii"))
            self._has_marker = True

        name = f"{instant}.{action}"
        completed, content = f"{HOODIE_DIR}/{name}", to_json_bytes(metadata)
        if self._fencing is not None:
            # The lease's swap decides the commit (LeaseLost: taken over, nothing done).
            self._fencing.commit(completed, content, f"{STAGED_DIR}/{name}")
        elif self._local is not None:
            # A folder's one writer holds its flock: a rename, which every file system
            # has (a create-if-absent would need hard links).
            self.store.write(completed, content, staging=TEMP_DIR)
        elif self.store.create(completed, content, staging=TEMP_DIR) is None:
            raise HudiError(
                f"instant {instant} of {self.location} was completed by another writer",
                "only one replicator may write a table: stop the other one",
            )
        self._added(name)
        self._cache_metadata(instant, metadata)
