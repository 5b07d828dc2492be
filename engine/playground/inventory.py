"""The ``inventory`` database that :mod:`engine.playground.workload` simulates.

Tables (topic ``<prefix>.inventory.<table>``):

============  =========================================================================
customers     id int32 PK (from 1001), first_name, last_name, email string,
              created_at ``io.debezium.time.MicroTimestamp``, vip boolean
products      id int32 PK (from 101), name string, description string (nullable),
              price ``org.apache.kafka.connect.data.Decimal`` (precision 10, scale 2),
              weight double (nullable), updated_at ``io.debezium.time.ZonedTimestamp``
orders        id int64 PK (from 10001), customer_id, product_id, quantity int32,
              order_date ``io.debezium.time.Date``, status ``io.debezium.data.Enum``
              (NEW, PAID, SHIPPED, CANCELLED); with ``notes`` (the wide rows of
              ``bench/catchup.py --wide``) also note string (nullable, 200-2,000
              characters)
============  =========================================================================

Here: the tables' Connect key and value schemas (:func:`key_schema`,
:func:`value_schema`), the sample values rows are drawn from (names, products,
descriptions that exercise JSON escaping and UTF-8), pre-rendered as JSON string
literals, the wire encoders of Debezium's semantic types (base64 decimals, zoned
timestamps) and the live row ids of a table (:class:`Rows`).
"""

from __future__ import annotations

import base64
import json
import random
import unicodedata
from array import array
from collections.abc import Callable
from datetime import date
from typing import Any, Final

TABLES: Final = ("customers", "products", "orders")
DATABASE: Final = "inventory"
SCHEMA: Final = "inventory"
DEBEZIUM_VERSION: Final = "2.7.3.Final"
_ENUM_STATUS: Final = ("NEW", "PAID", "SHIPPED", "CANCELLED")
_SNAPSHOT_ALLOWED: Final = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
US_PER_DAY: Final = 86_400_000_000

FIRST_NAMES: Final = (
    "Sally", "George", "Edward", "Anne", "Maria", "José", "Zoë", "Łukasz", "Søren", "Aiko",
    "Chen", "Fatima", "Olivia", "Liam", "Noah", "Emma", "Mateo", "Ingrid", "Dmitri", "Priya",
    "Kwame", "Hannah", "Lucas", "Amélie", "Yuki", "Omar", "Grace", "Henrik", "Lucía", "Ravi",
)  # fmt: skip
LAST_NAMES: Final = (
    "Thomas", "Bailey", "Walker", "Kretchmar", "García", "Müller", "O'Brien", "Nguyen",
    "Kowalski", "Johansson", "Tanaka", "Smith", "Brown", "Okafor", "Rossi", "Dubois",
    "Ivanova", "Patel", "Khan", "Silva", "Andersen", "Yılmaz", "Novák", "Fischer", "Lee",
)  # fmt: skip
DOMAINS: Final = ("example.com", "acme.org", "mail.test", "shop.invalid", "noanswer.org")
_PRODUCT_ADJECTIVES: Final = (
    "small", "large", "red", "blue", "heavy-duty", "12-pack", "deluxe", "compact", "vintage",
)  # fmt: skip
_PRODUCT_NOUNS: Final = (
    "scooter", "car battery", "drill bits", "hammer", "rocks", "spare tire", "jacket",
    "kettle", "desk lamp", "backpack", "teapot",
)  # fmt: skip
# Descriptions exercise JSON escaping and UTF-8: quotes, backslashes, control characters
# and non-ASCII text all occur in real catalogues.
_DESCRIPTIONS: Final = (
    "Small 2-wheel scooter",
    "12V car battery",
    "12-pack of drill bits with sizes ranging from #40 to #3",
    "12oz carpenter's hammer",
    "box of assorted rocks",
    "24 inch spare tire",
    "water resistant black wind breaker",
    'Heavy-duty 14" drill with "quick-change" chuck',
    "first line\nsecond line",
    "tab\tseparated\tvalues",
    "path C:\\tools\\bin",
    "mug ☕ with 日本語 label",
    "très élégant, größer",
    "",
)


def json_str(text: str) -> str:
    """Render ``text`` as a JSON string literal the way Jackson does (UTF-8, no \\u)."""
    return json.dumps(text, ensure_ascii=False)


def _slug(text: str) -> str:
    """ASCII, lower-case, alphanumeric rendering of a name, for e-mail addresses."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if c.isascii() and c.isalnum()).lower() or "x"


FIRST_J: Final = tuple(json_str(n) for n in FIRST_NAMES)
LAST_J: Final = tuple(json_str(n) for n in LAST_NAMES)
FIRST_SLUG: Final = tuple(_slug(n) for n in FIRST_NAMES)
LAST_SLUG: Final = tuple(_slug(n) for n in LAST_NAMES)
PRODUCT_NAMES_J: Final = tuple(
    json_str(f"{adjective} {noun}") for adjective in _PRODUCT_ADJECTIVES for noun in _PRODUCT_NOUNS
)
DESCRIPTIONS_J: Final = tuple(json_str(d) for d in _DESCRIPTIONS)
#: Shortest and longest ``orders.note`` of the wide rows (characters).
NOTE_LENGTHS: Final = (200, 2000)
STATUS_J: Final = tuple(json_str(s) for s in _ENUM_STATUS)


def decimal_base64(unscaled: int) -> str:
    """Connect Decimal payload: base64 of the minimal big-endian two's complement bytes."""
    # Room for the magnitude plus a sign bit; ~n has the magnitude bits of a negative n.
    magnitude = unscaled if unscaled >= 0 else ~unscaled
    length = (magnitude.bit_length() + 8) // 8
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode("ascii")


class ZonedFormatter:
    """Formats epoch microseconds as Debezium ``ZonedTimestamp`` JSON strings (UTC, Z).

    Like Java's ``ISO_OFFSET_DATE_TIME`` the fraction is printed with as few digits as
    needed (none for whole seconds). The date part is cached per day because formatting
    dates is the slow part.
    """

    def __init__(self) -> None:
        self._days: dict[int, str] = {}

    def __call__(self, us: int) -> str:
        days, rem = divmod(us, US_PER_DAY)
        day = self._days.get(days)
        if day is None:
            day = self._days[days] = date.fromordinal(_EPOCH_ORDINAL + days).isoformat()
        secs, frac = divmod(rem, 1_000_000)
        hours, secs = divmod(secs, 3600)
        minutes, secs = divmod(secs, 60)
        if frac:
            fraction = f".{frac:06d}".rstrip("0")
            return f'"{day}T{hours:02d}:{minutes:02d}:{secs:02d}{fraction}Z"'
        return f'"{day}T{hours:02d}:{minutes:02d}:{secs:02d}Z"'


def note_pool(seed: int, size: int = 1024) -> tuple[str, ...]:
    """``size`` order notes as JSON string literals, 200 to 2,000 characters each (uniform),
    made of the descriptions' words: escapes, control characters and UTF-8 throughout."""
    rng = random.Random(seed)
    words = " ".join(_DESCRIPTIONS + _PRODUCT_NOUNS).split(" ")
    low, high = NOTE_LENGTHS
    pool = []
    for _ in range(size):
        length = rng.randint(low, high)
        parts: list[str] = []
        n = -1
        while n < length:
            word = rng.choice(words)
            parts.append(word)
            n += len(word) + 1
        pool.append(json_str(" ".join(parts)[:length]))
    return tuple(pool)


def _field(type_: str, name: str, *, optional: bool = False, **extra: Any) -> dict[str, Any]:
    """A Connect field schema, with members in the order JsonConverter writes them."""
    schema: dict[str, Any] = {"type": type_, "optional": optional}
    if "semantic" in extra:
        schema["name"] = extra.pop("semantic")
        schema["version"] = 1
    if "parameters" in extra:
        schema["parameters"] = extra.pop("parameters")
    if "default" in extra:
        schema["default"] = extra.pop("default")
    schema["field"] = name
    return schema


_ROW_FIELDS: Final[dict[str, list[dict[str, Any]]]] = {
    "customers": [
        _field("int32", "id"),
        _field("string", "first_name"),
        _field("string", "last_name"),
        _field("string", "email"),
        _field("int64", "created_at", semantic="io.debezium.time.MicroTimestamp"),
        _field("boolean", "vip", default=False),
    ],
    "products": [
        _field("int32", "id"),
        _field("string", "name"),
        _field("string", "description", optional=True),
        _field(
            "bytes",
            "price",
            semantic="org.apache.kafka.connect.data.Decimal",
            parameters={"scale": "2", "connect.decimal.precision": "10"},
        ),
        _field("double", "weight", optional=True),
        _field("string", "updated_at", semantic="io.debezium.time.ZonedTimestamp"),
    ],
    "orders": [
        _field("int64", "id"),
        _field("int32", "customer_id"),
        _field("int32", "product_id"),
        _field("int32", "quantity"),
        _field("int32", "order_date", semantic="io.debezium.time.Date"),
        _field(
            "string",
            "status",
            semantic="io.debezium.data.Enum",
            parameters={"allowed": ",".join(_ENUM_STATUS)},
        ),
    ],
}
_NOTE_FIELD: Final = _field("string", "note", optional=True)


_SOURCE_FIELDS: Final = [
    _field("string", "version"),
    _field("string", "connector"),
    _field("string", "name"),
    _field("int64", "ts_ms"),
    _field(
        "string",
        "snapshot",
        optional=True,
        semantic="io.debezium.data.Enum",
        parameters={"allowed": _SNAPSHOT_ALLOWED},
        default="false",
    ),
    _field("string", "db"),
    _field("string", "sequence", optional=True),
    _field("int64", "ts_us", optional=True),
    _field("int64", "ts_ns", optional=True),
    _field("string", "schema"),
    _field("string", "table"),
    _field("int64", "txId", optional=True),
    _field("int64", "lsn", optional=True),
    _field("int64", "xmin", optional=True),
]


_TRANSACTION_SCHEMA: Final = {
    "type": "struct",
    "fields": [
        _field("string", "id"),
        _field("int64", "total_order"),
        _field("int64", "data_collection_order"),
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def key_schema(prefix: str, table: str) -> dict[str, Any]:
    """The Connect key schema of ``table`` (as JSON-ready dict)."""
    return {
        "type": "struct",
        "fields": [_ROW_FIELDS[table][0]],
        "optional": False,
        "name": f"{prefix}.{SCHEMA}.{table}.Key",
    }


def value_schema(prefix: str, table: str, notes: bool = False) -> dict[str, Any]:
    """The Connect envelope schema of ``table`` (as JSON-ready dict); ``notes``: orders
    have the wide rows' ``note`` column."""
    row_name = f"{prefix}.{SCHEMA}.{table}.Value"
    fields = _ROW_FIELDS[table] + ([_NOTE_FIELD] if notes and table == "orders" else [])
    row = {"type": "struct", "fields": fields, "optional": True, "name": row_name}
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "fields": _SOURCE_FIELDS,
                "optional": False,
                "name": "io.debezium.connector.postgresql.Source",
                "field": "source",
            },
            _TRANSACTION_SCHEMA,
            _field("string", "op"),
            _field("int64", "ts_ms", optional=True),
            _field("int64", "ts_us", optional=True),
            _field("int64", "ts_ns", optional=True),
        ],
        "optional": False,
        "name": f"{prefix}.{SCHEMA}.{table}.Envelope",
        "version": 2,
    }


class Rows:
    """Live primary keys of one table, with O(1) insert, delete and uniform choice.

    ``live`` holds the live ids (the newest ones at the end, except that a delete moves
    the last id into the freed slot); ``slot[id - base]`` is the id's index in ``live``
    or -1. Compact ``array``s keep millions of rows affordable.
    """

    def __init__(self, base: int) -> None:
        self.base = base
        self.next_id = base
        self.live = array("q")
        self.slot = array("q")
        self.dead: list[int] = []  # deleted ids, candidates for re-insertion

    def new_id(self) -> int:
        """Allocate the next id (a fresh sequence value); the caller fills its columns."""
        ident = self.next_id
        self.next_id += 1
        self.slot.append(-1)
        return ident

    def add(self, ident: int) -> None:
        self.slot[ident - self.base] = len(self.live)
        self.live.append(ident)

    def remove(self, ident: int) -> None:
        index = self.slot[ident - self.base]
        last = self.live.pop()
        if last != ident:
            self.live[index] = last
            self.slot[last - self.base] = index
        self.slot[ident - self.base] = -1


def advance(now_us: int, step_us: int, clock: Callable[[], float] | None) -> int:
    """A simulated clock ``step_us`` later; with a real clock (``time.time``) never ahead
    of it, but always forward: a live database's commit times."""
    later = now_us + step_us
    if clock is None:
        return later
    return max(now_us + 1, min(later, int(clock() * 1_000_000)))


def deleted_row_json(table: str, ident: int, notes: bool = False) -> str:
    """A delete's ``before`` row: with REPLICA IDENTITY DEFAULT it has the key; every other
    NOT NULL column gets its type's zero value and nullable columns get null (``notes``:
    the wide rows' ``note`` column, null)."""
    if table == "customers":
        return (
            f'{{"id":{ident},"first_name":"","last_name":"","email":"","created_at":0,"vip":false}}'
        )
    if table == "products":
        return (
            f'{{"id":{ident},"name":"","description":null,"price":"AA==",'
            f'"weight":null,"updated_at":"1970-01-01T00:00:00Z"}}'
        )
    note = ',"note":null' if notes else ""
    return (
        f'{{"id":{ident},"customer_id":0,"product_id":0,"quantity":0,'
        f'"order_date":0,"status":""{note}}}'
    )
