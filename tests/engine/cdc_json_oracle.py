"""Independent reference fold of generic CDC JSON events (shares no code with the engine).

Events are plain dicts (already parsed JSON) with an op field and an order field. They
are applied one by one in order-field order, the most direct reading of the semantics in
docs/guide/formats.md ("Generic CDC JSON"):

* insert / update: the row is created if absent; with full images the row becomes the
  event's columns, with partial images only the columns the event carries are set
  (others keep their value, or are None on a new row);
* delete: the row is removed.

Equal order values of one key are two changes (two updates in one millisecond): they
are applied in delivery order (the Kafka offset: an event's place in ``events``), so the
one consumed last wins, as Hudi's DefaultHoodieRecordPayload lets an incoming record
with an equal ordering value replace the stored one. There is no replay: whatever an
event is, it is applied at its place in (order value, delivery) order.

The result maps the record key text (the key field's value as text) to the row's
columns, without the op field.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from hypothesis import strategies as st


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


# -- hypothesis: random streams for the fold ---------------------------------------------

#: The non-key columns random events carry.
COLUMNS = ("a", "b", "c")


@st.composite
def streams(draw: st.DrawFn, max_events: int = 16, max_cuts: int = 4) -> tuple[list, list]:
    """Events of up to 3 keys with partial images, in a random delivery order, and where
    to cut them into batches. Order values repeat (ties); column values are null,
    integers or fractions, so a column first seen with integers may later get a fraction
    (and widen to double)."""
    n = draw(st.integers(1, max_events))
    events = []
    for _ in range(n):
        key = draw(st.integers(1, 3))
        op = draw(st.sampled_from(["_insert", "_update", "_update", "_delete"]))
        # A small range: equal order values of one key are common.
        event: dict[str, Any] = {"PK": key, "_action": op, "_timestamp": draw(st.integers(1, 12))}
        if op != "_delete":
            carried = draw(st.lists(st.sampled_from(COLUMNS), min_size=1, unique=True))
            for column in carried:
                event[column] = draw(
                    st.one_of(
                        st.none(),
                        st.integers(-50, 50),
                        st.integers(-200, 200).map(lambda x: x / 4),  # exact in binary
                    )
                )
        events.append(event)
    delivery = draw(st.permutations(events))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=max_cuts, unique=True)))
    return delivery, [c for c in cuts if c < n]


def cut(events: list[dict], cuts: list[int]) -> list[list[dict]]:
    """``events`` cut into batches before each index of ``cuts``."""
    bounds = [0, *cuts, len(events)]
    return [events[lo:hi] for lo, hi in itertools.pairwise(bounds) if hi > lo]
