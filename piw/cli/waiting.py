"""The end of a run that stops ``waiting``: what it waits for and the exact command that answers it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from piw.errors import PiwError
from piw.store.bundle import open_bundle
from piw.store.replay import RunState
from piw.views.decision import WaitView


def wait_view(home: Path, state: RunState, resolved: dict[str, Any] | None = None) -> WaitView | None:
    """The wait of a waiting run, from its bundle (``None`` when the run is not waiting or unreadable)."""
    if state.status != "waiting" or not state.waiting_on:
        return None
    try:
        bundle = open_bundle(home, state.run_id)
        output = bundle.resolve(state.final_output)
        node = bundle.read_snapshot().get("nodes", {}).get(state.waiting_on, {})
    except PiwError:
        return None
    answer = node.get("answer") if isinstance(node.get("answer"), dict) else {}
    return WaitView(
        state.run_id,
        state.waiting_on,
        output,
        answer_schema=answer.get("schema"),
        now=datetime.now(UTC),
        resolved=resolved,
    )


def print_wait(console: Console, home: Path, state: RunState) -> None:
    view = wait_view(home, state)
    if view is not None:
        console.print(view)
