"""Forking a run: which part of a parent's trace a new run adopts, and whether a definition can continue it.

A fork is a new run whose trace starts with ``run_started{forkedFrom}`` followed by copies of the parent's
events for every step that finished before the fork point (outputs, results, updates, child results and the
conversation entries they name), then continues live. The parent bundle is only ever read. Whether a changed
definition may continue the adopted prefix is decided by routing the prefix through the new graph: the same node
ids in the same order, and routing that reaches the fork point (``piw fork --workflow``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from piw.errors import TraceCorrupt, UsageError
from piw.store.bundle import Bundle
from piw.store.fold import RunState, StepRecord, fold_more
from piw.store.session import SessionEntry, read_session
from piw.store.trace import NODE_TERMINAL_TYPES, TraceEvent, iter_trace
from piw.workflow.definition import CheckpointNode
from piw.workflow.graph import FlatGraph
from piw.workflow.routing import decide

ADOPTED_RUN_EVENTS = frozenset({"include_entered", "include_exited"})
"""Run-scoped events that belong to the adopted steps (they move routing in and out of includes)."""
UNFINISHED_KEPT = frozenset({"child_step_finished"})
"""Events adopted from an attempt the fork point interrupts: the committed results of its ``run_agent`` children
(a script's leaves), which the fork's attempt of the same node visit then returns without a model request
(``docs/dynamic-workflows.md``)."""


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork leaves its parent: before the first attempt of ``node``, or after trace line ``seq``."""

    node: str | None = None
    seq: int | None = None

    def __post_init__(self) -> None:
        if (self.node is None) == (self.seq is None):
            raise UsageError("Give exactly one fork point: --from NODE or --at SEQ.")
        if self.seq is not None and self.seq < 1:
            raise UsageError(
                "--at takes a trace sequence number, 1 or more; see 'piw inspect RUN --view trace'."
            )


@dataclass(frozen=True)
class Prefix:
    """The part of a parent run a fork adopts."""

    parent: Bundle
    started: TraceEvent
    """The parent's ``run_started`` (input, title and any continuation it carried)."""
    events: list[TraceEvent]
    """Parent events to copy, in order: the adopted attempts' events and the include events among them."""
    seq: int
    """The parent sequence number the fork leaves from (``forkedFrom.seq``)."""
    next_node: str | None
    """``--from NODE``: the node the fork must reach; ``None`` for ``--at``."""
    entries: list[SessionEntry]
    """The parent's conversation entries up to the last one an adopted step names."""


def read_parent(parent: Bundle) -> tuple[list[TraceEvent], int | None]:
    """The readable prefix of the parent's trace, and the damaged line number when the trace is corrupt."""
    events: list[TraceEvent] = []
    try:
        for event in iter_trace(parent.trace_path):
            events.append(event)
    except TraceCorrupt as exc:
        return events, exc.line
    return events, None


def prefix_events(parent: Bundle) -> list[TraceEvent]:
    """The readable events of a parent's trace (a damaged tail is left out, never raised)."""
    return read_parent(parent)[0]


def select_prefix(parent: Bundle, point: ForkPoint) -> Prefix:
    """The adopted prefix for ``point``; a point the parent's readable trace does not have is a usage error."""
    events, damaged_line = read_parent(parent)
    if not events or events[0].type != "run_started":
        raise UsageError(f"Run {parent.run_id} never started (its trace is empty); there is nothing to fork.")
    damage = (
        f" (its trace is damaged at line {damaged_line}; fork from an earlier point)" if damaged_line else ""
    )
    last = events[-1].seq
    if point.seq is not None:
        if point.seq > last:
            raise UsageError(
                f"Run {parent.run_id} has no trace line {point.seq}: the readable trace ends at {last}{damage}."
            )
        cut = point.seq
    else:
        cut = _before_first_attempt(events, parent.run_id, str(point.node), damage)
    adopted = _adopted_events(events, cut)
    return Prefix(
        parent=parent,
        started=events[0],
        events=adopted,
        seq=cut,
        next_node=point.node,
        entries=_adopted_entries(parent, adopted),
    )


def _before_first_attempt(events: list[TraceEvent], run_id: str, node: str, damage: str) -> int:
    for event in events:
        if event.type == "node_started" and event.node_id == node:
            return event.seq - 1
    ran = list(dict.fromkeys(e.node_id for e in events if e.type == "node_started" and e.node_id))
    listed = ", ".join(ran) if ran else "none"
    raise UsageError(f"Node {node!r} never started in run {run_id}{damage}; nodes that ran: {listed}.")


def _adopted_events(events: list[TraceEvent], cut: int) -> list[TraceEvent]:
    """Events up to ``cut`` that belong to attempts finished by then, plus the include events among them."""
    within = [event for event in events if event.seq <= cut]
    finished = {e.attempt_id for e in within if e.type in NODE_TERMINAL_TYPES and e.attempt_id}
    adopted: list[TraceEvent] = []
    for event in within:
        if event.scope == "run":
            if event.type in ADOPTED_RUN_EVENTS:
                adopted.append(event)
        elif event.attempt_id is None or event.attempt_id in finished or event.type in UNFINISHED_KEPT:
            adopted.append(event)
    return adopted


def _named_entries(event: TraceEvent) -> Iterable[str]:
    payload = event.payload
    conversation = payload.get("conversation")
    if isinstance(conversation, dict):
        yield from (str(v) for k, v in conversation.items() if k in ("firstEntryId", "lastEntryId") and v)
    if event.type == "assistant_completion_recorded":
        for key in ("promptEntryId", "assistantEntryId"):
            if payload.get(key):
                yield str(payload[key])


def _adopted_entries(parent: Bundle, adopted: list[TraceEvent]) -> list[SessionEntry]:
    """The parent's entries up to the last one an adopted event names (prompts, replies, notifications)."""
    entries = read_session(parent.session_path)
    if not entries:
        return []
    position = {entry.id: index for index, entry in enumerate(entries)}
    notifications = {str(e.payload.get("notificationId")) for e in adopted if e.type == "notification_queued"}
    last = -1
    for event in adopted:
        for entry_id in _named_entries(event):
            last = max(last, position.get(entry_id, -1))
    if notifications:
        for index, entry in enumerate(entries):
            details = entry.message.get("details") or {}
            if details.get("notificationId") in notifications:
                last = max(last, index)
    return entries[: last + 1]


USAGE_KEYS = ("requests", "input", "output", "cacheRead", "cacheWrite")


def with_adopted_spend(prefix: Prefix) -> Prefix:
    """The prefix a budgeted fork adopts, with the spend of its steps in the budget's ledger.

    A parent with a budget recorded a ``usage_recorded`` line per request, and the fork copies them. One without
    recorded none: each adopted step that asked a model then gets one ``usage_recorded`` line, from the usage its
    terminal event recorded, just before it; and a carried ``usage`` (the parent continued a run) becomes the
    carried ``spent``. So the fork's budget counts what the adopted steps spent either way
    (``docs/fork-replay-budgets.md``).
    """
    metered = {event.attempt_id for event in prefix.events if event.type == "usage_recorded"}
    events: list[TraceEvent] = []
    for event in prefix.events:
        usage = event.payload.get("usage")
        if (
            event.type in NODE_TERMINAL_TYPES
            and event.attempt_id not in metered
            and isinstance(usage, dict)
            and int(usage.get("requests", 0)) > 0
        ):
            payload: dict[str, Any] = {key: int(usage.get(key, 0)) for key in USAGE_KEYS}
            if "cost" in usage:
                payload["cost"] = usage["cost"]
            payload["step"] = event.attempt_id
            events.append(
                msgspec.structs.replace(event, scope="agent", type="usage_recorded", payload=payload)
            )
        events.append(event)
    started = prefix.started
    carried = started.payload.get("carried")
    if isinstance(carried, dict) and "spent" not in carried and isinstance(carried.get("usage"), dict):
        spent = _spent_of(carried["usage"], carried.get("steps") or [])
        payload = {**started.payload, "carried": {**carried, "spent": spent}}
        started = msgspec.structs.replace(started, payload=payload)
    return replace(prefix, events=events, started=started)


def _spent_of(usage: dict[str, Any], steps: list[Any]) -> dict[str, Any]:
    """A carried ``usage`` as the budget's ``spent`` (its keys: ``piw.run.budget.SPENT_KEYS``)."""
    spent: dict[str, Any] = {key: int(usage.get(key, 0)) for key in USAGE_KEYS}
    spent["tokens"] = sum(spent[key] for key in ("input", "output", "cacheRead", "cacheWrite"))
    if "cost" in usage:
        spent["cost"] = float(usage["cost"])
    else:
        spent["unpricedRequests"] = spent["requests"]
    asked = [
        step
        for step in steps
        if isinstance(step, dict) and int((step.get("usage") or {}).get("requests", 0)) > 0
    ]
    spent["agentSteps"] = len(asked)
    return spent


@dataclass(frozen=True)
class Compatibility:
    """The result of routing an adopted prefix through a definition."""

    next_target: str | None
    """Where the fork continues (a node id, after include entries), or ``None`` when routing ends the run."""


def check_prefix(
    graph: FlatGraph, prefix: Prefix, state: RunState, resolve: Any, source: str
) -> Compatibility:
    """Route the adopted prefix through ``graph``: each adopted attempt must be the node routing reaches.

    ``state`` is the fork's state after ``run_started`` (input and carried steps); ``resolve`` loads artifact
    refs of recorded outputs. Raises ``UsageError`` naming the node that breaks the prefix.
    """
    target: str | None = _enter(graph, graph.definition.start_at)
    carried = state.steps[-1] if len(state.steps) else None
    if carried is not None:
        # A continuation's fork: routing resumes along the carried checkpoint's edge, as the continuation did.
        target = _next_after(graph, state, carried, resolve, checkpoint_ends=False)
    for event in prefix.events:
        if event.type == "include_entered":
            mount = "/".join(event.payload.get("mountPath", []))
            if mount not in graph.mounts:
                raise UsageError(
                    f"The workflow in {source} has no include {mount!r}; the recorded run entered it."
                )
        elif event.type == "node_started":
            node = event.node_id or ""
            gnode = graph.nodes.get(node)
            if gnode is None:
                raise UsageError(
                    f"The workflow in {source} has no node {node!r}, which the recorded run ran."
                )
            recorded_type = event.payload.get("nodeType")
            if recorded_type and gnode.node.node_type != recorded_type:
                raise UsageError(
                    f"Node {node!r} is a {gnode.node.node_type} node in {source}, but the recorded {node!r} "
                    f"is a {recorded_type} node."
                )
            if node != target:
                expected = "the end of the run" if target is None else repr(target)
                raise UsageError(
                    f"The workflow in {source} cannot reach the fork point: the recorded run ran {node!r} where "
                    f"its routing goes to {expected}."
                )
        state = fold_more(state, [event])
        if event.type in NODE_TERMINAL_TYPES:
            target = _next_after(graph, state, state.results[event.node_id or ""], resolve)
    return Compatibility(target)


def _next_after(
    graph: FlatGraph, state: RunState, step: StepRecord, resolve: Any, *, checkpoint_ends: bool = True
) -> str | None:
    """Where routing goes after a finished step, through include entries; ``None`` when the run ends there."""
    gnode = graph.nodes.get(step.node_id)
    if (
        checkpoint_ends
        and gnode is not None
        and isinstance(gnode.node, CheckpointNode)
        and step.outcome == "ok"
    ):
        return None
    decision = decide(graph, state, step.node_id, step.outcome, resolve(step.output), step.error)
    if decision.terminal is not None:
        return None
    return _enter(graph, decision.target)


def _enter(graph: FlatGraph, target: str | None) -> str | None:
    """The node a target starts at, through any includes it names (as the engine enters them)."""
    while target is not None and target in graph.mounts:
        mount = graph.mounts[target]
        target = f"{mount.path}/{mount.definition.start_at}"
    return target
