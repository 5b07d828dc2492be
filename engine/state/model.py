"""The vocabulary of replication state: a table's state, its counters, its status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any


class TableState(StrEnum):
    """Where a table stands (the names operators of AWS DMS and Flink CDC know)."""

    SNAPSHOTTING = "SNAPSHOTTING"
    REPLICATING = "REPLICATING"
    PAUSED = "PAUSED"
    FAILING = "FAILING"
    FAILED = "FAILED"
    #: Read, never recorded: no replicator runs (see :meth:`at_rest`).
    STOPPED = "STOPPED"

    @property
    def stopped(self) -> bool:
        """Whether the table no longer replicates (until it is fixed and restarted):
        FAILED. A FAILING table is retrying a transient failure and keeps its partitions."""
        return self is TableState.FAILED

    def at_rest(self) -> TableState:
        """What this recorded state reads while no replicator runs: PAUSED and FAILED
        hold (the next start keeps a pause, and a failure needs the operator), the states
        only a running replicator can be in (SNAPSHOTTING, REPLICATING, FAILING) read
        STOPPED."""
        return self if self in (TableState.PAUSED, TableState.FAILED) else TableState.STOPPED


#: Where a counter is shown: a column of ``cdcctl status`` (:data:`STATUS_VIEW`), of the
#: dashboard's tables table (:data:`TABLES_VIEW`: its first columns, after the lag, which
#: an 80-column terminal shows; :data:`NEXT_VIEW`: right after them, on 120 columns;
#: :data:`WIDE_VIEW`: further right; the others are reached by scrolling sideways) and of
#: its detail screen (:data:`DETAIL_VIEW`).
STATUS_VIEW, TABLES_VIEW, NEXT_VIEW, WIDE_VIEW, DETAIL_VIEW = (
    "status",
    "tables",
    "next",
    "wide",
    "detail",
)


@dataclass(frozen=True)
class Counter:
    """One per-table counter: declared once, as a field of :class:`TableCounters` (see
    :func:`counter`); the state store's columns (``<name>`` and ``run_<name>``), the
    fields of ``status --json``, the metrics, and the CLI's and the dashboard's columns
    are all made from these."""

    #: The field of :class:`TableCounters`, the store's column, the status field.
    name: str
    #: Its column heading (``cdcctl status``, the dashboard's tables).
    heading: str
    #: What it counts (the metric's help).
    help: str
    #: The ``cdcctl.counts`` key (what a commit recorded) whose value it adds up; None:
    #: not from the commit alone (``rows``, ``commits``: see :func:`add_commit_counts`).
    commit_key: str | None = None
    #: The ``op`` label of ``cdcctl_events_applied_total`` that exports it, or ...
    op: str | None = None
    #: ... the Prometheus family of its own (without ``_total``; a gauge with ``gauge``).
    metric: str | None = None
    gauge: bool = False
    #: Among the documented fields of ``status --json`` (first, in declaration order);
    #: the others follow the figures.
    listed: bool = True
    #: Where it is shown (:data:`STATUS_VIEW`, ...).
    views: frozenset[str] = frozenset()
    #: Kept in the state store and shown by the status (else in memory only).
    stored: bool = True
    #: Its label on the dashboard's detail screen, where not its heading.
    label: str = ""
    #: In ``cdcctl status``'s columns, right after this counter (else in declaration
    #: order): the CLI shows schema changes beside the source events.
    status_after: str = ""

    @property
    def detail_label(self) -> str:
        return self.label or self.heading


def counter(
    heading: str,
    help: str,
    *,
    commit_key: str | None = None,
    op: str | None = None,
    metric: str | None = None,
    gauge: bool = False,
    listed: bool = True,
    views: tuple[str, ...] = (),
    stored: bool = True,
    label: str = "",
    status_after: str = "",
) -> Any:
    """A counter field of :class:`TableCounters` (0 at first), its :class:`Counter` with it."""
    spec = Counter(
        "",
        heading,
        help,
        commit_key=commit_key,
        op=op,
        metric=metric,
        gauge=gauge,
        listed=listed,
        views=frozenset(views),
        stored=stored,
        label=label,
        status_after=status_after,
    )
    return field(default=0, metadata={"counter": spec})


_ALL = (STATUS_VIEW, TABLES_VIEW, DETAIL_VIEW)
_NEXT = (STATUS_VIEW, NEXT_VIEW, DETAIL_VIEW)
_FURTHER = (STATUS_VIEW, WIDE_VIEW, DETAIL_VIEW)


@dataclass
class TableCounters:
    """Counters of one table: source events applied, by op, and what else happened.

    Cumulative across runs when the replicator keeps a state store (loaded from it, and
    reconciled with the commits' ``cdcctl.counts`` after a crash). Each source event
    applied counts once, whatever later events of its batch do to its key; a Kafka
    tombstone is not an event of its own. The one declaration of every counter: see
    :data:`COUNTERS`.
    """

    #: (counted since the store knew of rows: stores made before count from then on)
    rows: int = counter(
        "rows",
        "Rows in the replica as of its last commit",
        metric="cdcctl_rows",
        gauge=True,
        views=(STATUS_VIEW, WIDE_VIEW),
    )
    snapshot_rows: int = counter(
        "snapshot",
        "Snapshot reads applied (op=r)",
        commit_key="events_r",
        op="snapshot",
        views=_FURTHER,
    )
    inserts: int = counter(
        "inserts", "Inserts applied (op=c)", commit_key="events_c", op="insert", views=_ALL
    )
    updates: int = counter(
        "updates", "Updates applied (op=u)", commit_key="events_u", op="update", views=_ALL
    )
    deletes: int = counter(
        "deletes", "Deletes applied (op=d)", commit_key="events_d", op="delete", views=_ALL
    )
    truncates: int = counter(
        "truncates",
        "Truncates applied (op=t)",
        commit_key="events_t",
        op="truncate",
        views=(STATUS_VIEW, DETAIL_VIEW),
    )
    late: int = counter(
        "late",
        "Events dropped as not newer than what the table held",
        commit_key="late",
        metric="cdcctl_late_events",
        views=_NEXT,
    )
    toast_unresolved: int = counter(
        "toast unresolved",
        "TOAST placeholders with no earlier value anywhere (the column stays null)",
        commit_key="toast_unresolved",
        listed=False,
    )
    toast_filled: int = counter(
        "toast filled",
        "TOAST placeholders filled with the column's previous value",
        commit_key="toast_filled",
        listed=False,
    )
    bad: int = counter(
        "bad",
        "Undecodable messages, quarantined to the dead letters",
        commit_key="bad",
        metric="cdcctl_bad_messages",
        views=_NEXT,
    )
    ignored: int = counter(
        "ignored",
        "Valid messages that are not row changes (heartbeats, transaction markers, ...)",
        stored=False,
    )
    ddl: int = counter(
        "ddl",
        "Schema changes: events of the schema change topic handled for the table, "
        "else batches that changed its schema",
        commit_key="ddl",
        metric="cdcctl_schema_changes",
        listed=False,
        label="schema chg",
        views=(STATUS_VIEW, DETAIL_VIEW),
        status_after="truncates",
    )
    retries: int = counter(
        "retries",
        "Retries of transient failures",
        metric="cdcctl_retries",
        views=_ALL,
    )
    commits: int = counter(
        "commits",
        "Hudi commits made",
        metric="cdcctl_commits",
        views=(STATUS_VIEW, DETAIL_VIEW, WIDE_VIEW),
    )
    #: Source commit time (ms) of the newest event applied.
    last_source_ts_ms: int | None = None


#: Every counter the state store keeps (each also for the current run, ``run_<name>``),
#: in declaration order.
COUNTERS: tuple[Counter, ...] = tuple(
    replace(f.metadata["counter"], name=f.name)
    for f in fields(TableCounters)
    if "counter" in f.metadata and f.metadata["counter"].stored
)
COUNTER_NAMES: tuple[str, ...] = tuple(c.name for c in COUNTERS)
#: ``cdcctl.counts`` keys of rows the replica gained (+1), changed (0) or lost (-1).
ROW_CHANGES = {"inserts": 1, "updates": 0, "deletes": -1, "truncated": -1}
#: Every key of a commit's ``cdcctl.counts``, in order.
COMMIT_KEYS = (*ROW_CHANGES, *(c.commit_key for c in COUNTERS if c.commit_key))


def shown_counters(view: str) -> tuple[Counter, ...]:
    """The counters a view shows, in declaration order (``status_after`` moves one in
    :data:`STATUS_VIEW`)."""
    shown = [c for c in COUNTERS if view in c.views]
    if view == STATUS_VIEW:
        for moved in [c for c in shown if c.status_after]:
            shown.remove(moved)
            at = next(i for i, c in enumerate(shown) if c.name == moved.status_after)
            shown.insert(at + 1, moved)
    return tuple(shown)


def commit_counts(values: Mapping[str, int]) -> dict[str, int]:
    """A commit's ``cdcctl.counts``: every key of :data:`COMMIT_KEYS` from ``values`` (0
    when absent; other keys are left out)."""
    return {k: int(values.get(k, 0)) for k in COMMIT_KEYS}


def add_commit_counts(counters: TableCounters, counts: Mapping[str, int]) -> None:
    """Add what one commit recorded in ``cdcctl.counts`` (and the commit itself)."""
    for c in COUNTERS:
        if c.commit_key is not None:
            setattr(counters, c.name, getattr(counters, c.name) + int(counts.get(c.commit_key, 0)))
    counters.rows += sum(int(counts.get(k, 0)) * sign for k, sign in ROW_CHANGES.items())
    counters.commits += 1


@dataclass(frozen=True)
class TableStatus:
    """A snapshot of one table: what the CLI prints and ``--json`` emits."""

    table: str
    topic: str
    state: TableState
    error: str | None = None
    counters: TableCounters = field(default_factory=TableCounters)
