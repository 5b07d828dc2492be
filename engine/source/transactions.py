"""Transaction boundaries: a micro-batch never ends inside a source transaction.

With ``provide.transaction.metadata=true`` Debezium stamps every change event with
``transaction.id`` and writes BEGIN/END records to ``<prefix>.transaction``; the END
record lists how many events the transaction produced per table. The replicator reads
that topic too, and before a table's batch is merged it cuts the batch (per partition)
at the first event of any transaction that is not complete in it: the events from
there on stay in Kafka (the consumer is rewound) and come again with the next batch.
So every committed Hudi instant holds whole transactions only: a state the source had.

PostgreSQL transaction ids are ``<txId>:<lsn>`` where the LSN part differs between
BEGIN, the events and END (debezium-format section 8.3): they are compared by txId.

Debezium's MySQL/MariaDB connector writes a BEGIN and never an END for a statement that
is not a row transaction (seen with MariaDB: DDL, and ``TRUNCATE TABLE``, whose truncate
event carries that transaction's id). Transactions of one binlog origin are written one
after the other, so when a later one of the same origin (GTID ``domain-server-seq`` or
``uuid:seq``) begins, an earlier one still without END is over: its events present are
all there is.

A transaction larger than ``replicator.max_batch_events`` could never fit; when a full
batch holds nothing but one unfinished transaction it is applied in parts, and a
warning says so.
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from engine.model import OFFSET, PARTITION, TX_ID

log = logging.getLogger("cdcctl.source")

_PG_ID = re.compile(r"^(\d+):\d+$")
#: How many finished transactions are remembered (their END records are small).
MAX_REMEMBERED = 1_000_000


def normalise_tx_id(tx_id: str) -> str:
    """The part of a transaction id that is the same on BEGIN, events and END."""
    match = _PG_ID.match(tx_id)
    return match.group(1) if match else tx_id


def data_collection(topic: str) -> str:
    """Debezium's data-collection name of a table topic: ``<schema-or-db>.<table>``."""
    return ".".join(topic.split(".")[-2:])


def transaction_topic(topic: str) -> str | None:
    """The transaction-metadata topic Debezium writes next to a table topic, if any."""
    return topic.split(".", 1)[0] + ".transaction" if "." in topic else None


def json_documents(values: Sequence[bytes | None]) -> list[Any]:
    """Transaction-topic values written by the JsonConverter, as JSON documents (None
    for a value that is not JSON)."""
    docs: list[Any] = []
    for raw in values:
        try:
            docs.append(None if raw is None else json.loads(raw))
        except (ValueError, RecursionError):  # not JSON, or nested beyond json's reach
            docs.append(None)
    return docs


_MARIADB_GTID = re.compile(r"^(\d+-\d+)-(\d+)$")
_MYSQL_GTID = re.compile(r"^([0-9A-Fa-f-]{36}):(\d+)$")


def gtid_order(tx_id: str) -> tuple[str, int] | None:
    """A MySQL/MariaDB GTID transaction id's origin and sequence number (None for other ids)."""
    match = _MARIADB_GTID.match(tx_id) or _MYSQL_GTID.match(tx_id)
    return (match[1].lower(), int(match[2])) if match else None


def _event_counts(end: dict[str, Any]) -> dict[str, int]:
    """An END record's events per data collection. A count that is not a whole number
    (a malformed record) is left out: that collection's share of the transaction is then
    taken as complete with whatever the batch holds, rather than waited for forever."""
    collections = end.get("data_collections")
    counts: dict[str, int] = {}
    for c in collections if isinstance(collections, list) else []:
        if not isinstance(c, dict):
            continue
        n = c.get("event_count")
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            counts[str(c.get("data_collection"))] = n
        else:
            log.warning(
                "transaction %s: END record has event_count %r for %r; taken as complete",
                str(end.get("id"))[:100],
                n,
                str(c.get("data_collection"))[:200],
            )
    return counts


class TransactionTracker:
    """END records seen on the transaction topics, and the batch cuts they imply.

    Args:
        documents: Turns raw transaction-topic values into documents (dicts with
            ``status``, ``id``, ``data_collections``); JSON by default, the Avro decoder's
            :meth:`documents` for ``debezium-avro``.
    """

    def __init__(
        self, documents: Callable[[Sequence[bytes | None]], list[Any]] | None = None
    ) -> None:
        self._ends: OrderedDict[str, dict[str, int]] = OrderedDict()
        self._documents = documents or json_documents
        #: Per GTID origin, the newest transaction begun: (sequence number, id).
        self._begun: dict[str, tuple[int, str]] = {}

    def observe(self, values: list[bytes | None]) -> int:
        """Record the END records among transaction-topic values; return how many."""
        seen = 0
        for doc in self._documents(values):
            if doc is None:
                continue
            if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
                doc = doc["payload"]
            if not isinstance(doc, dict) or not doc.get("id"):
                continue
            tx = normalise_tx_id(str(doc["id"]))
            if doc.get("status") in ("BEGIN", "END"):
                self._follow(tx)
            if doc.get("status") != "END":
                continue
            self._ends[tx] = _event_counts(doc)
            seen += 1
        while len(self._ends) > MAX_REMEMBERED:
            self._ends.popitem(last=False)
        return seen

    def _follow(self, tx: str) -> None:
        """A BEGIN or END of ``tx``: an earlier transaction of its GTID origin still
        without END never gets one (see the module's docstring)."""
        order = gtid_order(tx)
        if order is None:
            return
        origin, seq = order
        prev = self._begun.get(origin)
        if prev is not None and seq <= prev[0]:
            return  # the same transaction, or an older one read again
        if prev is not None and prev[1] not in self._ends:
            log.info(
                "transaction %s: no END record before %s began; taken as complete", prev[1], tx
            )
            self._ends[prev[1]] = {}
        self._begun[origin] = (seq, tx)

    def cuts(
        self, batch: pa.Table, collection: str, max_events: int
    ) -> tuple[dict[int, int], list[str]]:
        """Per partition, the first offset that must wait for the next batch.

        Args:
            batch: the table's decoded batch (needs ``_cdc_tx_id``, partition, offset).
            collection: the table's data-collection name (END records count by it).
            max_events: ``replicator.max_batch_events``: an unfinished transaction that
                alone fills a whole batch is applied in parts instead of waiting forever.

        Returns:
            ``{partition: offset}`` cuts, and warnings for split transactions.
        """
        if batch.num_rows == 0 or batch.column(TX_ID).null_count == batch.num_rows:
            return {}, []
        ids = [
            normalise_tx_id(t) if t is not None else None for t in batch.column(TX_ID).to_pylist()
        ]
        parts = batch.column(PARTITION).to_numpy()
        offs = batch.column(OFFSET).to_numpy()
        present: dict[str, int] = {}
        for tx in ids:
            if tx is not None:
                present[tx] = present.get(tx, 0) + 1
        incomplete = {
            tx
            for tx, n in present.items()
            if tx not in self._ends or self._ends[tx].get(collection, n) > n
        }
        if not incomplete:
            return {}, []
        cuts: dict[int, int] = {}
        for i, tx in enumerate(ids):
            if tx in incomplete:
                p, o = int(parts[i]), int(offs[i])
                if p not in cuts or o < cuts[p]:
                    cuts[p] = o
        warnings = []
        for p, cut in list(cuts.items()):
            in_part = offs[parts == p]
            if cut != int(in_part.min()) or len(in_part) < max_events:
                continue
            held = {ids[i] for i in np.flatnonzero((parts == p) & (offs >= cut))}
            if len(held) == 1:
                # Nothing would be applied and the batch is all one transaction: it
                # cannot fit, so waiting would never end. (Several unfinished ones
                # only mean their END records have not been read yet: they wait.)
                del cuts[p]
                warnings.append(
                    f"a transaction in partition {p} is larger than "
                    "replicator.max_batch_events; it is applied in parts"
                )
        return cuts, warnings


def apply_cuts(batch: pa.Table, cuts: dict[int, int]) -> pa.Table:
    """The rows of a batch before the cuts."""
    if not cuts:
        return batch
    parts = batch.column(PARTITION).to_numpy()
    offs = batch.column(OFFSET).to_numpy()
    keep = np.ones(batch.num_rows, dtype=bool)
    for p, cut in cuts.items():
        keep &= ~((parts == p) & (offs >= cut))
    return batch.filter(pa.array(keep))
