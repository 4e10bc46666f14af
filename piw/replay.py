"""The fold: the one pure function that turns trace events into ``RunState``.

Every reader — the engine after each append, resume, ``inspect``, ``watch``, every view — gets its state from
:func:`fold` / :func:`fold_more`, and ``fold_more(fold(a), b) == fold(a + b)`` holds for every split, so a cached
``state.json`` plus the tail of the trace always gives the same answer as a full replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from piw.trace import TraceEvent, paused_gc
from piw.wire import RUN_STATE_SCHEMA

RUN_STATUSES = ("running", "waiting", "completed", "failed", "timed_out", "cancelled")
TERMINAL_STATUSES = frozenset(RUN_STATUSES[1:])


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One finished attempt (``steps[]``); the latest per node is also its ``results`` entry."""

    attempt_id: str
    node_id: str
    node_type: str
    outcome: str
    started_at: str | None
    finished_at: str
    duration_ms: int | None = None
    prompt: str | None = None
    output: Any = None
    error: str | None = None
    action: dict[str, Any] | None = None
    conversation: dict[str, Any] | None = None
    assistant_completion: dict[str, Any] | None = None
    children: tuple[dict[str, Any], ...] = ()
    usage: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class UpdateRecord:
    """The latest ``update_published`` for one ``(type, key)`` pair."""

    update_id: str
    seq: int
    at: str
    run_id: str
    node_id: str
    attempt_id: str
    type: str
    key: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CurrentAttempt:
    """The attempt in progress: started, not yet finished or abandoned."""

    node_id: str
    attempt_id: str
    node_type: str
    started_at: str
    status_detail: str | None = None
    timeout_ms: int | None = None
    prompt: str | None = None
    children: tuple[dict[str, Any], ...] = ()
    assistant_completion: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunState:
    """The projection of a run's trace (``state.json``, ``pi-workflows.run-state.v1``)."""

    run_id: str = ""
    trace_seq: int = 0
    workflow_name: str = ""
    run_title: str | None = None
    parent_run_id: str | None = None
    carried_step_count: int = 0
    human_decision: dict[str, Any] | None = None
    workflow_source: dict[str, Any] = field(default_factory=dict)
    workflow_sources: tuple[dict[str, Any], ...] | None = None
    definition_digest: str = ""
    started_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    status: str = "running"
    input: Any = None
    max_steps: int = 100
    origin_session: dict[str, Any] | None = None
    outputs: Mapping[str, Any] = field(default_factory=dict)
    results: Mapping[str, StepRecord] = field(default_factory=dict)
    steps: tuple[StepRecord, ...] = ()
    usage: dict[str, Any] | None = None
    updates: Mapping[tuple[str, str], UpdateRecord] = field(default_factory=dict)
    current: CurrentAttempt | None = None
    mounts: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    paused: bool = False
    waiting_on: str | None = None
    final_output: Any = None
    error: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def steps_taken(self) -> int:
        """Attempts counted against ``maxSteps``: this trace's terminal node events plus carried ones."""
        return len(self.steps)

    def sorted_updates(self) -> list[UpdateRecord]:
        return sorted(self.updates.values(), key=lambda record: record.seq)


def add_usage(total: dict[str, Any] | None, part: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sum two usage objects; ``cost`` stays only when both sides know it."""
    if part is None:
        return total
    if total is None:
        return dict(part)
    summed = {key: total.get(key, 0) + part.get(key, 0) for key in ("requests", "input", "output")}
    summed["cacheRead"] = total.get("cacheRead", 0) + part.get("cacheRead", 0)
    summed["cacheWrite"] = total.get("cacheWrite", 0) + part.get("cacheWrite", 0)
    if "cost" in total and "cost" in part:
        summed["cost"] = total["cost"] + part["cost"]
    return summed


class _Folder:
    """Mutable working copy used inside one ``fold_more`` call; never escapes it."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        # The containers are shared with ``state`` until an event changes one (``own``): most events of a live
        # run (``node_started``, attempt events) only move ``current``, and copying every step per event would
        # make each append cost as much as the whole run so far.
        self.outputs: dict[str, Any] = state.outputs  # type: ignore[assignment]
        self.results: dict[str, StepRecord] = state.results  # type: ignore[assignment]
        self.steps: list[StepRecord] = state.steps  # type: ignore[assignment]
        self.updates: dict[tuple[str, str], UpdateRecord] = state.updates  # type: ignore[assignment]
        self.mounts: dict[str, dict[str, Any]] = state.mounts  # type: ignore[assignment]
        self.owned = False
        self.fields: dict[str, Any] = {}
        self.current = state.current
        self.started: TraceEvent | None = None
        """A ``node_started`` not yet turned into ``current``: most attempts end before anything reads it."""

    def attempt(self) -> CurrentAttempt | None:
        """The attempt in progress, built from its ``node_started`` the first time it is needed."""
        started = self.started
        if started is not None:
            payload = started.payload
            self.current = CurrentAttempt(
                node_id=started.node_id or "",
                attempt_id=started.attempt_id or "",
                node_type=payload.get("nodeType", ""),
                started_at=started.at,
                status_detail=payload.get("statusDetail"),
                timeout_ms=payload.get("timeoutMs"),
            )
            self.started = None
        return self.current

    def own(self) -> None:
        """Copy the shared containers before the first change, so the input state is never mutated."""
        if not self.owned:
            state = self.state
            self.outputs = dict(state.outputs)
            self.results = dict(state.results)
            self.steps = list(state.steps)
            self.updates = dict(state.updates)
            self.mounts = dict(state.mounts)
            self.owned = True

    def result(self, last: TraceEvent | None) -> RunState:
        if last is not None:
            self.fields["trace_seq"] = last.seq
            self.fields["updated_at"] = last.at
        current = self.attempt()
        if not self.owned and current is self.state.current and not self.fields:
            return self.state
        return replace(
            self.state,
            outputs=self.outputs,
            results=self.results,
            steps=tuple(self.steps) if self.owned else self.state.steps,
            updates=self.updates,
            mounts=self.mounts,
            current=current,
            **self.fields,
        )

    # ---- run-scoped events -------------------------------------------------------------------------------

    def run_started(self, event: TraceEvent) -> None:
        payload = event.payload
        sources = payload.get("workflowSources")
        self.fields.update(
            run_id=event.run_id,
            workflow_name=payload.get("workflowName", ""),
            run_title=payload.get("runTitle"),
            workflow_source=payload.get("workflowSource", {}),
            workflow_sources=tuple(sources) if sources else None,
            definition_digest=payload.get("definitionDigest", ""),
            started_at=event.at,
            status="running",
            input=payload.get("input"),
            max_steps=payload.get("maxSteps", 100),
            origin_session=payload.get("originSession"),
        )
        continued = payload.get("continuedFrom")
        if isinstance(continued, dict):
            self.fields["parent_run_id"] = continued.get("runId")
            self.fields["human_decision"] = continued.get("humanDecision")
        carried = payload.get("carried")
        if isinstance(carried, dict):
            self.own()
            self.outputs.update(carried.get("outputs") or {})
            for raw in carried.get("steps") or []:
                self.steps.append(_step_from_json(raw))
            for node_id, raw in (carried.get("results") or {}).items():
                self.results[node_id] = _step_from_json(raw)
            self.fields["carried_step_count"] = len(carried.get("steps") or [])

    def run_paused(self, event: TraceEvent) -> None:
        self.fields["paused"] = True

    def run_resumed(self, event: TraceEvent) -> None:
        self.fields["paused"] = False
        abandoned = event.payload.get("abandonedAttemptId")
        current = self.attempt()
        if abandoned and current is not None and current.attempt_id == abandoned:
            self.current = None

    def run_terminal(self, event: TraceEvent) -> None:
        payload = event.payload
        status = "failed" if event.type == "run_interrupted" else payload.get("status", event.type[4:])
        self.fields.update(status=status, finished_at=event.at)
        if "finalOutput" in payload:
            self.fields["final_output"] = payload["finalOutput"]
        if "waitingOn" in payload:
            self.fields["waiting_on"] = payload["waitingOn"]
        if payload.get("error") is not None:
            self.fields["error"] = payload["error"]
        if event.type != "run_waiting":
            self.started = self.current = None

    def include_entered(self, event: TraceEvent) -> None:
        self.own()
        path = "/".join(event.payload.get("mountPath", []))
        self.mounts[path] = {
            "invocation": event.payload.get("invocation", 1),
            "stepIndex": len(self.steps),
            "input": event.payload.get("input"),
        }

    def include_exited(self, event: TraceEvent) -> None:
        self.own()
        path = "/".join(event.payload.get("mountPath", []))
        self.outputs[path] = event.payload.get("output")
        mount = dict(self.mounts.get(path, {}))
        mount["exit"] = event.payload.get("exit")
        self.mounts[path] = mount

    # ---- attempt-scoped events ---------------------------------------------------------------------------

    def node_started(self, event: TraceEvent) -> None:
        self.started = event
        self.current = None

    def _current_for(self, event: TraceEvent) -> CurrentAttempt | None:
        current = self.attempt()
        if current is not None and current.attempt_id == event.attempt_id:
            return current
        return None

    def agent_prompt_sent(self, event: TraceEvent) -> None:
        current = self._current_for(event)
        if current is not None and current.prompt is None:
            self.current = replace(current, prompt=event.payload.get("prompt"))

    def assistant_completion_recorded(self, event: TraceEvent) -> None:
        current = self._current_for(event)
        if current is not None:
            payload = event.payload
            receipt = {key: payload.get(key) for key in ("assistantEntryId", "textSha256", "conversation")}
            self.current = replace(current, assistant_completion=receipt)

    def child_step_finished(self, event: TraceEvent) -> None:
        current = self._current_for(event)
        if current is not None:
            self.current = replace(current, children=(*current.children, dict(event.payload)))

    def update_published(self, event: TraceEvent) -> None:
        self.own()
        payload = event.payload
        pair = (payload.get("type", ""), payload.get("key", ""))
        self.updates.pop(pair, None)
        self.updates[pair] = UpdateRecord(
            update_id=payload.get("updateId", ""),
            seq=event.seq,
            at=event.at,
            run_id=event.run_id,
            node_id=event.node_id or "",
            attempt_id=event.attempt_id or "",
            type=pair[0],
            key=pair[1],
            data=payload.get("data", {}),
        )

    def node_terminal(self, event: TraceEvent) -> None:
        self.own()
        payload = event.payload
        node_id = event.node_id or ""
        outcome = payload.get("outcome", "ok" if event.type == "node_finished" else "failed")
        started = self.started
        node_type: str = payload.get("nodeType", "")
        started_at: str | None = None
        prompt: str | None = None
        completion: dict[str, Any] | None = None
        children: tuple[dict[str, Any], ...] = ()
        if started is not None and started.attempt_id == event.attempt_id:
            # the common case: nothing happened between start and end, so no CurrentAttempt was ever needed
            node_type, started_at = started.payload.get("nodeType", ""), started.at
            self.started = None
        else:
            current = self.attempt()
            if current is not None and current.attempt_id == event.attempt_id:
                node_type, started_at, prompt = current.node_type, current.started_at, current.prompt
                completion, children = current.assistant_completion, current.children
                self.current = None
        step = StepRecord(
            attempt_id=event.attempt_id or "",
            node_id=node_id,
            node_type=node_type,
            outcome=outcome,
            started_at=started_at,
            finished_at=event.at,
            duration_ms=payload.get("durationMs"),
            prompt=prompt,
            output=payload.get("output"),
            error=payload.get("error"),
            action=payload.get("action"),
            conversation=payload.get("conversation"),
            assistant_completion=completion,
            children=children,
            usage=payload.get("usage"),
        )
        self.steps.append(step)
        self.results[node_id] = step
        if outcome == "ok":
            self.outputs[node_id] = step.output
        else:
            self.outputs.pop(node_id, None)
        if step.usage is not None:
            self.fields["usage"] = add_usage(self.fields.get("usage", self.state.usage), step.usage)


_HANDLERS = {
    "run_started": _Folder.run_started,
    "run_paused": _Folder.run_paused,
    "run_resumed": _Folder.run_resumed,
    "include_entered": _Folder.include_entered,
    "include_exited": _Folder.include_exited,
    "node_started": _Folder.node_started,
    "agent_prompt_sent": _Folder.agent_prompt_sent,
    "assistant_completion_recorded": _Folder.assistant_completion_recorded,
    "child_step_finished": _Folder.child_step_finished,
    "update_published": _Folder.update_published,
    "node_finished": _Folder.node_terminal,
    "node_failed": _Folder.node_terminal,
    **{
        name: _Folder.run_terminal
        for name in (
            "run_completed",
            "run_waiting",
            "run_failed",
            "run_timed_out",
            "run_cancelled",
            "run_interrupted",
        )
    },
}


def fold_more(state: RunState, events: Iterable[TraceEvent]) -> RunState:
    """Apply more events to a state; pure (the input state is never changed)."""
    folder = _Folder(state)
    handlers = _HANDLERS
    last: TraceEvent | None = None
    with paused_gc():
        for last in events:
            handler = handlers.get(last.type)
            if handler is not None:
                handler(folder, last)
    return folder.result(last)


def fold(events: Iterable[TraceEvent]) -> RunState:
    """Replay a whole trace into ``RunState``."""
    return fold_more(RunState(), events)


# ---- state.json ------------------------------------------------------------------------------------------


def _drop_none(data: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None or key in keep}


def step_to_json(step: StepRecord) -> dict[str, Any]:
    """A ``steps[]`` entry in its camelCase wire shape (``prompt`` is nullable, so always present)."""
    data = {
        "attemptId": step.attempt_id,
        "nodeId": step.node_id,
        "nodeType": step.node_type,
        "outcome": step.outcome,
        "startedAt": step.started_at,
        "finishedAt": step.finished_at,
        "durationMs": step.duration_ms,
        "prompt": step.prompt,
        "output": step.output,
        "error": step.error,
        "action": step.action,
        "conversation": step.conversation,
        "assistantCompletion": step.assistant_completion,
        "children": list(step.children) or None,
        "usage": step.usage,
    }
    return _drop_none(data, keep=("prompt", "output"))


def result_to_json(step: StepRecord) -> dict[str, Any]:
    """A ``results[nodeId]`` entry: the latest attempt of that node."""
    data = {
        "attemptId": step.attempt_id,
        "nodeId": step.node_id,
        "nodeType": step.node_type,
        "outcome": step.outcome,
        "startedAt": step.started_at,
        "finishedAt": step.finished_at,
        "durationMs": step.duration_ms,
        "output": step.output if step.outcome == "ok" else None,
        "error": step.error,
    }
    return _drop_none(data)


def update_to_json(record: UpdateRecord) -> dict[str, Any]:
    return {
        "updateId": record.update_id,
        "seq": record.seq,
        "at": record.at,
        "runId": record.run_id,
        "nodeId": record.node_id,
        "attemptId": record.attempt_id,
        "type": record.type,
        "key": record.key,
        "data": record.data,
    }


def state_to_json(state: RunState) -> dict[str, Any]:
    """The ``state.json`` object (also ``piw inspect --json``)."""
    current = state.current
    data: dict[str, Any] = {
        "schema": RUN_STATE_SCHEMA,
        "traceSeq": state.trace_seq,
        "runId": state.run_id,
        "workflowName": state.workflow_name,
        "runTitle": state.run_title,
        "parentRunId": state.parent_run_id,
        "carriedStepCount": state.carried_step_count or None,
        "humanDecision": state.human_decision,
        "workflowSource": state.workflow_source,
        "workflowSources": list(state.workflow_sources) if state.workflow_sources else None,
        "definitionDigest": state.definition_digest,
        "startedAt": state.started_at,
        "updatedAt": state.updated_at,
        "finishedAt": state.finished_at,
        "status": state.status,
        "input": state.input,
        "maxSteps": state.max_steps,
        "originSession": state.origin_session,
        "outputs": dict(state.outputs),
        "results": {node: result_to_json(step) for node, step in state.results.items()},
        "steps": [step_to_json(step) for step in state.steps],
        "usage": state.usage,
        "updates": [update_to_json(record) for record in state.sorted_updates()],
        "currentNode": current.node_id if current else None,
        "currentAttemptId": current.attempt_id if current else None,
        "currentNodeStartedAt": current.started_at if current else None,
        "statusDetail": current.status_detail if current else None,
        "currentAttempt": _current_to_json(current) if current else None,
        "mounts": dict(state.mounts) or None,
        "paused": True if state.paused else None,
        "waitingOn": state.waiting_on,
        "finalOutput": state.final_output,
        "error": state.error,
    }
    return _drop_none(data, keep=("input",))


def _current_to_json(current: CurrentAttempt) -> dict[str, Any]:
    return _drop_none(
        {
            "nodeType": current.node_type,
            "timeoutMs": current.timeout_ms,
            "prompt": current.prompt,
            "children": list(current.children) or None,
            "assistantCompletion": current.assistant_completion,
        }
    )


def _step_from_json(raw: dict[str, Any]) -> StepRecord:
    return StepRecord(
        attempt_id=raw["attemptId"],
        node_id=raw["nodeId"],
        node_type=raw.get("nodeType", ""),
        outcome=raw.get("outcome", "ok"),
        started_at=raw.get("startedAt"),
        finished_at=raw.get("finishedAt", ""),
        duration_ms=raw.get("durationMs"),
        prompt=raw.get("prompt"),
        output=raw.get("output"),
        error=raw.get("error"),
        action=raw.get("action"),
        conversation=raw.get("conversation"),
        assistant_completion=raw.get("assistantCompletion"),
        children=tuple(raw.get("children") or ()),
        usage=raw.get("usage"),
    )


def state_from_json(data: dict[str, Any]) -> RunState:
    """Rebuild ``RunState`` from ``state.json``; raises ``KeyError``/``TypeError``/``ValueError`` when malformed."""
    if data.get("schema") != RUN_STATE_SCHEMA:
        raise ValueError("not a run-state document")
    steps = tuple(_step_from_json(raw) for raw in data.get("steps", []))
    by_attempt = {step.attempt_id: step for step in steps}
    results: dict[str, StepRecord] = {}
    for node_id, raw in data.get("results", {}).items():
        results[node_id] = by_attempt.get(raw["attemptId"]) or _step_from_json(raw)
    updates: dict[tuple[str, str], UpdateRecord] = {}
    for raw in data.get("updates", []):
        record = UpdateRecord(
            raw["updateId"], raw["seq"], raw["at"], raw["runId"], raw["nodeId"], raw["attemptId"],
            raw["type"], raw["key"], raw["data"],
        )  # fmt: skip
        updates[(record.type, record.key)] = record
    current = None
    if data.get("currentNode"):
        detail = data.get("currentAttempt") or {}
        current = CurrentAttempt(
            node_id=data["currentNode"],
            attempt_id=data["currentAttemptId"],
            node_type=detail.get("nodeType", ""),
            started_at=data.get("currentNodeStartedAt", ""),
            status_detail=data.get("statusDetail"),
            timeout_ms=detail.get("timeoutMs"),
            prompt=detail.get("prompt"),
            children=tuple(detail.get("children") or ()),
            assistant_completion=detail.get("assistantCompletion"),
        )
    sources = data.get("workflowSources")
    return RunState(
        run_id=data["runId"],
        trace_seq=int(data["traceSeq"]),
        workflow_name=data.get("workflowName", ""),
        run_title=data.get("runTitle"),
        parent_run_id=data.get("parentRunId"),
        carried_step_count=data.get("carriedStepCount", 0),
        human_decision=data.get("humanDecision"),
        workflow_source=data.get("workflowSource", {}),
        workflow_sources=tuple(sources) if sources else None,
        definition_digest=data.get("definitionDigest", ""),
        started_at=data.get("startedAt"),
        updated_at=data.get("updatedAt"),
        finished_at=data.get("finishedAt"),
        status=data.get("status", "running"),
        input=data.get("input"),
        max_steps=data.get("maxSteps", 100),
        origin_session=data.get("originSession"),
        outputs=dict(data.get("outputs", {})),
        results=results,
        steps=steps,
        usage=data.get("usage"),
        updates=updates,
        current=current,
        mounts=dict(data.get("mounts") or {}),
        paused=bool(data.get("paused", False)),
        waiting_on=data.get("waitingOn"),
        final_output=data.get("finalOutput"),
        error=data.get("error"),
    )
