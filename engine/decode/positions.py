"""Source positions (``_cdc_pos``, ``_cdc_pos_sub``) from the ``source`` block, vectorised.

Encoding (see :mod:`engine.model`):

* PostgreSQL: ``pos = commit_lsn or lsn`` and ``sub = lsn``. ``commit_lsn`` is element 0
  of ``source.sequence`` (a JSON array of decimal strings, itself inside a string);
  ``lsn`` is ``source.lsn``, or element 1 of ``sequence`` when ``lsn`` is absent.
* MySQL: ``pos = file_index << 32 | pos`` and ``sub = row``; ``file_index`` is the
  numeric suffix of ``source.file`` (``mysql-bin.000123`` -> 123).
* ``STREAMED_BIT`` is set unless ``source.snapshot`` marks a snapshot row. Anything other
  than ``false``/``"false"``/absent counts as snapshot, except ``"incremental"``:
  incremental-snapshot rows are emitted in stream order and must not lose to older
  streamed changes, so they count as streamed.

Rows without a usable position (events without a ``source`` block, or without ``lsn`` and
``sequence``: older PostgreSQL connectors sent incremental-snapshot reads so; Debezium
3.6.1's carry the watermark's LSN in ``sequence``) get nulls; malformed positions (a
``sequence`` that is not the documented array, a binlog file without numeric suffix,
values that would not fit the encoding) are reported so the message is quarantined rather
than mis-ordered.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from engine.model import STREAMED_BIT

# Element values are bounded to 18 digits (< 2**62, the room left by STREAMED_BIT).
_SEQUENCE_RE = (
    r'^\s*\[\s*(?:"(?P<commit>[0-9]{1,18})"|(?P<commitn>[0-9]{1,18})|null)\s*,'
    r'\s*(?:"(?P<lsn>[0-9]{1,18})"|(?P<lsnn>[0-9]{1,18})|null)\s*\]\s*$'
)
_FILE_INDEX_RE = r"(?:^|[^0-9])(?P<index>[0-9]{1,9})$"
# Typed scalars (untyped Python numbers make pyarrow attempt an import on every call).
_MAX_LSN = pa.scalar((1 << 62) - 1, pa.int64())
_MAX_BINLOG_POS = pa.scalar((1 << 32) - 1, pa.int64())
_ZERO = pa.scalar(0, pa.int64())
_THOUSAND = pa.scalar(1000, pa.int64())
_THIRTY_TWO = pa.scalar(32, pa.int64())
_EMPTY = pa.scalar("", pa.string())
_NOT_SNAPSHOT = pa.array(["false", "incremental"], pa.string())
_MYSQL_CONNECTORS = pa.array(["mysql", "mariadb"], pa.string())

#: ``connector_hint`` spellings accepted by the decoder.
POSTGRES_HINTS = frozenset({"postgresql", "postgres", "pg"})
MYSQL_HINTS = frozenset({"mysql", "mariadb"})


@dataclass(slots=True)
class SourceColumns:
    """Control columns derived from ``source`` for one parsed piece.

    Attributes:
        pos: ``_cdc_pos`` (int64, null when unknown).
        pos_sub: ``_cdc_pos_sub`` (int64, null when unknown).
        source_ts_ms: ``_cdc_source_ts_ms`` (int64).
        bad: Mask of rows whose position is malformed, or None.
        reasons: Reason per mask, in the order checked (first match wins).
    """

    pos: pa.Array
    pos_sub: pa.Array
    source_ts_ms: pa.Array
    bad: list[tuple[pa.Array, str]]
    gtid: pa.Array | None = None


def _field(
    children: dict[str, pa.Array],
    name: str,
    n: int,
    typ: pa.DataType,
    bad: list[tuple[pa.Array, str]],
) -> pa.Array:
    """Member ``name`` of ``source`` as ``typ``; values of another JSON type are flagged.

    Schemaless input is read with inferred types, so a member can arrive as anything
    (e.g. ``{"long": 5}`` in an Avro JSON rendering); such rows must not be ordered by
    a silently nulled position.
    """
    arr = children.get(name)
    if arr is None or pa.types.is_null(arr.type):
        return pa.nulls(n, typ)
    if arr.type == typ:
        return arr
    compatible = (pa.types.is_integer(typ) and pa.types.is_integer(arr.type)) or (
        pa.types.is_string(typ) and pa.types.is_large_string(arr.type)
    )
    if compatible:
        return arr.cast(typ)
    bad.append((pc.is_valid(arr), f"source.{name} is {arr.type}, expected {typ}"))
    return pa.nulls(n, typ)


def _empty_to_null(arr: pa.Array) -> pa.Array:
    # extract_regex yields "" for an alternative that did not participate.
    return pc.if_else(pc.equal(arr, _EMPTY), pa.scalar(None, pa.string()), arr)


def _sequence_element(parts: dict[str, pa.Array], name: str) -> pa.Array:
    """Element of ``source.sequence`` as int64 (quoted or bare digits; null if absent)."""
    quoted = _empty_to_null(parts[name])
    bare = _empty_to_null(parts[name + "n"])
    return pc.coalesce(quoted, bare).cast(pa.int64())


#: ``source.snapshot`` of a table's last snapshot record (``last``: of the whole snapshot).
SNAPSHOT_END_MARKS = ("last", "last_in_data_collection")


def ends_snapshot(source: pa.Array | None) -> bool:
    """Whether a parsed ``source`` struct column holds a table's last snapshot record."""
    if source is None or not pa.types.is_struct(source.type):
        return False
    index = source.type.get_field_index("snapshot")
    if index < 0:
        return False
    snapshot = source.field(index)
    if not (pa.types.is_string(snapshot.type) or pa.types.is_large_string(snapshot.type)):
        return False
    ends = pc.is_in(snapshot.cast(pa.string()), value_set=pa.array(SNAPSHOT_END_MARKS))
    return bool(pc.any(ends).as_py())


def is_snapshot(snapshot: pa.Array | None, n: int) -> pa.Array:
    """Boolean mask of snapshot rows from ``source.snapshot`` (any JSON type)."""
    if snapshot is None or pa.types.is_null(snapshot.type):
        return pa.array([False] * n, pa.bool_()) if n else pa.array([], pa.bool_())
    if pa.types.is_boolean(snapshot.type):
        return pc.fill_null(snapshot, False)
    if pa.types.is_string(snapshot.type) or pa.types.is_large_string(snapshot.type):
        snap = pc.invert(pc.is_in(snapshot.cast(pa.string()), value_set=_NOT_SNAPSHOT))
        return pc.fill_null(pc.and_(snap, pc.is_valid(snapshot)), False)
    # Any other type (never produced by Debezium): present means snapshot, per the doc.
    return pc.is_valid(snapshot)


def source_columns(source: pa.Array | None, n: int, connector_hint: str | None) -> SourceColumns:
    """Compute positions and the source timestamp for ``n`` rows.

    Args:
        source: The parsed ``source`` struct column (None if no row has one).
        n: Number of rows.
        connector_hint: ``"postgresql"``/``"mysql"`` to force an encoding; None detects it
            per row from ``source.connector`` (or the presence of ``file`` for 0.x MySQL).
    """
    if source is None or not pa.types.is_struct(source.type):
        nulls = pa.nulls(n, pa.int64())
        return SourceColumns(nulls, nulls, nulls, [], pa.nulls(n, pa.string()))
    children = dict(zip([f.name for f in source.type], source.flatten(), strict=True))
    i64 = pa.int64()
    type_bad: list[tuple[pa.Array, str]] = []
    connector = _field(children, "connector", n, pa.string(), type_bad)
    lsn = _field(children, "lsn", n, i64, type_bad)
    sequence = _field(children, "sequence", n, pa.string(), type_bad)
    binlog_file = _field(children, "file", n, pa.string(), type_bad)
    binlog_pos = _field(children, "pos", n, i64, type_bad)
    gtid = _field(children, "gtid", n, pa.string(), type_bad)
    binlog_row = _field(children, "row", n, i64, type_bad)

    # Database time; legacy shapes carried ts_usec (PostgreSQL 0.x) or ts_sec (MySQL 0.x).
    ts = pc.coalesce(
        _field(children, "ts_ms", n, i64, type_bad),
        pc.divide(_field(children, "ts_us", n, i64, type_bad), _THOUSAND),
        pc.divide(_field(children, "ts_usec", n, i64, type_bad), _THOUSAND),
        pc.multiply(_field(children, "ts_sec", n, i64, type_bad), _THOUSAND),
    )

    # -- PostgreSQL --------------------------------------------------------------------
    seq = pc.extract_regex(sequence, _SEQUENCE_RE)
    seq_bad = pc.and_(pc.is_valid(sequence), pc.is_null(seq))
    seq_parts = dict(zip([f.name for f in seq.type], seq.flatten(), strict=True))
    commit = _sequence_element(seq_parts, "commit")
    seq_lsn = _sequence_element(seq_parts, "lsn")
    event_lsn = pc.coalesce(lsn, seq_lsn)
    lsn_bad = pc.or_(pc.less(event_lsn, _ZERO), pc.greater(event_lsn, _MAX_LSN))
    null_i64 = pa.scalar(None, i64)
    pg_major = pc.if_else(pc.is_valid(event_lsn), pc.coalesce(commit, event_lsn), null_i64)
    pg_sub = event_lsn

    # -- MySQL -------------------------------------------------------------------------
    snapshot = is_snapshot(children.get("snapshot"), n)
    index_match = pc.extract_regex(binlog_file, _FILE_INDEX_RE)
    # A snapshot read at the connector's initial position (file "", pos 0) sorts at
    # index 0: snapshot reads come before every streamed change anyway (STREAMED_BIT).
    initial = pc.fill_null(pc.and_(snapshot, pc.equal(binlog_file, _EMPTY)), False)
    file_index = pc.if_else(initial, _ZERO, pc.struct_field(index_match, [0]).cast(i64))
    file_bad = pc.and_(
        pc.and_(pc.is_valid(binlog_file), pc.is_null(index_match)), pc.invert(initial)
    )
    pos_bad = pc.or_(pc.less(binlog_pos, _ZERO), pc.greater(binlog_pos, _MAX_BINLOG_POS))
    safe_pos = pc.if_else(pc.fill_null(pos_bad, False), pa.scalar(None, i64), binlog_pos)
    my_major = pc.bit_wise_or(pc.shift_left(file_index, _THIRTY_TWO), safe_pos)
    my_sub = pc.if_else(pc.is_valid(my_major), pc.fill_null(binlog_row, _ZERO), null_i64)

    # -- choose per row ----------------------------------------------------------------
    if connector_hint in POSTGRES_HINTS:
        mysql = pa.array([False] * n, pa.bool_())
    elif connector_hint in MYSQL_HINTS:
        mysql = pa.array([True] * n, pa.bool_())
    else:
        named_mysql = pc.is_in(connector, value_set=_MYSQL_CONNECTORS)
        unnamed_with_file = pc.and_(pc.is_null(connector), pc.is_valid(binlog_file))
        mysql = pc.fill_null(pc.or_(named_mysql, unnamed_with_file), False)

    major = pc.if_else(mysql, my_major, pg_major)
    sub = pc.if_else(mysql, my_sub, pg_sub)
    pos = pc.if_else(snapshot, major, pc.bit_wise_or(major, pa.scalar(STREAMED_BIT, i64)))

    bad = [
        *type_bad,
        (pc.and_(pc.invert(mysql), seq_bad), "undecodable source.sequence"),
        (pc.and_(pc.invert(mysql), lsn_bad), "source.lsn out of range"),
        (pc.and_(mysql, file_bad), "source.file has no numeric binlog index"),
        (pc.and_(mysql, pos_bad), "source.pos out of range"),
    ]
    return SourceColumns(pos, sub, ts, [(pc.fill_null(m, False), r) for m, r in bad], gtid)
