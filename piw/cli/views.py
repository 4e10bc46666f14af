"""Commands that read runs: ``inspect`` (replay one view of a run)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from piw.cli import app
from piw.console import make_console
from piw.errors import UsageError
from piw.replay import fold, state_to_json
from piw.store import open_bundle, piw_home
from piw.terminal import safe_text, single_line

VIEWS = ("state", "steps", "trace")


@app.command()
def inspect(
    run_id: Annotated[str, typer.Argument(help="The run to show.")],
    view: Annotated[str, typer.Option("--view", help="state, steps or trace.")] = "state",
    at: Annotated[int | None, typer.Option("--at", help="Replay only events 1..SEQ.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the replayed RunState as JSON.")] = False,
) -> int:
    """Replay a run's trace and show one view."""
    if view not in VIEWS:
        raise UsageError(f"Unknown view {view!r}; use one of: {', '.join(VIEWS)}.")
    bundle = open_bundle(piw_home(), run_id)
    events = bundle.read_trace().events
    if at is not None:
        events = events[: max(0, at)]
    state = fold(events)
    if as_json:
        sys.stdout.write(json.dumps(state_to_json(state), ensure_ascii=False) + "\n")
        return 0
    console = make_console()
    if view == "state":
        console.print(safe_text(f"{state.run_id}  {state.status}  {state.run_title or state.workflow_name}"))
    elif view == "steps":
        table = Table(box=None)
        for column in ("node", "outcome", "ms", "output / error"):
            table.add_column(column)
        for step in state.steps:
            detail = step.error if step.outcome != "ok" else json.dumps(step.output, ensure_ascii=False)
            table.add_row(safe_text(step.node_id), step.outcome, str(step.duration_ms), safe_text(single_line(detail or "")[:80]))
        console.print(table)
    else:
        for event in events:
            console.print(safe_text(f"{event.seq:>5} {event.type} {event.node_id or ''}"))
    return 0
