"""The runs list: status, title, age, current node and cost, newest first, with a status filter and a search.

It re-reads the runs every few seconds on a worker thread (so a new or finishing run shows up by itself) and keeps
the cursor on the same run. Enter opens the run screen.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from piw.app.pane import LinesPane
from piw.app.runs import STATUS_FILTERS, RunRow, load_rows, select_rows
from piw.app.sources import RunsSource, TextSource
from piw.views.base import safe

REFRESH_S = 2.0


class RunsScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", show=False),
        Binding("f", "filter", "Filter status"),
        Binding("slash", "search", "Search"),
        Binding("r", "reload", "Reload", show=False),
        Binding("escape", "clear", "Clear search", show=False),
    ]
    DEFAULT_CSS = """
    RunsScreen #heading { height: auto; padding: 0 1; }
    RunsScreen #search { dock: bottom; display: none; }
    RunsScreen #search.-shown { display: block; }
    """

    def __init__(
        self,
        home: Path,
        open_run: Callable[[str], None],
        *,
        clock: Callable[[], datetime] | None = None,
        message: str | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        super().__init__()
        self.home = home
        self.open_run = open_run
        self.clock = clock or (lambda: datetime.now(UTC))
        self.message = message
        self.refresh_s = refresh_s
        self.all_rows: list[RunRow] = []
        self.rows: list[RunRow] = []
        self.status: str | None = None
        self.search = ""
        self.loaded = False
        """Set once the runs have been read (the first read happens on a worker)."""

    def compose(self) -> ComposeResult:
        yield Static(id="heading")
        yield LinesPane(id="runs")
        yield Input(
            placeholder="search runs (id, title, workflow, node); Enter keeps it, Esc clears", id="search"
        )
        yield Footer()

    @property
    def table(self) -> LinesPane:
        return self.query_one("#runs", LinesPane)

    def on_mount(self) -> None:
        self.table.set_source(TextSource(["Reading the runs…"]))
        self._heading()
        # After the next frame of the top screen: `piw view RUN` stacks the run screen on this one at once, and
        # reading every run's row beside it would slow down its first frame, not this list's.
        self.app.call_after_refresh(self._background_reload)
        self.table.focus()
        if self.refresh_s > 0:
            self.set_interval(self.refresh_s, self._background_reload)

    def _background_reload(self) -> None:
        self.run_worker(self._read, thread=True, group="runs", exclusive=True, exit_on_error=False)

    def _read(self) -> None:
        rows = load_rows(self.home)
        self.app.call_from_thread(self.show, rows)

    def reload(self) -> None:
        self.show(load_rows(self.home))

    def show(self, rows: list[RunRow]) -> None:
        """Show ``rows`` through the filter and search, keeping the cursor on the run it was on."""
        table = self.table
        was = self.rows[table.cursor].run_id if self.rows and table.cursor < len(self.rows) else None
        self.all_rows = rows
        self.loaded = True
        self.rows = select_rows(rows, self.status, self.search)
        now = self.clock()
        cursor = next((i for i, row in enumerate(self.rows) if row.run_id == was), None)
        table.set_source(RunsSource(self.rows, lambda row: row.age(now)), cursor=cursor)
        self._heading()

    def _heading(self) -> None:
        line = Text("piw runs", style="bold")
        line.append(f"  {len(self.rows)} of {len(self.all_rows)}", style="dim")
        line.append(f"  status: {self.status or 'all'}", style="cyan")
        if self.search:
            line.append("  search: ", style="dim")
            line.append_text(safe(self.search, "cyan"))
        lines = [line]
        if self.message:
            lines.append(safe(f"⚠ {self.message}", "yellow"))
        self.query_one("#heading", Static).update(Text("\n").join(lines))

    def action_open(self) -> None:
        if self.rows and self.table.cursor < len(self.rows):
            self.open_run(self.rows[self.table.cursor].run_id)

    def on_lines_pane_activated(self, event: LinesPane.Activated) -> None:
        event.stop()
        self.action_open()

    def action_filter(self) -> None:
        index = STATUS_FILTERS.index(self.status)
        self.status = STATUS_FILTERS[(index + 1) % len(STATUS_FILTERS)]
        self.show(self.all_rows)

    def action_search(self) -> None:
        field = self.query_one("#search", Input)
        field.value = self.search
        field.add_class("-shown")
        field.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.search = event.value
        self.show(self.all_rows)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#search", Input).remove_class("-shown")
        self.table.focus()

    def action_clear(self) -> None:
        field = self.query_one("#search", Input)
        field.remove_class("-shown")
        if self.search:
            self.search = ""
            self.show(self.all_rows)
        self.table.focus()

    def action_reload(self) -> None:
        self.reload()
