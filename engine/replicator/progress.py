"""A table's progress through its topic, kept in every Hudi commit it makes.

Besides the streamer checkpoint (the Kafka positions, written by the Hudi writer), each
commit carries the engine's own bookkeeping in its extra metadata, so that a restart
continues exactly where the last commit left off: the position of the newest truncate
(older events are late), the newest source time seen (tombstone retention), each
partition's last applied keyed event (a tombstone opening the next batch inherits its
position: :mod:`engine.merge.positions`) and the GTID lineages in the order first seen
(:mod:`engine.decode.gtid`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from engine.hudi import HudiWriter
from engine.hudi.options import SCHEMA_STATE_KEY, SOURCE_TABLE_KEY
from engine.merge.positions import Tail
from engine.model import KEY, OFFSET, PARTITION, POS, POS_SUB
from engine.replicator.ddl import DDL_KEY, DdlState
from engine.replicator.epochs import EPOCH_KEY, EpochState

TRUNCATE_KEY = "cdcctl.truncate.pos"
MAX_TS_KEY = "cdcctl.source.max_ts"
TOPIC_KEY = "cdcctl.source.topic"
TAIL_KEY = "cdcctl.partition.tail"
GTID_KEY = "cdcctl.gtid.lineages"
GAPS_KEY = "cdcctl.accepted_gaps"
TOPIC_ID_KEY = "cdcctl.source.topic_id"


def truncate_floor(extra: dict[str, str]) -> tuple[int, int] | None:
    """The table's last truncate a commit's extra metadata records (None: none)."""
    value = extra.get(TRUNCATE_KEY)
    if not value:
        return None
    pos, _, sub = value.partition(":")
    return int(pos), int(sub)


def partition_tails(extra: dict[str, str]) -> dict[int, list]:
    """Each partition's last keyed event a commit records: ``[offset, key, pos, sub]``."""
    return {int(p): v for p, v in json.loads(extra.get(TAIL_KEY) or "{}").items()}


@dataclass
class TableProgress:
    """Where a table stands, as of its newest commit (then updated batch by batch)."""

    #: Next offset to consume per partition, as committed to Hudi.
    committed: dict[int, int] = field(default_factory=dict)
    #: Position of the table's newest truncate (older events are late).
    floor: tuple[int, int] | None = None
    max_source_ts: int | None = None
    #: Partition -> [offset, key, pos, pos_sub] of the last keyed event applied.
    tail: dict[int, list] = field(default_factory=dict)
    #: GTID origins in the order first seen.
    gtid_lineages: list[str] = field(default_factory=list)
    #: Offset gaps accepted by ``replicator.accept_offset_gaps``, as recorded.
    accepted_gaps: list[str] = field(default_factory=list)
    #: The id Kafka gave the topic the checkpoint was read from (a recreated topic has
    #: another; None: not known yet).
    topic_id: str | None = None
    #: The source table (``cdcctl.source_table``: JSON of connector, db, schema, table).
    source_table: str | None = None
    #: Schema changes handled (:mod:`engine.replicator.ddl`).
    ddl: DdlState = field(default_factory=DdlState)
    #: High-water positions and accepted position epochs (:mod:`engine.replicator.epochs`).
    epoch: EpochState = field(default_factory=EpochState)
    #: Schema changes seen in events (:mod:`engine.replicator.schema_changes`): ``kept``,
    #: ``dropped`` column lists, ``pos`` the newest position judged.
    schema_state: dict = field(default_factory=dict)

    @classmethod
    def load(cls, writer: HudiWriter, topic: str) -> TableProgress:
        """The progress recorded by the table's newest commit."""
        extra = writer.extra_metadata()
        tail = partition_tails(extra)
        return cls(
            committed=writer.checkpoint(topic),
            floor=truncate_floor(extra),
            max_source_ts=int(extra[MAX_TS_KEY]) if extra.get(MAX_TS_KEY) else None,
            tail=tail,
            gtid_lineages=json.loads(extra.get(GTID_KEY) or "[]"),
            accepted_gaps=json.loads(extra.get(GAPS_KEY) or "[]"),
            topic_id=extra.get(TOPIC_ID_KEY) or None,
            source_table=extra.get(SOURCE_TABLE_KEY),
            ddl=DdlState.load(extra.get(DDL_KEY)),
            epoch=EpochState.load(extra.get(EPOCH_KEY), tail),
            schema_state=json.loads(extra.get(SCHEMA_STATE_KEY) or "{}"),
        )

    def extra(self, topic: str, floor: tuple[int, int] | None) -> dict[str, str]:
        """The extra metadata of the next commit (``floor``: the truncate floor after it)."""
        extra = {TOPIC_KEY: topic}
        if floor is not None:
            extra[TRUNCATE_KEY] = f"{floor[0]}:{floor[1]}"
        if self.max_source_ts is not None:
            extra[MAX_TS_KEY] = str(self.max_source_ts)
        if self.tail:
            extra[TAIL_KEY] = json.dumps(self.tail, separators=(",", ":"))
        if self.gtid_lineages:
            extra[GTID_KEY] = json.dumps(self.gtid_lineages, separators=(",", ":"))
        if self.accepted_gaps:
            extra[GAPS_KEY] = json.dumps(self.accepted_gaps, separators=(",", ":"))
        if self.topic_id:
            extra[TOPIC_ID_KEY] = self.topic_id
        if self.source_table:
            extra[SOURCE_TABLE_KEY] = self.source_table
        if self.ddl.used:
            extra[DDL_KEY] = self.ddl.dump()
        if self.epoch.used:
            extra[EPOCH_KEY] = self.epoch.dump()
        if any(self.schema_state.values()):
            extra[SCHEMA_STATE_KEY] = json.dumps(
                self.schema_state, separators=(",", ":"), sort_keys=True
            )
        return extra

    def tails(self) -> tuple[Tail, ...]:
        """Each partition's last applied keyed event, for position inheritance."""
        return tuple((p, key, pos, sub) for p, (_, key, pos, sub) in sorted(self.tail.items()))

    def record_tails(self, keyed: pa.Table) -> None:
        """Remember each partition's last keyed event of a batch (when it has a position).

        A partition whose last event has no position of its own (a tombstone) forgets its
        tail: the next batch's events of that key come after the tombstone's delete.
        """
        if keyed.num_rows == 0:
            return
        parts = keyed.column(PARTITION).to_numpy()
        offs = keyed.column(OFFSET).to_numpy()
        for part in np.unique(parts).tolist():
            if part < 0:  # a repair's deletes (engine.replicator.repairs): from no topic
                continue
            idx = np.nonzero(parts == part)[0]
            last = int(idx[np.argmax(offs[idx])])
            row_pos = keyed.column(POS)[last].as_py()
            if row_pos is not None:
                self.tail[part] = [
                    int(offs[last]),
                    keyed.column(KEY)[last].as_py(),
                    row_pos,
                    keyed.column(POS_SUB)[last].as_py() or 0,
                ]
            else:
                self.tail.pop(part, None)
