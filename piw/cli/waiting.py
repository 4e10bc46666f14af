"""The end of a run that stops ``waiting``: what it waits for, whether it was answered, and the commands.

``piw run``/``resume``/``answer``/``decide`` print :func:`print_wait` when a run stops waiting; ``piw inspect``
shows the same for a waiting run (state view) and adds it as ``decision`` to ``--json``. The decision's status
(open, answered, cancelled) comes from ``piw.sqlite``, read only: nothing here sweeps or writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from piw.errors import PiwError
from piw.store.bundle import open_bundle
from piw.store.fold import RunState
from piw.views.decision import WaitView, answer_command, decide_commands, is_decision


def decision_summary(home: Path, state: RunState) -> dict[str, Any] | None:
    """The waiting run's decision for ``--json``: kind, node, status, the request or summary, commands, winner."""
    if state.status != "waiting" or not state.waiting_on:
        return None
    try:
        bundle = open_bundle(home, state.run_id)
        output = bundle.resolve(state.final_output)
        node = bundle.read_snapshot().get("nodes", {}).get(state.waiting_on, {})
    except PiwError:
        return None
    gate = is_decision(output) and "humanDecision" in node
    data: dict[str, Any] = {"kind": "human_decision" if gate else "checkpoint", "nodeId": state.waiting_on}
    answer = node.get("answer") if isinstance(node.get("answer"), dict) else {}
    if gate:
        data.update(decisionId=output.get("decisionId"), request=output, status="open")
        data["commands"] = decide_commands(state.run_id, output)
    else:
        data.update(summary=output, answerSchema=answer.get("schema"), status="open")
        data["commands"] = [answer_command(state.run_id, answer.get("schema"))]
    data.update(_recorded(home, state.run_id, output.get("decisionId") if gate else None))
    if gate:
        from piw.channels.status import posts_json

        data["channels"] = posts_json(home, state.run_id)  # docs/channels.md
    return data


def _recorded(home: Path, run_id: str, decision_id: str | None) -> dict[str, Any]:
    """What the database says about the answer (read only; a missing or unreadable database says nothing)."""
    from piw.store.db.database import database_path
    from piw.store.db.run_database import open_run_database

    if not database_path(home).is_file():
        return {}
    try:
        database = open_run_database(home)
        row = database.decisions.get_decision(decision_id) if decision_id else None
        continuation = database.decisions.continuation_of(run_id)
        parent = database.queue.get(run_id)
    except PiwError:
        return {}
    found: dict[str, Any] = {}
    if row is not None and row.status != "open":
        found.update(
            status=row.status,
            answer=row.response,
            provenance=row.provenance,
            answeredBy=row.answered_by,
            resolvedAt=row.resolved_at,
        )
    if continuation is not None:
        found.setdefault("status", "resolved")
        found["continuationRunId"] = continuation.run_id
        if not decision_id:
            spec = ((continuation.input or {}).get("continuation") or {}) if continuation.input else {}
            if "answer" in spec:
                found["answer"] = spec["answer"]
    if parent is not None and parent.status == "cancelled" and "continuationRunId" not in found:
        found["status"] = "cancelled"
    return found


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
