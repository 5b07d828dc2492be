"""The dashboard: a Textual app that watches and steers a work folder's replicator.

The main screen is a header (the replicator's state, uptime, events/s with a sparkline,
total lag, broker and target, time since the last commit), one row per replica and a
footer made from the bindings. The state store is read by a worker thread on a timer
(:meth:`DashboardApp.poll`), never in the UI thread; actions file the control requests
``cdcctl pause/resume/stop/resync`` file, also from workers, and say how they went as
notifications. ``Enter`` opens a table's detail screen (``tui.detail``).

With ``replicator`` (``cdcctl start --tui``, ``cdcctl demo --tui``) the replicator runs in a
thread of the same process: quitting then asks whether to stop it. Stopping waits for
the batch in flight; answering no keeps the dashboard (the process cannot go on
replicating without it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Sparkline, Static
from textual.widgets.data_table import ColumnKey

import engine
from tui import view
from tui.screens import ConfirmScreen, DeadLettersScreen, HelpScreen
from tui.source import Snapshot, StatusSource

if TYPE_CHECKING:
    from tui.background import BackgroundReplicator

#: Seconds between two readings of the state store (the replicator writes it at most
#: twice a second).
POLL_SECONDS = 1.0
#: Terminals narrower than this show counts compactly (``12.3k``) and a snapshotting
#: table's state without its rows so far; wider terminals also show more of the columns
#: (:data:`tui.view.COLUMNS`, most wanted first).
COMPACT_BELOW = 120
#: Terminals this tall or taller show the newest entries of the event log.
EVENTS_FROM_HEIGHT = 36
EVENT_LINES = 10
#: How long to wait for the replicator to answer a pause or resume; a stop or a resync
#: waits for the batch in flight (as the CLI's ``--wait``).
WAIT_SECONDS, STOP_WAIT_SECONDS = 5.0, 60.0
#: Longer help for the keys whose footer label is short.
HELP = {
    "detail": "the selected table's detail: latency, throughput, partitions, timeline, "
    "schema, events, last error",
    "pause": "pause the selected table, or resume it when paused (`cdcctl pause/resume`)",
    "pause_all": "pause every table, or resume them all when all are paused",
    "stop": "stop the replicator after the batch in flight (asks first; `cdcctl stop`)",
    "resync": "rebuild the selected table from its topic (asks first; `cdcctl resync`)",
    "dead_letters": "the selected table's dead letters (`cdcctl deadletters TABLE`)",
    "sort": "sort by the next column (a click on a heading sorts by it)",
    "reverse": "reverse the order",
    "filter": "filter the tables by name or state (Enter keeps it, Escape clears it)",
    "screenshot": "save the screen as an SVG file in the current folder (says where)",
    "help": "this help",
    "quit": "quit (with the replicator in this process: asks whether to stop it)",
}
#: Keys of the tables table itself (DataTable's bindings), for the help.
NAVIGATION = [
    ("↑ ↓", "select a table (PgUp PgDn: a page at a time)"),
    ("← →", "scroll the columns sideways (the name and the state stay in view)"),
    ("Home End", "the first columns, the last columns"),
]
#: Actions of the main screen, off (and out of the footer) on the detail screen.
MAIN_ONLY = {"pause", "pause_all", "stop", "resync", "dead_letters", "sort", "reverse", "filter"}


#: Between the header's label-value pairs.
SEPARATOR = "  │  "


def _labelled(*pairs: tuple[str, str]) -> Text:
    """``label: value  │  label: value``: labels dim, values bold, a colon and spaces
    between them (readable without colours, and when copied as text)."""
    text = Text()
    for i, (label, value) in enumerate(pairs):
        if i:
            text.append(SEPARATOR, style="dim")
        text.append(f"{label}: ", style="dim")
        text.append(value, style="bold")
    return text


class StatusRead(Message):
    """A reading of the state store, posted by the polling worker."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class TablesTable(DataTable[Any]):
    """The replicas: one row each; Enter opens the selected one's detail."""

    BINDINGS = [Binding("enter", "select_cursor", "Detail", key_display="⏎")]


class DashboardApp(App[None]):
    """Watch and steer the replicator of one work folder."""

    TITLE = "cdcctl"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("p", "pause", "Pause"),
        Binding("P", "pause_all", "All"),
        Binding("s", "stop", "Stop"),
        Binding("r", "resync", "Resync"),
        Binding("d", "dead_letters", "Dead letters"),
        Binding("o", "sort", "Sort", show=False),
        Binding("O", "reverse", "Reverse", show=False),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("w", "screenshot", "Screenshot", show=False),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        work_dir: Path,
        config: engine.Config | None = None,
        *,
        interval: float = POLL_SECONDS,
        now: Callable[[], float] = time.time,
        replicator: BackgroundReplicator | None = None,
        screenshot_dir: Path | None = None,
    ) -> None:
        super().__init__()
        #: Where ``w`` saves screenshots (None: the current folder).
        self.screenshot_dir = screenshot_dir
        self.source = StatusSource(work_dir, config, now=now)
        self.interval = interval
        self.now = now
        self.replicator = replicator
        #: The last reading shown (None until the first arrives).
        self.snapshot: Snapshot | None = None
        self.sort_key, self.sort_reverse = "table", False
        self.filter_text = ""
        self._reading = False
        self._told_ended = False
        self._stopping = False
        self._compact = True
        #: The width names are shortened to (None: whole), and the names and rows shown.
        self._name_cap: int | None = None
        self._shown: tuple[list[str], list[list[str | Text]]] = ([], [])
        #: Readings shown so far.
        self.reads = 0

    # -- layout ------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="state")
        yield Static(id="where")
        with Horizontal(id="rates"):
            yield Static(id="rate")
            yield Sparkline([], id="spark")
            yield Static(id="lag")
        yield Static(id="notice")
        table = TablesTable(id="tables", cursor_type="row", zebra_stripes=True, fixed_columns=2)
        table.border_title = "replicas"
        yield table
        events = Static(id="events")
        events.border_title = "recent events"
        yield events
        yield Input(placeholder="filter tables by name or state", id="filter")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        target = self.source.target or "?"
        broker = self.source.broker or "?"
        where = _labelled(("broker", broker), ("target", target))
        self.query_one("#where", Static).update(where)
        self.query_one("#notice", Static).display = False
        self.query_one("#filter", Input).display = False
        self._compact = self.compact
        self._add_columns()
        self.query_one(TablesTable).focus()
        self.poll()
        self.set_interval(self.interval, self.poll)

    def _add_columns(self) -> None:
        table = self.query_one(TablesTable)
        table.clear(columns=True)
        for column in view.COLUMNS:
            table.add_column(self._label(column), key=column.key)

    def _label(self, column: view.Column) -> Text:
        label = column.heading
        if column.key == self.sort_key:
            label += " ▼" if self.sort_reverse else " ▲"
        return Text(label, justify="right" if column.numeric else "left")

    def _relabel(self) -> None:
        """Mark the sort column in the headings (the columns stay as they are)."""
        table = self.query_one(TablesTable)
        for column in view.COLUMNS:
            table.columns[ColumnKey(column.key)].label = self._label(column)
        table.refresh()

    @property
    def compact(self) -> bool:
        return self.size.width < COMPACT_BELOW

    # -- reading the store -------------------------------------------------------------
    def poll(self) -> None:
        """Read the store in a worker (one reading at a time)."""
        if not self._reading:
            self._reading = True
            self._read()

    @work(thread=True, group="status")
    def _read(self) -> None:
        self.post_message(StatusRead(self.source.read()))

    def on_status_read(self, message: StatusRead) -> None:
        self._reading = False
        self.reads += 1
        try:
            self.show(message.snapshot)
        except NoMatches:
            # A reading that arrives while the app closes, its widgets already removed.
            return
        if self.replicator is not None and not self.replicator.is_alive() and not self._told_ended:
            self._told_ended = True
            error = self.replicator.error
            if error is not None:
                text = getattr(error, "message", None) or str(error) or type(error).__name__
                self.notify(f"the replicator ended: {text}", severity="error", timeout=30)
            else:
                self.notify("the replicator has stopped")

    def show(self, snapshot: Snapshot) -> None:
        """Show a reading: the header, the notice and the rows."""
        self.snapshot = snapshot
        self._fit()
        notice = self.query_one("#notice", Static)
        if snapshot.status is None:
            notice.update(Text(snapshot.problem or "", style="bold"))
            notice.display = True
            self.query_one("#state", Static).update(Text("cdcctl: no state", style="bold"))
            self.query_one("#rate", Static).update("")
            self.query_one("#lag", Static).update("")
            self._fill([])
            self.query_one("#events", Static).display = False
            return
        head = view.headline(snapshot.status, snapshot.read_at)
        said = view.not_running_notice(head)
        notice.update(Text(said or "", style="bold"))
        notice.display = said is not None
        self.query_one("#state", Static).update(self._state_line(head))
        rate = view.count(round(head.events_per_s, 1))
        self.query_one("#rate", Static).update(_labelled(("events/s", rate)))
        self.query_one("#spark", Sparkline).data = head.history or [0.0]
        lag = f"{view.count(head.lag_messages)} msgs · {view.duration(head.lag_seconds)}"
        self.query_one("#lag", Static).update(_labelled(("lag", lag)))
        self._fill(snapshot.status.tables)
        events = self.query_one("#events", Static)
        events.display = self.size.height >= EVENTS_FROM_HEIGHT
        events.update(view.event_lines(snapshot.status.events, EVENT_LINES))

    def _state_line(self, head: view.Headline) -> Text:
        line = Text.assemble(("cdcctl: ", "bold"))
        line.append(head.state.upper(), style=view.REPLICATOR_STYLES.get(head.state, "bold"))
        if not head.alive:
            line.append(" (not running)", style="bold")
        pairs = []
        if head.uptime is not None:
            pairs.append(("up", view.duration(head.uptime)))
        ago = view.duration(head.last_commit_ago)
        pairs.append(("last commit", ago if head.last_commit_ago is None else f"{ago} ago"))
        line.append(SEPARATOR, style="dim")
        line.append_text(_labelled(*pairs))
        if head.slo_compliance is not None and head.slo_met is not None:
            met = head.slo_met
            line.append(SEPARATOR, style="dim")
            line.append("SLO ", style="bold")
            line.append(
                f"{head.slo_compliance * 100:.2f}% {'met' if met else 'MISSED'}",
                style="green" if met else "bold red",
            )
        if head.source_problems:
            line.append(SEPARATOR, style="dim")
            line.append(f"source: {head.source_problems[0]}", style="bold red")
            if len(head.source_problems) > 1:
                line.append(f" (+{len(head.source_problems) - 1} more)", style="bold red")
        return line

    def _fill(self, tables: list[engine.TableRecord]) -> None:
        """Put the visible tables in the table, keeping the selected one selected."""
        widget = self.query_one(TablesTable)
        selected = self.selected_table()
        shown = view.visible_tables(tables, self.sort_key, self.sort_reverse, self.filter_text)
        names = [t.table for t in shown]
        keys = list(view.COLUMN_KEYS)
        rows = [view.cells(t, self.now(), compact=self._compact) for t in shown]
        width = self._name_width(names, rows)
        self._shown = (names, rows)
        if width is not None:
            for row, name in zip(rows, view.shortened(names, width), strict=True):
                row[0] = name
        if width != self._name_cap:
            # The name column narrows only when made anew (DataTable widens, never narrows).
            self._name_cap = width
            self._add_columns()
        with self.batch_update():
            if names == [str(r.key.value) for r in widget.ordered_rows]:
                # The same rows in the same order: their cells change in place (the
                # cursor and the scroll position stay where the user left them).
                for name, row in zip(names, rows, strict=True):
                    for key, value in zip(keys, row, strict=True):
                        widget.update_cell(name, key, value, update_width=True)
            else:
                widget.clear()
                for name, row in zip(names, rows, strict=True):
                    widget.add_row(*row, key=name)
                if selected in names:
                    widget.move_cursor(row=names.index(selected), animate=False)
        self._titles(len(shown), len(tables))

    def _name_width(self, names: list[str], rows: list[list[str | Text]]) -> int | None:
        """On a compact terminal, the width names are shortened to so that the first
        columns (:data:`tui.view.FIRST`) fit whole; None: every name fits (or the table
        is not laid out yet: :meth:`_after_layout` looks again)."""
        widget = self.query_one(TablesTable)
        if not self._compact or widget.size.width == 0:
            return None
        # Without the vertical scrollbar, when the rows outgrow the table's height.
        room = widget.scrollable_content_region.width
        padding = 2 * widget.cell_padding
        for i, column in enumerate(view.COLUMNS[1 : view.FIRST], start=1):
            cells = [Text(r[i]).cell_len if isinstance(r[i], str) else r[i].cell_len for r in rows]
            room -= max([self._label(column).cell_len, *cells]) + padding
        width = max(view.NAME_MIN, room - padding)
        return width if any(len(n) > width for n in names) else None

    def _titles(self, shown: int, total: int) -> None:
        widget = self.query_one(TablesTable)
        title = "replicas"
        if self.filter_text:
            title += f" matching {self.filter_text!r} ({shown} of {total})"
        # Spaced from the border's line (the table has no corners to do it).
        widget.border_title = f" {title} "
        widget.border_subtitle = f" sorted by {self._heading(self.sort_key)}" + (
            " (reversed) " if self.sort_reverse else " "
        )
        self.call_after_refresh(self._after_layout)

    def _after_layout(self) -> None:
        """Once the table is laid out: names shortened for its real size (a first
        reading comes before the layout that follows it), and a word in its bottom
        border when some columns are out of view."""
        if self._name_width(*self._shown) != self._name_cap and self.snapshot is not None:
            self.show(self.snapshot)
            return
        widget = self.query_one(TablesTable)
        hint = " ← → more columns  │ "
        cut = widget.virtual_size.width > widget.scrollable_content_region.width
        subtitle = str(widget.border_subtitle or "").removeprefix(hint)
        widget.border_subtitle = hint + subtitle if cut else subtitle

    @staticmethod
    def _heading(key: str) -> str:
        return next(c.heading for c in view.COLUMNS if c.key == key)

    def _redraw(self) -> None:
        self._relabel()
        if self.snapshot is not None:
            self.show(self.snapshot)

    def on_resize(self) -> None:
        if self.snapshot is not None:
            self.show(self.snapshot)

    def _fit(self) -> None:
        """Counts compact or not for the terminal's width (it may have changed since the
        last reading): the columns are made anew, as narrow as their new cells."""
        if self._compact != self.compact:
            self._compact = self.compact
            self._add_columns()

    def selected_table(self) -> str | None:
        widget = self.query_one(TablesTable)
        if widget.row_count == 0:
            return None
        try:
            key = widget.coordinate_to_cell_key(widget.cursor_coordinate).row_key
        except Exception:  # noqa: BLE001 - no valid cursor: nothing selected
            return None
        return str(key.value) if key.value is not None else None

    def _row(self, name: str) -> engine.TableRecord | None:
        if self.snapshot is None or self.snapshot.status is None:
            return None
        return self.snapshot.status.table(name)

    # -- sorting and filtering -----------------------------------------------------------
    def action_sort(self) -> None:
        keys = list(view.COLUMN_KEYS)
        self.sort_key = keys[(keys.index(self.sort_key) + 1) % len(keys)]
        self.sort_reverse = self.sort_key != "table"  # the biggest, the most troubled first
        self._redraw()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._redraw()

    @on(DataTable.HeaderSelected)
    def _sort_by_heading(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key = key
            self.sort_reverse = key != "table"
        self._redraw()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.value = self.filter_text
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        if self.snapshot is not None:
            self.show(self.snapshot)

    @on(Input.Submitted, "#filter")
    def _filter_kept(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = bool(self.filter_text)
        self.query_one(TablesTable).focus()

    def on_key(self, event: Any) -> None:
        box = self.query_one("#filter", Input)
        if event.key == "escape" and (box.has_focus or self.filter_text):
            box.value = ""
            self.filter_text = ""
            box.display = False
            self.query_one(TablesTable).focus()
            if self.snapshot is not None:
                self.show(self.snapshot)
            event.stop()

    # -- actions -------------------------------------------------------------------------
    @on(DataTable.RowSelected, "#tables")
    def _row_selected(self) -> None:
        self.action_detail()

    def action_detail(self) -> None:
        name = self.selected_table()
        if name is None:
            return
        try:  # the detail screen is its own module
            from tui.detail import TableDetailScreen
        except ImportError:
            self.notify("the detail screen is not part of this build", severity="warning")
            return
        self.push_screen(
            TableDetailScreen(self.source.work_dir, self.source.config, name, now=self.now)
        )

    def _need_table(self, what: str) -> str | None:
        name = self.selected_table()
        if name is None:
            self.notify(f"no table selected to {what}", severity="warning")
        return name

    def action_pause(self) -> None:
        name = self._need_table("pause")
        if name is None:
            return
        row = self._row(name)
        kind = "resume" if row is not None and row.state == "PAUSED" else "pause"
        self.control(kind, [name])

    def action_pause_all(self) -> None:
        tables = self.snapshot.status.tables if self.snapshot and self.snapshot.status else []
        live = [t for t in tables if t.state not in ("FAILED", "FAILING")]
        kind = "resume" if live and all(t.state == "PAUSED" for t in live) else "pause"
        self.control(kind, [])

    def action_stop(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.control("stop", [], STOP_WAIT_SECONDS)

        self.push_screen(
            ConfirmScreen(
                "Stop the replicator?",
                "It finishes and commits the batch in flight, then exits; "
                "`cdcctl start` resumes from each table's last commit.",
                yes="Stop",
                no="Cancel",
            ),
            answered,
        )

    def action_resync(self) -> None:
        name = self._need_table("resync")
        if name is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.control("resync", [name], STOP_WAIT_SECONDS)

        self.push_screen(
            ConfirmScreen(
                f"Resync {name}?",
                "Its replica is dropped and its topic read again from the beginning; "
                "the other tables go on.",
                yes="Resync",
                no="Cancel",
            ),
            answered,
        )

    def action_dead_letters(self) -> None:
        name = self._need_table("list dead letters of")
        if name is not None:
            self.push_screen(DeadLettersScreen(self.source, name))

    def action_help(self) -> None:
        keys = [*NAVIGATION, ("⏎", HELP["detail"])]
        for b in self.BINDINGS:
            if isinstance(b, Binding):
                shown = b.key_display or b.key
                keys.append((shown, HELP.get(b.action, b.description)))
        self.push_screen(HelpScreen(keys))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The main screen's actions are off elsewhere (the detail screen has its own
        keys, and its footer room for them)."""
        if action in MAIN_ONLY and len(self.screen_stack) > 1:
            return False
        return True

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        """Save the screen as SVG (``w``) and say where."""
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        folder = Path(path) if path else (self.screenshot_dir or Path.cwd())
        name = filename or f"cdcctl-dashboard-{stamp}.svg"
        try:
            saved = self.save_screenshot(name, str(folder))
        except OSError as exc:
            self.notify(f"cannot save the screenshot in {folder}: {exc}", severity="error")
            return
        self.notify(f"screenshot saved: {Path(saved).resolve()}", timeout=10)

    @work(thread=True, group="control")
    def control(self, kind: str, tables: list[str], wait: float = WAIT_SECONDS) -> None:
        """File a control request and say how it went (a worker: it waits for the answer)."""
        what = f"{kind} {tables[0] if tables else 'all tables'}"
        try:
            answers = self.source.request(kind, tables, wait)
            if answers is None and kind == "resync":
                removed = self.source.resync_offline(tables[0])
                note = f"removed {len(removed)} path(s); the next `cdcctl start` reads its topic"
                self.call_from_thread(self.notify, f"{what}: no replicator runs; {note}")
                return
        except engine.CdcError as exc:
            hint = f" ({exc.hint})" if exc.hint else ""
            self.call_from_thread(self.notify, f"{what}: {exc.message}{hint}", severity="error")
            return
        except Exception as exc:  # noqa: BLE001 - the store could not be written: say so
            said = f"{what}: failed: {type(exc).__name__}: {exc}"
            self.call_from_thread(self.notify, said, severity="error")
            return
        if answers is None:
            self.call_from_thread(
                self.notify,
                f"no replicator runs on {self.source.work_dir}: nothing to {kind}",
                severity="warning",
            )
            return
        for a in answers:
            outcome = a.outcome or "no answer"
            bad = a.done_at is None or outcome.startswith(("error", "not picked", "withdrawn"))
            self.call_from_thread(
                self.notify,
                f"{kind} {a.table or 'all tables'}: {outcome}",
                severity="error" if bad else "information",
            )
            if kind == "stop" and not bad:
                stopped = self.source.wait_stopped(wait)
                said = "the replicator stopped" if stopped else "still finishing its batch"
                self.call_from_thread(self.notify, said)
        self.call_from_thread(self.poll)

    # -- quitting ------------------------------------------------------------------------
    async def action_quit(self) -> None:
        if self.replicator is None or not self.replicator.is_alive():
            self.exit()
            return
        if self._stopping:
            self.notify("stopping: waiting for the batch in flight", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._stopping = True
                self.notify("stopping after the batch in flight…", timeout=60)
                self._stop_and_exit()

        self.push_screen(
            ConfirmScreen(
                "Stop replicating and quit?",
                "The replicator runs in this process: quitting stops it after the batch "
                "in flight (`cdcctl start` resumes from each table's last commit). "
                "No keeps the dashboard open.",
                yes="Stop and quit",
                no="Keep running",
            ),
            answered,
        )

    @work(thread=True, group="quit")
    def _stop_and_exit(self) -> None:
        if self.replicator is not None:
            self.replicator.stop()
            self.replicator.join()
        self.call_from_thread(self.exit)
