"""What a waiting run waits for, for ``--json`` and ``piw serve``: the decision or checkpoint, its status, commands.

``piw inspect --json`` adds it as ``decision``; ``GET /api/runs/{run_id}/waiting`` and ``piw waiting`` show it
(``docs/serve.md``). The status (open, answered, cancelled) comes from the run database, read only: nothing here
sweeps or writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import PiwError
from piw.store.bundle import open_bundle
from piw.store.fold import RunState
from piw.views.decision import answer_command, decide_commands, is_decision


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


def state_document(home: Path, run_id: str, at: int | None = None, *, steps: bool = True) -> Iterator[bytes]:
    """``piw inspect RUN --json`` as pieces of JSON text: the replayed ``RunState``, with ``damage`` and the
    waiting run's ``decision`` (``GET /api/runs/{run_id}`` sends the same bytes, ``docs/serve.md``). ``steps=False``
    leaves ``steps`` empty (``?steps=none``): a long run's state without its one row per attempt, which a client
    pages through ``/steps`` instead."""
    from piw.store.state_json import iter_state_json
    from piw.views.source import load_run, with_artifact_check

    run = with_artifact_check(load_run(home, run_id, at))
    extra: dict[str, Any] = {"damage": run.damage.to_json()} if run.damage is not None else {}
    if at is None and run.state.status == "waiting":
        decision = decision_summary(home, run.state)
        if decision is not None:
            extra["decision"] = decision
    if not steps:
        import orjson

        from piw.store.state_json import state_to_json

        return iter([orjson.dumps({**state_to_json(run.state, steps=False), **extra})])
    return iter_state_json(run.state, extra or None)


DEFAULT_API = "http://127.0.0.1:8780"
"""Where ``piw serve`` listens by default (``piw waiting`` prints its routes)."""


@dataclass(frozen=True)
class WaitingItem:
    """One run that waits for a person: its decision summary, for ``piw waiting`` and ``GET /api/waiting``."""

    run_id: str
    workflow_name: str
    run_title: str | None
    started_at: str | None
    summary: dict[str, Any]
    due_at: str | None = None

    @property
    def kind(self) -> str:
        return str(self.summary.get("kind"))

    @property
    def question(self) -> str:
        """The request's question, or the checkpoint's summary, as one line of text."""
        if self.kind == "human_decision":
            request = self.summary.get("request") or {}
            value = request.get("request") if isinstance(request, dict) else None
        else:
            value = self.summary.get("summary")
        if isinstance(value, dict):
            value = value.get("question") or value.get("summary") or value.get("title") or json.dumps(value)
        return "" if value is None else str(value)

    def route(self, base: str) -> str:
        verb = "decide" if self.kind == "human_decision" else "answer"
        return f"{base.rstrip('/')}/api/runs/{self.run_id}/{verb}"

    def to_json(self, base: str = DEFAULT_API) -> dict[str, Any]:
        request = self.summary.get("request") if self.kind == "human_decision" else None
        return {
            "runId": self.run_id,
            "workflowName": self.workflow_name,
            "runTitle": self.run_title,
            "startedAt": self.started_at,
            "nodeId": self.summary.get("nodeId"),
            "kind": self.kind,
            "question": self.question,
            "requestSha256": request.get("requestSha256") if isinstance(request, dict) else None,
            "dueAt": self.due_at,
            "commands": list(self.summary.get("commands") or []),
            "apiUrl": self.route(base),
        }


def waiting_items(home: Path) -> list[WaitingItem]:
    """Every run whose gate or checkpoint still needs an answer, newest first (``piw runs --status waiting``)."""
    from piw.store.bundle import load_state
    from piw.store.history import run_summaries

    items: list[WaitingItem] = []
    for row in run_summaries(home, "waiting"):
        try:
            state = load_state(open_bundle(home, row.run_id))
        except PiwError:
            continue
        summary = decision_summary(home, state)
        if summary is None or summary.get("status") != "open":
            continue
        due = row.wait.to_json().get("dueAt") if row.wait is not None else None
        items.append(WaitingItem(row.run_id, row.workflow_name, row.run_title, row.started_at, summary, due))
    return items
