"""Bulk parsing of newline-delimited payloads with the Arrow JSON reader.

One ``pyarrow.json.read_json`` call parses a whole group of payloads into columns, with
an explicit schema (derived from the Connect schema) so that unneeded members such as
``before`` are skipped and no type is guessed.

A single bad record makes the reader fail for the whole buffer, so a failed group is
re-read as one block and the row number in the reader's error locates the culprit: the
good prefix is kept, the culprit goes to the per-record path, and reading resumes after
it. Errors without a row number fall back to bisection. The per-record path tells invalid
JSON apart from valid records the bulk reader cannot type; those are normalized in Python
and kept, or quarantined with a precise reason.
"""

from __future__ import annotations

import decimal
import json
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pyarrow.json as pj

from engine.decode.debezium_json.connect import FieldError
from engine.decode.debezium_json.inferred import (
    TooDeep,
    as_inferred,
    explicit_part,
    not_too_deep,
    type_depth,
)
from engine.decode.debezium_json.split import Group
from engine.decode.limits import MAX_NESTING_DEPTH_CEILING
from engine.decode.text import LONE_SURROGATE, holds_lone_surrogate

#: Ranges at most this long are examined record by record.
_LEAF = 16
#: Minimum block size of the Arrow reader; blocks must hold the longest record.
_MIN_BLOCK = 1 << 22
_READ_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
#: Arrow parse errors end with the 0-based row of the offending line within the block.
_ERROR_ROW = re.compile(r"in row (\d+)$")
# Marker reason for a payload that is the JSON literal null (identity-compared).
_JSON_NULL = "payload is JSON null"
AVRO_REASON = (
    'Avro JSON rendering (union values wrapped as {"<type>": value}), not JsonConverter '
    "output; consume the topic with the Avro decoder"
)
#: Branch names Avro's JSON encoding uses to wrap union values.
AVRO_BRANCHES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class ReadFailed(Exception):
    """The Arrow reader rejected a buffer (bad JSON, type mismatch, row-count mismatch).

    Attributes:
        row: Index (within the buffer) of the first record that failed, when known.
    """

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


@dataclass(slots=True)
class Piece:
    """Records of one group parsed together.

    Attributes:
        positions: Positions (within the group) of the records, ascending.
        table: Their parsed columns, in the reader's wire representation.
    """

    positions: list[int] | range
    table: pa.Table


def _valid_utf8(buf: bytes | pa.Buffer) -> bool:
    # RapidJSON inside Arrow does not validate UTF-8; validating the whole buffer as one
    # large_string value is a zero-copy SIMD check.
    data = buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)
    offsets = pa.py_buffer(struct.pack("<qq", 0, data.size))
    arr = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, data])
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _has_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_timestamp(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_timestamp(t.value_type)
    return False


def _timestamps_as_strings(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_timestamps_as_strings(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(_timestamps_as_strings(t.value_type))
    return t


#: Bytes of a buffer whose inferred types seed :func:`envelope_retry_schema`.
_SAMPLE_BYTES = 1 << 20


def envelope_retry_schema(buf: bytes | pa.Buffer) -> pa.Schema | None:
    """Parse schema for schemaless envelopes whose full inference failed.

    pyarrow 26 cannot infer ``before`` when it is null in the first blocks of a buffer
    and an object later (a snapshot or inserts followed by updates): it types the
    object's string members as ``timestamp[s]`` and fails with "JSON conversion to
    struct<...> is not supported". Debezium's ``before`` and ``after`` share one row
    type, so both get the type inferred for ``after`` from the buffer's first ~1 MiB
    (one reader block: no cross-block promotion); members first seen later are still
    inferred. Returns None when the sample has no object ``after``.
    """
    sample = bytes(memoryview(buf)[:_SAMPLE_BYTES])
    if len(sample) == _SAMPLE_BYTES:  # cut at the last whole record
        sample = sample[: max(sample.rfind(b"\n"), 0)]
    if not sample:
        return None
    try:
        inferred = pj.read_json(
            pa.BufferReader(sample), read_options=pj.ReadOptions(block_size=len(sample) + 1)
        ).schema
    except _READ_ERRORS:
        return None
    if "after" not in inferred.names or not pa.types.is_struct(inferred.field("after").type):
        return None
    if type_depth(inferred) > MAX_NESTING_DEPTH_CEILING:
        return None  # too deep for any limit (and for the recursive type walk below)
    row = _timestamps_as_strings(inferred.field("after").type)
    return pa.schema([pa.field("before", row), pa.field("after", row)])


def avro_rendering_hint(obj: Any) -> str | None:
    """Reason text if ``obj`` looks like Avro's JSON rendering of an envelope."""
    if not isinstance(obj, dict):
        return None
    candidates: list[Any] = []
    source = obj.get("source")
    if isinstance(source, dict):
        candidates.extend(source.values())
    candidates.extend(obj.get(k) for k in ("op", "ts_ms", "before", "after"))
    for v in candidates:
        if isinstance(v, dict) and len(v) == 1:
            (branch,) = v
            if branch in AVRO_BRANCHES or ("." in branch and isinstance(v[branch], dict)):
                return AVRO_REASON
    return None


def merge_pieces(pieces: list[Piece]) -> list[Piece]:
    """Concatenate the pieces of a bisected group so they are post-processed once.

    Pieces parsed with the same explicit schema always merge; inferred (schemaless)
    pieces merge when Arrow can unify their types. Otherwise they stay separate.
    """
    if len(pieces) <= 1:
        return pieces
    try:
        table = pa.concat_tables([p.table for p in pieces], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pieces
    positions: list[int] = []
    for p in pieces:
        positions.extend(p.positions)
    return [Piece(positions, table)]


class BulkReader:
    """Parses the payloads of one group into Arrow tables.

    Precondition (guaranteed by :mod:`.split`): every payload is one line
    that starts with ``{`` (after optional blanks). Besides keeping rows aligned with
    records, this protects the process: pyarrow 26's JSON reader segfaults when a block
    starts with a top-level ``null``.

    Args:
        variants: Explicit parse schemas to try, preferred first (None: infer all). A
            successful non-first variant moves to the front (e.g. a topic with
            ``decimal.format=NUMERIC``).
        infer: Let the reader infer members absent from the schema (schemaless input).
        py_build: Builds a table with the first variant's schema from ``json.loads``
            objects; raises :class:`FieldError` when an object does not fit.
        arrow_readable: False when the schema uses types the Arrow reader cannot build
            (maps): every record then goes through ``py_build``.
        exact_numbers: Parse JSON fractions as ``Decimal`` on the per-record path
            (numeric decimals must not round through float).
        use_threads: Let Arrow parse blocks in parallel.
        probes: ``(variant, probe)`` pairs: a read with ``variant`` only counts if
            ``probe`` also parses the buffer (guards the NUMERIC-decimal variant).
        retry_schema: Inferring readers only: called with the buffer when every variant
            failed; an explicit schema it returns (members not in it are still inferred)
            is tried once before the read is given up.
        learned: Inferring readers only: the schema inference gave an earlier buffer of
            the same stream (ISO-looking strings already strings), tried first as an explicit
            schema and kept only when :func:`as_inferred` proves the result equal to
            what inference would give; ``exempt`` names the top-level members that proof
            skips, ``explicit_hook`` may type them in the explicit schema.

    After a read, :attr:`inferred` holds the schema a full inference produced (None when
    the learned schema served, or no inference ran): the caller's next ``learned``.
    """

    def __init__(
        self,
        variants: list[pa.Schema | None],
        *,
        infer: bool,
        py_build: Callable[[list[Any]], pa.Table],
        arrow_readable: bool = True,
        exact_numbers: bool = False,
        use_threads: bool = True,
        probes: list[tuple[pa.Schema, pa.Schema]] | None = None,
        retry_schema: Callable[[bytes | pa.Buffer], pa.Schema | None] | None = None,
        learned: pa.Schema | None = None,
        exempt: frozenset[str] = frozenset(),
        explicit_hook: Callable[[pa.Schema], pa.Schema] | None = None,
    ) -> None:
        self.variants = variants
        self.probes = {id(schema): probe for schema, probe in probes or []}
        self.infer = infer
        self.py_build = py_build
        self.arrow_readable = arrow_readable
        self.loads_kwargs: dict[str, Any] = {}
        if exact_numbers:
            self.loads_kwargs["parse_float"] = decimal.Decimal
        self.use_threads = use_threads
        self.retry_schema = retry_schema
        self.learned = learned if infer else None
        self.exempt = exempt
        self.explicit_hook = explicit_hook
        self.inferred: pa.Schema | None = None
        self.learned_missed = False

    # -- single buffer -------------------------------------------------------------------

    def _read_one(self, buf: bytes | pa.Buffer, schema: pa.Schema | None, block: int) -> pa.Table:
        if schema is None:
            # Full inference is faster than an explicit partial schema plus inference.
            parse = pj.ParseOptions()
        else:
            parse = pj.ParseOptions(
                explicit_schema=schema,
                unexpected_field_behavior="infer" if self.infer else "ignore",
            )
        # Threads only pay off for buffers that span several blocks; small reads (during
        # bisection) are dominated by the thread-pool round trip.
        size = buf.size if isinstance(buf, pa.Buffer) else len(buf)
        threads = self.use_threads and size > 2 * block
        return pj.read_json(
            pa.BufferReader(buf),
            read_options=pj.ReadOptions(use_threads=threads, block_size=block),
            parse_options=parse,
        )

    def read(
        self,
        buf: bytes | pa.Buffer,
        rows: int,
        max_len: int,
        *,
        one_block: bool = False,
        utf8_checked: bool = False,
    ) -> pa.Table:
        """Parse ``rows`` newline-delimited payloads; raises :class:`ReadFailed`.

        With ``one_block`` the whole buffer is a single reader block, so the row number in
        a parse error counts from the start of ``buf`` (used to locate bad records).
        """
        size = buf.size if isinstance(buf, pa.Buffer) else len(buf)
        if not size:
            raise ReadFailed("empty input")
        if not utf8_checked and not _valid_utf8(buf):
            raise ReadFailed("invalid UTF-8")
        block = max(_MIN_BLOCK, 2 * max_len + 64)
        if one_block:
            block = max(block, size + 1)
        if self.learned is not None:
            table = self._read_learned(buf, self.learned, rows, block)
            if table is not None:
                return table
            self.learned_missed = True
        problem = "no parse schema"
        error_rows: list[int | None] = []
        for k, schema in enumerate(self._attempts(buf)):
            try:
                table = self._read_one(buf, schema, block)
                not_too_deep(table)
                if self.infer and any(_has_timestamp(f.type) for f in table.schema):
                    # Arrow infers ISO-looking strings as timestamp[s]; without a schema we
                    # must not guess logical types, so read those members as strings.
                    fixed = pa.schema(
                        [f.with_type(_timestamps_as_strings(f.type)) for f in table.schema]
                    )
                    table = self._read_one(buf, fixed, block)
            except TooDeep as exc:
                problem = str(exc)
                error_rows.append(None)
                continue
            except _READ_ERRORS as exc:
                problem = str(exc)
                match = _ERROR_ROW.search(problem)
                error_rows.append(int(match.group(1)) if match and one_block else None)
                continue
            if table.num_rows != rows:
                # Blank or concatenated records shift the row count; isolate them.
                problem = f"{table.num_rows} rows parsed for {rows} records"
                error_rows.append(None)
                continue
            try:
                # Cheap structural check: the reader has been seen to build inconsistent
                # list offsets for members with an empty name ({"": [...]}).
                table.validate()
            except pa.ArrowInvalid as exc:
                problem = f"reader produced an invalid table: {exc}"
                error_rows.append(None)
                continue
            probe = self.probes.get(id(schema))
            if probe is not None:
                try:
                    # Decimals read as decimal also accept JSON strings ("1234" is valid
                    # base64 too): the probe (decimals as float64) fails on any string.
                    self._read_one(buf, probe, block)
                except _READ_ERRORS as exc:
                    problem = f"decimal given as a JSON string among numeric ones: {exc}"
                    match = _ERROR_ROW.search(str(exc))
                    error_rows.append(int(match.group(1)) if match and one_block else None)
                    continue
            if 0 < k < len(self.variants):
                self.variants.insert(0, self.variants.pop(k))
            if self.infer:
                self.inferred = table.schema
            return table
        # Every variant failed; the furthest error row is the first record none can read.
        rows_known = [r for r in error_rows if r is not None]
        located = max(rows_known) if rows_known and len(rows_known) == len(error_rows) else None
        raise ReadFailed(problem, located)

    def _read_learned(
        self, buf: bytes | pa.Buffer, learned: pa.Schema, rows: int, block: int
    ) -> pa.Table | None:
        """The buffer read with the learned schema, or None unless that is certain to
        equal a full inference's table (then the usual attempts follow)."""
        explicit = explicit_part(learned)
        if explicit is None:
            return None
        if self.explicit_hook is not None:
            explicit = self.explicit_hook(explicit)
        try:
            table = self._read_one(buf, explicit, block)
            if table.num_rows != rows:
                return None
            not_too_deep(table)
            table.validate()
        except (*_READ_ERRORS, pa.ArrowInvalid, TooDeep):
            return None
        out = as_inferred(table, learned, self.exempt, explicit)
        return out if out is not None and out.num_rows == rows else None

    def _attempts(self, buf: bytes | pa.Buffer) -> Iterator[pa.Schema | None]:
        """The parse schemas to try, in order: the variants, then the retry schema."""
        yield from list(self.variants)
        if self.infer and self.retry_schema is not None:
            schema = self.retry_schema(buf)
            if schema is not None:
                yield schema

    # -- a whole group -------------------------------------------------------------------

    def decode(
        self, group: Group, refuse: Callable[[list[int]], set[int]] | None = None
    ) -> tuple[list[Piece], dict[int, str], list[int]]:
        """Parse a group.

        ``refuse`` (the caller's nesting limit): called with the positions about to be
        parsed one by one or in parts (the bulk read failed); the positions it returns
        (made bad by it) are left out.

        Returns:
            The parsed pieces, the bad positions with reasons, and the positions whose
            payload is the JSON literal ``null`` (a tombstone written as text).
        """
        pieces: list[Piece] = []
        bad: dict[int, str] = {}
        n = len(group.indices)
        if self.arrow_readable:
            try:
                pieces.append(Piece(range(n), self.read(group.joined_bytes(), n, group.max_len)))
                return pieces, bad, []
            except ReadFailed:
                pass
        positions = list(range(n))
        if refuse is not None:
            refused = refuse(positions)
            positions = [p for p in positions if p not in refused]
        if not self.arrow_readable:
            self._python(group.payload_list(), positions, pieces, bad)
        elif positions:
            self._scan(group.payload_list(), positions, group.max_len, pieces, bad)
        nulls = [p for p, reason in bad.items() if reason is _JSON_NULL]
        for p in nulls:
            del bad[p]
        return pieces, bad, nulls

    def _scan(
        self,
        payloads: list[bytes],
        positions: list[int],
        max_len: int,
        pieces: list[Piece],
        bad: dict[int, str],
    ) -> None:
        """Locate bad records from the reader's error row; bisect when it gives none.

        The positions are joined once; each round parses the rest of them as one block (a
        zero-copy slice). On an error at row ``r`` the good prefix is kept, the record at
        ``r`` is examined alone and the scan resumes after it, so a few bad records cost
        about two passes over the data instead of one pass per bisection level.
        """
        buf = b"\n".join(payloads[p] for p in positions)
        if not _valid_utf8(buf):
            # Rare: drop the records that are not UTF-8 (one cheap decode each).
            kept = []
            for p in positions:
                try:
                    payloads[p].decode("utf-8")
                    kept.append(p)
                except UnicodeDecodeError as exc:
                    bad[p] = f"invalid UTF-8: {exc}"
            positions = kept
            buf = b"\n".join(payloads[p] for p in positions)
        starts = [0, *accumulate(len(payloads[p]) + 1 for p in positions)]
        data = pa.py_buffer(buf)
        i, m = 0, len(positions)
        while i < m:
            rest = data.slice(starts[i], starts[m] - 1 - starts[i])
            try:
                table = self.read(rest, m - i, max_len, one_block=True, utf8_checked=True)
                pieces.append(Piece(positions[i:], table))
                return
            except ReadFailed as exc:
                row = exc.row
            if row is None or not 0 <= row < m - i:
                self._bisect(payloads, positions[i:], max_len, pieces, bad)
                return
            if row:
                head = data.slice(starts[i], starts[i + row] - 1 - starts[i])
                try:
                    table = self.read(head, row, max_len, one_block=True, utf8_checked=True)
                    pieces.append(Piece(positions[i : i + row], table))
                except ReadFailed:
                    self._bisect(payloads, positions[i : i + row], max_len, pieces, bad)
            self._leaf(payloads, positions[i + row : i + row + 1], max_len, pieces, bad)
            i += row + 1

    def _bisect(
        self,
        payloads: list[bytes],
        positions: list[int],
        max_len: int,
        pieces: list[Piece],
        bad: dict[int, str],
    ) -> None:
        if len(positions) <= _LEAF:
            self._leaf(payloads, positions, max_len, pieces, bad)
            return
        mid = len(positions) // 2
        for part in (positions[:mid], positions[mid:]):
            try:
                table = self.read(b"\n".join(payloads[p] for p in part), len(part), max_len)
                pieces.append(Piece(part, table))
            except ReadFailed:
                self._bisect(payloads, part, max_len, pieces, bad)

    def _loads(
        self, payloads: list[bytes], positions: range | list[int], bad: dict[int, str]
    ) -> dict[int, dict]:
        objs: dict[int, dict] = {}
        for p in positions:
            try:
                obj = json.loads(payloads[p], **self.loads_kwargs)
            except (UnicodeDecodeError, ValueError) as exc:
                bad[p] = f"invalid JSON: {exc}"
                continue
            if obj is None:
                bad[p] = _JSON_NULL
                continue
            if not isinstance(obj, dict):
                bad[p] = f"not a JSON object but {type(obj).__name__}"
                continue
            if holds_lone_surrogate(payloads[p], obj):
                bad[p] = LONE_SURROGATE
                continue
            objs[p] = obj
        return objs

    def _leaf(
        self,
        payloads: list[bytes],
        positions: list[int] | range,
        max_len: int,
        pieces: list[Piece],
        bad: dict[int, str],
    ) -> None:
        objs = self._loads(payloads, positions, bad)
        ok = list(objs)
        if 1 < len(ok) < len(positions):
            # Only the invalid JSON spoiled the range: parse the rest together.
            try:
                buf = b"\n".join(payloads[p] for p in ok)
                pieces.append(Piece(ok, self.read(buf, len(ok), max_len)))
                return
            except ReadFailed:
                pass
        for p in ok:
            try:
                pieces.append(Piece([p], self.read(payloads[p], 1, max_len)))
            except ReadFailed:
                self._python_one(p, objs[p], pieces, bad)

    def _python_one(self, p: int, obj: dict, pieces: list[Piece], bad: dict[int, str]) -> None:
        try:
            pieces.append(Piece([p], self.py_build([obj])))
        except FieldError as exc:
            bad[p] = avro_rendering_hint(obj) or f"undecodable field: {exc}"

    def _python(
        self, payloads: list[bytes], positions: list[int], pieces: list[Piece], bad: dict[int, str]
    ) -> None:
        objs = self._loads(payloads, positions, bad)
        if not objs:
            return
        try:
            pieces.append(Piece(list(objs), self.py_build(list(objs.values()))))
        except FieldError:
            for p, obj in objs.items():
                self._python_one(p, obj, pieces, bad)
