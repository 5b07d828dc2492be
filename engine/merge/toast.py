"""TOAST placeholders: values Debezium could not read, which mean "unchanged".

PostgreSQL stores large values out of line (TOAST) and, with REPLICA IDENTITY DEFAULT,
logical decoding does not carry an unchanged TOASTed column of an update; Debezium then
writes its ``unavailable.value.placeholder`` instead of the value. The fold replaces it
with the previous value of the same key in the batch, else the stored one
(:func:`resolve_toast`), and never writes the placeholder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.hudi import HOODIE_RECORD_KEY
from engine.model import KEY

if TYPE_CHECKING:
    from engine.merge.rules import MergeCounts

#: Debezium's default ``unavailable.value.placeholder``.
DEFAULT_TOAST = "__debezium_unavailable_value"


def toast_mask(column: pa.ChunkedArray, placeholder: str) -> pa.ChunkedArray | None:
    """Where a column holds Debezium's unavailable-value placeholder, in any of its forms.

    Strings hold the text; bytes its UTF-8 bytes (``hex:...`` placeholders are bytes);
    text arrays ``[placeholder]``; integer arrays the placeholder's byte values.
    Returns None for column types that cannot carry the placeholder.
    """
    if placeholder.startswith("hex:"):
        raw = bytes.fromhex(placeholder[4:])
        text = raw.decode("utf-8", "replace")
    else:
        raw, text = placeholder.encode(), placeholder
    typ = column.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pc.fill_null(pc.equal(column, text), False)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pc.fill_null(pc.equal(column, pa.scalar(raw, typ)), False)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        value_type = typ.value_type
        lengths = pc.fill_null(pc.list_value_length(column), -1)
        if pa.types.is_string(value_type) or pa.types.is_binary(value_type):
            one = pc.equal(lengths, 1)
            masks = []
            for chunk, one_chunk in zip(column.chunks, one.chunks, strict=True):
                padded = pc.if_else(one_chunk, chunk, pa.scalar([None], chunk.type))
                first = pc.list_element(padded, 0)
                target = text if pa.types.is_string(value_type) else pa.scalar(raw, value_type)
                masks.append(pc.fill_null(pc.and_(one_chunk, pc.equal(first, target)), False))
            return pa.chunked_array(masks, pa.bool_())
        if pa.types.is_integer(value_type):
            pattern = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
            out = np.zeros(len(column), dtype=bool)
            lens = lengths.to_numpy()
            candidates = np.nonzero(lens == len(pattern))[0]
            if len(candidates):
                picked = column.take(pa.array(candidates))
                flat = pc.list_flatten(picked).to_numpy(zero_copy_only=False)
                grid = flat.reshape(len(candidates), len(pattern))
                out[candidates] = (grid == pattern).all(axis=1)
            return pa.chunked_array([pa.array(out)])
    return None


def has_toast(table: pa.Table, placeholder: str) -> bool:
    for name in table.column_names:
        if name.startswith("_cdc_"):
            continue
        mask = toast_mask(table.column(name), placeholder)
        if mask is not None and pc.any(mask).as_py():
            return True
    return False


def resolve_toast(
    upserts: pa.Table, history: pa.Table, old: pa.Table, placeholder: str, counts: MergeCounts
) -> pa.Table:
    """Replace placeholders by the previous value in the batch, else the stored one.

    ``history`` holds the batch's kept events sorted by (key, position); a winner is the
    last of its key's run, so its predecessors are the rows just before it.
    """
    keys_sorted = history.column(KEY).to_numpy(zero_copy_only=False)
    winner_keys = upserts.column(KEY).to_numpy(zero_copy_only=False)
    starts = np.searchsorted(keys_sorted, winner_keys, side="left")
    ends = np.searchsorted(keys_sorted, winner_keys, side="right")
    old_idx = pc.index_in(upserts.column(KEY), value_set=old.column(HOODIE_RECORD_KEY))
    for name in upserts.column_names:
        if name.startswith("_cdc_"):
            continue
        mask = toast_mask(upserts.column(name), placeholder)
        if mask is None or not pc.any(mask).as_py():
            continue
        hist_mask = toast_mask(history.column(name), placeholder)
        if hist_mask is None:  # same column type as the winners: cannot happen
            raise RuntimeError(f"TOAST history of {name} has type {history.column(name).type}")
        hist_ok = ~np.asarray(hist_mask.to_numpy(zero_copy_only=False), dtype=bool)
        source = np.full(len(upserts), -1, dtype=np.int64)
        for r in np.nonzero(mask.to_numpy(zero_copy_only=False))[0]:
            # Only rows holding a placeholder get here; each scans its own key's run.
            candidates = np.nonzero(hist_ok[starts[r] : ends[r] - 1])[0]
            if len(candidates):
                source[r] = starts[r] + candidates[-1]
        from_batch = history.column(name).take(pa.array(np.where(source >= 0, source, 0)))
        stored = (
            old.column(name).take(old_idx).cast(from_batch.type)
            if name in old.column_names
            else pa.nulls(len(upserts), from_batch.type)
        )
        in_batch = pa.array(source >= 0)
        resolved = pc.if_else(in_batch, from_batch, stored)
        unresolved = pc.and_(mask, pc.and_(pc.invert(in_batch), pc.is_null(old_idx)))
        missing = pc.sum(unresolved).as_py() or 0
        counts.toast_unresolved += missing
        counts.toast_filled += (pc.sum(mask).as_py() or 0) - missing
        column = pc.if_else(mask, resolved, upserts.column(name))
        upserts = upserts.set_column(upserts.schema.get_field_index(name), name, column)
    return upserts
