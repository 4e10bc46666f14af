"""The output view: what a run produced, whole — its final output, its error with the traceback, or its wait.

``piw run`` ends by printing the outcome clipped to the terminal; this view (``piw inspect RUN --view output``)
is the command that shows it in full. A string output is shown as text, anything else as indented JSON; long
lines wrap instead of being cut. Large values stored as artifacts are loaded (through the bundle, read-only),
because showing the whole value is the point of this view.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.store.state import RunState
from piw.terminal import sanitize_terminal_text
from piw.views.base import View, node_label
from piw.views.failure import failed_step, traceback_lines

Resolve = Callable[[Any], Any]


def value_lines(value: Any) -> list[str]:
    """A value as lines of text: a string as it is, anything else as indented JSON (sanitised)."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=2, allow_nan=True)
        except (TypeError, ValueError):
            text = repr(value)
    return sanitize_terminal_text(text).split("\n")


def outcome_lines(state: RunState, resolve: Resolve) -> Iterator[Text]:
    """The outcome, unwrapped: one ``Text`` per logical line (callers wrap or clip to their width)."""
    if not state.run_id:
        yield Text("No events in this run yet.", style="dim")
    elif state.status == "completed":
        for line in value_lines(resolve(state.final_output)):
            yield Text(line)
    elif state.status == "waiting":
        yield Text(f"Waiting on {node_label(state.waiting_on or '?')}:", style="bold")
        for line in value_lines(resolve(state.final_output)):
            yield Text(line)
    elif state.status == "running":
        where = f" (at {node_label(state.current.node_id)})" if state.current else ""
        yield Text(f"No final output yet: the run is running{where}.", style="dim")
    else:
        step = failed_step(state)
        if step is not None:
            yield Text(f"{node_label(step.node_id)} {step.outcome}:", style="bold")
        error = resolve(state.error)
        yield from traceback_lines(
            step.traceback if step else None, str(error) if error is not None else None
        )


class OutputView(View):
    def __init__(self, state: RunState, resolve: Resolve) -> None:
        self.state, self.resolve = state, resolve

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        for line in outcome_lines(self.state, self.resolve):
            if line.cell_len <= width:
                yield line
            else:
                yield from line.wrap(console, width, overflow="fold")


def output_view(state: RunState, resolve: Resolve | None = None) -> OutputView:
    return OutputView(state, resolve or (lambda value: value))
