"""Hudi log files of a Merge-on-Read file slice: one file per delta commit.

A log file sits next to its slice's base file and is named
``.<fileId>_<baseInstant>.log.<version>_<writeToken>``. It is a sequence of blocks;
this module writes (and reads back, for the merge's own use) the two block types a
CDC replica needs:

* a **parquet data block**: the upserted rows, a complete parquet file as the content;
* a **delete block**: the deleted record keys, an Avro ``HoodieDeleteRecordList``.

Block layout (log format version 1, as Hudi 0.x/1.x write it and hudi-rs reads it)::

    "#HUDI#"                    magic
    int64   block size          (everything after this field)
    int32   format version = 1
    int32   block type          (1 delete, 5 parquet data)
    header  int32 count, then per entry int32 key, int32 length, UTF-8 bytes
    int64   content length
    bytes   content
    footer  int32 count = 0
    int64   total block length  (from the magic to here, excluding this field)

All integers are big-endian. Header keys: 0 instant time, 2 schema (Avro JSON).

Delete records carry Java's default ordering value, ``IntWrapper`` 0 ("natural order",
see :mod:`engine.hudi.avro_models`): readers then let a delete win over every earlier
record of its key, which is what we need since the writer has already put every key's
events in source order before writing.

Each delta commit writes new log files and never appends to existing ones, so rolling
back a failed commit means deleting its files. The write token is three small integers
(``<task partition>-<stage>-<attempt>``), as Hudi writes and parses it
(``Integer.parseInt``); which delta commit wrote a log file is in its first block's
header (:func:`log_instant`), which is how
:meth:`engine.hudi.table.HudiTable.rollback_pending` finds them. Files named by earlier
cdcctl versions carry the instant as the token's middle part, and are read that way.
"""

from __future__ import annotations

import io
import os
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from engine.errors import HudiError
from engine.hudi import parquet
from engine.hudi.avro_models import decode_delete_list, encode_delete_list
from engine.storage import ObjectInfo, Storage

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
DELETE_BLOCK_CONTENT_VERSION = 3
BLOCK_DELETE = 1
BLOCK_PARQUET = 5
HEADER_INSTANT_TIME = 0
HEADER_SCHEMA = 2

LOG_FILE_RE = re.compile(r"\.([^_]+)_(\d{17}|\d{14})\.log\.(\d+)_(\d+)-(\d+)-(\d+)\Z")


#: The stage part of the write tokens cdcctl writes (base files use the same).
WRITE_STAGE = 1


@dataclass(frozen=True)
class LogFileName:
    """The parts of a log file name."""

    file_id: str
    base_instant: str
    version: int
    task: int
    stage: int = WRITE_STAGE
    attempt: int = 0
    #: The instant in the token of a file an earlier cdcctl wrote ("" otherwise).
    legacy_instant: str = ""

    @property
    def name(self) -> str:
        """The file name (no directory)."""
        middle = self.legacy_instant or str(self.stage)
        return (
            f".{self.file_id}_{self.base_instant}.log.{self.version}"
            f"_{self.task}-{middle}-{self.attempt}"
        )

    @classmethod
    def parse(cls, name: str) -> LogFileName | None:
        """Parse a log file name; None if ``name`` is not a Hudi log file name."""
        m = LOG_FILE_RE.match(name)
        if not m:
            return None
        middle = m[5]
        if len(middle) in (14, 17):  # an instant: a file an earlier cdcctl wrote
            return cls(m[1], m[2], int(m[3]), int(m[4]), 0, int(m[6]), middle)
        return cls(m[1], m[2], int(m[3]), int(m[4]), int(middle), int(m[6]))


#: Instant of each log file read so far, by (path, inode or version, mtime, size): a log
#: file never changes, but the name of a rolled-back one is written again by the redo.
_INSTANTS: dict[tuple[str, int | str, int, int], str] = {}
_INSTANTS_LIMIT = 200_000


def log_instant(
    path: Path, parsed: LogFileName | None = None, st: os.stat_result | None = None
) -> str:
    """The delta commit that wrote a log file: its first block's instant-time header.

    ``st`` is the file's stat if the caller has it (a directory scan does).

    Raises:
        HudiError: The file is not a readable log file.
    """
    if parsed is not None and parsed.legacy_instant:
        return parsed.legacy_instant
    st = st or path.stat()

    def head(n: int) -> bytes:
        with open(path, "rb") as f:
            return f.read(n)

    key = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
    return _cached(key, lambda: _first_instant(head, st.st_size, str(path)))


def log_instant_in(store: Storage, info: ObjectInfo, parsed: LogFileName) -> str:
    """:func:`log_instant` of a log file ``info`` (as listed) in a table's ``store``: one
    ranged read of its first block's header, cached by name, version and size (a log file
    is never appended to, but a rolled-back one's name is written again by the redo)."""
    if parsed.legacy_instant:
        return parsed.legacy_instant
    name, size = info.path, info.size
    where = f"{store.url}/{name}"

    def read() -> str:
        return _first_instant(lambda n: store.read_range(name, 0, n), size, where)

    if not info.version:
        return read()  # a store without ETags: no telling a rewritten name apart
    return _cached((where, info.version, 0, size), read)


def _cached(key: tuple[str, int | str, int, int], read: Callable[[], str]) -> str:
    found = _INSTANTS.get(key)
    if found is None:
        found = read()
        if len(_INSTANTS) >= _INSTANTS_LIMIT:
            _INSTANTS.clear()
        _INSTANTS[key] = found
    return found


#: Bytes read first for a log file's header (the instant time is among its first fields).
_HEAD_BYTES = 4096


def _first_instant(head: Callable[[int], bytes], size: int, where: str) -> str:
    """The instant time of a log file's first block, from ``head(n)`` (its first ``n``
    bytes): the first 4 KiB, and all of it only if its header is longer."""
    data = head(min(_HEAD_BYTES, size))
    found = _instant_from_header(data, where, complete=len(data) >= size)
    if found is None:
        found = _instant_from_header(head(size), where, complete=True)
    assert found is not None  # a complete read answers or raises
    return found


def _instant_from_header(data: bytes, where: str, *, complete: bool) -> str | None:
    """The instant time of the first block's header at the start of ``data``; None if
    ``data`` ends before the header does and is not the whole file (``complete``).

    Raises:
        HudiError: Not a log file, or its first block has no instant time.
    """
    if (len(data) >= 6 and data[:6] != MAGIC) or (len(data) < 26 and complete):
        raise HudiError(f"{where} is not a Hudi log file (no block magic)")
    if len(data) < 26:
        return None
    (count,) = struct.unpack_from(">i", data, 22)  # after magic, size, version, type
    i = 26
    for _ in range(count):
        if i + 8 > len(data):
            break
        key, length = struct.unpack_from(">ii", data, i)
        i += 8
        if i + length > len(data):
            break
        if key == HEADER_INSTANT_TIME:
            return data[i : i + length].decode("utf-8")
        i += length
    else:
        raise HudiError(f"{where}: its first log block has no instant time")
    if complete:
        raise HudiError(f"{where}: its first log block has no instant time")
    return None


def _metadata(entries: dict[int, str]) -> bytes:
    out = [struct.pack(">i", len(entries))]
    for key, value in entries.items():
        raw = value.encode("utf-8")
        out.append(struct.pack(">ii", key, len(raw)))
        out.append(raw)
    return b"".join(out)


def _block(block_type: int, header: dict[int, str], content: bytes) -> bytes:
    head = _metadata(header)
    footer = _metadata({})
    body = b"".join(
        [
            struct.pack(">ii", LOG_FORMAT_VERSION, block_type),
            head,
            struct.pack(">q", len(content)),
            content,
            footer,
        ]
    )
    # "block size" counts everything after it, the trailing total length included.
    size = len(body) + 8
    block = MAGIC + struct.pack(">q", size) + body
    return block + struct.pack(">q", len(block))


def _zigzag_varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# One HoodieDeleteRecord after its key: partitionPath = union branch 1 (string) "",
# orderingVal = union branch 2 (IntWrapper) holding the int 0.
_DELETE_TAIL = b"\x02\x00" + b"\x04\x00"


def _delete_content(keys: Sequence[str] | pa.Array | pa.ChunkedArray) -> bytes:
    """Avro binary ``HoodieDeleteRecordList`` framed as a version-3 delete block.

    Keys are encoded with array operations, 5-9x faster than fastavro; the bytes equal
    :func:`~engine.hudi.avro_models.encode_delete_list`'s (a property test checks it).
    Keys of 1 MiB or more, or a null key, go through fastavro.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    array = keys.cast(pa.string()) if isinstance(keys, pa.Array) else pa.array(keys, pa.string())
    records = _delete_records_vectorised(array)
    if records is not None:
        datum = (_zigzag_varint(len(array)) if len(array) else b"") + records + b"\x00"
    else:
        datum = encode_delete_list(array.to_pylist())
    return struct.pack(">ii", DELETE_BLOCK_CONTENT_VERSION, len(datum)) + datum


def _delete_records_vectorised(keys: pa.StringArray) -> bytes | None:
    """The records of one Avro array block of deletes, built with array operations.

    Applies when every key is shorter than 1 MiB (its zig-zag length is then at most
    three varint bytes) and none is null; returns None otherwise.
    """
    n = len(keys)
    if n == 0:
        return b""
    if keys.null_count:
        return None
    offsets = np.frombuffer(keys.buffers()[1], np.int32, n + 1, keys.offset * 4).astype(np.int64)
    lengths = np.diff(offsets)
    zigzag = lengths * 2
    if zigzag.max() >= 1 << 21:
        return None
    # The length's varint: 7 bits a byte, low bits first, high bit set on all but the last.
    width = 1 + (zigzag >= 1 << 7) + (zigzag >= 1 << 14)
    sizes = 1 + width + lengths + len(_DELETE_TAIL)
    starts = np.cumsum(sizes) - sizes
    out = np.empty(int(sizes.sum()), np.uint8)
    out[starts] = 0x02  # key: union branch 1 (string)
    for b in range(3):
        has = width > b
        part = ((zigzag >> (7 * b)) & 0x7F) | np.where(width > b + 1, 0x80, 0)
        out[(starts + 1 + b)[has]] = part[has]
    key_starts = starts + 1 + width
    if offsets[-1] > offsets[0]:
        data = np.frombuffer(keys.buffers()[2], np.uint8)
        target = np.repeat(key_starts - offsets[:-1], lengths) + np.arange(offsets[0], offsets[-1])
        out[target] = data[offsets[0] : offsets[-1]]
    tails = key_starts + lengths
    for i, byte in enumerate(_DELETE_TAIL):
        out[tails + i] = byte
    return out.tobytes()


def encode_log_file(
    instant: str,
    avro_schema: str,
    upserts: pa.Table | None,
    deleted_keys: Sequence[str] | pa.Array | pa.ChunkedArray,
) -> bytes:
    """Return the bytes of one delta commit's log file: data block, then delete block
    (at least one block: with nothing to write, an empty delete block).

    Args:
        instant: The delta commit's instant.
        avro_schema: The table's Avro schema JSON (with ``_hoodie_*`` fields).
        upserts: Rows with the full base-file schema, or None.
        deleted_keys: Record keys deleted by this commit.
    """
    blocks = []
    if upserts is not None and upserts.num_rows:
        buf = io.BytesIO()
        # No statistics: they cost time and buy a reader nothing, a block is read whole.
        parquet.write_table(upserts, buf)
        header = {HEADER_INSTANT_TIME: instant, HEADER_SCHEMA: avro_schema}
        blocks.append(_block(BLOCK_PARQUET, header, buf.getvalue()))
    if len(deleted_keys) or not blocks:
        # A write that changed only the group's tombstones still needs its log file (it
        # names the slice's newest instant): an empty delete block, never an empty file,
        # which Hudi's log reader would take for a corrupt one.
        # Hudi's append handle gives every block of a write the same header: the
        # instant and the writer schema.
        header = {HEADER_INSTANT_TIME: instant, HEADER_SCHEMA: avro_schema}
        blocks.append(_block(BLOCK_DELETE, header, _delete_content(deleted_keys)))
    return b"".join(blocks)


@dataclass
class LogBlock:
    """One block read back: its instant and either rows or deleted keys."""

    instant: str
    rows: pa.Table | None = None
    deleted_keys: list[str] | None = None


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = buf[i]
        i += 1
        z |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), i


def _decode_delete_keys(content: bytes) -> list[str]:
    _version, length = struct.unpack_from(">ii", content, 0)
    buf = content[8 : 8 + length]
    fast = _decode_own_delete_keys(buf)
    if fast is not None:
        return fast
    keys = []
    for record in decode_delete_list(buf):
        if record["orderingVal"] not in (None, ("IntWrapper", 0)):
            # Written by another writer with an ordering value: applying it as a plain
            # delete could remove a newer row. Refuse rather than guess.
            raise HudiError(
                f"a delete block orders its deletes by value ({record['orderingVal']!r})",
                "cdcctl reads deletes in natural order only (Java's default)",
            )
        keys.append(record["recordKey"])
    return keys


def _decode_own_delete_keys(buf: bytes) -> list[str] | None:
    """Decode the list as this module writes it (one array block, keys under 64 bytes,
    empty partition path, orderingVal IntWrapper 0) without a varint call per field;
    None if ``buf`` is shaped otherwise."""
    count, i = _read_varint(buf, 0)
    if count <= 0:
        return [] if count == 0 and len(buf) == 1 else None
    keys: list[str] = []
    append = keys.append
    end = len(buf)
    for _ in range(count):
        if i + 2 > end or buf[i] != 2 or buf[i + 1] >= 0x80:
            return None
        n = buf[i + 1] >> 1
        start = i + 2
        i = start + n
        if buf[i : i + 4] != _DELETE_TAIL:
            return None
        append(buf[start:i].decode("utf-8"))
        i += 4
    return keys if buf[i:] == b"\x00" else None


def iter_blocks(
    path: Path | str, data: bytes | None = None
) -> Iterator[tuple[int, dict[int, str], bytes]]:
    """Yield ``(block type, header, content)`` of every block of a log file (its
    ``data`` if the caller read it already; ``path`` then names it in errors).

    Raises:
        HudiError: If a block does not start with the log block magic.
    """
    if data is None:
        data = Path(path).read_bytes()
    i = 0
    while i < len(data):
        if data[i : i + 6] != MAGIC:
            raise HudiError(f"{path}: no log block magic at byte {i}")
        (size,) = struct.unpack_from(">q", data, i + 6)
        j = i + 14
        _fmt, block_type = struct.unpack_from(">ii", data, j)
        j += 8
        (n,) = struct.unpack_from(">i", data, j)
        j += 4
        header: dict[int, str] = {}
        for _ in range(n):
            key, length = struct.unpack_from(">ii", data, j)
            j += 8
            header[key] = data[j : j + length].decode("utf-8")
            j += length
        (length,) = struct.unpack_from(">q", data, j)
        j += 8
        yield block_type, header, data[j : j + length]
        i += 14 + size  # the block size counts everything after it


def read_log_file(
    path: Path | str, columns: list[str] | None = None, data: bytes | None = None
) -> Iterator[LogBlock]:
    """Yield the data and delete blocks of a log file written by :func:`encode_log_file`
    (its ``data`` if the caller read it already; ``path`` then names it in errors)."""
    for block_type, header, content in iter_blocks(path, data):
        instant = header.get(HEADER_INSTANT_TIME, "")
        if block_type == BLOCK_PARQUET:
            yield LogBlock(instant, rows=parquet.read_table(pa.py_buffer(content), columns))
        elif block_type == BLOCK_DELETE:
            yield LogBlock(instant, deleted_keys=_decode_delete_keys(content))
        else:
            raise HudiError(f"{path}: unsupported log block type {block_type}")
