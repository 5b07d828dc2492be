"""The narrow writer interface: everything the replicator does to a Hudi table.

:class:`HudiWriter` is one process's writer of one table. Its life::

    writer = HudiWriter.open(path)            # or HudiWriter.create(path, ...)
    writer.recover()                          # roll back unfinished instants (start-up)
    offsets = writer.checkpoint(topic)        # where the source resumes
    instant = writer.begin()                  # requested + inflight
    writes = writer.plan_writes(instant, touched, rewrite, schema, first_task)
    ... each SliceWrite is executed by a merge task (read, fold, SliceWrite.write) ...
    writer.commit(instant, results, schema, topic, offsets, extra)   # visible, with checkpoint
    writer.clean(retention)                   # now and then (engine.hudi.retention)
    writer.archive(keep_min, keep_max, hours, retention) # after clean: old instants archived

Only this package names Hudi files or builds write stats; the rest of the engine sees
buckets, :class:`FileSlice` summaries (for the compaction policy), :class:`SliceWrite`
plans and :class:`SliceResult` outcomes. An official Hudi writer could stand behind the
same calls.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from engine.errors import HudiError
from engine.hudi import consistency, tombstones, upgrade
from engine.hudi import options as o
from engine.hudi.bucket_index import bucket_file_id
from engine.hudi.commit import WriteStat, format_checkpoint, parse_checkpoint
from engine.hudi.file_slice import FileSlice, RowCounts, SliceResult, SliceWrite, base_file_name
from engine.hudi.log_file import WRITE_STAGE, LogFileName
from engine.hudi.retention import Retention
from engine.hudi.schema import HOODIE_RECORD_KEY, avro_schema_json, file_schema
from engine.hudi.services import Fencing
from engine.hudi.table import HudiTable
from engine.storage import Storage

#: Every this many commits of a table, old file slices are cleaned and instants archived.
CLEAN_EVERY_COMMITS = 10

#: Extra-metadata key of a commit :meth:`HudiWriter.upgrade` made: the buckets rewritten.
UPGRADE_KEY = "cdcctl.upgrade"


class HudiWriter:
    """The writer of one non-partitioned, bucket-indexed table (COW or MOR, version 6)."""

    def __init__(self, table: HudiTable) -> None:
        self._table = table

    # ----------------------------------------------------------------- open / create

    @staticmethod
    def exists(path: Path | Storage) -> bool:
        """Whether ``path`` (a folder, or a store rooted at the table) holds a Hudi table."""
        return HudiTable.exists(path)

    @classmethod
    def open(cls, path: Path | Storage) -> HudiWriter:
        """Open an existing table (see :meth:`HudiTable.open` for what is refused)."""
        return cls(HudiTable.open(path))

    @classmethod
    def create(
        cls,
        path: Path | Storage,
        *,
        name: str,
        record_key_fields: list[str],
        ordering_field: str,
        num_buckets: int,
        schema: pa.Schema,
        table_type: str,
    ) -> HudiWriter:
        """Create an empty table in ``path`` (a folder, created if missing, or a store
        rooted at the table).

        Raises:
            HudiError: the table cannot store ``schema`` (checked before anything is
                written, :meth:`check_schema`).
        """
        avro_schema_json(file_schema(schema), name)
        if not isinstance(path, Storage):
            path.mkdir(parents=True, exist_ok=True)
        table = HudiTable.create(
            path,
            name,
            record_key_fields,
            ordering_field,
            num_buckets,
            schema,
            table_type=table_type,
        )
        return cls(table)

    def fence(self, lease: Fencing) -> None:
        """Commit through the writer's ``lease`` (a table on object storage): a commit is
        decided by the lease's compare-and-swap, and a writer whose lease was taken over
        commits and deletes nothing (``LeaseLost``)."""
        self._table.fence(lease)

    def verify(self) -> list[str]:
        """Check the table is safe to write on (:func:`engine.hudi.consistency.check`:
        raises :class:`HudiError` saying what is damaged and what to do); returns the
        stray names in its folder, which readers skip."""
        consistency.check(self._table)
        return consistency.strays(self.store)

    def recover(self) -> list[str]:
        """Undo what a crashed writer left: unfinished instants (with their files), their
        tombstone sidecars and staged temporary files. Returns the rolled-back instants."""
        # Files staged in .hoodie/.temp go with the rollback (``repair_archive``); these
        # are those staged beside the data files by earlier versions.
        rolled = self._table.rollback_pending()
        self._table.drop_orphans()
        self.store.discard_staged("")
        self._sweep_tombstones()
        self.upgrade()
        return rolled

    def upgrade(self) -> list[int]:
        """Bring a table an earlier cdcctl wrote up to what Hudi's readers need
        (:mod:`engine.hudi.upgrade`): rewrite every file group whose current slice holds
        a null ordering value in a log record or a type stored as Spark's Parquet reader
        refuses, in one commit that keeps the newest commit's checkpoint and bookkeeping,
        then add the ``hoodie.properties`` keys Hudi 0.15 writes. Tables that have those
        keys are left alone. Returns the buckets rewritten."""
        if not upgrade.missing_properties(self._table.properties):
            return []
        if self.store.local_path("") is None:
            raise HudiError(
                f"{self.location} was written by an earlier cdcctl and copied into the "
                "bucket: it needs an upgrade, which works in a folder",
                "copy it to a folder, run `cdcctl start` there once with that folder as "
                "target.path, then copy it back (or rebuild it: move it away)",
            )
        groups = self.file_groups()
        buckets = upgrade.stale_buckets(self._table, groups)
        schema = self.schema()
        if buckets and schema is not None:
            self._rewrite(groups, buckets, schema)
        upgrade.upgrade_properties(self._table)
        return buckets

    def _rewrite(self, groups: dict[int, FileSlice], buckets: list[int], schema: pa.Schema) -> None:
        previous = self.extra_metadata()
        instant = self.begin()
        writes = self.plan_writes(instant, groups, buckets, set(buckets), schema, 0)
        stored = file_schema(schema)

        def carried(rows: pa.Table | None) -> pa.Table:
            # The slice's rows in the current file schema (columns added since: null).
            if rows is None:
                return stored.empty_table()
            return pa.Table.from_arrays(
                [
                    rows[f.name].cast(f.type)
                    if f.name in rows.column_names
                    else pa.nulls(rows.num_rows, f.type)
                    for f in stored
                ],
                schema=stored,
            )

        results = [
            w.write(
                carried=carried(w.read()),
                upserts=None,
                deleted_keys=pa.array([], pa.string()),
                tombs=w.read_tombstones(),
                key_column=HOODIE_RECORD_KEY,
                data_schema=schema,
                counts=RowCounts(),
            )
            for w in writes
        ]
        extra = {
            k: v
            for k, v in previous.items()
            if k not in (o.SCHEMA_KEY, o.ARROW_SCHEMA_KEY, o.TOMBSTONES_KEY, o.COUNTS_KEY)
        }
        extra[o.TOMBSTONES_KEY] = _with_tombstones(results)
        extra[o.COUNTS_KEY] = "{}"
        extra[UPGRADE_KEY] = ",".join(str(b) for b in buckets)
        self._complete(instant, results, schema, extra)

    # ----------------------------------------------------------------- what it holds

    @property
    def path(self) -> Path:
        """The table folder (a table on object storage has none: :attr:`store`)."""
        return self._table.base_path

    @property
    def store(self) -> Storage:
        """The table's files: a folder, or a bucket's prefix."""
        return self._table.store

    @property
    def location(self) -> str:
        """Where the table is, for messages: its folder or ``s3://`` URL."""
        return self._table.location

    @property
    def name(self) -> str:
        """The table name."""
        return self._table.name

    @property
    def record_key_fields(self) -> list[str]:
        """Record key columns, in key order."""
        return self._table.record_key_fields

    @property
    def num_buckets(self) -> int:
        """Buckets of the bucket index (fixed for the table's life)."""
        return self._table.num_buckets

    @property
    def is_mor(self) -> bool:
        """Whether the table is Merge-on-Read."""
        return self._table.is_mor

    def schema(self) -> pa.Schema | None:
        """The data schema of the newest commit (else the create schema)."""
        return self._table.arrow_schema()

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise :class:`HudiError` if the table cannot store ``schema`` (before any write)."""
        avro_schema_json(file_schema(schema), self.name)

    def schema_at(self, instant: str) -> pa.Schema | None:
        """The data schema a completed instant wrote with (None if unknown)."""
        return self._table.schema_at(instant)

    def completed_instants(self) -> list[str]:
        """Completed write instants, oldest first (the writer's own view: no listing)."""
        return sorted(self._table.timeline().completed)

    def checkpoint(self, topic: str) -> dict[int, int]:
        """The next offset per partition of ``topic`` recorded by the newest commit."""
        return parse_checkpoint(self._table.checkpoint(), topic)

    def extra_metadata(self, instant: str | None = None) -> dict[str, str]:
        """The extra metadata of the completed write ``instant``, by default of the newest
        commit (the engine's own keys live there too)."""
        if instant is None:
            return self._table.latest_extra_metadata()
        return self._table.extra_metadata(instant)

    def file_groups(self) -> dict[int, FileSlice]:
        """The latest committed slice of every live file group, by bucket (the writer's
        own view of the timeline: no listing of ``.hoodie``)."""
        return self._table.file_groups(listed=False)

    def created_by(self, instant: str) -> bool:
        """Whether ``instant`` is the table's only completed write (it created the table)."""
        return list(self._table.timeline().completed) == [instant]

    def bucket_ids(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The bucket of each record key (Hudi's hashing, so Java writers agree)."""
        return self._table.bucket_ids(keys)

    # ----------------------------------------------------------------- writing

    def begin(self) -> str:
        """Start a write instant (requested + inflight) and return it."""
        instant = self._table.new_instant_time()
        self._table.start_commit(instant)
        return instant

    def plan_writes(
        self,
        instant: str,
        groups: dict[int, FileSlice],
        touched: list[int],
        rewrite: set[int],
        schema: pa.Schema,
        first_task: int,
    ) -> list[SliceWrite]:
        """One :class:`SliceWrite` per touched bucket, in ``touched`` order.

        Args:
            instant: The instant from :meth:`begin`.
            groups: :meth:`file_groups` as read when planning.
            touched: Buckets written by this instant.
            rewrite: Those of them that get a new base file; the others get a log file
                (Merge-on-Read only; every bucket without a slice must be in it).
            schema: The data schema of the instant.
            first_task: Task partition number of the first write (numbers are unique
                within an instant across tables' writes sharing one Spark job).
        """
        avro = avro_schema_json(file_schema(schema), self.name) if self.is_mor else ""
        recorded: dict[str, set[str] | None] = {}
        writes = []
        for i, bucket in enumerate(touched):
            part = first_task + i
            current = groups.get(bucket)
            file_id = current.file_id if current else bucket_file_id(bucket)
            append = bucket not in rewrite
            if append:
                if current is None:
                    raise ValueError(f"bucket {bucket} has no slice to append to")
                version = 1 + max((_log_version(name) for name in current.log_files), default=0)
                # On object storage the lease's epoch is the token's stage: a writer that
                # lost its lease (whose late upload may still land) never writes the name
                # of a log its successor committed.
                stage = self._table.epoch or WRITE_STAGE
                name = LogFileName(file_id, current.instant, version, part, stage).name
            else:
                name = base_file_name(file_id, f"{part}-1-0", instant)
            has_tombstones = None
            if current is not None:
                state = current.state_instant
                if state not in recorded:
                    extra = self._table.extra_metadata(state)
                    ids = extra.get(o.TOMBSTONES_KEY)
                    recorded[state] = None if ids is None else set(filter(None, ids.split(",")))
                ids_of_state = recorded[state]
                has_tombstones = None if ids_of_state is None else file_id in ids_of_state
                sidecar = tombstones.sidecar(self.store, file_id, state)
                local = sidecar.local
                # On object storage the merge task finds a missing sidecar when it reads
                # it (a request per group and batch here would cost more than it saves).
                if has_tombstones and local is not None and not local.is_file():
                    raise tombstones.missing(sidecar, state)
            writes.append(
                SliceWrite(
                    store=self.store,
                    instant=instant,
                    bucket=bucket,
                    file_id=file_id,
                    file_name=name,
                    task_partition=part,
                    base_file=current.file_name if current else None,
                    base_instant=current.instant if current else None,
                    log_files=current.log_files if current else (),
                    file_versions=current.versions if current else (),
                    state_instant=current.state_instant if current else None,
                    has_tombstones=has_tombstones,
                    append=append,
                    avro_schema=avro,
                    ordering_field=self._table.precombine_field,
                )
            )
        return writes

    def commit(
        self,
        instant: str,
        results: list[SliceResult],
        schema: pa.Schema,
        topic: str,
        offsets: dict[int, int],
        extra: dict[str, str],
    ) -> None:
        """Complete ``instant``: its files and the source checkpoint become visible at once.

        Args:
            instant: From :meth:`begin`.
            results: What each planned write did (unchanged groups wrote nothing).
            schema: The data schema of the instant.
            topic: The source topic, and ``offsets`` the next offset per partition: the
                checkpoint a restart resumes from.
            extra: More extra-metadata entries to keep with the commit.
        """
        metadata = {
            o.CHECKPOINT_KEY: format_checkpoint(topic, offsets),
            o.TOMBSTONES_KEY: _with_tombstones(results),
            **extra,
        }
        self._complete(instant, results, schema, metadata)

    def _complete(
        self, instant: str, results: list[SliceResult], schema: pa.Schema, extra: dict[str, str]
    ) -> None:
        """Commit what the writes of ``results`` wrote: the tombstone sidecars' folder is
        synced first (the data files' is by the commit), then the commit is completed."""
        if any(r.tombstones for r in results):
            tombstones.sync_folder(self.store)
        self._table.commit(instant, self._stats(results), schema, extra)

    @staticmethod
    def _stats(results: list[SliceResult]) -> list[WriteStat]:
        return [
            WriteStat(
                file_id=r.file_id,
                path=r.file_name,
                prev_commit=r.prev_commit,
                num_writes=r.num_writes,
                num_deletes=r.counts.deletes,
                num_update_writes=r.counts.updates,
                num_inserts=r.counts.inserts,
                total_write_bytes=r.file_size,
                file_size_in_bytes=r.file_size,
                base_file=r.base_file,
                log_version=_log_version(r.file_name) if r.base_file is not None else 1,
            )
            for r in results
            if r.file_name
        ]

    def clean(self, retain: int | Retention) -> list[str]:
        """Delete slices no query at an instant ``retain`` keeps readable needs (see
        :meth:`HudiTable.clean`; an int is a number of commits), and the tombstone
        sidecars of slices that are gone."""
        deleted = self._table.clean(retain)
        self._sweep_tombstones()
        return deleted

    def maintain(
        self,
        commits: int,
        retention: Retention,
        keep_min: int,
        keep_max: int,
        archive_retention_hours: float = 0,
    ) -> None:
        """After the table's commit number ``commits`` (counted across runs): every
        :data:`CLEAN_EVERY_COMMITS` commits, clean (:meth:`clean`) and archive
        (:meth:`archive`)."""
        if commits % CLEAN_EVERY_COMMITS:
            return
        self.clean(retention)
        self.archive(keep_min, keep_max, archive_retention_hours, retention)

    def retained_from(self, retention: Retention) -> str | None:
        """The earliest commit ``retention`` keeps readable now (None: every commit)."""
        return retention.earliest_retained(self.completed_instants())

    def archive(
        self,
        keep_min: int,
        keep_max: int,
        retention_hours: float = 0,
        retention: Retention | None = None,
    ) -> list[str]:
        """Archive old instants as Hudi 0.14/0.15 do (see :meth:`HudiTable.archive`),
        never the earliest commit ``retention`` keeps readable now nor a later one;
        archive files older than ``retention_hours`` go too (0: never), except those
        holding an instant a live file slice refers to. Returns the archived instants."""
        live: set[str] = set()
        if retention_hours > 0:
            for fs in self.file_groups().values():
                live.update((fs.instant, fs.state_instant))
        retain_from = self.retained_from(retention) if retention is not None else None
        return self._table.archive(keep_min, keep_max, retention_hours, live, retain_from)

    def _sweep_tombstones(self) -> None:
        live = {(fs.file_id, fs.state_instant) for fs in self.file_groups().values()}
        self._table.fenced()  # it deletes: never after the lease was taken over
        tombstones.sweep(self.store, live)


def _log_version(name: str) -> int:
    parsed = LogFileName.parse(name)
    if parsed is None:
        raise ValueError(f"{name!r} is not a log file name")
    return parsed.version


def _with_tombstones(results: list[SliceResult]) -> str:
    """The commit's ``TOMBSTONES_KEY`` value: the file ids whose groups keep tombstones."""
    return ",".join(sorted(r.file_id for r in results if r.tombstones))
