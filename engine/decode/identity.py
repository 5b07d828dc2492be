"""Record keys rebuilt from row fields, for tables configured so in ``[tables.<name>]``.

``key_fields = [...]``: the record key is rebuilt from those row fields (after image, or
the before image of a delete). ``keyless = "full-row"``: the record key is a hash of the
row's values (nulls left out, so a column added later does not change the identity of
older rows), ``_cdc_row_hash`` and ``_cdc_copies`` are added to the row, and an update
becomes a delete of its before image plus an insert of its after image (see
:mod:`engine.merge.rules` for the counts). :func:`identities_for` gives a topic's
:class:`Identity`, which :mod:`engine.decode.rewrite` applies per record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.decode.jsonconverter import BadRecord, ConvertedSchemas, compact
from engine.model import COPIES, OP, POS_SUB, ROW_HASH

if TYPE_CHECKING:
    from engine.config import Config, TableConfig


def _row_hash(image: dict) -> str:
    values = {k: v for k, v in image.items() if v is not None and k not in (ROW_HASH, COPIES)}
    return hashlib.sha256(
        compact(dict(sorted(values.items()))).encode("utf-8", "surrogatepass")
    ).hexdigest()[:32]


def _with_identity_columns(schema: dict) -> dict:
    """Envelope schema whose before/after structs also hold ``_cdc_row_hash``/``_cdc_copies``."""
    fields = []
    for f in schema.get("fields") or []:
        if isinstance(f, dict) and f.get("field") in ("before", "after") and f.get("fields"):
            members = [m for m in f["fields"] if m.get("field") not in (ROW_HASH, COPIES)]
            members += [
                {"type": "string", "optional": True, "field": ROW_HASH},
                {"type": "int64", "optional": True, "field": COPIES},
            ]
            f = {**f, "fields": members}
        fields.append(f)
    return {**schema, "fields": fields}


class Identity:
    """Record keys of a table with ``key_fields`` or ``keyless = "full-row"``."""

    def __init__(self, table: str, tc: TableConfig) -> None:
        self.table = table
        self.key_fields = tc.key_fields
        self.full_row = tc.keyless == "full-row"
        self._cache = ConvertedSchemas()

    def schema(self, schema: dict | None) -> dict | None:
        if schema is None or not self.full_row:
            return schema
        return self._cache.get(schema, _with_identity_columns)

    def rekey(self, env: Any) -> list[tuple[dict, dict]]:
        """``[(record key, envelope)]`` for one envelope (two for a full-row update)."""
        if not isinstance(env, dict) or env.get("op") not in ("c", "u", "r", "d"):
            return []  # not a row change: the decoder settles it (ignored or bad)
        op = env["op"]
        before, after = env.get("before"), env.get("after")
        if op == "d":
            image = before if isinstance(before, dict) else after
        else:
            image = after
        if not isinstance(image, dict):
            which = "before" if op == "d" else "after"
            raise BadRecord(
                f"table {self.table}: a {op!r} event without a {which} image cannot be keyed "
                "by its row (a delete needs REPLICA IDENTITY FULL / binlog_row_image=FULL)"
            )
        if self.key_fields is not None:
            missing = [f for f in self.key_fields if f not in image]
            if missing:
                raise BadRecord(
                    f"table {self.table}: key field(s) {', '.join(missing)} "
                    f"(tables.{self.table}.key_fields) not in the row image"
                )
            key = {f: image[f] for f in self.key_fields}
            if op == "d" and not isinstance(after, dict):
                env = {**env, "after": image}  # the key columns of the delete's row
            return [(key, env)]
        # full-row
        if op in ("c", "r"):
            h = _row_hash(image)
            return [({ROW_HASH: h}, {**env, "after": {**image, ROW_HASH: h, COPIES: 1}})]
        if op == "d":
            h = _row_hash(image)
            return [({ROW_HASH: h}, {**env, "after": {**image, ROW_HASH: h, COPIES: -1}})]
        if not isinstance(before, dict):
            raise BadRecord(
                f'table {self.table} (keyless = "full-row"): an update without its before '
                "image cannot say which row changed; set REPLICA IDENTITY FULL (PostgreSQL) "
                "or binlog_row_image=FULL (MySQL); flattened events never carry one"
            )
        old, new = _row_hash(before), _row_hash(image)
        if old == new:  # nothing changed: the row keeps its count
            return [({ROW_HASH: new}, {**env, "after": {**image, ROW_HASH: new, COPIES: 0}})]
        gone = {**env, "op": "d", "after": {**before, ROW_HASH: old, COPIES: -1}}
        came = {**env, "after": {**image, ROW_HASH: new, COPIES: 1}}
        return [({ROW_HASH: old}, gone), ({ROW_HASH: new}, came)]


def snapshot_rows_apart(batch: pa.Table, offsets: pa.Array) -> pa.Table:
    """Full-row tables: the rows of one snapshot share a source position (its LSN or
    binlog coordinates), so equal rows would look like replays of each other. A snapshot
    row's sub-position becomes its Kafka offset: still before every streamed change (the
    streamed bit of ``_cdc_pos`` is clear), and apart from its equal neighbours."""
    is_read = pc.fill_null(pc.equal(batch.column(OP), "r"), False)
    if not pc.any(is_read).as_py():
        return batch
    i = batch.schema.get_field_index(POS_SUB)
    sub = pc.if_else(is_read, offsets, batch.column(POS_SUB)).cast(pa.int64())
    return batch.set_column(i, POS_SUB, sub)


def identities_for(cfg: Config) -> Callable[[str], Identity | None]:
    """The key rewrite of each topic's table, from ``[tables.<name>]``."""
    configured = {
        name: tc for name, tc in cfg.tables.items() if tc.key_fields or tc.keyless is not None
    }
    cache: dict[str, Identity | None] = {}

    def lookup(topic: str) -> Identity | None:
        if not configured:
            return None
        if topic not in cache:
            name = cfg.table_name(topic)
            tc = configured.get(name)
            cache[topic] = Identity(name, tc) if tc is not None else None
        return cache[topic]

    return lookup
