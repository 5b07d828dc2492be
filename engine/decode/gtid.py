"""MySQL/MariaDB GTID ordering, for deployments that fail over between servers.

Binlog coordinates (file, pos, row) order events only within one server's binlog: after
a fail-over to a replica they restart at other numbers. With
``source.mysql_gtid_ordering = true`` streamed events that carry a GTID are ordered by
it instead. GTID sequence numbers only order transactions of one origin (MySQL: the
server UUID in ``uuid:N``; MariaDB: the ``domain-server`` part of ``domain-server-N``),
so each origin is a *lineage*, numbered in the order the table first saw it, and a new
lineage is a barrier: its events order after every event of earlier lineages.

Encoding (engine/model.py's two int64s): ``_cdc_pos = STREAMED_BIT | lineage << 40 | N``
and ``_cdc_pos_sub = binlog pos << 20 | row`` (order inside a transaction). The
lineage list is kept in every commit of the table, so restarts number them the same.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from engine.model import GTID, POS, POS_SUB, STREAMED_BIT

_GTID_RE = r"^(?P<lineage>.+)[:-](?P<n>\d{1,12})$"
_LOW32 = (1 << 32) - 1


def gtid_positions(batch: pa.Table, lineages: list[str]) -> pa.Table:
    """Re-encode positions of streamed GTID events; ``lineages`` grows in place."""
    if GTID not in batch.column_names or batch.column(GTID).null_count == batch.num_rows:
        return batch
    parts = pc.extract_regex(batch.column(GTID), _GTID_RE)
    lineage = pc.struct_field(parts, "lineage")
    number = pc.cast(pc.struct_field(parts, "n"), pa.int64())
    pos, sub = batch.column(POS), batch.column(POS_SUB)
    streamed = pc.not_equal(pc.bit_wise_and(pos, STREAMED_BIT), 0)
    use = pc.fill_null(pc.and_(pc.is_valid(number), streamed), False)
    if not pc.any(use).as_py():
        return batch
    for name in pc.unique(lineage.filter(use)).to_pylist():
        if name not in lineages:
            lineages.append(name)
    epoch = pc.index_in(lineage, value_set=pa.array(lineages, pa.string()))
    major = pc.bit_wise_or(
        pc.bit_wise_or(pc.shift_left(pc.cast(epoch, pa.int64()), 40), number), STREAMED_BIT
    )
    minor = pc.bit_wise_or(pc.shift_left(pc.bit_wise_and(pos, _LOW32), 20), sub)
    batch = batch.set_column(batch.schema.get_field_index(POS), POS, pc.if_else(use, major, pos))
    return batch.set_column(
        batch.schema.get_field_index(POS_SUB), POS_SUB, pc.if_else(use, minor, sub)
    )
