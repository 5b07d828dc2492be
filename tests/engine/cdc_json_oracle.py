"""Independent reference fold of generic CDC JSON events (shares no code with the engine).

Events are plain dicts (already parsed JSON) with an op field and an order field. They
are applied one by one in order-field order (ties: delivery order), the most direct
reading of the semantics in the README ("Generic CDC JSON"):

* insert / update: the row is created if absent; with full images the row becomes the
  event's columns, with partial images only the columns the event carries are set
  (others keep their value, or are None on a new row);
* delete: the row is removed.

The result maps the record key text (the key field's value as text) to the row's
columns, without the op field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def fold_events(
    events: Iterable[dict[str, Any]],
    *,
    key: str,
    op_field: str = "_action",
    order_field: str = "_timestamp",
    deletes: tuple[str, ...] = ("_delete",),
    partial: bool,
) -> dict[str, dict[str, Any]]:
    indexed = list(enumerate(events))
    indexed.sort(key=lambda item: (item[1][order_field], item[0]))
    table: dict[str, dict[str, Any]] = {}
    for _, event in indexed:
        k = str(event[key])
        if event[op_field] in deletes:
            table.pop(k, None)
            continue
        image = {c: v for c, v in event.items() if c != op_field}
        if partial:
            table.setdefault(k, {}).update(image)
        else:
            table[k] = image
    return table
