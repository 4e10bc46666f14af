"""``ViewerApp``: the Textual application behind ``piw view`` (and ``piw view --serve``).

It stacks the runs list and, on top, a run screen; Esc goes back down. A terminal smaller than
:data:`MIN_SIZE` gets a message instead of a broken layout until it grows again. The app reads bundles only —
it never imports the engine, executors, providers or the writer (``tests/test_imports.py``) and never writes
to a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Static

from piw.app.help import HelpScreen
from piw.app.pane import LinesPane
from piw.app.reader import open_run
from piw.app.run_screen import RunScreen
from piw.app.runs_screen import RunsScreen
from piw.errors import PiwError

MIN_SIZE = (40, 12)


class TooSmall(Screen[None]):
    """Shown while the terminal is smaller than :data:`MIN_SIZE`."""

    DEFAULT_CSS = """
    TooSmall { align: center middle; }
    TooSmall Static { width: auto; height: auto; }
    """

    def compose(self) -> ComposeResult:
        width, height = MIN_SIZE
        yield Static(f"piw view needs at least {width}×{height}.\nMake the terminal larger, or press q.")


class ViewerApp(App[None]):
    """Runs list → run screen → step card; ``?`` lists every key of the screen you are on."""

    TITLE = "piw view"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(
        self,
        home: Path,
        run_id: str | None = None,
        *,
        message: str | None = None,
        clock: Callable[[], datetime] | None = None,
        force_polling: bool = False,
        follow: bool = True,
        refresh_s: float = 2.0,
        ansi_color: bool = False,
    ) -> None:
        super().__init__(ansi_color=ansi_color)
        self.home = home
        self.first_run = run_id
        self.message = message
        self.clock = clock
        self.force_polling = force_polling
        self.follow = follow
        self.refresh_s = refresh_s

    def on_mount(self) -> None:
        self.push_screen(
            RunsScreen(
                self.home, self.open_run, clock=self.clock, message=self.message, refresh_s=self.refresh_s
            )
        )
        if self.first_run is not None:
            self.open_run(self.first_run)
        self._check_size(self.size.width, self.size.height)

    def open_run(self, run_id: str) -> None:
        """Push the run screen of ``run_id``; a run that cannot be opened says why and leaves the list."""
        try:
            reader = open_run(self.home, run_id)
        except PiwError as exc:
            self.notify(str(exc), title="Cannot open the run", severity="error", markup=False)
            return
        screen = RunScreen(reader, clock=self.clock, force_polling=self.force_polling, follow=self.follow)
        self.push_screen(screen)

    def on_resize(self, event: events.Resize) -> None:
        self._check_size(event.size.width, event.size.height)

    def _check_size(self, width: int, height: int) -> None:
        small = width < MIN_SIZE[0] or height < MIN_SIZE[1]
        showing = isinstance(self.screen, TooSmall)
        if small and not showing:
            self.push_screen(TooSmall())
        elif not small and showing:
            self.pop_screen()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        groups: list[tuple[str, Iterable[BindingType]]] = [
            (type(self.screen).__name__.removesuffix("Screen") + " screen", self.screen.BINDINGS),
            ("Panes", LinesPane.BINDINGS),
            ("Everywhere", self.BINDINGS),
        ]
        self.push_screen(HelpScreen(groups))
