"""The end of a foreground run: after the ``■ status`` line, what the run produced, clipped to the terminal.

Shape (``piw run`` and ``piw resume`` without ``--json``):

- completed: ``output`` and the final output (a string as text, anything else as indented JSON), unless it is
  the assistant reply the run just printed (a response is shown once);
- failed, timed out or cancelled: ``error``, the error with ``at file:line`` of the workflow code that raised;
- waiting: what the run waits for (:func:`print_waiting`: the wording of checkpoints and human decisions
  belongs with them, in :mod:`piw.cli.waiting`; this module only fixes where it goes).

Every block is at most :func:`line_budget` lines of at most the console width; when anything was cut, a last
line names the command that shows it whole (``piw inspect RUN --view output``, or the steps view of the failed
node for the traceback).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from piw.cli.stdout_guard import reader_gone
from piw.errors import PiwError
from piw.store.bundle import open_bundle
from piw.store.fold import RunState
from piw.views.base import fit, node_label
from piw.views.failure import failed_step, traceback_lines, where
from piw.views.output import value_lines

KEY_WIDTH = 8
MAX_LINES = 20


def line_budget(console: Console) -> int:
    """How many lines an outcome may take: most of a terminal's height, never fewer than 3 or more than 20."""
    return max(3, min(MAX_LINES, console.size.height - 6))


def _block(console: Console, key: str, lines: list[Text], style: str = "") -> str | None:
    """``key`` then ``lines`` under one indent, cut to the budget and width; says what was cut, if anything."""
    width = max(1, console.width - KEY_WIDTH)
    shown = lines[: line_budget(console)]
    cut_wide = False
    for index, line in enumerate(shown):
        cut_wide = cut_wide or line.cell_len > width
        prefix = Text(f"{key:<{KEY_WIDTH}}" if index == 0 else " " * KEY_WIDTH, style="dim")
        console.print(prefix + fit(line, width), style=style, soft_wrap=True)
    more = len(lines) - len(shown)
    if more:
        return f"{more} more line{'s' if more != 1 else ''}"
    return "clipped" if cut_wide else None


def _resolved(home: Path, state: RunState) -> tuple[Any, Any]:
    """The final output and error with artifact refs loaded (as stored when the bundle cannot be read)."""
    try:
        bundle = open_bundle(home, state.run_id)
        return bundle.resolve(state.final_output), bundle.resolve(state.error)
    except PiwError:
        return state.final_output, state.error


def _is_reply_shown(state: RunState) -> bool:
    """The final output is the last step's assistant reply, which the run already printed as the response.

    An assistant response is shown once (docs/design/agent-steps.md §8): printing it again under ``output``
    would repeat it.
    """
    if not state.steps:
        return False
    last = state.steps[-1]
    return last.assistant_completion is not None and last.output == state.final_output


def _hint(console: Console, text: str, command: str) -> None:
    """``text`` and the command, on one line when it fits; the command is never cut (people copy it)."""
    indent = " " * KEY_WIDTH
    if len(indent) + len(text) + 1 + len(command) <= console.width:
        console.print(Text(f"{indent}{text} {command}", style="dim"), soft_wrap=True)
        return
    console.print(Text(indent + text, style="dim"), soft_wrap=True)
    console.print(
        Text((indent if len(indent) + len(command) <= console.width else "") + command), soft_wrap=True
    )


def print_outcome(console: Console, home: Path, state: RunState, *, verbose: bool = False) -> None:
    """Print the outcome block of a stopped run (nothing for a run still running, e.g. interrupted).

    With ``verbose`` a failure is followed by its whole traceback (workflow frames) instead of the command.
    """
    if not state.run_id:
        return
    if reader_gone() and console.file is sys.stdout:  # ``| head -1``: the outcome follows the status line
        from piw.cli.console import make_console

        console = make_console(sys.stderr)
    whole = f"piw inspect {state.run_id} --view output"
    final_output, error = _resolved(home, state)
    if state.status == "completed" and _is_reply_shown(state):
        _block(console, "output", [Text("the assistant reply above", style="dim")])
    elif state.status == "completed":
        cut = _block(console, "output", [Text(line) for line in value_lines(final_output)])
        if cut:
            _hint(console, f"… {cut}; the whole output:", whole)
    elif state.status == "waiting":
        print_waiting(console, home, state)
    elif state.status == "unknown":
        print_unknown(console, state)
    elif state.is_terminal:
        step = failed_step(state)
        location = where(step.traceback) if step is not None else None
        lines = [Text(line) for line in value_lines(str(error or f"The run {state.status}."))]
        if step is not None:
            lines[0] = Text(f"{node_label(step.node_id)}: ") + lines[0]
        if location:
            lines[-1].append(f"  at {location}")
        cut = _block(console, "error", lines, "red")
        if verbose and step is not None and step.traceback:
            for line in traceback_lines(step.traceback, None, indent=" " * KEY_WIDTH):
                console.print(line, soft_wrap=True)
        elif step is not None and step.traceback:
            _hint(console, f"{'… ' + cut + '; ' if cut else ''}the traceback:", whole)
        elif cut:
            _hint(console, f"… {cut}; the whole error:", whole)


def print_unknown(console: Console, state: RunState) -> None:
    """A run parked on an effect whose outcome is unknown: what was started, when, and the command that answers."""
    from piw.views.effects import unresolved_lines

    _block(console, "unknown", [Text(line) for line in unresolved_lines(state)], "yellow")
    _hint(console, "check whether it happened, then:", f"piw resolve {state.run_id} done|retry|skip")


def print_waiting(console: Console, home: Path, state: RunState) -> None:
    """What a waiting run waits for: the question, the choices and the exact command that answers it.

    The wording is the checkpoint and decision work's (:mod:`piw.cli.waiting`); this module only places it after
    the status line, like the output and the error.
    """
    from piw.cli.waiting import print_wait

    print_wait(console, home, state)
