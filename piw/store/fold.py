"""The fold: the one pure function that turns trace events into ``RunState``.

Every reader — the engine after each append, resume, ``inspect``, ``watch``, every view — gets its state from
:func:`fold` / :func:`fold_more`, and ``fold_more(fold(a), b) == fold(a + b)`` holds for every split, so a cached
``state.json`` plus the tail of the trace always gives the same answer as a full replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from sys import intern
from typing import Any

from msgspec import UNSET

from piw.store.state import (
    RUN_STATUSES,
    TERMINAL_STATUSES,
    CurrentAttempt,
    RunState,
    StepList,
    StepRecord,
    UpdateRecord,
    add_step_stat,
    add_usage,
    evolve,
)
from piw.store.state_json import (
    result_to_json,
    state_from_json,
    state_to_json,
    step_from_json,
    step_to_json,
    update_to_json,
)
from piw.store.trace import RUN_TERMINAL_TYPES, TraceEvent, paused_gc
from piw.store.trace_typed import NodeFailedLine, NodeFinishedLine, NodeStartedLine

__all__ = [
    # The fold is this module's own concept; the state types are re-exported because every reader of a run
    # gets them from here together with ``fold``.
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "CurrentAttempt",
    "RunState",
    "StepList",
    "StepRecord",
    "UpdateRecord",
    "add_usage",
    "fold",
    "fold_more",
    "result_to_json",
    "state_from_json",
    "state_to_json",
    "step_to_json",
    "update_to_json",
]


def _shared(value: Any) -> Any:
    """One object per distinct short string that every step repeats (node ids, types, outcomes)."""
    return intern(value) if type(value) is str else value


class _Folder:
    """Mutable working copy used inside one ``fold_more`` call; never escapes it."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        # The containers are shared with ``state`` until an event changes one (``own``): most events of a live
        # run (``node_started``, attempt events) only move ``current``, and copying every step per event would
        # make each append cost as much as the whole run so far.
        self.outputs: dict[str, Any] = state.outputs  # type: ignore[assignment]
        self.results: dict[str, StepRecord] = state.results  # type: ignore[assignment]
        self.new_steps: list[StepRecord] = []
        """Steps finished in this call; added to the shared ``StepList`` once, in ``result``."""
        self.updates: dict[tuple[str, str], UpdateRecord] = state.updates  # type: ignore[assignment]
        self.mounts: dict[str, dict[str, Any]] = state.mounts  # type: ignore[assignment]
        self.node_stats: dict[str, tuple[int, float]] = state.node_stats  # type: ignore[assignment]
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
            self.updates = dict(state.updates)
            self.mounts = dict(state.mounts)
            self.node_stats = dict(state.node_stats)
            self.owned = True

    def result(self, last: TraceEvent | None) -> RunState:
        if last is not None:
            self.fields["trace_seq"] = last.seq
            self.fields["updated_at"] = last.at
        current = self.attempt()
        if not self.owned and current is self.state.current and not self.fields:
            return self.state
        changes = self.fields
        changes["current"] = current
        if self.owned:
            changes.update(
                outputs=self.outputs,
                results=self.results,
                updates=self.updates,
                mounts=self.mounts,
                node_stats=self.node_stats,
            )
        if self.new_steps:
            changes["steps"] = self.state.steps.extended(self.new_steps)
        return evolve(self.state, changes)

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
        if isinstance(payload.get("budget"), dict):
            self.fields["budget"] = dict(payload["budget"])
        scheduled = payload.get("schedule")
        if isinstance(scheduled, dict):
            self.fields["schedule"] = {"name": scheduled.get("name"), "fireAt": scheduled.get("fireAt")}
        forked = payload.get("forkedFrom")
        if isinstance(forked, dict):
            self.fields["forked_from"] = {"runId": forked.get("runId"), "seq": forked.get("seq")}
        continued = payload.get("continuedFrom")
        if isinstance(continued, dict):
            self.fields["parent_run_id"] = continued.get("runId")
            self.fields["human_decision"] = continued.get("humanDecision")
        carried = payload.get("carried")
        if isinstance(carried, dict):
            self.own()
            self.outputs.update(carried.get("outputs") or {})
            for raw in carried.get("steps") or []:
                step = step_from_json(raw)
                self.new_steps.append(step)
                add_step_stat(self.node_stats, step)
            by_attempt = {step.attempt_id: step for step in self.new_steps}
            for node_id, raw in (carried.get("results") or {}).items():
                # the same record as its step, as state.json's reader builds it
                self.results[node_id] = by_attempt.get(raw.get("attemptId", "")) or step_from_json(raw)
            # The include state of the parent, so a gate inside a mount continues with that mount's input and
            # invocation (``stepIndex`` indexes ``steps``, where the carried steps come first).
            self.mounts.update({path: dict(entry) for path, entry in (carried.get("mounts") or {}).items()})
            if carried.get("usage") is not None:
                self.fields["usage"] = carried["usage"]
            self.fields["carried_step_count"] = len(carried.get("steps") or [])
            if isinstance(carried.get("spent"), dict):
                self.fields["spent"] = dict(carried["spent"])

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
            "stepIndex": len(self.state.steps) + len(self.new_steps),
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

    def mcp_tools_listed(self, event: TraceEvent) -> None:
        """The first listing of the attempt's MCP servers is the one it keeps (``docs/tools-mcp.md``)."""
        current = self._current_for(event)
        servers = event.payload.get("servers")
        if current is not None and current.mcp_tools is None and isinstance(servers, list):
            self.current = replace(current, mcp_tools=tuple(servers))

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

    def process_started(self, event: TraceEvent) -> None:
        current = self._current_for(event)
        if current is not None:
            self.current = replace(current, process_group=dict(event.payload))

    def tool_call_started(self, event: TraceEvent) -> None:
        current = self._current_for(event)
        call_id = event.payload.get("toolCallId")
        if current is not None and isinstance(call_id, str):
            self.current = replace(current, tool_calls_started=(*current.tool_calls_started, call_id))

    def effect_started(self, event: TraceEvent) -> None:
        """A ``once``/``reconcile`` effect began: from here on the attempt's outcome is not known until it ends."""
        current = self._current_for(event)
        if current is not None:
            self.current = replace(current, effect={**event.payload, "startedAt": event.at})

    def effect_reconciled(self, event: TraceEvent) -> None:
        current = self._current_for(event)
        if current is not None:
            self.current = replace(
                current, effect={**(current.effect or {}), "reconciled": dict(event.payload)}
            )

    def effect_outcome_unknown(self, event: TraceEvent) -> None:
        """The run parks with status ``unknown`` until ``piw resolve`` (``effect_resolved``)."""
        unresolved = {"nodeId": event.node_id, "attemptId": event.attempt_id, "at": event.at, **event.payload}
        self.fields.update(status="unknown", unresolved=unresolved)

    def effect_resolved(self, event: TraceEvent) -> None:
        self.fields.update(status="running", unresolved=None)

    def usage_recorded(self, event: TraceEvent) -> None:
        """One model request's spend: summed into ``spent`` (the budget's ledger) and per node."""
        payload = event.payload
        spent = dict(self.fields.get("spent") or self.state.spent or {})
        tokens = sum(int(payload.get(key, 0)) for key in ("input", "output", "cacheRead", "cacheWrite"))
        for key in ("requests", "input", "output", "cacheRead", "cacheWrite"):
            spent[key] = spent.get(key, 0) + int(payload.get(key, 0))
        spent["tokens"] = spent.get("tokens", 0) + tokens
        if "cost" in payload:
            spent["cost"] = spent.get("cost", 0.0) + float(payload["cost"])
        else:
            spent["unpricedRequests"] = spent.get("unpricedRequests", 0) + 1
        steps = self.fields.get("spent_steps", self.state.spent_steps)
        step = str(payload.get("step", event.attempt_id))
        if step not in steps:
            spent["agentSteps"] = spent.get("agentSteps", 0) + 1
            self.fields["spent_steps"] = steps | {step}
        self.fields["spent"] = spent
        by_node = dict(self.fields.get("spent_by_node") or self.state.spent_by_node)
        node = event.node_id or ""
        if payload.get("childKey"):
            node = f"{node}/{payload['childKey']}"
        mine = dict(by_node.get(node, {}))
        mine["requests"] = mine.get("requests", 0) + 1
        mine["tokens"] = mine.get("tokens", 0) + tokens
        if "cost" in payload:
            mine["cost"] = mine.get("cost", 0.0) + float(payload["cost"])
        by_node[node] = mine
        self.fields["spent_by_node"] = by_node

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
        node_id = _shared(event.node_id or "")
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
        get = payload.get
        # node ids, types and outcomes repeat on every step of a long run: one string object each
        step = StepRecord(
            attempt_id=event.attempt_id or "",
            node_id=node_id,
            node_type=_shared(node_type),
            outcome=_shared(outcome),
            started_at=started_at,
            finished_at=event.at,
            duration_ms=get("durationMs"),
            prompt=prompt,
            output=get("output"),
            error=get("error"),
            action=get("action"),
            conversation=get("conversation"),
            assistant_completion=completion,
            children=children,
            usage=get("usage"),
            traceback=_frames(tb) if (tb := get("traceback")) else None,
        )
        self.new_steps.append(step)
        add_step_stat(self.node_stats, step)
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
    "mcp_tools_listed": _Folder.mcp_tools_listed,
    "assistant_completion_recorded": _Folder.assistant_completion_recorded,
    "child_step_finished": _Folder.child_step_finished,
    "update_published": _Folder.update_published,
    "usage_recorded": _Folder.usage_recorded,
    "process_started": _Folder.process_started,
    "tool_call_started": _Folder.tool_call_started,
    "effect_started": _Folder.effect_started,
    "effect_reconciled": _Folder.effect_reconciled,
    "effect_outcome_unknown": _Folder.effect_outcome_unknown,
    "effect_resolved": _Folder.effect_resolved,
    "node_finished": _Folder.node_terminal,
    "node_failed": _Folder.node_terminal,
    **dict.fromkeys(sorted(RUN_TERMINAL_TYPES), _Folder.run_terminal),
}


def fold_more(state: RunState, events: Iterable[TraceEvent]) -> RunState:
    """Apply more events to a state; pure (the input state is never changed)."""
    folder = _Folder(state)
    if type(events) is list and len(events) <= 16:
        # the engine folds one event at a time: pausing the collector (a context manager, 1.8 us) would cost
        # more than it saves there
        last = _fold_into(folder, events)
    else:
        with paused_gc():  # keeps the collector from walking the growing result again and again
            last = _fold_into(folder, events)
    return folder.result(last)


def _fold_into(folder: _Folder, events: Iterable[TraceEvent]) -> TraceEvent | None:
    """Fold ``events`` into ``folder``; the last event, if any.

    Every event goes to its handler in ``_HANDLERS``, which is what the fold means, except the two that make up
    almost all of a long trace: a ``node_started`` and the terminal event of that same attempt with nothing in
    between. That pair is folded here, in the loop, with the containers held in locals. It builds the very
    ``StepRecord`` that ``_Folder.node_terminal`` builds (``tests/store/test_fold_fast_path.py`` compares the two on
    generated traces), in half the time: the handler calls, attribute reads and helper calls it skips are most
    of what a cold replay spends in the fold. A pair decoded typed (``piw.store.trace_typed``: the payload a struct,
    not a dict) is read by attribute (``tests/store/test_trace_typed.py`` folds traces both ways).
    """
    state = folder.state
    handlers = _HANDLERS
    last: TraceEvent | None = None
    # While in this loop the pending ``node_started`` is the local ``started`` and ``folder.started`` is None;
    # a handler gets it in ``folder.started`` and may consume it.
    started: Any = None
    steps = folder.new_steps
    outputs, results, stats = folder.outputs, folder.results, folder.node_stats
    bound = False  # whether those are the owned containers yet (``own`` copies them once, before a change)
    for last in events:
        line: Any = last
        kind = type(line)
        if kind is _TYPED_START:
            started = line
            folder.current = None
            continue
        if (
            (kind is _TYPED_FINISHED or kind is _TYPED_FAILED)
            and type(started) is _TYPED_START
            and started.attempt_id == line.attempt_id
        ):
            body = line.body
            outcome = body.outcome
            if outcome is UNSET:
                outcome = "ok" if kind is _TYPED_FINISHED else "failed"
            node_type = started.body.node_type
            if node_type is UNSET:
                node_type = ""
            tb = body.traceback
            step = StepRecord(
                attempt_id=line.attempt_id,
                node_id=intern(line.node_id),
                node_type=intern(node_type) if type(node_type) is str else node_type,
                outcome=intern(outcome) if type(outcome) is str else outcome,
                started_at=started.at,
                finished_at=line.at,
                duration_ms=body.duration_ms,
                prompt=None,
                output=body.output,
                error=body.error,
                action=body.action,
                conversation=body.conversation,
                usage=body.usage,
                traceback=_frames(tb) if tb else None,
            )
        else:
            name = line.type
            if name == "node_started":
                started = line
                folder.current = None
                continue
            if (
                started is None
                or (name != "node_finished" and name != "node_failed")
                or started.attempt_id != line.attempt_id
            ):
                handler = handlers.get(name)
                if handler is not None:
                    folder.started = started
                    handler(folder, last)
                    started, folder.started = folder.started, None
                continue
            get = line.payload.get
            outcome = get("outcome", "ok" if name == "node_finished" else "failed")
            node_type = started.payload.get("nodeType", "")
            step = StepRecord(
                attempt_id=line.attempt_id or "",
                node_id=intern(line.node_id or ""),
                node_type=intern(node_type) if type(node_type) is str else node_type,
                outcome=intern(outcome) if type(outcome) is str else outcome,
                started_at=started.at,
                finished_at=line.at,
                duration_ms=get("durationMs"),
                prompt=None,
                output=get("output"),
                error=get("error"),
                action=get("action"),
                conversation=get("conversation"),
                usage=get("usage"),
                traceback=_frames(tb) if (tb := get("traceback")) else None,
            )
        # the pair's step, however it was decoded
        started = None
        if not bound:
            folder.own()
            outputs, results, stats = folder.outputs, folder.results, folder.node_stats
            bound = True
        steps.append(step)
        node_id = step.node_id
        duration: Any = step.duration_ms
        attempts, total = stats.get(node_id, (0, 0.0))
        stats[node_id] = (attempts + 1, total + duration if type(duration) in (int, float) else total)
        results[node_id] = step
        if step.outcome == "ok":
            outputs[node_id] = step.output
        else:
            outputs.pop(node_id, None)
        if step.usage is not None:
            folder.fields["usage"] = add_usage(folder.fields.get("usage", state.usage), step.usage)
    folder.started = started
    return last


_TYPED_START: Any = NodeStartedLine
_TYPED_FINISHED: Any = NodeFinishedLine
_TYPED_FAILED: Any = NodeFailedLine


def fold(events: Iterable[TraceEvent]) -> RunState:
    """Replay a whole trace into ``RunState``."""
    return fold_more(RunState(), events)


def _frames(value: Any) -> tuple[dict[str, Any], ...] | None:
    """``node_failed.traceback``: a list of frame objects; anything else (an older or damaged writer) is none."""
    if not isinstance(value, list) or not value:
        return None
    return tuple(frame for frame in value if isinstance(frame, dict)) or None
