"""The dashboard's modal screens: a yes/no question, the key help, a table's dead letters."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Label, Static

if TYPE_CHECKING:
    from tui.source import StatusSource

#: Characters of a dead letter's key and error shown in the list.
PREVIEW = 60


class ConfirmScreen(ModalScreen[bool]):
    """A question answered yes (``y``) or no (``n``, Escape)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "", *, yes: str = "Yes", no: str = "No"):
        super().__init__()
        self.question, self.detail, self.yes, self.no = question, detail, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question, id="question")
            if self.detail:
                yield Static(self.detail, id="detail")
            with Horizontal(id="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button(f"{self.no} (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HelpScreen(ModalScreen[None]):
    """Every key of the dashboard, from its bindings; it scrolls (``↑`` ``↓``) where the
    terminal is too short for all of them."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, keys: Sequence[tuple[str, str]]):
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="help"):
            yield Label("Keys (↑ ↓ scroll this list; Escape closes it)", id="question")
            table = Table.grid(padding=(0, 2))
            table.add_column(justify="right", style="bold", no_wrap=True)
            table.add_column()
            for key, what in self.keys:
                table.add_row(key, what)
            with VerticalScroll(id="keys"):
                yield Static(table, id="detail")

    def on_mount(self) -> None:
        self.query_one("#keys", VerticalScroll).focus()


class DeadLettersScreen(ModalScreen[None]):
    """A table's pending dead letters (``cdcctl deadletters TABLE``)."""

    BINDINGS = [Binding("escape,q,d", "dismiss", "Close")]

    def __init__(self, source: StatusSource, table: str):
        super().__init__()
        self.source, self.table = source, table

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="wide"):
            yield Label(f"Dead letters of {self.table}", id="question")
            yield Static("reading…", id="detail")
            yield DataTable(id="letters", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, group="deadletters")
    def load(self) -> None:
        try:
            letters: list[dict[str, Any]] | str = self.source.dead_letters(self.table)
        except Exception as exc:  # noqa: BLE001 - shown on the screen, not a traceback
            letters = str(getattr(exc, "message", exc))
        self.app.call_from_thread(self.show, letters)

    def show(self, letters: list[dict[str, Any]] | str) -> None:
        info = self.query_one("#detail", Static)
        view = self.query_one("#letters", DataTable)
        if isinstance(letters, str):
            info.update(letters)
            view.display = False
            return
        if not letters:
            info.update(f"No dead letters for {self.table}.")
            view.display = False
            return
        info.update(
            f"{len(letters):,} not yet replayed; `cdcctl deadletters replay {self.table}` "
            "applies them."
        )
        view.add_columns("partition", "offset", "time (UTC)", "error", "key")
        for d in letters:
            key = d.get("key") if d.get("key") is not None else d.get("key_b64")
            view.add_row(
                str(d.get("partition", "-")),
                str(d.get("offset", "-")),
                _utc(d.get("time")),
                _preview(d.get("error")),
                _preview(key),
            )
        view.focus()


def _utc(value: Any) -> str:
    """A dead letter's time (ISO 8601) as ``2026-11-25 12:02:27`` in UTC, to the second."""
    if not value:
        return "-"
    try:
        at = dt.datetime.fromisoformat(str(value)).astimezone(dt.UTC)
    except ValueError:
        return str(value)
    return at.strftime("%Y-%m-%d %H:%M:%S")


def _preview(value: Any) -> str:
    text = "-" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"
