"""The writer's table services: rollback of failed writes, cleaning, archiving.

:class:`TableServices` is a :class:`~engine.hudi.view.HudiView` that also hands out new
instant times and runs Hudi 0.14/0.15's table services as they record them: rollback of
every unfinished write instant (sections 12.2, 12.3), the cleaner (``clean`` instants)
and the timeline archiver (``.hoodie/archived``). :class:`~engine.hudi.table.HudiTable`
adds the commit protocol. One process writes a table at a time; nothing here locks.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from engine.errors import HudiError
from engine.hudi import archive as ar
from engine.hudi import avro_models as am
from engine.hudi import timeline as tl
from engine.hudi.commit import PARTITION_PATH
from engine.hudi.file_slice import BASE_FILE_RE
from engine.hudi.layout import HOODIE_DIR, PARTITION_METADATA_FILE, TEMP_DIR, parse_properties
from engine.hudi.log_file import LogFileName
from engine.hudi.retention import Retention
from engine.hudi.view import HudiView
from engine.storage import ObjectInfo, Storage

log = logging.getLogger("cdcctl.hudi")

#: On object storage, how far ahead of this machine's clock the table's last instant or
#: its store's clock may be before a new instant stops waiting for it (a warning instead).
SKEW_WAIT_S = 5.0
#: Where archive files live, relative to the table.
ARCHIVED = f"{HOODIE_DIR}/{ar.ARCHIVE_DIR}"

#: Hudi's ``hoodie.compact.inline.max.delta.commits`` default: the archiver keeps that many
#: delta commits since the last compaction for the compaction trigger to count (MOR).
MAX_DELTA_COMMITS = 5


class Fencing(Protocol):
    """The writer's lease on a table on object storage (:class:`engine.storage.lease.Lease`):
    what decides a commit, and proves before a destructive service that it still holds."""

    @property
    def epoch(self) -> int: ...

    def commit(self, completed: str, content: bytes, staged: str) -> ObjectInfo: ...

    def settle(self) -> None: ...

    def renew(self) -> None: ...


class TableServices(HudiView):
    """A table's instants and services as its one writer runs them."""

    def __init__(self, base_path: Path | Storage, properties: dict[str, str]) -> None:
        """Wrap an existing table; use :meth:`open` or ``HudiTable.create`` instead."""
        super().__init__(base_path, properties)
        # Last instant handed out, so two calls in one millisecond still differ.
        self._last_instant = ""
        # Whether the partition marker is known to be there (written by the first commit).
        self._has_marker = False
        self._fencing: Fencing | None = None

    def fence(self, fencing: Fencing) -> None:
        """Commit through ``fencing`` from now on, and renew it before deleting anything:
        a writer whose lease was taken over commits and deletes nothing."""
        self._fencing = fencing

    @property
    def epoch(self) -> int | None:
        """The epoch of the lease this writer commits through (None: not fenced)."""
        return None if self._fencing is None else self._fencing.epoch

    def fenced(self) -> None:
        """Raise (``LeaseLost``) if this writer's lease was taken over."""
        if self._fencing is not None:
            self._fencing.renew()

    def _put_meta(self, name: str, data: bytes) -> None:
        """Write a file of ``.hoodie`` whole (staged in ``.hoodie/.temp`` on a disk)."""
        self.store.write(f"{HOODIE_DIR}/{name}", data, staging=TEMP_DIR)
        self._added(name)

    # ----------------------------------------------------------------- instants

    def _added(self, *names: str) -> None:
        if self._names is not None:
            self._names.update(names)

    def _removed(self, *names: str) -> None:
        if self._names is not None:
            self._names.difference_update(names)

    def new_instant_time(self) -> str:
        """Return a new instant time: now in UTC, greater than every instant seen.

        The instant is ``yyyyMMddHHmmssSSS`` and strictly greater than every instant file
        in ``.hoodie`` (any action or state) and than the last one this object handed out;
        if the clock is not ahead, the greatest of those plus 1 ms is used (section 3.1).

        Returns:
            A 17-digit instant.
        """
        # The one listing of .hoodie a batch makes: every instant file on disk counts.
        floor = max(self._rescan().latest, self._last_instant)
        if self.store.local_path("") is None:
            candidate = self._second_after(floor)
        else:
            candidate = tl.now_instant()
            if candidate <= floor:
                candidate = tl.instant_plus_1ms(floor)
        self._last_instant = candidate
        return candidate

    def _second_after(self, floor: str) -> str:
        """An instant on object storage: a whole second (``...000``), now or just past,
        later than ``floor`` and than the second the store last wrote a timeline file.

        Hudi 1.x readers take a version-6 instant's completion time from its completed
        file's modification time, which S3 gives in whole seconds, and attach a log file
        to the newest slice whose base instant is not after the completion time of the
        instant its name carries. With millisecond instants a commit completing in the
        same second as it began reads as completed before it began, and its logs were
        merged into the older slice (stale rows, seen with Hudi 1.0.2 over S3A). Whole
        seconds taken as the time already past make every completion time at or after
        its instant; starting no instant in a second the store wrote the timeline in keeps
        it before the next. At most one instant a second per table: a batch waits for the
        next second when the last one ended in this one.

        When ``floor`` or the store's last write is more than :data:`SKEW_WAIT_S` ahead
        of this machine's clock (a store or an earlier writer whose clock runs ahead),
        the instant is the second after them at once, with a warning: waiting for the
        clocks to agree could take hours, and only Hudi 1.x readers' slicing suffers.
        """
        written = self.timeline_written
        never = datetime.min.replace(tzinfo=UTC)
        last = max(tl.instant_datetime(floor) if floor else never, written or never)
        last = last.replace(microsecond=0)
        ahead = (last - datetime.now(UTC)).total_seconds()
        if ahead > SKEW_WAIT_S:
            log.warning(
                "%s: the table's last instant or its store's clock is %.0f s ahead of this "
                "machine's clock: instants go on from there; check the clocks (NTP), Hudi "
                "1.x readers may misplace log files meanwhile",
                self.location,
                ahead,
            )
            return tl.instant_at(last + timedelta(seconds=1))
        while True:
            now = datetime.now(UTC).replace(microsecond=0)
            if now > last:
                return tl.instant_at(now)
            time.sleep(1.001 - datetime.now(UTC).microsecond / 1e6)

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
        if self._fencing is not None:
            # A commit the lease decided is completed first, never rolled back.
            self._fencing.settle()
        timeline = self._rescan()
        rolled: list[str] = []
        if timeline.pending or timeline.pending_services("rollback"):
            self.fenced()
        for r in timeline.pending_services("rollback"):
            plan = am.deserialize_avro_metadata(
                self.store.read(f"{HOODIE_DIR}/{r}.rollback.requested"), am.ROLLBACK_PLAN
            )
            self._execute_rollback(r, plan, timeline)
            rolled.append(plan["instantToRollback"]["commitTime"])
        for c in timeline.pending_services("clean"):
            self._execute_clean(c, self._clean_plan(c))
        self.repair_archive()
        timeline = self._timeline()
        if timeline.pending:
            files, logs = self._list_data_files()
            for instant in sorted(timeline.pending):
                names = timeline.pending[instant]
                action = _pending_action(names)
                requests = [
                    _rollback_request(self._full_path(f[2])) for f in files if f[1] == instant
                ]
                requests += [
                    _rollback_request(self._full_path(log.name))
                    for log, _, written in logs
                    if written == instant
                ]
                plan = {
                    "instantToRollback": {"commitTime": instant, "action": action},
                    "RollbackRequests": requests,
                    "version": am.ROLLBACK_VERSION,
                }
                r = self.new_instant_time()
                self._put_meta(
                    f"{r}.rollback.requested", am.serialize_avro_metadata(am.ROLLBACK_PLAN, plan)
                )
                self._execute_rollback(r, plan, self._timeline())
                rolled.append(instant)
                files = [f for f in files if f[1] != instant]
        self.store.sync(HOODIE_DIR)
        return sorted(rolled)

    def drop_orphans(self) -> list[str]:
        """On a table whose writer holds its lease (object storage): delete the data files
        of instants the timeline does not know (not older than it either): late uploads
        of a writer that lost the lease, after its successor rolled their instant back.
        Returns their names; a table without a lease keeps them (the consistency check
        refuses it: there they mean lost commit files)."""
        if self._fencing is None:
            return []
        timeline = self._rescan()
        first, known = timeline.first, set(timeline.files)
        bases, logs = self._list_data_files()
        names = [b[2] for b in bases if b[1] not in known and not b[1] < first]
        names += [f.name for f, _, w in logs if w not in known and not w < first]
        if names:
            self.fenced()
            for name in names:
                self.store.delete(name)
            log.info(
                "%s: deleted %d file(s) a writer that lost its lease left",
                self.location,
                len(names),
            )
        return names

    def _execute_rollback(self, r: str, plan: dict[str, Any], timeline: tl.Timeline) -> None:
        """Run the rollback plan of instant ``r`` (its requested file exists)."""
        started = time.monotonic()
        target = plan["instantToRollback"]
        instant, action = target["commitTime"], target["action"]
        inflight = f"{r}.rollback.inflight"
        if inflight not in timeline.files.get(r, []):
            self._put_meta(inflight, b"")  # empty, as Hudi's
        planned = [p for req in plan["RollbackRequests"] or [] for p in req["filesToBeDeleted"]]
        log_sizes: dict[str, int] = {}
        deleted: list[str] = []
        for text in planned:
            name = self._own_data_file(text)
            if name is None:
                log.warning(
                    "%s: rollback %s: %s is not a file of this table, left", self.location, r, text
                )
                continue
            if LogFileName.parse(name) is not None:
                found = self.store.head(name)
                if found is not None:
                    log_sizes[text] = found.size
            self.store.delete(name)
            deleted.append(text)
        try:
            marker = parse_properties(self.store.read(PARTITION_METADATA_FILE).decode())
        except FileNotFoundError:
            marker = {}
        if marker.get("commitTime") == instant and not any(
            e.path.endswith(".parquet") for e in self.store.entries()
        ):
            # the failed write created the partition (12.3 step 1)
            self.store.delete(PARTITION_METADATA_FILE)
            self._has_marker = False
        self.store.sync()
        # Inflight before requested: an interrupted rollback still shows the instant as
        # pending, and R stays pending too, so the next start finishes it.
        for name in sorted(
            timeline.pending.get(instant, []), key=lambda n: n.endswith(".requested")
        ):
            self.store.delete(f"{HOODIE_DIR}/{name}")
            self._removed(name)
        self.store.sync(HOODIE_DIR)
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
        self._put_meta(f"{r}.rollback", am.serialize_avro_metadata(am.ROLLBACK_METADATA, metadata))
        self._last_instant = max(self._last_instant, instant, r)

    def clean(self, retain: int | Retention, *, now: datetime | None = None) -> list[str]:
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
            The names of the deleted files.
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
                    {  # full paths, as Hudi's plans hold: a re-run resolves none
                        "filePath": self._full_path(n),
                        "isBootstrapBaseFile": False,
                    }
                    for n in doomed_names
                ]
            },
            "partitionsToBeDeleted": [],
        }
        c = self.new_instant_time()
        self._put_meta(f"{c}.clean.requested", am.serialize_avro_metadata(am.CLEANER_PLAN, plan))
        return self._execute_clean(c, plan)

    def _full_path(self, name: str) -> str:
        """A data file's full path, as Hudi's plans hold them (its folder or URL)."""
        if self._local is not None:
            return str((self._local / name).absolute())
        return f"{self.location}/{name}"

    def _in_table_folder(self, folder: str) -> bool:
        """Whether a plan's folder (absolute path or URL) is this table's."""
        if self._local is not None:
            return Path(folder).is_absolute() and Path(folder).resolve() == self._local.resolve()
        scheme, sep, rest = folder.partition("://")
        own_scheme, _, own_rest = self.location.partition("://")
        scheme, own_scheme = scheme.lower(), own_scheme.lower()
        # Hudi's JVM writers name S3 files s3a://; the same object either way.
        return (
            bool(sep)
            and scheme in ("s3", "s3a")
            and own_scheme == "s3"
            and rest.rstrip("/") == own_rest
        )

    def _own_data_file(self, planned: str) -> str | None:
        """The file of this table a plan's path names, or None: not one to delete.

        The table is non-partitioned (its one partition is :data:`PARTITION_PATH`, the
        table's folder), so every data file lies directly in the folder. A full path (what
        Hudi and this writer plan) counts only when its folder is the table's: the plan of
        a table copied or moved since names files at the old place, which are another
        table's (or gone), so they are left. A relative path counts only when it is a bare
        file name, taken in the table's folder (Hudi's own cleaner would resolve it against
        its working directory; nothing of ours writes one). Either way the name must be a
        base or log file's.
        """
        folder, _, name = planned.rpartition("/")
        if folder and not self._in_table_folder(folder):
            return None
        if not (BASE_FILE_RE.match(name) or LogFileName.parse(name)):
            return None
        return name

    def _execute_clean(self, c: str, plan: dict[str, Any]) -> list[str]:
        """Run the cleaner plan of instant ``c`` (its requested file exists)."""
        self.fenced()
        started = time.monotonic()
        inflight = f"{c}.clean.inflight"
        if inflight not in self._timeline().files.get(c, []):
            # Hudi's inflight clean holds the plan again.
            self._put_meta(inflight, am.serialize_avro_metadata(am.CLEANER_PLAN, plan))
        planned = [
            info["filePath"]
            for infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).values()
            for info in infos
        ]
        names: list[str] = []
        left: list[str] = []
        for text in planned:
            name = self._own_data_file(text)
            if name is None:
                left.append(text)
            else:
                names.append(name)
        if left:
            log.warning(
                "%s: clean %s: %d file(s) of its plan left in place, not data files in the "
                "table's folder (the table was copied or moved since it was planned?): %s",
                self.location,
                c,
                len(left),
                ", ".join(left[:5]) + (" ..." if len(left) > 5 else ""),
            )
        for name in names:
            self.store.delete(name)
        if names:
            self.store.sync()
        failed = [t.rpartition("/")[2] for t in left]
        ectr = plan.get("earliestInstantToRetain") or {}
        metadata = {
            "startCleanTime": c,
            "timeTakenInMillis": int((time.monotonic() - started) * 1000),
            "totalFilesDeleted": len(names),
            "earliestCommitToRetain": ectr.get("timestamp") or "",
            "lastCompletedCommitTimestamp": plan.get("lastCompletedCommitTimestamp") or "",
            "partitionMetadata": {
                PARTITION_PATH: {
                    "partitionPath": PARTITION_PATH,
                    "policy": plan["policy"],
                    "deletePathPatterns": names + failed,
                    "successDeleteFiles": names,
                    "failedDeleteFiles": failed,
                    "isPartitionDeleted": False,
                }
            },
            "version": am.CLEAN_VERSION,
            "bootstrapPartitionMetadata": {},
        }
        self._put_meta(f"{c}.clean", am.serialize_avro_metadata(am.CLEAN_METADATA, metadata))
        self._last_instant = max(self._last_instant, c)
        return names

    # ----------------------------------------------------------------- archiving

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
            written = {
                info.path.rsplit("/", 1)[-1]: info.modified
                for info in self.store.entries(HOODIE_DIR)
            }
            records = [
                ar.meta_entry(n, self.store.read(f"{HOODIE_DIR}/{n}"), written[n]) for n in names
            ]
            versions = ar.archives_in(self.store)
            name = ar.archive_file_name(1 + max((v for v, _, _ in versions), default=0))
            self.fenced()
            made = self.store.create(
                f"{ARCHIVED}/{name}", ar.encode_archive(records), staging=TEMP_DIR
            )
            if made is None:
                raise HudiError(
                    f"{self.location}: archive file {name} appeared while archiving",
                    "only one replicator may write a table: stop the other one",
                )
            self._archive_index[name] = [(t, a, st) for t, a, st in _entries_of(records)]
            self._delete_instant_files(names)
        if retention_hours > 0:
            self._expire_archives(retention_hours, keep_instants)
        return instants

    def _delete_instant_files(self, names: list[str]) -> None:
        self.fenced()
        pending = [n for n in names if n.endswith((".requested", ".inflight"))]
        completed = sorted((n for n in names if n not in pending), key=lambda n: n.split(".")[0])
        for name in [*pending, *completed]:
            self.store.delete(f"{HOODIE_DIR}/{name}")
            self._removed(name)
        self.store.sync(HOODIE_DIR)

    def repair_archive(self) -> list[str]:
        """Finish an archiving run a crash interrupted: instants the newest archive file
        holds that still have files in ``.hoodie/`` lose them (Hudi's order). Returns the
        file names deleted."""
        # Every file staged in .hoodie/.temp (archive files, instant files, data files:
        # engine.hudi.layout.TEMP_DIR) that a crash left unrenamed.
        self.store.discard_staged(TEMP_DIR)
        versions = ar.archives_in(self.store)
        if not versions:
            return []
        entries = self._archive_entries(versions[-1][1])
        instants = {t for t, _, _ in entries}
        timeline = self._timeline()
        names = [n for t in sorted(instants) for n in timeline.files.get(t, [])]
        if names:
            self._delete_instant_files(names)
        return names

    def _expire_archives(self, retention_hours: float, keep: set[str] | frozenset[str]) -> None:
        cutoff = tl.instant_at(datetime.now(UTC) - timedelta(hours=retention_hours))
        self.fenced()
        removed = False
        for _, name, _ in ar.archives_in(self.store):
            instants = {t for t, _, _ in self._archive_entries(name)}
            if not instants or max(instants) >= cutoff:
                break  # files are in time order: the rest is newer
            if instants & keep:
                continue
            self.store.delete(f"{ARCHIVED}/{name}")
            self._archive_index.pop(name, None)
            removed = True
        if removed:
            self.store.sync(ARCHIVED)


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
