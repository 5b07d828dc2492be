"""Compare one replica with its source table: counts, range hashes, then rows by key.

1. Columns: each column shared by both sides gets a comparison kind
   (:mod:`engine.validate.canonical`); columns on one side only are a difference.
2. Segments: a table with a single integer key is split into key ranges of about
   :data:`SEGMENT_ROWS` source rows (by the key's min and max); other keys are bucketed by
   a hash of the key's canonical text. A table of one segment is compared row by row at
   once.
3. Per segment, the source computes ``count(*)`` and the sum of its rows' hashes in SQL
   (one grouped query, in the snapshot); the replica the same over its file slices,
   :data:`READ_THREADS` at a time, while the database works. Equal count and sum: the
   segment is equal.
4. Rows of the differing segments are compared by key: the source's rows of a chunk of
   segments are streamed in key order into a dict (bounded by :data:`ROW_BUDGET`), the
   replica's rows of those segments are matched against it (from the slices kept from
   step 3 when they fit in :data:`KEEP_BYTES`, else read again).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.model import ROW_POS
from engine.validate import canonical as cn
from engine.validate.canonical import ColumnPlan
from engine.validate.replica import Replica, max_position, strip_streamed
from engine.validate.report import MAX_EXAMPLES, ColumnDiff, RowDiff, TableReport
from engine.validate.source import SourceDB, TableRef

#: Source rows per segment (a differing segment is fetched row by row); the environment
#: variable ``CDCCTL_VALIDATE_SEGMENT_ROWS`` overrides it (tests use small segments).
SEGMENT_ROWS = int(os.environ.get("CDCCTL_VALIDATE_SEGMENT_ROWS") or 5_000)
#: Most source rows held at once while comparing row by row.
ROW_BUDGET = 400_000
#: File slices of the replica read and hashed at once (hudi-rs, Arrow and DuckDB work
#: without Python's lock, so two use both cores of a small machine).
READ_THREADS = 2
#: Bytes of replica rows kept from the hashing pass, so that the rows of differing
#: segments are compared without reading the replica again (a larger replica is read
#: again).
KEEP_BYTES = 256 << 20
_MASK64 = (1 << 64) - 1
_T = TypeVar("_T")


@dataclass
class _Plan:
    """How a table is compared."""

    ref: TableRef
    columns: list[ColumnPlan]  # shared columns, replica order
    keys: list[ColumnPlan]
    hashed: list[ColumnPlan]
    row_only: list[ColumnPlan]
    #: ``ranges``: (lo, width, n) of the integer key; ``key-hash``: n buckets.
    method: str = "rows"
    lo: int = 0
    width: int = 1
    segments: int = 1
    source_rows: int = 0
    int_key: bool = False
    #: The source's position when its rows were read (None: not known).
    position: int | None = None


@dataclass
class _Found:
    """Differences found for a set of keys."""

    missing: dict[str, Any] = field(default_factory=dict)  # key -> raw key values
    extra: dict[str, Any] = field(default_factory=dict)
    differing: dict[str, tuple[Any, list[ColumnDiff]]] = field(default_factory=dict)
    compared: int = 0


def _key_text(texts: list[str | None], names: list[str]) -> str:
    if len(texts) == 1:
        return "NULL" if texts[0] is None else texts[0]
    return ", ".join(f"{n}={'NULL' if t is None else t}" for n, t in zip(names, texts, strict=True))


# ----------------------------------------------------------------------------- planning


def make_plan(db: SourceDB, replica: Replica, ref: TableRef, report: TableReport) -> _Plan | None:
    """Shared columns and their kinds; None (with ``report.error``) when not comparable."""
    source_cols = db.columns(ref)
    if not source_cols:
        report.status = "error"
        report.error = f"source table {ref} not found (or not readable) in {db.shown}"
        return None
    by_name = {c.name: c for c in source_cols}
    replica_names = [f.name for f in replica.schema]
    report.source_only_columns = [c.name for c in source_cols if c.name not in replica_names]
    report.replica_only_columns = [n for n in replica_names if n not in by_name]
    kept = [n for n in report.replica_only_columns if n in replica.kept_columns]
    if kept:  # dropped in the source, kept by schema_changes = "keep": not a difference
        report.replica_only_columns = [n for n in report.replica_only_columns if n not in kept]
        report.notes.append(
            f"column(s) {', '.join(kept)} no longer in the source are kept in the replica "
            '(schema_changes = "keep"): not compared'
        )
    columns = [
        ColumnPlan(
            f.name,
            cn.column_kind(db.dialect, by_name[f.name], f.type),
            by_name[f.name].type,
            f.type,
            by_name[f.name].nullable,
        )
        for f in replica.schema
        if f.name in by_name
    ]
    plans = {c.name: c for c in columns}
    missing_keys = [k for k in replica.key_fields if k not in plans]
    if missing_keys:
        report.status = "error"
        report.error = f"key column(s) {', '.join(missing_keys)} not in the source table {ref}"
        return None
    keys = [plans[k] for k in replica.key_fields]
    if any(k.kind == cn.ROW for k in keys):
        bad = [f"{k.name} ({k.source_type})" for k in keys if k.kind == cn.ROW]
        report.status = "error"
        report.error = f"key column type not supported for comparison: {', '.join(bad)}"
        return None
    hashed = [c for c in columns if c.kind != cn.ROW]
    row_only = [c for c in columns if c.kind == cn.ROW]
    report.row_only_columns = [c.name for c in row_only]
    plan = _Plan(ref, columns, keys, hashed, row_only)
    plan.int_key = len(keys) == 1 and keys[0].kind == cn.INT
    return plan


def _choose_segments(db: SourceDB, plan: _Plan) -> None:
    table = db.qualified(plan.ref)
    if plan.int_key:
        k = db.quote(plan.keys[0].name)
        count, lo, hi = db.query(f"SELECT count(*), min({k}), max({k}) FROM {table}")[0]
        plan.source_rows = int(count)
        n = max(1, math.ceil(plan.source_rows / SEGMENT_ROWS))
        if n > 1 and lo is not None and hi is not None:
            plan.method = "ranges"
            plan.lo = int(lo)
            plan.width = max(1, math.ceil((int(hi) - int(lo) + 1) / n))
            plan.segments = math.ceil((int(hi) - int(lo) + 1) / plan.width)
        return
    plan.source_rows = int(db.query(f"SELECT count(*) FROM {table}")[0][0])
    n = max(1, math.ceil(plan.source_rows / SEGMENT_ROWS))
    if n > 1:
        plan.method = "key-hash"
        plan.segments = n


# ----------------------------------------------------------------------------- source side


def _source_key_text(db: SourceDB, plan: _Plan) -> str:
    return db.row_text([db.text_expr(k) for k in plan.keys])


def _source_segment(db: SourceDB, plan: _Plan) -> tuple[str, list[Any]]:
    """SQL of a row's segment (0-based, as on the replica side) and its parameters."""
    if plan.method == "ranges":
        k = db.quote(plan.keys[0].name)
        div = "/" if db.dialect == "postgresql" else "DIV"
        return f"(({k} - %s) {div} %s)", [plan.lo, plan.width]
    text = _source_key_text(db, plan)
    if db.dialect == "postgresql":
        return f"(('x' || substr(md5({text}), 1, 8))::bit(32)::bigint %% %s)", [plan.segments]
    return f"(CAST(CONV(SUBSTR(MD5({text}), 1, 8), 16, 10) AS UNSIGNED) %% %s)", [plan.segments]


def _source_segment_sums(db: SourceDB, plan: _Plan) -> dict[int, tuple[int, int]]:
    seg, params = _source_segment(db, plan)
    row = db.row_text([db.text_expr(c) for c in plan.hashed])
    h = db.hash_expr(row)
    sql = f"SELECT {seg} AS seg, count(*), sum({h}) FROM {db.qualified(plan.ref)} GROUP BY 1"
    return {int(s): (int(c), int(t) & _MASK64) for s, c, t in db.query(sql, params)}


def _segment_filter(db: SourceDB, plan: _Plan, segments: list[int]) -> tuple[str, list[Any]]:
    if plan.method == "rows":
        return "", []
    if plan.method == "ranges":
        k = db.quote(plan.keys[0].name)
        runs: list[list[int]] = []
        for s in sorted(segments):
            if runs and runs[-1][1] == s - 1:
                runs[-1][1] = s
            else:
                runs.append([s, s])
        parts, params = [], []
        for a, b in runs:
            parts.append(f"({k} >= %s AND {k} < %s)")
            params += [plan.lo + a * plan.width, plan.lo + (b + 1) * plan.width]
        return " WHERE " + " OR ".join(parts), params
    seg, params = _source_segment(db, plan)
    marks = ", ".join(["%s"] * len(segments))
    return f" WHERE {seg} IN ({marks})", params + list(segments)


def _source_rows(
    db: SourceDB, plan: _Plan, where: str, params: list[Any]
) -> Iterable[tuple[str, list[Any], list[str | None], list[Any]]]:
    """(key text, raw key values, canonical texts of hashed columns, raw row-only values)."""
    texts = [db.text_expr(c) for c in plan.hashed]
    raws = [db.raw_expr(c) for c in plan.row_only]
    keyraw = [db.quote(k.name) for k in plan.keys]
    select = ", ".join(f"{e} AS _v{i}" for i, e in enumerate(texts + raws + keyraw))
    order = ", ".join(db.key_order(k.name, k.source_type) for k in plan.keys)
    sql = f"SELECT {select} FROM {db.qualified(plan.ref)}{where} ORDER BY {order}"
    key_idx = [plan.hashed.index(k) for k in plan.keys]
    nh, nr = len(texts), len(raws)
    names = [k.name for k in plan.keys]
    for row in db.stream(sql, params):
        hashed = list(row[:nh])
        key = _key_text([hashed[i] for i in key_idx], names)
        yield key, list(row[nh + nr :]), hashed, list(row[nh : nh + nr])


# ----------------------------------------------------------------------------- replica side


def _texts(table: pa.Table, cols: list[ColumnPlan]) -> list[pa.Array]:
    return [cn.replica_text(table.column(c.name), c.kind) for c in cols]


def _replica_segments(con: duckdb.DuckDBPyConnection, table: pa.Table, plan: _Plan) -> np.ndarray:
    """Each row's segment index shifted by one (0: below the source's keys; for ranges
    ``segments + 1``: above them)."""
    if plan.method == "ranges":
        k = table.column(plan.keys[0].name).to_numpy(zero_copy_only=False).astype(np.int64)
        seg = (k - plan.lo) // plan.width
        return np.clip(seg, -1, plan.segments) + 1
    if plan.method == "rows":
        return np.ones(table.num_rows, dtype=np.int64)
    key_texts = cn.row_texts(_texts(table, plan.keys))
    con.register("kt", pa.table({"t": key_texts}))
    seg = (
        con.sql(
            f"SELECT ('0x' || substr(md5(t), 1, 8))::BIGINT % {int(plan.segments)} AS s FROM kt"
        )
        .to_arrow_table()
        .column("s")
    )
    con.unregister("kt")
    return seg.to_numpy().astype(np.int64) + 1


def _in_threads(
    work: Callable[[Callable[[], pa.Table], duckdb.DuckDBPyConnection], _T],
    readers: list[Callable[[], pa.Table]],
) -> Iterator[_T]:
    """``work(reader, con)`` of every slice reader, :data:`READ_THREADS` at once (each
    thread with its own DuckDB connection), in order; at most one result waits unread
    per thread, so memory holds a few slices, never the table."""
    local = threading.local()
    connections: list[duckdb.DuckDBPyConnection] = []
    lock = threading.Lock()

    def run(reader: Callable[[], pa.Table]) -> _T:
        con = getattr(local, "con", None)
        if con is None:
            con = local.con = duckdb.connect()
            with lock:
                connections.append(con)
        return work(reader, con)

    try:
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="validate-replica") as pool:
            pending: deque[Future[_T]] = deque()
            for reader in readers:
                pending.append(pool.submit(run, reader))
                if len(pending) >= 2 * READ_THREADS:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
    finally:
        for con in connections:
            con.close()


def _replica_sums(
    replica: Replica, plan: _Plan, report: TableReport, kept: list[pa.Table] | None = None
) -> tuple[dict[int, tuple[int, int]], int | None]:
    """Per segment (shifted by one) the replica's count and hash sum (mod 2**64), and the
    newest ``_cdc_pos`` of its rows. ``kept``: filled with the slices read, unless they
    are more than :data:`KEEP_BYTES` (then emptied)."""
    n = plan.segments + 2
    counts = np.zeros(n, dtype=np.int64)
    sums = np.zeros(n, dtype=np.uint64)
    newest: int | None = None
    names = [c.name for c in plan.columns] + [ROW_POS]

    def work(
        read: Callable[[], pa.Table], con: duckdb.DuckDBPyConnection
    ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        table = read()
        if table.num_rows == 0:
            return table, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint64)
        seg = _replica_segments(con, table, plan)
        hashes = cn.row_hashes(cn.row_texts(_texts(table, plan.hashed)), con)
        part = np.zeros(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.add.at(part, seg, hashes.to_numpy().astype(np.uint64))
        return table, np.bincount(seg, minlength=n), part

    held = 0
    for table, count, part in _in_threads(work, replica.slice_readers(names)):
        if table.num_rows == 0:
            continue
        pos = max_position(table)
        if pos is not None:
            newest = pos if newest is None else max(newest, pos)
        report.replica_rows += table.num_rows
        counts += count
        with np.errstate(over="ignore"):
            sums += part
        if kept is not None and held <= KEEP_BYTES:
            held += table.nbytes
            if held <= KEEP_BYTES:
                kept.append(table)
            else:
                kept.clear()
    out = {s: (int(counts[s]), int(sums[s])) for s in range(n) if counts[s]}
    return out, newest


def _replica_rows(
    replica: Replica,
    plan: _Plan,
    keep: Callable[[duckdb.DuckDBPyConnection, pa.Table], pa.Array | None],
    report: TableReport | None,
    newest: list[int | None],
    kept: list[pa.Table] | None = None,
    positions: dict[str, int] | None = None,
) -> Iterable[tuple[str, list[Any], list[str | None], list[Any]]]:
    """Replica rows passing ``keep`` (a mask over a slice; None: all), as (key text, raw
    key, canonical texts, raw row-only values); from the slices ``kept`` when given.
    ``positions`` (when given) gets each row's stored ``_cdc_pos`` by key text."""
    names = [c.name for c in plan.columns] + [ROW_POS]
    key_idx = [plan.hashed.index(k) for k in plan.keys]
    key_names = [k.name for k in plan.keys]
    con = duckdb.connect()
    try:
        for table in kept if kept else replica.slices(names):
            if table.num_rows == 0:
                continue
            if report is not None:
                report.replica_rows += table.num_rows
                pos = max_position(table)
                if pos is not None:
                    newest[0] = pos if newest[0] is None else max(newest[0], pos)
            mask = keep(con, table)
            if mask is not None:
                table = table.filter(mask)
            if table.num_rows == 0:
                continue
            texts = [t.to_pylist() for t in _texts(table, plan.hashed)]
            raws = [table.column(c.name).to_pylist() for c in plan.row_only]
            keyraw = [table.column(k.name).to_pylist() for k in plan.keys]
            stored = table.column(ROW_POS).to_pylist() if positions is not None else []
            for i in range(table.num_rows):
                hashed = [t[i] for t in texts]
                key = _key_text([hashed[j] for j in key_idx], key_names)
                if positions is not None:
                    positions[key] = stored[i]
                yield key, [k[i] for k in keyraw], hashed, [r[i] for r in raws]
    finally:
        con.close()


# ----------------------------------------------------------------------------- rows


def _compare_rows(
    plan: _Plan,
    source: Iterable[tuple[str, list[Any], list[str | None], list[Any]]],
    replica: Iterable[tuple[str, list[Any], list[str | None], list[Any]]],
    found: _Found,
) -> None:
    """Match replica rows against the (bounded) source rows by key."""
    held: dict[str, tuple[list[Any], list[str | None], list[Any]]] = {}
    for key, raw, texts, rows in source:
        held[key] = (raw, texts, rows)
    found.compared += len(held)
    for key, raw, texts, rows in replica:
        src = held.pop(key, None)
        if src is None:
            found.extra[key] = raw
            continue
        diffs = [
            ColumnDiff(c.name, a, b)
            for c, a, b in zip(plan.hashed, src[1], texts, strict=True)
            if a != b
        ]
        diffs += [
            ColumnDiff(c.name, _shown(a), _shown(b))
            for c, a, b in zip(plan.row_only, src[2], rows, strict=True)
            if not cn.same_value(c.source_type, a, b)
        ]
        if diffs:
            found.differing[key] = (src[0], diffs)
    for key, (raw, _, _) in held.items():
        found.missing[key] = raw


def _shown(v: Any) -> Any:
    if v is None or isinstance(v, int | float | str | bool):
        return v
    return str(v)


def _chunks(segments: list[int], sizes: dict[int, int]) -> list[list[int]]:
    out: list[list[int]] = [[]]
    total = 0
    for s in segments:
        size = sizes.get(s, 0)
        if out[-1] and total + size > ROW_BUDGET:
            out.append([])
            total = 0
        out[-1].append(s)
        total += size
    return out


def _fill(report: TableReport, found: _Found) -> None:
    report.missing = len(found.missing)
    report.extra = len(found.extra)
    report.differing = len(found.differing)
    report.missing_keys = sorted(found.missing)[:MAX_EXAMPLES]
    report.extra_keys = sorted(found.extra)[:MAX_EXAMPLES]
    report.differing_rows = [
        RowDiff(k, found.differing[k][1]) for k in sorted(found.differing)[:MAX_EXAMPLES]
    ]
    report.rows_compared_row_by_row = found.compared


# ----------------------------------------------------------------------------- one table


def compare_table(
    db: SourceDB, replica: Replica, ref: TableRef, report: TableReport
) -> tuple[_Plan, _Found] | None:
    """Fill ``report`` with the comparison of ``replica`` and the source table ``ref``."""
    started = time.monotonic()
    plan = make_plan(db, replica, ref, report)
    if plan is None:
        return None
    snapshot = plan.position = db.begin_snapshot()
    report.source_position = db.position_text(snapshot)
    found = _Found()
    newest: list[int | None] = [None]
    src: Iterable[Any]
    try:
        _choose_segments(db, plan)
        report.method = plan.method
        report.source_rows = plan.source_rows
        if plan.method == "rows":
            report.ranges = 1
            src = _source_rows(db, plan, "", [])
            rows = _replica_rows(replica, plan, lambda con, t: None, report, newest)
            _compare_rows(plan, src, rows, found)
        else:
            report.ranges = plan.segments
            # The database hashes its side while this process reads the replica's.
            kept: list[pa.Table] = []
            with ThreadPoolExecutor(1, thread_name_prefix="validate-source") as pool:
                pending = pool.submit(_source_segment_sums, db, plan)
                replica_sums, newest[0] = _replica_sums(replica, plan, report, kept)
                source_sums = {s + 1: v for s, v in pending.result().items()}
            differing = sorted(
                s
                for s in set(source_sums) | set(replica_sums)
                if source_sums.get(s, (0, 0)) != replica_sums.get(s, (0, 0))
            )
            report.ranges_differing = len(differing)
            sizes = {s: source_sums.get(s, (0, 0))[0] for s in differing}
            for chunk in _chunks(differing, sizes):
                wanted = set(chunk)
                real = [s - 1 for s in chunk if 1 <= s <= plan.segments]
                if real:
                    where, params = _segment_filter(db, plan, real)
                    src = _source_rows(db, plan, where, params)
                else:
                    src = iter(())
                value_set = pa.array(sorted(wanted), pa.int64())

                def keep(
                    con: duckdb.DuckDBPyConnection, t: pa.Table, vs: pa.Array = value_set
                ) -> pa.Array:
                    return pc.is_in(pa.array(_replica_segments(con, t, plan)), value_set=vs)

                rows = _replica_rows(replica, plan, keep, None, newest, kept)
                _compare_rows(plan, src, rows, found)
            kept.clear()
    finally:
        db.end_snapshot()
    known = [p for p in (newest[0], replica.tail_position) if p is not None]
    pos, _ = strip_streamed(max(known) if known else None)
    report.replica_position = db.position_text(pos) if pos is not None else None
    _fill(report, found)
    different = bool(found.missing or found.extra or found.differing)
    if report.source_only_columns or report.replica_only_columns:
        different = True
    report.status = "different" if different else "equal"
    report.seconds = round(time.monotonic() - started, 3)
    total = max(report.source_rows, report.replica_rows)
    report.rows_per_second = round(total / report.seconds) if report.seconds > 0 else 0.0
    return plan, found
