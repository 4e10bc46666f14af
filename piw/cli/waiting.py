"""The end of a run that stops ``waiting``: what it waits for, whether it was answered, and the commands.

``piw run``/``resume``/``answer``/``decide`` print :func:`print_wait` when a run stops waiting; ``piw inspect``
shows the same for a waiting run (state view) and adds it as ``decision`` to ``--json``. The decision's status
(open, answered, cancelled) comes from ``piw.sqlite``, read only: nothing here sweeps or writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from piw.store.fold import RunState
from piw.views.decision import WaitView
from piw.views.waits import decision_summary

__all__ = ["decision_summary", "print_wait", "wait_view"]


def wait_view(home: Path, state: RunState) -> WaitView | None:
    """The wait of a waiting run, from its bundle and the decision record (``None`` when not waiting)."""
    summary = decision_summary(home, state)
    if summary is None:
        return None
    resolved = summary if summary.get("status") != "open" else None
    output = summary.get("request") if summary["kind"] == "human_decision" else summary.get("summary")
    return WaitView(
        state.run_id,
        summary["nodeId"],
        output,
        answer_schema=summary.get("answerSchema"),
        now=datetime.now(UTC),
        resolved=resolved,
    )


def print_wait(console: Console, home: Path, state: RunState) -> None:
    view = wait_view(home, state)
    if view is not None:
        console.print(view)
        print_channels(console, home, state.run_id)


def print_channels(console: Console, home: Path, run_id: str) -> None:
    """One line per channel post of the waiting run (``docs/channels.md``)."""
    from piw.channels.status import channel_lines
    from piw.terminal import safe_text, single_line

    for line in channel_lines(home, run_id):
        console.print(safe_text(single_line(line)))
