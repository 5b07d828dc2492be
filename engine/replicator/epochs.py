"""Position epochs: source positions that start over, found and stopped; a new one accepted.

LSNs and binlog coordinates order events only within one server's history. A restore into
a new cluster, a blue/green switch or a failover without GTIDs gives the new events
positions that compare lower than what the table holds, so the merge would count each of
them late and drop it. This module tells such an *epoch change* apart from the ordinary
disorder of a topic and stops the table before any event of the new epoch is applied.

**The rule** (:func:`detect`). Per Kafka partition the table keeps its *high-water*: the
highest source position applied (streamed bit cleared, so snapshot reads count too;
:attr:`EpochState.high`, in every commit). An event whose position is below the
high-water while its source time (``source.ts_ms``) is newer than every event the table
applied can only come from another history: a replay — Debezium re-sending events after a
connector restart, however many — re-sends events that were already applied, with their
original positions *and their original source times*, so a replayed event is never newer
than the newest one seen. No distance or run length has to be guessed: a replay of any
size never trips the rule, and the first event of a new history does (the restored
cluster's snapshot reads, or its first streamed change). A snapshot that restarts on the
same history (a new slot, ``snapshot.mode = always``) reads at a position at or above
the high-water and is not an epoch change.

On a change the table's share of the batch is cut at the first such event of each
partition (what precedes it still commits) and the table stops, FAILED, its checkpoint at
that event: nothing of the new epoch is applied or dropped.

**Accepting a new epoch** (:func:`accept_epoch`, ``cdcctl resync TABLE --new-epoch``)
keeps the replica and makes every stored position older than any position of the new
epoch: an empty commit records an :class:`Accepted` epoch whose ``base`` lies above the
table's high-water, and from its checkpoint on every position read is mapped
(:func:`mapped`) to ``base + 2 * (raw - origin) + streamed``, where ``origin`` is the
lowest raw position of the first batch read (fixed by that batch and committed with it).
The map keeps the order within the new epoch (a snapshot read still orders before a
streamed change at the same position) and puts all of it above the old one. When the new
epoch opens with a snapshot, its end (the table's last snapshot record) carries a
truncate at ``base - 1``: every stored row and tombstone the new snapshot did not replace
is deleted, so the replica becomes the new snapshot plus what follows. An epoch without a
snapshot (a MySQL failover whose streaming just continues) keeps every stored row; its
changes are newer than all of them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.config import Config
from engine.errors import StateError
from engine.hudi import HudiWriter
from engine.model import OFFSET, OP, OP_READ, OP_TRUNCATE, PARTITION, POS, POS_SUB, SOURCE_TS
from engine.model import STREAMED_BIT as BIT

log = logging.getLogger("cdcctl.replicator")

#: The commit extra-metadata key of :class:`EpochState`.
EPOCH_KEY = "cdcctl.epoch"
#: How an epoch change's error begins (``resync --new-epoch`` looks for it).
MARK = "the source's positions started over (position epoch change)"
#: Formats whose positions are Debezium source positions (LSN, binlog coordinates).
FORMATS = ("debezium-json", "debezium-avro")
_NONE = np.iinfo(np.int64).min
_OPS = {"r": "snapshot read", "c": "insert", "u": "update", "d": "delete", "t": "truncate"}


@dataclass
class Accepted:
    """An epoch accepted by ``resync --new-epoch``: how its positions are mapped."""

    #: The mapped position of the epoch's lowest raw position (above everything stored).
    base: int
    #: That raw position (streamed bit cleared); None until the epoch's first batch.
    origin: int | None = None
    #: ``"pending"``: the epoch opened with a snapshot whose end has not been applied yet;
    #: ``"done"``: it was (rows it did not have were deleted); ``"none"``: no snapshot.
    snapshot: str | None = None
    #: Partition -> the offset the epoch starts at (the checkpoint when it was accepted):
    #: earlier events (a dead letter replayed later) belong to the epoch before.
    starts: dict[int, int] = field(default_factory=dict)

    @classmethod
    def load(cls, data: dict) -> Accepted:
        starts = {int(p): int(o) for p, o in (data.get("starts") or {}).items()}
        return cls(data["base"], data.get("origin"), data.get("snapshot"), starts)


@dataclass
class EpochState:
    """A table's high-water positions and accepted epochs (kept in every commit)."""

    #: Partition -> highest raw position (streamed bit cleared) applied.
    high: dict[int, int] = field(default_factory=dict)
    accepted: list[Accepted] = field(default_factory=list)

    @classmethod
    def load(cls, text: str | None, tails: dict[int, list] | None = None) -> EpochState:
        """From a commit's ``cdcctl.epoch``; a table from before it starts from its
        partitions' last applied events (``cdcctl.partition.tail``)."""
        if not text:
            high = {int(p): int(t[2]) & ~BIT for p, t in (tails or {}).items() if t[2] is not None}
            return cls(high=high)
        data = json.loads(text)
        return cls(
            high={int(p): int(v) for p, v in data.get("high", {}).items()},
            accepted=[Accepted.load(a) for a in data.get("accepted", [])],
        )

    def dump(self) -> str:
        data = {
            "high": {str(p): v for p, v in sorted(self.high.items())},
            "accepted": [asdict(a) for a in self.accepted],
        }
        return json.dumps(data, separators=(",", ":"))

    @property
    def used(self) -> bool:
        return bool(self.high or self.accepted)

    def next_base(self) -> int:
        """The ``base`` of an epoch accepted now: above every position stored."""
        top = max(self.high.values(), default=0)
        return BIT + top + 2


def _column(batch: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A nullable int64 column as (values with nulls as 0, validity mask)."""
    col = batch.column(name)
    valid = pc.is_valid(col).to_numpy(zero_copy_only=False)
    values = pc.fill_null(col, 0).to_numpy().astype(np.int64, copy=False)
    return values, valid


def mapped(batch: pa.Table, state: EpochState, snapshot_ended: bool) -> tuple[pa.Table, str | None]:
    """The batch with its positions mapped into the table's accepted epoch (unchanged when
    none was accepted), and a truncate appended at the end of the epoch's snapshot.

    Returns:
        The batch, and why the table must stop (positions that cannot be mapped).
    """
    if not state.accepted or batch.num_rows == 0:
        return batch, None
    epoch = state.accepted[-1]
    pos, valid = _column(batch, POS)
    parts = batch.column(PARTITION).to_numpy()
    offs = batch.column(OFFSET).to_numpy()
    for part, start in epoch.starts.items():
        valid &= ~((parts == part) & (offs < start))
    if not valid.any():
        return batch, None
    raw = pos & ~BIT
    streamed = (pos & BIT) != 0
    reads = valid & ~streamed & (batch.column(OP).to_numpy(zero_copy_only=False) == OP_READ)
    if epoch.origin is None:
        epoch.origin = int(raw[valid].min())
        epoch.snapshot = "pending" if reads.any() else "none"
    top = int(raw[valid].max())
    if epoch.base + 2 * (top - epoch.origin) + 1 >= 2**63:
        return batch, (
            f"source position {top} is too far above the accepted epoch's first position "
            f"{epoch.origin} to be ordered after the earlier epoch; rebuild the table "
            "(`cdcctl resync`)"
        )
    new = np.where(valid, epoch.base + 2 * (raw - epoch.origin) + streamed, pos)
    out = pa.array(new, pa.int64(), mask=~pc.is_valid(batch.column(POS)).to_numpy(False))
    batch = batch.set_column(batch.schema.get_field_index(POS), POS, out)
    if epoch.snapshot == "pending" and snapshot_ended and reads.any():
        batch = _with_truncate(batch, epoch.base - 1, reads)
    return batch, None


def _with_truncate(batch: pa.Table, position: int, reads: np.ndarray) -> pa.Table:
    """Append a truncate at ``position`` with the coordinates of the batch's last snapshot
    read (``reads``: the mask of them; a cut before it drops the truncate too): the end of
    an accepted epoch's snapshot deletes what it did not read."""
    parts = batch.column(PARTITION).to_numpy()
    offs = batch.column(OFFSET).to_numpy()
    reads = np.nonzero(reads)[0]
    last = int(reads[np.lexsort((offs[reads], parts[reads]))[-1]])
    row: dict[str, object] = dict.fromkeys(batch.column_names)
    row.update(
        {
            OP: OP_TRUNCATE,
            POS: position,
            POS_SUB: 0,
            PARTITION: int(parts[last]),
            OFFSET: int(offs[last]),
            SOURCE_TS: batch.column(SOURCE_TS)[last].as_py(),
        }
    )
    extra = pa.Table.from_pylist([row], schema=batch.schema)
    return pa.concat_tables([batch, extra])


@dataclass
class EpochChange:
    """Where a table's positions started over: per partition, where to cut its share."""

    cuts: dict[int, int]
    message: str


def first_offsets(batch: pa.Table) -> dict[int, int]:
    """Each partition's first offset in a batch."""
    parts = batch.column(PARTITION).to_numpy()
    offs = batch.column(OFFSET).to_numpy()
    return {int(p): int(offs[parts == p].min()) for p in np.unique(parts)}


def detect(
    batch: pa.Table, state: EpochState, max_ts: int | None, *, topic: str, table: str, pg: bool
) -> EpochChange | None:
    """Find an epoch change in a table's share of a batch (after its cuts), and move the
    high-water up to what the share applies.

    Args:
        batch: The share's events (positions already :func:`mapped`).
        state: The table's epoch state, updated in place.
        max_ts: The newest source time of the events the table applied before.
        topic, table: For the message.
        pg: Positions are LSNs (else binlog coordinates), for the message.
    """
    if batch.num_rows == 0:
        return None
    pos, valid = _column(batch, POS)
    ops = batch.column(OP).to_numpy(zero_copy_only=False)
    if state.accepted and state.accepted[-1].snapshot == "pending":
        ended = (ops == OP_TRUNCATE) & valid & (pos == state.accepted[-1].base - 1)
        if ended.any():  # the share carries the truncate that ends the epoch's snapshot
            state.accepted[-1].snapshot = "done"
    ts, has_ts = _column(batch, SOURCE_TS)
    key = np.where(valid, pos & ~BIT, _NONE)
    ts = np.where(has_ts, ts, _NONE)
    parts = batch.column(PARTITION).to_numpy()
    offs = batch.column(OFFSET).to_numpy()
    order = np.lexsort((offs, parts))
    cuts: dict[int, int] = {}
    seen: list[str] = []
    for part in np.unique(parts).tolist():
        idx = order[parts[order] == part]
        k, t = key[idx], ts[idx]
        # Before each event: the highest position, and the newest source time, applied.
        before = np.maximum.accumulate(np.concatenate(([state.high.get(part, _NONE)], k)))[:-1]
        start_ts = _NONE if max_ts is None else max_ts
        newest = np.maximum.accumulate(np.concatenate(([start_ts], t)))[:-1]
        signal = (k != _NONE) & (before != _NONE) & (k < before) & (t != _NONE)
        signal &= (newest != _NONE) & (t > newest)
        if not signal.any():
            if (k != _NONE).any():
                state.high[part] = int(max(state.high.get(part, _NONE), k.max()))
            continue
        first = int(np.argmax(signal))
        row = int(idx[first])
        cuts[part] = int(offs[row])
        if first:
            state.high[part] = int(max(state.high.get(part, _NONE), k[:first].max()))
        seen.append(
            f"{topic}[{part}] offset {int(offs[row])}: a {_OPS.get(str(ops[row]), 'change')} at "
            f"{_position(int(pos[row]), pg)} with source time {_time(int(t[first]))}, below "
            f"the table's high-water {_position(int(before[first]), pg)} yet newer than the "
            f"newest event it applied ({_time(int(newest[first]))})"
        )
    if not cuts:
        return None
    message = (
        f"{MARK}: {'; '.join(seen)}. A replay re-sends events the table applied, with their "
        "times; these are newer than all of them, so the source is another history (a "
        "restore into a new cluster, a blue/green switch, a failover without GTIDs). "
        "Nothing from those offsets on was applied or dropped: the table stopped there. "
        f"If the new source is right, accept its epoch: `cdcctl resync {table} --new-epoch` "
        "(its snapshot, if it opens with one, becomes the table: rows it no longer has are "
        "deleted; without one its changes count newer than every stored row); or rebuild "
        f"it whole: `cdcctl resync {table}`"
    )
    return EpochChange(cuts, message)


def _position(pos: int, pg: bool) -> str:
    raw = pos & ~BIT
    if pg:
        return f"LSN {raw >> 32:X}/{raw & 0xFFFFFFFF:X}"
    return f"binlog file #{raw >> 32} position {raw & 0xFFFFFFFF}"


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def screened(cfg: Config) -> bool:
    """Whether a config's positions are Debezium source positions (epochs apply)."""
    return cfg.source.format in FORMATS


def accept(writer: HudiWriter, topic: str) -> tuple[str, dict[int, int]]:
    """Record a new epoch in an empty commit of the table (its checkpoint, where the epoch
    starts, unchanged); the instant and that checkpoint."""
    from engine.replicator.progress import TableProgress  # it imports this module

    progress = TableProgress.load(writer, topic)
    epoch = Accepted(progress.epoch.next_base(), starts=dict(progress.committed))
    progress.epoch.accepted.append(epoch)
    schema = writer.schema()
    if schema is None:
        raise StateError(f"{writer.location} records no schema", hint="rebuild it: `cdcctl resync`")
    instant = writer.begin()
    writer.commit(
        instant, [], schema, topic, progress.committed, progress.extra(topic, progress.floor)
    )
    return instant, progress.committed


def accept_epoch(cfg: Config, table: str) -> str:
    """Accept the new position epoch of a table that stopped at one, with no replicator
    running: an empty commit records it (checkpoint unchanged); the next start maps the
    new epoch's positions above the stored ones. What was done, in words.

    Raises:
        StateError: a replicator runs, the table is unknown or did not stop at an epoch
            change.
        ForeignTableError, WriterLockError: as for a resync.
    """
    # Imported here: they import the loop's modules, which import this one.
    from engine.hudi import ownership
    from engine.lock import LOCK_NAME, Locks
    from engine.replicator.progress import TOPIC_KEY
    from engine.replicator.reset import replica_store
    from engine.state.control import alive, open_store

    work, target = cfg.work_path(), cfg.target_store()
    if alive(work):
        raise StateError(
            f"a replicator runs on {work}",
            hint=f"`cdcctl resync {table} --new-epoch` asks it to accept the epoch",
        )
    store = open_store(work)
    try:
        row = store.table(table) if store is not None else None
        error = (row or {}).get("last_error") or ""
        if row is None or row.get("state") != "FAILED" or MARK not in error:
            raise StateError(
                f"table {table} did not stop at a position epoch change",
                hint="`cdcctl status` shows why a table stopped; `--new-epoch` accepts only "
                "an epoch change the replicator found",
            )
        folder = replica_store(target, table)
        ownership.check(folder, table)
        locks = Locks()
        try:
            locks.take(work / LOCK_NAME, f"the work folder {work}")
            lease = locks.take_table(folder, f"table {table} ({folder.url})")
            writer = HudiWriter.open(folder)
            if lease is not None:
                writer.fence(lease)
            writer.recover()
            topic = row.get("topic") or writer.extra_metadata().get(TOPIC_KEY) or ""
            instant, committed = accept(writer, topic)
            with store.transaction() as db:  # type: ignore[union-attr]
                store.put_table(db, table, {"state": "REPLICATING"})  # type: ignore[union-attr]
                store.add_event(  # type: ignore[union-attr]
                    db, table, "epoch", f"new position epoch accepted at {instant}"
                )
        finally:
            locks.release_all()
    finally:
        if store is not None:
            store.close()
    where = ", ".join(f"{topic}[{p}] offset {o}" for p, o in sorted(committed.items()))
    log.info("%s: new position epoch accepted from %s", table, where)
    return (
        f"new position epoch accepted from {where}: `cdcctl start` applies it, every "
        "position of it newer than every stored row"
    )
