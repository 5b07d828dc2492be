"""Cheap first pass over raw Kafka record bytes: strip the JsonConverter wrapper.

With ``schemas.enable=true`` the JsonConverter writes ``{"schema":<S>,"payload":<P>}``
where ``<S>`` is byte-identical for every record of one table version. The exact byte
prefix ``{"schema":<S>,"payload":`` is therefore found once (with
``json.JSONDecoder.raw_decode``) and every further record is checked with
``bytes.startswith`` and sliced; the Connect schema is parsed once per distinct prefix,
never per record. When a whole batch shares one prefix (the normal case) the check and the
slicing run as C-level ``map`` calls and only the payload bytes are copied.

Everything that does not fit the fast shapes (pretty-printed JSON, members in another
order, the legacy ``{"schema":null,"payload":null}`` tombstone, primitive keys, garbage)
goes through a slower per-record path that understands any JSON layout. Records are
grouped by Connect schema so that each group can be parsed in bulk with one explicit
Arrow schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import contains, itemgetter
from typing import Any

_WRAPPED_HEAD = b'{"schema":'
_PAYLOAD_SEP = ',"payload":'
_LEGACY_TOMBSTONE = b'{"schema":null,"payload":null}'
_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")

# Distinct prefixes seen in earlier calls -> (fingerprint, schema). Bounded: a topic has a
# handful of schema versions, but a long-running process may see many tables.
_PREFIX_CACHE: dict[bytes, tuple[str | None, dict | None]] = {}
_PREFIX_CACHE_MAX = 1024


@dataclass(slots=True)
class Group:
    """Records sharing one Connect schema (``fingerprint`` None = schemaless).

    Attributes:
        fingerprint: Stable id of the Connect schema (hash of its canonical JSON).
        schema: The Connect schema object, or None for schemaless records.
        indices: Positions of the records in the input sequence, ascending.
        payloads: Payload bytes, one per index (built lazily for fast-path groups).
        joined: The payloads joined by newlines (built lazily from ``payloads``).
        max_len: Length of the longest record (sizes the Arrow reader blocks).
        source: Fast-path groups only: the original records and the wrapper prefix
            length, from which ``payloads`` is rebuilt if a fallback needs it.
    """

    fingerprint: str | None
    schema: dict | None
    indices: list[int] | range = field(default_factory=list)
    payloads: list[bytes] | None = None
    joined: bytes | None = None
    max_len: int = 0
    source: tuple[Sequence[bytes], int] | None = None

    def payload_list(self) -> list[bytes]:
        """The payloads as a list, one line each."""
        if self.payloads is None:
            if self.source is None:
                raise RuntimeError("a split group has neither payloads nor their source")
            messages, cut = self.source
            if cut:
                self.payloads = [_one_line(m[cut:-1]) for m in messages]
            else:
                self.payloads = [_one_line(m) for m in messages]
        return self.payloads

    def joined_bytes(self) -> bytes:
        """All payloads as one newline-delimited buffer."""
        if self.joined is None:
            self.joined = b"\n".join(self.payload_list())
        return self.joined


@dataclass(slots=True)
class Split:
    """Outcome of the first pass over one side (keys or values) of a batch.

    Attributes:
        groups: Payload groups by schema fingerprint, in order of first appearance.
        nulls: Indices whose record is null (tombstone value / null key).
        scalars: Keys only: indices whose key is a JSON scalar, rendered as text.
        bad: Indices that are not JSON (or not a usable wrapper), with the reason.
    """

    groups: dict[str | None, Group] = field(default_factory=dict)
    nulls: list[int] = field(default_factory=list)
    scalars: dict[int, str] = field(default_factory=dict)
    bad: dict[int, str] = field(default_factory=dict)


def fingerprint(schema: Any) -> str:
    """Stable short id of a Connect schema, independent of member order and spacing."""
    canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _identity(schema: Any) -> tuple[str | None, dict | None]:
    # A null or empty schema (documentation examples elide it as {}) means "no types".
    if isinstance(schema, dict) and "type" in schema:
        return fingerprint(schema), schema
    return None, None


def _find_prefix(message: bytes) -> tuple[bytes, str | None, dict | None] | None:
    """Exact ``{"schema":<S>,"payload":`` prefix of a compact wrapped record, if any."""
    if not message.startswith(_WRAPPED_HEAD):
        return None
    try:
        text = message.decode("utf-8")
        schema, end = _DECODER.raw_decode(text, len(_WRAPPED_HEAD))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not text.startswith(_PAYLOAD_SEP, end):
        return None
    prefix = text[: end + len(_PAYLOAD_SEP)].encode("utf-8")
    cached = _PREFIX_CACHE.get(prefix)
    if cached is None:
        cached = _identity(schema)
        if len(_PREFIX_CACHE) >= _PREFIX_CACHE_MAX:
            _PREFIX_CACHE.pop(next(iter(_PREFIX_CACHE)))
        _PREFIX_CACHE[prefix] = cached
    return prefix, cached[0], cached[1]


def _scan_members(text: str) -> dict[str, tuple[int, int]]:
    """Spans of the top-level members of a JSON object (raises ValueError if invalid)."""
    try:
        i = _WS.match(text, 0).end()  # type: ignore[union-attr]
        if text[i] != "{":
            raise ValueError("not a JSON object")
        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        members: dict[str, tuple[int, int]] = {}
        if text[i] == "}":
            i += 1
        else:
            while True:
                if text[i] != '"':
                    raise ValueError(f"expected a member name at {i}")
                key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
                i = _WS.match(text, i).end()  # type: ignore[union-attr]
                if text[i] != ":":
                    raise ValueError(f"expected ':' at {i}")
                i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
                _, end = _DECODER.raw_decode(text, i)
                members[key] = (i, end)
                i = _WS.match(text, end).end()  # type: ignore[union-attr]
                if text[i] == ",":
                    i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
                    continue
                if text[i] == "}":
                    i += 1
                    break
                raise ValueError(f"expected ',' or '}}' at {i}")
        if _WS.match(text, i).end() != len(text):  # type: ignore[union-attr]
            raise ValueError("extra data after the JSON object")
        return members
    except IndexError as exc:
        raise ValueError("truncated JSON") from exc


def _one_line(payload: bytes) -> bytes:
    """The payload on one line of the bulk input (line breaks would misalign records).

    In valid JSON a raw CR/LF can only be whitespace between tokens (inside strings it
    must be escaped), so blanking it changes nothing. In invalid JSON it may sit inside a
    string, where blanking would silently "repair" the record; there it becomes NUL,
    which is invalid everywhere in JSON, so the record is still reported as bad.
    """
    if b"\n" not in payload and b"\r" not in payload:
        return payload
    try:
        json.loads(payload)
        blank = b" "
    except (UnicodeDecodeError, ValueError):
        blank = b"\x00"
    return payload.replace(b"\n", blank).replace(b"\r", blank)


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _Splitter:
    def __init__(self, role: str) -> None:
        self.role = role
        self.out = Split()
        self.prefixes: list[tuple[bytes, str | None, dict | None]] = []

    def add(self, fp: str | None, schema: dict | None, i: int, payload: bytes) -> None:
        group = self.out.groups.get(fp)
        if group is None:
            group = self.out.groups[fp] = Group(fp, schema, [], [])
        group.indices.append(i)  # type: ignore[union-attr]
        group.payloads.append(payload)  # type: ignore[union-attr]
        if len(payload) > group.max_len:
            group.max_len = len(payload)

    def add_payload(self, fp: str | None, schema: dict | None, i: int, payload: bytes) -> None:
        """Route one unwrapped payload: object -> group, null -> nulls, scalar -> keys only."""
        head = payload.lstrip()[:1]
        if head == b"{":
            self.add(fp, schema, i, _one_line(payload))
            return
        try:
            value = json.loads(payload)
        except (UnicodeDecodeError, ValueError) as exc:
            self.out.bad[i] = f"invalid JSON: {exc}"
            return
        if value is None:
            self.out.nulls.append(i)
        elif self.role == "key" and not isinstance(value, (dict, list)):
            text = _scalar_text(value)
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                self.out.bad[i] = (
                    "key holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), not text"
                )
                return
            self.out.scalars[i] = text
        else:
            what = "key" if self.role == "key" else "value"
            self.out.bad[i] = f"{what} is not a JSON object but {type(value).__name__}"

    def one(self, i: int, message: Any) -> None:
        """Classify one record on the slow path."""
        if not isinstance(message, (bytes, bytearray, memoryview)):
            self.out.bad[i] = f"record is {type(message).__name__}, not bytes"
            return
        message = bytes(message)
        if message == _LEGACY_TOMBSTONE:
            self.out.nulls.append(i)
            return
        found = _find_prefix(message)
        if found is not None:
            if all(known[0] != found[0] for known in self.prefixes):
                # Most recent first: schema changes make older prefixes rare.
                self.prefixes.insert(0, found)
            prefix, fp, schema = found
            if message.endswith(b"}"):
                self.add_payload(fp, schema, i, message[len(prefix) : -1])
                return
        body = message.lstrip()
        if body.startswith(b"{"):
            head = body[1:].lstrip()
            # A Debezium envelope never has a top-level "schema"/"payload" member, so only
            # objects starting with one of them can be a (non-compact) wrapper.
            if head.startswith(b'"schema"') or head.startswith(b'"payload"'):
                self.wrapper(i, message)
                return
            self.add(None, None, i, _one_line(message))
            return
        self.add_payload(None, None, i, message)

    def wrapper(self, i: int, message: bytes) -> None:
        try:
            text = message.decode("utf-8")
            members = _scan_members(text)
        except (UnicodeDecodeError, ValueError) as exc:
            self.out.bad[i] = f"invalid JSON: {exc}"
            return
        if "payload" not in members or not set(members) <= {"schema", "payload"}:
            # An object that merely starts with such a member: treat it as a bare payload.
            self.add(None, None, i, _one_line(message))
            return
        schema: Any = None
        if "schema" in members:
            a, b = members["schema"]
            schema = json.loads(text[a:b])
        fp, schema = _identity(schema)
        a, b = members["payload"]
        self.add_payload(fp, schema, i, text[a:b].encode("utf-8"))

    def run(self, messages: Sequence[Any], indices: Sequence[int] | None = None) -> Split:
        for i in range(len(messages)) if indices is None else indices:
            message = messages[i]
            if message is None:
                self.out.nulls.append(i)
                continue
            if type(message) is not bytes:
                self.one(i, message)
                continue
            for prefix, fp, schema in self.prefixes:
                if message.startswith(prefix) and message.endswith(b"}"):
                    payload = message[len(prefix) : -1]
                    if payload[:1] == b"{" and b"\n" not in payload:
                        self.add(fp, schema, i, payload)
                    else:
                        self.add_payload(fp, schema, i, payload)
                    break
            else:
                self.one(i, message)
        return self.out


def _fast(messages: Sequence[Any], role: str) -> Split | None:
    """Whole-batch shortcut for the normal case; None when the batch needs the slow pass.

    Applies when no record is null, every payload is a one-line JSON object text (starts
    with ``{``, no raw newline) and either every record carries the same compact wrapper
    prefix or none is wrapped at the start. All checks are C-level ``map`` calls over unbound
    ``bytes`` methods and ``operator.contains``. The payloads are not proven well-formed here:
    the bulk reader is the check, and :meth:`Group.payload_list` rebuilds exact
    per-record payloads for the fallback. (Wrapped records hiding in a schemaless batch
    surface as records without ``op`` and are rerouted by the decoder.)

    The "object, one line" guarantee matters beyond speed: the Arrow JSON reader crashes
    the process on a line holding a top-level ``null`` (pyarrow 26), so no such line may
    ever reach it.
    """
    n = len(messages)
    if n == 0 or type(messages[0]) is not bytes:
        return None
    first = messages[0]
    try:
        # A raw newline (memchr per record) would split a record in two. TypeError (a
        # None tombstone, a non-bytes record) leaves the fast path too.
        if any(map(contains, messages, repeat(b"\n"))):
            return None
        if first.startswith(_WRAPPED_HEAD):
            found = _find_prefix(first)
            if found is None:
                return None
            prefix, fp, schema = found
            if schema is None:
                return None  # may hold legacy {"schema":null,"payload":null} tombstones
            cut = len(prefix)
            if not all(map(bytes.startswith, messages, repeat(prefix))):
                return None
            if not all(map(bytes.startswith, messages, repeat(b"{"), repeat(cut))):
                return None  # null (tombstone) or scalar payloads
            if not all(map(bytes.endswith, messages, repeat(b"}"))):
                return None
            body = b"\n".join(map(itemgetter(slice(cut, -1)), messages))
            max_len = max(map(len, messages)) - cut
            group = Group(fp, schema, range(n), None, body, max_len, (messages, cut))
            return Split(groups={fp: group})
        if not all(map(bytes.startswith, messages, repeat(b"{"))):
            return None
        joined = b"\n".join(messages)
    except TypeError:
        return None
    if role == "key" and b'"payload"' in joined:
        return None  # keys are small: check exactly for wrapped keys
    max_len = max(map(len, messages))
    return Split(groups={None: Group(None, None, range(n), None, joined, max_len, (messages, 0))})


def split_fast(messages: Sequence[Any], role: str) -> Split | None:
    """:func:`split_records` when the batch (or all of it but its nulls) has the fast
    shape (see :func:`_fast`: one group of one-line objects, nothing parsed in Python),
    else None."""
    fast = _fast(messages, role)
    if fast is not None:
        return fast
    # Tombstones (null values) follow every delete: keep the fast path for the rest.
    present = [i for i, m in enumerate(messages) if m is not None]
    if present and len(present) < len(messages):
        fast = _fast([messages[i] for i in present], role)
        if fast is not None:
            for group in fast.groups.values():
                group.indices = present  # payload k of the group is record present[k]
            fast.nulls = [i for i, m in enumerate(messages) if m is None]
            return fast
    return None


def split_records(messages: Sequence[Any], role: str) -> Split:
    """Unwrap and group the records of one side of a batch.

    Args:
        messages: Raw record bytes (None for null records), in consumption order.
        role: ``"key"`` or ``"value"`` (keys may be JSON scalars, values may not).
    """
    fast = split_fast(messages, role)
    return fast if fast is not None else _Splitter(role).run(messages)


def split_slow(messages: Sequence[Any], indices: Sequence[int], role: str) -> Split:
    """Split selected records with the per-record path (for records rerouted later)."""
    return _Splitter(role).run(messages, indices)
