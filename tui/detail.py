"""The detail screen of one table: everything the engine knows about it, refreshed live.

:class:`TableDetailScreen` shows, from :class:`engine.TableDetailReader`: the latency
percentiles and the throughput history, the counters (in all and this run), the Kafka
partitions with the applied (checkpoint) and end offsets, the Hudi timeline (the last
instants, file groups, log files, the last compaction), the schema with its latest
change, the table's recent event log, and the last error in full (``c`` copies it; it
sits in a read-only text area where it can be selected).

The state store and the replica are read by a thread worker every ``refresh`` seconds,
the broker by another (each request waits at most a short time) every
``offsets_every`` seconds: the UI thread never waits for either, and an unreachable
broker, a missing store or replica is said on screen. Times are shown in UTC, with how
long ago they were by the ``now`` clock (injectable, so that snapshots are stable).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Sparkline, Static, TextArea

import engine
from tui.view import STATE_STYLES, duration, epoch

if TYPE_CHECKING:
    from engine import KafkaOffsets, TableDetail

#: Counters shown, in order: (label, status key).
COUNTERS = tuple((c.detail_label, c.name) for c in engine.shown_counters(engine.DETAIL_VIEW))


def when(value: Any, now: float, *, date: bool = False) -> str:
    """``12:02:27 (5m ago)`` in UTC (with ``date``: ``2026-11-25 12:02:27``); ``-``."""
    ts = epoch(value)
    if ts is None:
        return "-"
    stamp = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{stamp} ({duration(now - ts)} ago)"


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def _table(*columns: str, **kwargs: Any) -> Table:
    table = Table(box=box.SIMPLE_HEAD, expand=True, pad_edge=False, show_edge=False, **kwargs)
    for name in columns:
        table.add_column(name)
    return table


class TableDetailScreen(Screen[None]):
    """One table in detail (see the module docstring). Escape or ``q`` goes back."""

    DEFAULT_CSS = """
    TableDetailScreen { layout: vertical; }
    TableDetailScreen #title { height: auto; padding: 0 1; background: $panel; }
    TableDetailScreen #body { height: 1fr; }
    TableDetailScreen #columns { height: auto; }
    TableDetailScreen .column { width: 1fr; height: auto; }
    TableDetailScreen.-narrow #columns { layout: vertical; }
    TableDetailScreen.-narrow .column { width: 100%; }
    TableDetailScreen .panel {
        height: auto; border: round $primary-darken-1; padding: 0 1;
        border-title-color: $text; border-title-style: bold;
    }
    TableDetailScreen Sparkline { height: 3; margin: 0 0 0 0; }
    TableDetailScreen #error-text { height: auto; max-height: 14; border: none; padding: 0; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("q", "back", "Back", show=False),
        Binding("c", "copy_error", "Copy error"),
        Binding("e", "show_error", "Error"),
        Binding("r", "reload", "Refresh"),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    AUTO_FOCUS = "#body"

    class Loaded(Message):
        """A read of the store and the replica (or why it failed)."""

        def __init__(self, detail: TableDetail | None, error: str | None = None) -> None:
            super().__init__()
            self.detail, self.error = detail, error

    class OffsetsLoaded(Message):
        """The broker's answer about the table's partitions."""

        def __init__(self, offsets: KafkaOffsets) -> None:
            super().__init__()
            self.offsets = offsets

    def __init__(
        self,
        work_dir: Path,
        config: engine.Config | None,
        table: str,
        *,
        now: Callable[[], float] = time.time,
        refresh: float = 2.0,
        offsets_every: float = 5.0,
        broker_timeout: float = 2.0,
    ) -> None:
        super().__init__()
        self.work_dir, self.config, self.table = Path(work_dir), config, table
        self.now = now
        self.refresh_seconds, self.offsets_every = refresh, offsets_every
        self.broker_timeout = broker_timeout
        self.reader = engine.TableDetailReader(self.work_dir, config, table)
        #: The last reads (None until they arrive).
        self.detail: TableDetail | None = None
        self.offsets: KafkaOffsets | None = None
        self._reading = threading.Lock()
        self._asking = threading.Lock()
        self._asked_at = float("-inf")

    # -- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.table}  loading…"), id="title")
        with VerticalScroll(id="body"), Horizontal(id="columns"):
            with Vertical(classes="column"):
                with Vertical(classes="panel", id="perf") as perf:
                    perf.border_title = "Latency & throughput"
                    yield Static("loading…", id="latency")
                    yield Sparkline([], id="throughput", summary_function=max)
                    yield Static("", id="throughput-caption")
                with Vertical(classes="panel", id="counters") as counters:
                    counters.border_title = "Counters"
                    yield Static("loading…", id="counters-table")
                with Vertical(classes="panel", id="kafka") as kafka:
                    kafka.border_title = "Kafka partitions"
                    yield Static("asking the broker…", id="kafka-table")
                with Vertical(classes="panel", id="schema") as schema:
                    schema.border_title = "Schema"
                    yield Static("loading…", id="schema-table")
            with Vertical(classes="column"):
                with Vertical(classes="panel", id="hudi") as hudi:
                    hudi.border_title = "Hudi timeline"
                    yield Static("loading…", id="hudi-table")
                with Vertical(classes="panel", id="events") as events:
                    events.border_title = "Event log"
                    yield Static("loading…", id="events-table")
                with Vertical(classes="panel", id="error") as error:
                    error.border_title = "Last error"
                    yield Static("", id="error-when")
                    yield TextArea("", id="error-text", read_only=True, soft_wrap=True)
        yield Footer()

    def on_mount(self) -> None:
        area = self.query_one("#error-text", TextArea)
        area.cursor_blink = False
        area.display = False
        self.load()
        self.set_interval(self.refresh_seconds, self.load)

    # -- reading (worker threads) ---------------------------------------------------------
    def load(self) -> None:
        """Read the store and the replica again, unless a read is under way."""
        if self._reading.acquire(blocking=False):
            self._read()

    @work(thread=True, group="detail-read", exit_on_error=False)
    def _read(self) -> None:
        try:
            try:
                detail = self.reader.read()
            except Exception as exc:  # shown on screen, not raised into the app
                self.post_message(self.Loaded(None, f"cannot read {self.table}: {exc}"))
                return
            self.post_message(self.Loaded(detail))
        finally:
            self._reading.release()
        if time.monotonic() - self._asked_at >= self.offsets_every:
            self._ask_broker(detail)

    def _ask_broker(self, detail: TableDetail) -> None:
        if not self._asking.acquire(blocking=False):
            return
        try:
            self._asked_at = time.monotonic()
            try:
                offsets = self.reader.offsets(detail, timeout=self.broker_timeout)
            except Exception as exc:  # shown on screen, not raised into the app
                offsets = engine.KafkaOffsets(detail.topic, (), f"cannot ask the broker: {exc}")
            self.post_message(self.OffsetsLoaded(offsets))
        finally:
            self._asking.release()

    # -- showing --------------------------------------------------------------------------
    def on_table_detail_screen_loaded(self, message: Loaded) -> None:
        if message.detail is None:
            self.query_one("#title", Static).update(
                Text.assemble((self.table, "bold"), "  ", (message.error or "", "red"))
            )
            return
        self.detail = message.detail
        self._show(message.detail)

    def on_table_detail_screen_offsets_loaded(self, message: OffsetsLoaded) -> None:
        self.offsets = message.offsets
        self.query_one("#kafka-table", Static).update(self._kafka(message.offsets))

    def _show(self, d: TableDetail) -> None:
        now = self.now()
        s = d.status
        self.query_one("#title", Static).update(self._title(d, now))
        if s is None:
            self.query_one("#latency", Static).update(
                "no figures: the state store has no row for this table"
                if d.replicator is not None
                else f"no state store in {d.work_dir}: no replicator ran there"
            )
        else:
            lat = [s.latency_p50_s, s.latency_p95_s, s.latency_p99_s]
            text = Text()
            for n, v in zip((50, 95, 99), lat, strict=True):
                text.append(f"p{n} ", "dim")
                text.append(duration(v) if v is not None else "-", "bold")
                text.append("   ")
            text.append("events/s ", "dim")
            text.append(_number(s.events_per_s), "bold")
            text.append("\nlag ", "dim")
            lag = s.lag_messages
            lag_s = s.lag_seconds
            text.append(f"{_number(lag)} messages", "bold")
            text.append(f" ({duration(lag_s)})" if lag_s is not None else "")
            text.append("   last commit ", "dim")
            text.append(when(s.last_commit_at, now))
            self.query_one("#latency", Static).update(text)
        history = [float(v) for v in (s.throughput if s is not None else [])]
        self.query_one("#throughput", Sparkline).data = history or [0.0]
        peak = max(history, default=0.0)
        self.query_one("#throughput-caption", Static).update(
            Text(
                f"events/s, last {duration(len(history) * d.throughput_step_s)} "
                f"in {d.throughput_step_s:g} s steps; peak {peak:,.1f}"
            )
            if history
            else Text("no throughput history yet", "dim")
        )
        self.query_one("#counters-table", Static).update(self._counters(s))
        self.query_one("#hudi-table", Static).update(self._hudi(d, now))
        self.query_one("#schema-table", Static).update(self._schema(d))
        self.query_one("#events-table", Static).update(self._events(d.events, now))
        self._error(s, now)
        if self.offsets is not None and d.replica is not None:
            # Applied offsets move with every commit; the broker's ends are kept.
            self.query_one("#kafka-table", Static).update(self._kafka(self.offsets))

    def _title(self, d: TableDetail, now: float) -> Text:
        s = d.status
        title = Text.assemble((d.table, "bold"), "  ")
        if s is not None:
            style, mark = STATE_STYLES.get(s.state, ("bold", ""))
            title.append(f"{mark} {s.state}".strip(), style)
            since = epoch(s.state_since)
            if since is not None:
                title.append(f" for {duration(now - since)}")
        else:
            title.append("not recorded", "dim")
        if d.topic:
            title.append("   topic ", "dim")
            title.append(d.topic)
        rep = d.replicator
        title.append("   replicator ", "dim")
        if rep is None:
            title.append("never ran here")
        else:
            title.append(str(rep.state))
            seen = epoch(rep.updated_at)
            if not rep.alive and seen is not None:
                title.append(f" (not running; last seen {duration(now - seen)} ago)")
        return title

    def _counters(self, s: engine.TableRecord | None) -> RenderableType:
        if s is None:
            return Text("-", "dim")
        table = _table("", "total", "this run", "", "total", "this run")
        for col in (1, 2, 4, 5):
            table.columns[col].justify = "right"
        rows = [
            (label, getattr(s.counters, key), getattr(s.this_run, key)) for label, key in COUNTERS
        ]
        half = (len(rows) + 1) // 2
        right_rows = rows[half:] + [("", None, None)] * (len(rows) % 2)
        for left, right in zip(rows[:half], right_rows, strict=True):
            cells: list[RenderableType] = []
            for label, total, this in (left, right):
                cells += [
                    Text(label, "dim"),
                    _number(total) if label else "",
                    _number(this) if label else "",
                ]
            table.add_row(*cells)
        return table

    def _kafka(self, k: KafkaOffsets) -> RenderableType:
        # Applied offsets from the newest read of the replica, when there is one.
        applied = (
            self.detail.replica.checkpoint
            if self.detail is not None and self.detail.replica is not None
            else {p.partition: p.applied for p in k.partitions if p.applied is not None}
        )
        parts = sorted({p.partition for p in k.partitions} | set(applied))
        ends = {p.partition: p.end for p in k.partitions}
        table = _table("partition", "applied", "end", "lag")
        for col in range(4):
            table.columns[col].justify = "right"
        for p in parts:
            end, done = ends.get(p), applied.get(p)
            lag = None if end is None else max(0, end - (done or 0))
            table.add_row(str(p), _number(done), _number(end), _number(lag))
        if k.error is not None:
            # librdkafka's reason varies from one attempt to the next: not shown.
            note = Text(k.error, "bold")
            if k.servers is not None and k.topic is not None and not k.reachable:
                note = Text(f"end offsets unknown: broker unreachable ({k.servers})", "bold")
            return Group(note, table) if parts else note
        topic = Text.assemble(("topic ", "dim"), k.topic or "-")
        return Group(topic, table) if parts else Group(topic, Text("no partitions", "dim"))

    def _hudi(self, d: TableDetail, now: float) -> RenderableType:
        r = d.replica
        if r is None:
            return Text(d.replica_error or "no replica", "bold")
        kind = "Merge-on-Read" if r.merge_on_read else "Copy-on-Write"
        summary = Text()
        summary.append(f"{kind}", "bold")
        summary.append(f"   {r.completed:,} commits active   {r.file_groups:,} file groups")
        if r.merge_on_read:
            summary.append(f"   {r.log_files:,} log files")
        summary.append("\nlast compaction ", "dim")
        if not r.merge_on_read:
            summary.append("none needed (every commit rewrites the groups it touches)")
        elif r.last_compaction is None:
            summary.append("none on the active timeline")
        else:
            c = r.last_compaction
            groups = "group" if c.file_groups == 1 else "groups"
            summary.append(f"{c.instant} ({c.file_groups} {groups}), ")
            summary.append(when(c.at, now))
        table = _table("instant (UTC)", "action", "state", "age")
        table.columns[0].no_wrap, table.columns[0].min_width = True, 17
        for i in r.instants:
            state = Text(i.state, "bold yellow" if i.state != "COMPLETED" else "")
            table.add_row(i.instant, i.action, state, f"{duration(now - i.at)} ago")
        return Group(summary, table)

    def _schema(self, d: TableDetail) -> RenderableType:
        r = d.replica
        if r is None:
            return Text(d.replica_error or "no replica", "dim")
        change = r.schema_change
        head = Text()
        if change is None:
            head.append("no schema change on the active timeline", "dim")
        else:
            head.append("latest change ", "dim")
            head.append(f"at {change.instant}", "bold")
            if not change.before_known:
                head.append(" (the schema before it is archived)")
            for col in change.added:
                head.append(f"\n  + {col.name} {col.type}", "green")
            for name in change.removed:
                head.append(f"\n  - {name}", "red")
            for name, before, after in change.changed:
                head.append(f"\n  ~ {name} {before} -> {after}", "yellow")
        added = {c.name for c in change.added} if change else set()
        table = _table("column", "type", "null", "key")
        for c in r.schema:
            style = "dim" if c.name.startswith("_cdc_") else ""
            label = Text(c.name + (" +" if c.name in added else ""), style)
            table.add_row(
                label, Text(c.type, style), "yes" if c.nullable else "no", "key" if c.key else ""
            )
        return Group(head, table)

    def _events(self, events: Iterable[dict[str, Any]], now: float) -> RenderableType:
        rows = list(events)
        if not rows:
            return Text("no events for this table", "dim")
        table = _table("time (UTC)", "kind", "message")
        table.columns[0].no_wrap = True
        table.columns[1].no_wrap = True
        table.columns[2].ratio = 1
        for e in reversed(rows):  # newest first
            style = "red" if e["kind"] == "error" else ""
            table.add_row(when(e["at"], now), Text(e["kind"], style), e["message"])
        return table

    def _error(self, s: engine.TableRecord | None, now: float) -> None:
        error = s.last_error if s is not None else None
        area = self.query_one("#error-text", TextArea)
        label = self.query_one("#error-when", Static)
        if not error:
            label.update(Text("no error recorded", "dim"))
            area.display = False
            return
        label.update(
            Text.assemble(
                ("at ", "dim"),
                when(s.last_error_at if s is not None else None, now, date=True),
                ("   c copies it", "dim"),
            )
        )
        if area.text != error:
            area.load_text(error)
        area.display = True

    # -- actions --------------------------------------------------------------------------
    def action_back(self) -> None:
        self.app.pop_screen()

    def action_reload(self) -> None:
        self._asked_at = float("-inf")
        self.load()

    def action_copy_error(self) -> None:
        status = self.detail.status if self.detail else None
        error = status.last_error if status is not None else None
        if not error:
            self.notify("no error to copy", severity="warning")
            return
        self.app.copy_to_clipboard(error)
        self.notify("the last error is in the clipboard")

    def action_show_error(self) -> None:
        panel = self.query_one("#error")
        panel.scroll_visible(top=True)
        area = self.query_one("#error-text", TextArea)
        if area.display:
            area.focus()
