"""Resume: continue a run from its trace alone (``docs/design/persistence.md`` §8).

The trace is read and folded once (:func:`read_run_trace`); the refusals every resume makes before it claims or
writes anything live here (:func:`refuse_unresumable`, :func:`check_source`), and so does what the claim holder
then does: repair a torn tail, and decide from the last committed events whether the run reattaches an agent
attempt, reruns an interrupted node under a fresh attempt, only writes the terminal event it owes, or routes on.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from piw.errors import ResumeRefused, RunFinished, SourceChanged
from piw.run.effects import apply_resolution, recover_effect, refuse_unknown
from piw.run.process_groups import stop_group
from piw.run.step import StepLoop
from piw.store.fold import RunState, fold
from piw.store.run_store import RunStore
from piw.store.trace import NODE_TERMINAL_TYPES, TraceEvent
from piw.workflow.loader import LoadedWorkflow
from piw.workflow.routing import Decision


@dataclass(frozen=True)
class RunTrace:
    """A run's trace as resume reads it: the valid prefix, folded once, and the bytes found after it."""

    events: list[TraceEvent]
    state: RunState
    valid_bytes: int
    tail: bytes
    """Everything after the valid prefix: an unterminated tail and/or one torn final line (§5)."""

    @property
    def torn_bytes(self) -> int:
        return len(self.tail)


def read_run_trace(store: RunStore) -> RunTrace:
    """Read and fold a run's trace: from the trace, never ``state.json`` (a cache that says "completed" must not
    stop a resume, ``docs/design/persistence.md`` §3). ``TraceCorrupt`` for a damaged line before the last."""
    read = store.read_trace()
    return RunTrace(read.events, fold(read.events), read.valid_bytes, read.tail)


def read_on(store: RunStore, earlier: RunTrace) -> RunTrace:
    """The trace once the writer lock is held: ``earlier`` when nothing changed since it was read, else read again.

    A valid prefix never changes (lines are never rewritten and only a torn tail is ever cut, §5), so the bytes
    after it tell: the same bytes there, the same trace, and nothing is parsed or folded a second time.
    """
    return earlier if store.unchanged(earlier.valid_bytes, earlier.tail) else read_run_trace(store)


def refuse_unresumable(trace: RunTrace, run_id: str, resolution: dict[str, Any] | None = None) -> None:
    """A run that never started, or already ended, is not resumed (§8 steps 1–2); one whose effect outcome is
    unknown only with a ``piw resolve`` answer (``resolution``), which nothing else takes (``docs/effects.md``)."""
    if not trace.state.run_id:
        raise ResumeRefused(f"Run {run_id} never started (its trace is empty); start it again with piw run.")
    if trace.state.is_terminal:
        if resolution is not None:
            refuse_unknown(trace.state, resolution)
        raise RunFinished(f"Run {run_id} already ended ({trace.state.status}); nothing to resume.")
    refuse_unknown(trace.state, resolution)


def check_source(loaded: LoadedWorkflow, state: RunState) -> None:
    """``SourceChanged`` unless the loaded workflow is the one the run started from (file hash or built-in
    revision, every mounted child, the definition digest): completed steps replay only against that."""
    same = (
        _identity(state.workflow_source) == _identity(loaded.source)
        and [_mounted(source) for source in state.workflow_sources or []]
        == [_mounted(source) for source in loaded.sources or []]
        and state.definition_digest == loaded.digest
    )
    if not same:
        where = _source_label(state.workflow_source, loaded.source, state.workflow_name)
        workflow = _rerun_reference(state.workflow_source, state.workflow_name)
        raise SourceChanged(
            f"Workflow source changed since run {state.run_id} started ({where}). Completed steps cannot be "
            "replayed against a different definition. To keep them, fork the run onto the changed workflow: "
            f"'piw fork {state.run_id} {_fork_point(state)} --workflow {workflow}'. Or cancel it with "
            f"'piw cancel {state.run_id}' and start again with 'piw run {workflow}'."
        )


def _identity(source: dict[str, Any] | None) -> dict[str, Any]:
    """A workflow source without its path: a file is its content hash wherever it lives (the same file on another
    machine, or moved, resumes; ``docs/many-machines.md``, "Routing by workflow version")."""
    return {key: value for key, value in (source or {}).items() if key != "path"}


def _mounted(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "source": _identity(entry.get("source"))}


def _rerun_reference(recorded: dict[str, Any], name: str) -> str:
    """What ``piw run``/``piw fork --workflow`` take to find the workflow again: a built-in's id, else the file's
    path as the run recorded it (its definition name need not be a name discovery finds), shell-quoted."""
    if recorded.get("kind") == "builtin" and recorded.get("id"):
        return shlex.quote(str(recorded["id"]))
    return shlex.quote(str(recorded.get("path") or name))


def _fork_point(state: RunState) -> str:
    """``--from NODE`` for the node the run stopped in, when that was its first visit (the fork then adopts every
    step before it); else ``--at SEQ`` of the trace's end, which adopts every finished step (docs/cli.md
    ``piw fork``)."""
    node = state.current.node_id if state.current is not None else state.waiting_on
    visits = state.node_stats.get(node, (0, 0.0))[0] if node else 0
    if node and visits <= (0 if state.current is not None else 1):
        return f"--from {shlex.quote(node)}"
    return f"--at {state.trace_seq}"


def _source_label(recorded: dict[str, Any], installed: dict[str, Any], name: str) -> str:
    """The parenthesis of ``SourceChanged``: a file's path, or a built-in's recorded and installed revisions."""
    if recorded.get("kind") == "builtin":
        now = installed.get("revision") if installed.get("kind") == "builtin" else None
        return (
            f"builtin {recorded.get('id')} revision {recorded.get('revision')}, "
            f"installed revision {now if now is not None else 'none'}"
        )
    return str(recorded.get("path") or recorded.get("id") or name)


def repair_tail(store: RunStore, trace: RunTrace) -> int:
    """Cut a torn tail off the trace (the fence was checked just before); the bytes removed (§5)."""
    return store.repair_tail(trace.valid_bytes, trace.torn_bytes)


def continue_from_trace(steps: StepLoop, events: list[TraceEvent], truncated: int) -> None:
    """Continue an open run whose committed events are ``events`` (§8 steps 4–6), ``truncated`` bytes repaired."""
    writer = steps.run.writer
    state = writer.state
    if not truncated and len(events) == 1 and events[0].type == "run_started" and not state.steps:
        # Queued and never begun (``piw run --detach``): the host starts it; there is nothing to resume.
        _begin_or_follow(steps, events)
        return
    if state.paused and state.current is None:
        writer.append("run", "run_resumed", {}, sync=True)  # after a pause: empty (§4)
        decision = _decision_after(steps, events, state)
        if decision.terminal is not None and not decision.exits:
            writer.append("run", decision.terminal[0], decision.terminal[1], sync=True)
            return
        next_node = steps.apply(decision)
        if next_node is not None:
            steps.loop(next_node)
        return
    if state.status == "unknown":
        apply_resolution(steps, steps.options.resolution)  # 'piw resolve' (without one: parked again)
        return
    if state.current is not None and steps.needs_origin_session(state.current.node_id):
        steps.control.stopped = (
            "needs-origin-session"  # the origin session's 'piw resume' recovers it visibly
        )
        return
    resumed: dict[str, Any] = {"replayedSteps": len(state.steps)}
    if truncated:
        resumed["truncatedBytes"] = truncated
    current = state.current
    group = current.process_group if current is not None else None
    # The dead holder's command may still run: stop it before its node reruns (process_groups).
    if group and stop_group(group):
        resumed["killedProcessGroup"] = {"pid": group.get("pid"), "pgid": group.get("pgid")}
    if current is not None and recover_effect(steps, current, resumed):
        return  # a once/reconcile effect that may have happened: never rerun blindly (docs/effects.md)
    if current is not None:
        if _can_reattach(steps, current.node_type, current.node_id, current.attempt_id):
            resumed.update(resumeAt=current.node_id, reattachedAttemptId=current.attempt_id)
            writer.append("run", "run_resumed", resumed, sync=True)
            steps.loop(current.node_id, reattach=current.attempt_id)
            return
        resumed.update(resumeAt=current.node_id, abandonedAttemptId=current.attempt_id)
        writer.append("run", "run_resumed", resumed, sync=True)
        steps.loop(current.node_id)
        return
    decision = _decision_after(steps, events, state)
    if decision.terminal is not None and not decision.exits:
        if truncated:
            # Only the terminal event is owed, but the repair must still be reported (docs/design/persistence.md §5),
            # e.g. when the cut was inside the terminal line itself.
            writer.append("run", "run_resumed", resumed, sync=True)
        writer.append("run", decision.terminal[0], decision.terminal[1], sync=True)
        return
    resumed["resumeAt"] = _peek_target(steps, decision)
    writer.append("run", "run_resumed", resumed, sync=True)
    next_node = steps.apply(decision)
    if next_node is not None:
        steps.loop(next_node)


def _begin_or_follow(steps: StepLoop, events: list[TraceEvent]) -> None:
    """A run whose trace holds only ``run_started``: begin it (a continuation follows its answered edge)."""
    continued = events[0].payload.get("continuedFrom")
    if isinstance(continued, dict):
        steps.after_answer(str(continued.get("nodeId")))
    else:
        steps.begin()


def _decision_after(steps: StepLoop, events: list[TraceEvent], state: RunState) -> Decision:
    """Where routing goes from the last committed event that moved it."""
    for event in reversed(events):
        if event.type in NODE_TERMINAL_TYPES and event.node_id:
            step = state.results[event.node_id]
            return steps.route_after(step.node_id, step.outcome, step.output, step.error)
        if event.type == "include_exited":
            mount_path = "/".join(event.payload.get("mountPath", []))
            output = event.payload.get("output")  # wire form: route_after resolves it exactly once
            return steps.route_after(mount_path, "ok", output, None, exit_name=event.payload.get("exit"))
        if event.type == "include_entered":
            mount = steps.graph.mounts["/".join(event.payload.get("mountPath", []))]
            return Decision(target=f"{mount.path}/{mount.definition.start_at}")
        if event.type == "run_started" and isinstance(event.payload.get("continuedFrom"), dict):
            # a continuation that crashed before its first step: follow the answered checkpoint's edge
            continued = event.payload["continuedFrom"]
            if continued.get("resumeAt"):
                return Decision(target=str(continued["resumeAt"]))  # a budget top-up: the blocked node
            return steps.route_answered(str(continued.get("nodeId")))
    return Decision(target=steps.workflow.definition.start_at)


def _peek_target(steps: StepLoop, decision: Decision) -> str | None:
    target = decision.target
    while target is not None and target in steps.graph.mounts:
        target = steps.graph.mounts[target].start
    return target


def _can_reattach(steps: StepLoop, node_type: str, node_id: str, attempt_id: str) -> bool:
    """An in-progress agent attempt whose step prompt is in the conversation keeps its id (§8 step 5)."""
    check = getattr(steps.executors["agent"], "can_reattach", None)
    return (
        node_type == "agent"
        and check is not None
        and check(steps.run.session, steps.run.run_id, node_id, attempt_id)
    )
