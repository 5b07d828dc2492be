"""Hostile variants of seed messages, driven by any source of choices.

The same mutators serve hypothesis (choices drawn from ``st.data()``, so failures shrink),
atheris (choices consumed from the fuzzer's bytes, so coverage steers them) and a plain
seeded ``random.Random``. A :class:`Chooser` is all they need.

Byte-level mutations (any format): truncation, bit flips, inserted/deleted ranges,
non-UTF-8 sequences, concatenated records and stray newlines, deep bracket nesting.
JSON-level mutations (when a key or value parses as JSON): a node replaced by an
adversarial value (huge or negative numbers, NaN/Infinity, giant strings, odd unicode,
wrong types), members dropped, duplicate members, positions out of range in ``source``,
an unknown ``op``, the Connect schema of one message glued to the payload of another,
pretty-printing.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from tests.fuzz.registry import Seed

T = TypeVar("T")

#: Largest giant string a mutation makes (the fuzz config's size limit is 256 KiB).
GIANT = 300 * 1024


class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int:
        """A whole number in ``[lo, hi]``."""

    def raw(self, max_size: int) -> bytes:
        """Arbitrary bytes, at most ``max_size`` of them."""


def choice(c: Chooser, seq: Sequence[T]) -> T:
    return seq[c.integer(0, len(seq) - 1)]


class RandomChooser:
    """Choices from a seeded :class:`random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def raw(self, max_size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, max_size))


# -- adversarial values ------------------------------------------------------------------

_NUMBERS: list[Any] = [
    0,
    -1,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**40,
    -(10**400),
    1e308,
    -1e308,
    5e-324,
    -0.0,
    0.1,
    math.nan,
    math.inf,
    -math.inf,
]
_STRINGS = [
    "",
    "\u0000",
    "\ud800",  # lone surrogate (json.dumps writes the escape \ud800)
    "\udfff\ud800",
    "\u202e\u200b\ufeff",
    "e\u0301",  # combining accent
    "\U0001f600" * 3,
    "Ａｄｍｉｎ",  # full-width look-alike
    '\n\r\t"\\',
    "null",
    "2024-03-04T05:06:07Z",
    "123",
    "1e999",
    "NaN",
    "__debezium_unavailable_value",
    "AAEC",
    '["1","2"]',
    '[null,"99999999999999999999999"]',
    "mysql-bin.999999999999",
]


class Raw(str):
    """JSON text written as is (number tokens ``json.dumps`` cannot produce)."""


_RAW_NUMBERS = [
    "1e999999999",
    "-1E-999999999",
    "1" * 500,
    "0." + "0" * 400 + "1",
    "123456789012345678901234567890.123456789",
    "-0",
    "1.0e+309",
]


def adversarial_value(c: Chooser) -> Any:
    kind = c.integer(0, 9)
    if kind <= 1:
        return choice(c, _NUMBERS)
    if kind == 2:
        return Raw(choice(c, _RAW_NUMBERS))
    if kind <= 4:
        return choice(c, _STRINGS)
    if kind == 5:
        size = choice(c, [1000, 65_536, GIANT])
        return choice(c, ["x", "é", "\U0001f600", "\\"]) * (size // 4)
    if kind == 6:
        return choice(c, [True, False, None, [], {}, [None], {"": None}])
    if kind == 7:
        depth = choice(c, [10, 60, 65, 200])
        node: Any = 1
        for _ in range(depth):
            node = [node] if c.integer(0, 1) else {"a": node}
        return node
    if kind == 8:
        return c.raw(40).decode("latin-1")
    return [adversarial_value(c) for _ in range(c.integer(0, 3))]


# -- a JSON writer that can emit duplicate members and NaN -------------------------------


class Dup:
    """An object written with the given members in order, duplicates included."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def dump(node: Any, indent: bool = False) -> str:
    sep = ", " if indent else ","
    if isinstance(node, Raw):
        return str(node)
    if isinstance(node, Dup):
        return "{" + sep.join(f"{json.dumps(k)}:{dump(v, indent)}" for k, v in node.pairs) + "}"
    if isinstance(node, dict):
        return "{" + sep.join(f"{json.dumps(k)}:{dump(v, indent)}" for k, v in node.items()) + "}"
    if isinstance(node, list):
        return "[" + sep.join(dump(v, indent) for v in node) + "]"
    return json.dumps(node)  # NaN / Infinity as the non-standard tokens


# -- JSON tree mutations -----------------------------------------------------------------


def _paths(node: Any, prefix: tuple = (), out: list | None = None, limit: int = 400) -> list:
    """Paths to every node (breadth-limited)."""
    out = [] if out is None else out
    if len(out) >= limit or len(prefix) > 100:
        return out
    out.append(prefix)
    if isinstance(node, dict):
        for k, v in node.items():
            _paths(v, (*prefix, k), out, limit)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _paths(v, (*prefix, i), out, limit)
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def _set(root: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = _get(root, path[:-1])
    parent[path[-1]] = value
    return root


def _source_paths(root: Any) -> list[tuple]:
    """Paths of the position members (``source``/``transaction`` blocks, ``ts_ms``)."""
    names = {
        "lsn", "sequence", "txId", "xmin", "ts_ms", "ts_us", "ts_ns", "ts_sec", "ts_usec",
        "file", "pos", "row", "gtid", "server_id", "snapshot", "id", "total_order",
        "data_collection_order", "commit_lsn", "event_count", "thread",
    }  # fmt: skip
    return [p for p in _paths(root) if p and p[-1] in names]


def mutate_tree(root: Any, c: Chooser, others: Sequence[Any]) -> Any:
    """One JSON-level mutation of ``root`` (a parsed key or value)."""
    paths = _paths(root)
    kind = c.integer(0, 7)
    if kind <= 1:
        return _set(root, choice(c, paths), adversarial_value(c))
    if kind == 2:
        positions = _source_paths(root)
        if positions:
            return _set(root, choice(c, positions), adversarial_value(c))
        return _set(root, choice(c, paths), adversarial_value(c))
    if kind == 3:  # drop a member
        members = [p for p in paths if p and isinstance(p[-1], str)]
        if members:
            p = choice(c, members)
            del _get(root, p[:-1])[p[-1]]
        return root
    if kind == 4:  # duplicate member, before or after the original
        objects = [p for p in paths if isinstance(_get(root, p), dict) and _get(root, p)]
        if not objects:
            return root
        p = choice(c, objects)
        obj = _get(root, p)
        k = choice(c, list(obj))
        extra = (k, adversarial_value(c) if c.integer(0, 1) else choice(c, ["c", "d", None]))
        pairs = list(obj.items())
        pairs.insert(0 if c.integer(0, 1) else len(pairs), extra)
        return _set(root, p, Dup(pairs))
    if kind == 5:  # an unknown or odd op
        ops = [p for p in paths if p and p[-1] == "op"]
        if ops:
            return _set(root, choice(c, ops), choice(c, ["x", "m", "", "C", "uu", 1, None]))
        return root
    if kind == 6 and others:  # schema of another message glued to this payload
        other = choice(c, others)
        if isinstance(root, dict) and isinstance(other, dict):
            payload = root.get("payload", root)
            return {"schema": copy.deepcopy(other.get("schema", other)), "payload": payload}
        return root
    # kind 7: a container emptied or swapped for the other container type
    containers = [p for p in paths if isinstance(_get(root, p), dict | list)]
    if containers:
        p = choice(c, containers)
        node = _get(root, p)
        return _set(root, p, list(node.values()) if isinstance(node, dict) else {})
    return root


# -- byte mutations ----------------------------------------------------------------------

_NOT_UTF8 = [b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80\x80"]


def mutate_bytes(data: bytes, c: Chooser) -> bytes:
    """One byte-level mutation of ``data``."""
    n = len(data)
    kind = c.integer(0, 8)
    at = c.integer(0, n)
    if kind == 0:
        return data[:at]
    if kind == 1 and n:
        i = min(at, n - 1)
        return data[:i] + bytes([data[i] ^ (1 << c.integer(0, 7))]) + data[i + 1 :]
    if kind == 2:
        return data[:at] + c.raw(16) + data[at:]
    if kind == 3:
        return data[:at] + data[at + c.integer(1, 64) :]
    if kind == 4:
        return data[:at] + choice(c, _NOT_UTF8) + data[at:]
    if kind == 5:
        return data + choice(c, [b"\n", b" ", b"\n" + data, data, b"\x00", b"}"])
    if kind == 6:
        return data[:at] + b"\n" + data[at:]
    if kind == 7:
        depth = choice(c, [60, 70, 1000, 100_000])
        open_, close = choice(c, [(b"[", b"]"), (b'{"a":', b"}")])
        return open_ * depth + data + close * depth
    return c.raw(64)


# -- messages and batches ----------------------------------------------------------------


def _parse(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def mutate_part(
    data: bytes | None, c: Chooser, others: Sequence[Any], *, rounds: int = 2
) -> bytes | None:
    """Up to ``rounds`` mutations of one key or value."""
    for _ in range(c.integer(0, rounds)):
        kind = c.integer(0, 9)
        if kind == 0:
            data = None if data is not None else c.raw(32)
            continue
        tree = _parse(data)
        if tree is not None and kind <= 6:
            try:
                text = dump(mutate_tree(tree, c, others), indent=kind == 6)
            except RecursionError:  # grown too deep to write: keep the previous data
                continue
            data = text.encode("utf-8", "surrogatepass")
        else:
            data = mutate_bytes(data or b"", c)
    return data


Record = tuple[bytes | None, bytes | None]


def mutated_batch(
    seeds: Sequence[Seed], c: Chooser, *, max_records: int = 8, rounds: int = 2
) -> tuple[str, list[Record]]:
    """A topic and a batch of records for it: seeds of that topic and others, mutated."""
    first = choice(c, seeds)
    same_topic = [s for s in seeds if s.topic == first.topic]
    parsed_values = [v for s in seeds[:40] if (v := _parse(s.value)) is not None]
    records: list[Record] = []
    for _ in range(c.integer(1, max_records)):
        seed = choice(c, same_topic) if c.integer(0, 3) else choice(c, seeds)
        key, value = seed.key, seed.value
        part = c.integer(0, 3)
        if part in (0, 2):
            value = mutate_part(value, c, parsed_values, rounds=rounds)
        if part in (1, 2):
            key = mutate_part(key, c, [], rounds=rounds)
        records.append((key, value))
    return first.topic, records


def runner(fn: Callable[[Chooser], None], seed: int, count: int) -> None:
    """Call ``fn`` ``count`` times with seeded random choices (no hypothesis needed)."""
    rng = random.Random(seed)
    for _ in range(count):
        fn(RandomChooser(rng))
