"""One step's card, expanded: prompt, tool calls, submission, validation errors and usage (Esc goes back)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from piw.app.pane import LinesPane
from piw.app.sources import ViewSource
from piw.store.fold import CurrentAttempt, StepRecord
from piw.store.session import SessionEntry
from piw.views.base import node_label
from piw.views.phases import Phase
from piw.views.step_detail import step_detail_view


class StepScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]
    DEFAULT_CSS = """
    StepScreen #title { height: 1; padding: 0 1; text-style: bold; }
    """

    def __init__(
        self,
        step: StepRecord | CurrentAttempt,
        entries: Iterable[SessionEntry],
        number: int | None,
        phases: Sequence[Phase] = (),
    ) -> None:
        super().__init__()
        self.step = step
        self.view = step_detail_view(step, entries, number, phases)

    def compose(self) -> ComposeResult:
        title = f"Step {node_label(self.step.node_id)} · attempt {self.step.attempt_id[:8]}"
        yield Static(title, id="title", markup=False)
        yield LinesPane(ViewSource(self.view), cursor=False, id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#detail", LinesPane).focus()
