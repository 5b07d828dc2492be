"""A deterministic, realistic Debezium PostgreSQL workload for demos, tests and benchmarks.

:class:`InventoryWorkload` simulates the Debezium PostgreSQL connector capturing an
``inventory`` database with three tables and yields the Kafka messages the connector
would write, serialized exactly like Kafka Connect's ``JsonConverter``:

* ``schemas=True``: key and value are ``{"schema": <Connect schema>, "payload": ...}``
  with the real Connect schemas and semantic type names;
* ``schemas=False``: key and value are the bare payloads.

Tables: see :mod:`engine.playground.inventory`.

The event stream behaves like a real connector with ``REPLICA IDENTITY DEFAULT``:

* an initial snapshot first (``op = "r"``, ``source.snapshot`` ``first`` /
  ``first_in_data_collection`` / ``true`` / ``last_in_data_collection`` / ``last``, all
  rows at the snapshot LSN with ``sequence = [null, "<lsn>"]``);
* then transactions of 1 to 8 changes: inserts (``c``), updates (``u``, ``before`` null)
  and deletes (``d``, ``before`` holding the key and type "zero" placeholders), each
  delete immediately followed by a tombstone (null value) for the same key;
* LSNs strictly increase in source order; ``source.sequence`` is ``[<commit LSN of the
  previous transaction>, <lsn>]``; ``source.ts_ms`` is the commit time (shared by the
  events of a transaction, increasing across transactions); ``txId`` increases; the
  envelope ``ts_ms`` is the commit time plus a small connector lag;
* updates and deletes only ever touch live rows; deleted customer ids are occasionally
  re-inserted.

Everything derives from the seed, never from the clock, so a seed always yields the same
bytes. The JSON is assembled from pre-rendered fragments with f-strings (one
``json.dumps`` per message would be several times slower): about a million messages in a
few seconds, which the benchmarks need.
"""

from __future__ import annotations

import math
import random
from array import array
from bisect import bisect
from collections.abc import Callable, Iterator, Mapping
from itertools import chain
from typing import Any, Final

from engine.playground.inventory import (
    DATABASE,
    DEBEZIUM_VERSION,
    DESCRIPTIONS_J,
    DOMAINS,
    FIRST_J,
    FIRST_NAMES,
    FIRST_SLUG,
    LAST_J,
    LAST_NAMES,
    LAST_SLUG,
    PRODUCT_NAMES_J,
    SCHEMA,
    STATUS_J,
    TABLES,
    US_PER_DAY,
    Rows,
    ZonedFormatter,
    advance,
    compact,
    decimal_base64,
    deleted_row_json,
    json_str,
    key_schema,
    note_pool,
    value_schema,
)

__all__ = ["DEFAULT_MIX", "InventoryWorkload", "Message"]

#: A Kafka message: ``(topic, key bytes, value bytes or None for a tombstone)``.
Message = tuple[str, bytes, bytes | None]

#: Default fractions of change events per table and operation (they sum to 1): a shop
#: where orders dominate and the catalogue changes slowly.
DEFAULT_MIX: Final[dict[str, dict[str, float]]] = {
    "customers": {"insert": 0.04, "update": 0.08, "delete": 0.01},
    "products": {"insert": 0.01, "update": 0.08, "delete": 0.005},
    "orders": {"insert": 0.40, "update": 0.30, "delete": 0.075},
}

#: How the snapshot part of :meth:`InventoryWorkload.events` is split between tables.
_SNAPSHOT_SHARES: Final = {"customers": 0.2, "products": 0.05}

_OPS: Final = ("insert", "update", "delete")

# Simulation constants. 2024-01-15T08:00:00Z: the snapshot starts here.
_SNAPSHOT_START_US: Final = 1_705_305_600_000_000
_SNAPSHOT_LSN: Final = 0x2B3_C1F8  # "0/2B3C1F8"
_SNAPSHOT_TXID: Final = 767
_NAN: Final = float("nan")

# Transaction sizes (number of row changes), drawn uniformly from this table: mostly
# single-statement transactions, some multi-row ones.
_TX_SIZES: Final = (1,) * 55 + (2,) * 25 + (3,) * 12 + (4, 4, 4, 5, 5, 6, 8, 8)


class InventoryWorkload:
    """Deterministic generator of Debezium PostgreSQL change events for ``inventory``.

    The workload is stateful: :meth:`snapshot` creates the initial rows and
    :meth:`stream` continues from whatever state the previous calls left. Iterators are
    lazy and mutate the state as they are consumed, so consume one before starting the
    next. Two instances with equal arguments yield byte-identical messages.

    Example::

        workload = InventoryWorkload(seed=7, schemas=True)
        for topic, key, value in workload.events(100_000):
            ...

    Attributes:
        seed: The random seed.
        prefix: Debezium ``topic.prefix`` (logical server name).
        schemas: Whether messages carry Connect schemas (``schemas.enable``).
        topics: Topic name per table.
        counts: Change events emitted so far per table and op code (``r``, ``c``, ``u``,
            ``d``) plus tombstones (``x``).
    """

    def __init__(
        self,
        seed: int = 0,
        prefix: str = "dbserver1",
        schemas: bool = False,
        clock: Callable[[], float] | None = None,
        notes: bool = False,
    ) -> None:
        """Create a workload.

        Args:
            seed: Seed of the pseudo-random generator; equal seeds give equal output.
            prefix: Debezium ``topic.prefix``; topics are ``<prefix>.inventory.<table>``.
            schemas: ``True`` for JsonConverter ``schemas.enable=true`` output.
            clock: ``time.time`` for a live database's times (the demo: see
                :func:`advance`); None: 2024-01-15 on, the same output for a seed.
            notes: Wide rows: orders get a ``note`` text column of 200 to 2,000
                characters (5 % null; a third of the order updates rewrite it).
        """
        self.seed = seed
        self.prefix = prefix
        self.schemas = schemas
        self.notes = notes
        self._notes_j = note_pool(seed) if notes else ()
        self._rng = random.Random(seed)
        self.topics: dict[str, str] = {t: f"{prefix}.{SCHEMA}.{t}" for t in TABLES}
        self.counts: dict[str, dict[str, int]] = {
            t: {"r": 0, "c": 0, "u": 0, "d": 0, "x": 0} for t in TABLES
        }
        self._zoned = ZonedFormatter()
        self._decimals: dict[int, str] = {}
        self._started = False

        # Envelope wrappers: with schemas the payload is embedded after a fixed prefix.
        self._key_head: dict[str, str] = {}
        self._value_head: dict[str, str] = {}
        self._tail = "}" if schemas else ""
        for table in TABLES:
            if schemas:
                self._key_head[table] = (
                    '{"schema":' + compact(key_schema(prefix, table)) + ',"payload":'
                )
                self._value_head[table] = (
                    '{"schema":' + compact(value_schema(prefix, table, notes)) + ',"payload":'
                )
            else:
                self._key_head[table] = ""
                self._value_head[table] = ""
        self._source_head = (
            f'{{"version":"{DEBEZIUM_VERSION}","connector":"postgresql",'
            f'"name":{json_str(prefix)},"ts_ms":'
        )

        # Simulated database clock and WAL position.
        self._clock = clock
        self._now_us = _SNAPSHOT_START_US if clock is None else int(clock() * 1_000_000)
        self._lsn = _SNAPSHOT_LSN
        self._last_commit_lsn = _SNAPSHOT_LSN
        self._txid = _SNAPSHOT_TXID
        self._last_env_ms = 0

        # Row state, one compact array per column, indexed by id - base.
        self._rows = {
            "customers": Rows(1001),
            "products": Rows(101),
            "orders": Rows(10001),
        }
        self._c_first = array("H")
        self._c_last = array("H")
        self._c_email_ver = array("I")
        self._c_domain = array("B")
        self._c_created = array("q")
        self._c_vip = array("b")
        self._p_name = array("H")
        self._p_desc = array("h")  # -1: NULL
        self._p_price = array("q")  # unscaled, scale 2
        self._p_weight = array("d")  # NaN: NULL
        self._p_updated = array("q")
        self._o_customer = array("i")
        self._o_product = array("i")
        self._o_quantity = array("i")
        self._o_date = array("i")
        self._o_status = array("B")
        self._o_note = array("h")  # -1: NULL

    # ------------------------------------------------------------------ public API

    def topic(self, table: str) -> str:
        """Topic name of ``table``."""
        return self.topics[table]

    def live_ids(self, table: str) -> list[int]:
        """Ids of the rows of ``table`` that exist after the messages yielded so far."""
        return sorted(self._rows[table].live)

    def snapshot(self, customers: int, products: int, orders: int) -> Iterator[Message]:
        """Create the initial rows and return the snapshot's ``op = "r"`` messages.

        Tables are read one after another (customers, products, orders), like Debezium's
        initial snapshot. Must be called before :meth:`stream`.

        Args:
            customers: Number of customer rows.
            products: Number of product rows.
            orders: Number of order rows.

        Returns:
            An iterator over exactly ``customers + products + orders`` messages.

        Raises:
            RuntimeError: If events were already generated.
            ValueError: If a count is negative.
        """
        if self._started:
            raise RuntimeError("snapshot() must come before any other event of the workload")
        if min(customers, products, orders) < 0:
            raise ValueError("snapshot row counts must not be negative")
        self._started = True
        rnd = self._rng.random
        # Create the rows now (not lazily) so that the state is complete even if the
        # caller consumes the iterator partially.
        snapshot_us = self._now_us
        for _ in range(customers):
            ident = self._new_customer(snapshot_us - int(rnd() * 3 * 365 * US_PER_DAY))
            self._rows["customers"].add(ident)
        for _ in range(products):
            updated = snapshot_us - int(rnd() * 400 * US_PER_DAY)
            if rnd() < 0.05:
                updated -= updated % 1_000_000  # whole seconds: rows loaded by a script
            ident = self._new_product(updated)
            self._rows["products"].add(ident)
        snapshot_day = snapshot_us // US_PER_DAY
        for _ in range(orders):
            age = int(rnd() * rnd() * 730)  # skewed towards recent orders
            if age > 14:
                status = 2 if rnd() < 0.95 else 3
            else:
                status = int(rnd() * 4)
            ident = self._new_order(snapshot_day - age, status)
            self._rows["orders"].add(ident)
        total = customers + products + orders
        # The snapshot read takes a while: a few hundred rows per millisecond.
        self._now_us = advance(snapshot_us, (total // 300 + 1) * 1000 + 5000, self._clock)
        return self._snapshot_messages(snapshot_us, (customers, products, orders))

    def stream(
        self,
        n_events: int,
        mix: Mapping[str, Any] | None = None,
        hot_fraction: float | None = None,
    ) -> Iterator[Message]:
        """Return streamed changes (transactions of inserts, updates and deletes).

        Args:
            n_events: Number of Kafka messages to yield, tombstones included (a delete
                is two messages; it is replaced by an update or insert when only one
                message is left).
            mix: Fractions of change events, either per table and operation
                (``{"orders": {"insert": 0.5, "update": 0.3}, ...}``) or per operation
                for every table alike (``{"insert": 0.2, "update": 0.7, "delete": 0.1}``,
                tables weighted as in :data:`DEFAULT_MIX`). Missing entries are 0; the
                values are normalized. Defaults to :data:`DEFAULT_MIX`. An update or
                delete drawn for a table without rows becomes an insert.
            hot_fraction: Probability that an update or delete targets one of the
                newest rows of its table (the newest 1 %, at least 16) instead of a row
                chosen uniformly; ``None`` or 0 for uniform choice only.

        Returns:
            An iterator over exactly ``n_events`` messages.
        """
        if n_events < 0:
            raise ValueError("n_events must not be negative")
        if hot_fraction is not None and not 0.0 <= hot_fraction <= 1.0:
            raise ValueError("hot_fraction must be between 0 and 1")
        weights = _normalize_mix(mix)
        self._started = True
        return self._stream(n_events, weights, hot_fraction or 0.0)

    def events(
        self,
        total: int,
        snapshot_fraction: float = 0.1,
        mix: Mapping[str, Any] | None = None,
        hot_fraction: float | None = None,
    ) -> Iterator[Message]:
        """Return a snapshot followed by a stream, ``total`` messages in all.

        Args:
            total: Number of messages (tombstones count).
            snapshot_fraction: Share of ``total`` spent on the snapshot; split between
                customers (20 %), products (5 %) and orders (the rest).
            mix: See :meth:`stream`.
            hot_fraction: See :meth:`stream`.
        """
        if total < 0:
            raise ValueError("total must not be negative")
        if not 0.0 <= snapshot_fraction <= 1.0:
            raise ValueError("snapshot_fraction must be between 0 and 1")
        snap = round(total * snapshot_fraction)
        customers = round(snap * _SNAPSHOT_SHARES["customers"])
        products = round(snap * _SNAPSHOT_SHARES["products"])
        if snap >= 3:
            # Every table gets rows, so the stream has something to update right away.
            customers = max(customers, 1)
            products = max(products, 1)
        orders = max(snap - customers - products, 0)
        return chain(
            self.snapshot(customers, products, orders),
            self.stream(total - (customers + products + orders), mix, hot_fraction),
        )

    # ------------------------------------------------------------------ rows

    def _new_customer(self, created_us: int) -> int:
        rows = self._rows["customers"]
        rnd = self._rng.random
        ident = rows.new_id()
        self._c_first.append(int(rnd() * len(FIRST_NAMES)))
        self._c_last.append(int(rnd() * len(LAST_NAMES)))
        self._c_email_ver.append(0)
        self._c_domain.append(int(rnd() * len(DOMAINS)))
        self._c_created.append(created_us)
        self._c_vip.append(1 if rnd() < 0.1 else 0)
        return ident

    def _reuse_customer(self, ident: int, created_us: int) -> None:
        """Fill the columns of a previously deleted customer id that is inserted again."""
        rnd = self._rng.random
        i = ident - 1001
        self._c_first[i] = int(rnd() * len(FIRST_NAMES))
        self._c_last[i] = int(rnd() * len(LAST_NAMES))
        self._c_email_ver[i] += 1
        self._c_domain[i] = int(rnd() * len(DOMAINS))
        self._c_created[i] = created_us
        self._c_vip[i] = 0

    def _new_product(self, updated_us: int) -> int:
        rows = self._rows["products"]
        rnd = self._rng.random
        ident = rows.new_id()
        self._p_name.append(int(rnd() * len(PRODUCT_NAMES_J)))
        self._p_desc.append(-1 if rnd() < 0.2 else int(rnd() * len(DESCRIPTIONS_J)))
        # Prices from 0.99 to about 2000.00, most of them small.
        self._p_price.append(99 + int(rnd() * rnd() * 200_000))
        self._p_weight.append(_NAN if rnd() < 0.15 else round(0.05 + rnd() * 40, 3))
        self._p_updated.append(updated_us)
        return ident

    def _new_order(self, day: int, status: int) -> int:
        rows = self._rows["orders"]
        rnd = self._rng.random
        ident = rows.new_id()
        customers = self._rows["customers"].live
        products = self._rows["products"].live
        # Foreign keys point at live rows (any plausible id while a table is empty).
        self._o_customer.append(
            customers[int(rnd() * len(customers))] if customers else 1001 + int(rnd() * 100)
        )
        self._o_product.append(
            products[int(rnd() * len(products))] if products else 101 + int(rnd() * 100)
        )
        self._o_quantity.append(1 + int(rnd() * rnd() * 12))
        self._o_date.append(day)
        self._o_status.append(status)
        if self.notes:
            self._o_note.append(-1 if rnd() < 0.05 else int(rnd() * len(self._notes_j)))
        return ident

    def _customer_json(self, ident: int) -> str:
        i = ident - 1001
        first = self._c_first[i]
        last = self._c_last[i]
        ver = self._c_email_ver[i]
        tag = f"+{ver}" if ver else ""
        return (
            f'{{"id":{ident},"first_name":{FIRST_J[first]},"last_name":{LAST_J[last]},'
            f'"email":"{FIRST_SLUG[first]}.{LAST_SLUG[last]}{ident}{tag}'
            f'@{DOMAINS[self._c_domain[i]]}","created_at":{self._c_created[i]},'
            f'"vip":{"true" if self._c_vip[i] else "false"}}}'
        )

    def _product_json(self, ident: int) -> str:
        i = ident - 101
        desc = self._p_desc[i]
        weight = self._p_weight[i]
        price = self._p_price[i]
        price_b64 = self._decimals.get(price)
        if price_b64 is None:
            price_b64 = self._decimals[price] = decimal_base64(price)
        return (
            f'{{"id":{ident},"name":{PRODUCT_NAMES_J[self._p_name[i]]},'
            f'"description":{"null" if desc < 0 else DESCRIPTIONS_J[desc]},'
            f'"price":"{price_b64}","weight":{"null" if weight != weight else repr(weight)},'
            f'"updated_at":{self._zoned(self._p_updated[i])}}}'
        )

    def _order_json(self, ident: int) -> str:
        i = ident - 10001
        return (
            f'{{"id":{ident},"customer_id":{self._o_customer[i]},'
            f'"product_id":{self._o_product[i]},"quantity":{self._o_quantity[i]},'
            f'"order_date":{self._o_date[i]},"status":{STATUS_J[self._o_status[i]]}'
            f"{self._note_json(i)}}}"
        )

    def _note_json(self, i: int) -> str:
        if not self.notes:
            return ""
        note = self._o_note[i]
        return f',"note":{"null" if note < 0 else self._notes_j[note]}'

    def _update_row(self, table: str, ident: int, commit_us: int) -> None:
        """Apply a plausible UPDATE to the stored row."""
        rnd = self._rng.random
        if table == "customers":
            i = ident - 1001
            r = rnd()
            if r < 0.5:
                self._c_email_ver[i] += 1
                self._c_domain[i] = int(rnd() * len(DOMAINS))
            elif r < 0.8:
                self._c_vip[i] ^= 1
            else:
                self._c_last[i] = int(rnd() * len(LAST_NAMES))
        elif table == "products":
            i = ident - 101
            r = rnd()
            if r < 0.6:
                # Price changes of -20 % .. +25 %, never below 0.01.
                self._p_price[i] = max(1, int(self._p_price[i] * (0.8 + rnd() * 0.45)))
            elif r < 0.8:
                self._p_desc[i] = -1 if rnd() < 0.15 else int(rnd() * len(DESCRIPTIONS_J))
            else:
                self._p_weight[i] = _NAN if rnd() < 0.1 else round(0.05 + rnd() * 40, 3)
            self._p_updated[i] = commit_us
        else:
            i = ident - 10001
            status = self._o_status[i]
            if status < 2 and rnd() < 0.85:
                self._o_status[i] = status + 1  # NEW -> PAID -> SHIPPED
            elif status < 2:
                self._o_status[i] = 3  # CANCELLED
            else:
                self._o_quantity[i] = 1 + int(rnd() * 12)  # a correction after the fact
            if self.notes and rnd() < 0.33:
                self._o_note[i] = int(rnd() * len(self._notes_j))

    # ------------------------------------------------------------------ messages

    def _snapshot_messages(
        self, snapshot_us: int, sizes: tuple[int, int, int]
    ) -> Iterator[Message]:
        rnd = self._rng.random
        source_head = self._source_head
        tail = self._tail
        lsn = _SNAPSHOT_LSN
        source_rest = f',"db":"{DATABASE}","sequence":"[null,\\"{lsn}\\"]",'
        total = sum(sizes)
        produced = 0
        row_json = {
            "customers": self._customer_json,
            "products": self._product_json,
            "orders": self._order_json,
        }
        for table, size in zip(TABLES, sizes, strict=True):
            rows = self._rows[table]
            topic = self.topics[table]
            key_head = self._key_head[table]
            value_head = self._value_head[table]
            render = row_json[table]
            source_tail = (
                f'"schema":"{SCHEMA}","table":"{table}","txId":{_SNAPSHOT_TXID},'
                f'"lsn":{lsn},"xmin":null}}'
            )
            counts = self.counts[table]
            # Snapshot rows are the first `size` ids of the table, in key order.
            for n in range(size):
                ident = rows.base + n
                if produced == total - 1:
                    marker = "last"
                elif produced == 0:
                    marker = "first"
                elif n == 0:
                    marker = "first_in_data_collection"
                elif n == size - 1:
                    marker = "last_in_data_collection"
                else:
                    marker = "true"
                produced += 1
                read_us = snapshot_us + (produced // 300) * 1000
                read_ms = read_us // 1000
                env_ms = max(read_ms + 2 + int(rnd() * 30), self._last_env_ms)
                self._last_env_ms = env_ms
                env_us = env_ms * 1000 + int(rnd() * 1000)
                counts["r"] += 1
                yield (
                    topic,
                    f'{key_head}{{"id":{ident}}}{tail}'.encode(),
                    (
                        f'{value_head}{{"before":null,"after":{render(ident)},'
                        f'"source":{source_head}{read_ms},"snapshot":"{marker}"'
                        f'{source_rest}"ts_us":{read_us},"ts_ns":{read_us}000,{source_tail},'
                        f'"transaction":null,"op":"r","ts_ms":{env_ms},"ts_us":{env_us},'
                        f'"ts_ns":{env_us}000}}{tail}'
                    ).encode(),
                )

    def _stream(
        self, n_events: int, weights: list[tuple[float, int, int]], hot_fraction: float
    ) -> Iterator[Message]:
        rng = self._rng
        rnd = rng.random
        tables = TABLES
        all_rows = [self._rows[t] for t in tables]
        topics = [self.topics[t] for t in tables]
        key_heads = [self._key_head[t] for t in tables]
        value_heads = [self._value_head[t] for t in tables]
        counts = [self.counts[t] for t in tables]
        renders = [self._customer_json, self._product_json, self._order_json]
        tail = self._tail
        source_head = self._source_head
        notes = self.notes
        update_row = self._update_row
        tx_sizes = _TX_SIZES
        n_tx_sizes = len(tx_sizes)
        customers = all_rows[0]
        thresholds = [w[0] for w in weights]
        choice_table = [w[1] for w in weights]
        choice_op = [w[2] for w in weights]

        remaining = n_events
        while remaining > 0:
            # ---- BEGIN: a new transaction with its own xid and commit time.
            self._txid += 1 if rnd() < 0.8 else 2 + int(rnd() * 3)
            self._now_us = advance(self._now_us, 1000 + int(rnd() * 20_000), self._clock)
            commit_us = self._now_us
            commit_ms = commit_us // 1000
            txid = self._txid
            prev_commit = self._last_commit_lsn
            lsn = self._lsn + 64 + 8 * int(rnd() * 64)
            source_a = (
                f'{source_head}{commit_ms},"snapshot":"false","db":"{DATABASE}",'
                f'"sequence":"[\\"{prev_commit}\\",\\"'
            )
            source_b = (
                f'\\"]","ts_us":{commit_us},"ts_ns":{commit_us}000,"schema":"{SCHEMA}","table":"'
            )
            source_c = f'","txId":{txid},"lsn":'
            # The connector sees the transaction a little after its commit; its clock
            # (the envelope ts_ms) never goes backwards.
            env_ms = max(commit_ms + 3 + int(rnd() * 40), self._last_env_ms)
            self._last_env_ms = env_ms
            size = tx_sizes[int(rnd() * n_tx_sizes)]

            for _ in range(size):
                if remaining <= 0:
                    break
                # ---- choose table and operation
                k = bisect(thresholds, rnd())
                t = choice_table[k]
                op = choice_op[k]
                rows = all_rows[t]
                live = rows.live
                if op and not live:
                    op = 0  # nothing to update or delete yet: insert instead
                elif op == 2 and remaining < 2:
                    op = 1  # no room left for the tombstone
                lsn += 56 + 8 * int(rnd() * 40)
                # Saved per event: a caller may abandon the iterator mid-transaction, and
                # the next stream() must still continue above every LSN already emitted.
                self._lsn = lsn
                ident: int
                if op:
                    n_live = len(live)
                    if hot_fraction and rnd() < hot_fraction:
                        window = max(16, n_live // 100)
                        ident = live[n_live - 1 - int(rnd() * min(window, n_live))]
                    else:
                        ident = live[int(rnd() * n_live)]
                if op == 0:
                    if t == 0:
                        if customers.dead and rnd() < 0.1:
                            # A deleted customer signs up again under the old id.
                            dead = customers.dead
                            pick = int(rnd() * len(dead))
                            ident = dead[pick]
                            dead[pick] = dead[-1]
                            dead.pop()
                            self._reuse_customer(ident, commit_us)
                        else:
                            ident = self._new_customer(commit_us)
                    elif t == 1:
                        ident = self._new_product(commit_us)
                    else:
                        ident = self._new_order(commit_us // US_PER_DAY, 0)
                    rows.add(ident)
                    before = "null"
                    after = renders[t](ident)
                    code = "c"
                elif op == 1:
                    update_row(tables[t], ident, commit_us)
                    before = "null"
                    after = renders[t](ident)
                    code = "u"
                else:
                    rows.remove(ident)
                    if t == 0:
                        customers.dead.append(ident)
                    before = deleted_row_json(tables[t], ident, notes)
                    after = "null"
                    code = "d"
                env_us = str(env_ms * 1000 + int(rnd() * 1000))
                lsn_s = str(lsn)
                key = f'{key_heads[t]}{{"id":{ident}}}{tail}'.encode()
                counts[t][code] += 1
                yield (
                    topics[t],
                    key,
                    (
                        f'{value_heads[t]}{{"before":{before},"after":{after},'
                        f'"source":{source_a}{lsn_s}{source_b}{tables[t]}{source_c}{lsn_s},'
                        f'"xmin":null}},"transaction":null,"op":"{code}","ts_ms":{env_ms},'
                        f'"ts_us":{env_us},"ts_ns":{env_us}000}}{tail}'
                    ).encode(),
                )
                remaining -= 1
                if code == "d":
                    counts[t]["x"] += 1
                    yield (topics[t], key, None)
                    remaining -= 1
            # ---- COMMIT
            self._lsn = lsn + 48
            self._last_commit_lsn = self._lsn


def _normalize_mix(spec: Mapping[str, Any] | None) -> list[tuple[float, int, int]]:
    """Turn a mix into cumulative thresholds ``(upper bound, table index, op index)``.

    A uniform draw ``r`` selects the first entry whose bound exceeds it, which is what
    ``bisect`` (right) over the bounds finds.
    """
    mix: Mapping[str, Any] = DEFAULT_MIX if spec is None else spec
    pairs: list[tuple[float, int, int]] = []
    if set(mix) <= set(_OPS):
        # One split of operations for every table, tables weighted like the default.
        table_weight = {t: sum(DEFAULT_MIX[t].values()) for t in TABLES}
        nested = {t: {op: float(mix.get(op, 0.0)) * table_weight[t] for op in _OPS} for t in TABLES}
    else:
        unknown = set(mix) - set(TABLES)
        if unknown:
            raise ValueError(f"unknown tables in mix: {sorted(unknown)}; expected {TABLES}")
        nested = {}
        for table, ops in mix.items():
            bad = set(ops) - set(_OPS)
            if bad:
                raise ValueError(f"unknown operations in mix[{table!r}]: {sorted(bad)}")
            nested[table] = {op: float(ops.get(op, 0.0)) for op in _OPS}
    for ti, table in enumerate(TABLES):
        for oi, op in enumerate(_OPS):
            weight = nested.get(table, {}).get(op, 0.0)
            if weight < 0 or math.isnan(weight):
                raise ValueError(f"mix fraction for {table}.{op} must be >= 0")
            if weight > 0:
                pairs.append((weight, ti, oi))
    total = sum(w for w, _, _ in pairs)
    if total <= 0:
        raise ValueError("the mix must give at least one operation a positive fraction")
    cumulative: list[tuple[float, int, int]] = []
    acc = 0.0
    for weight, ti, oi in pairs:
        acc += weight / total
        cumulative.append((acc, ti, oi))
    # Guard against rounding: the last threshold must catch every draw in [0, 1).
    last = cumulative[-1]
    cumulative[-1] = (2.0, last[1], last[2])
    return cumulative
