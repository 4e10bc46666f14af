"""Agent steps inside actions: ``ctx.run_agent`` (``docs/design/agent-steps.md`` §10).

A child is a submit-mode agent step with its own attempt id and conversation branch. Each finished child appends
one ``child_step_finished`` event under the action's attempt, which makes it durable: when the action reruns in
the same node visit, a key that already finished ``ok`` returns its recorded output without a model request.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from piw.agent_steps.attempt import AgentSettings, AttemptRun
from piw.agent_steps.contract import format_step_prompt, make_contract
from piw.errors import DefinitionError
from piw.providers.base import Provider
from piw.run.executors import Attempt
from piw.store.session import SessionEntry, SessionLog, current_branch
from piw.store.trace import iter_trace
from piw.workflow.definition import AgentNode, AssistantMessage
from piw.workflow.graph import GraphNode

KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
DEFAULT_MAX_CONCURRENT_CHILDREN = 8


@dataclass(frozen=True)
class ChildResult:
    """The result of one child step: ``output`` when ``ok``, ``error`` otherwise."""

    outcome: str
    output: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


class BranchSession:
    """One child's branch of the run's conversation, safe to use from the child's thread."""

    def __init__(self, log: SessionLog, lock: threading.Lock, parent_id: str | None) -> None:
        self.log = log
        self.lock = lock
        self.head = parent_id

    @property
    def entries(self) -> list[SessionEntry]:
        with self.lock:
            if self.head is None:
                return []
            by_id = {entry.id: entry for entry in self.log.entries}
            chain: list[SessionEntry] = []
            cursor = by_id.get(self.head)
            while cursor is not None:
                chain.append(cursor)
                cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
            chain.reverse()
            return chain

    def append(self, message: dict[str, Any], *, sync: bool = True, **_: Any) -> SessionEntry:
        with self.lock:
            entry = self.log.append(message, parent_id=self.head, sync=sync)
            self.head = entry.id
            return entry

    def find_custom(self, custom_type: str, key: str, value: Any) -> SessionEntry | None:
        return self.log.find_custom(custom_type, key, value)


class ChildRunner:
    """The ``ctx.run_agent`` of one action attempt."""

    def __init__(
        self,
        settings: AgentSettings,
        provider: Callable[[], Provider],
        attempt: Attempt,
        max_concurrent: int | None = None,
    ) -> None:
        self.settings = settings
        self.provider = provider
        self.attempt = attempt
        self.slots = threading.BoundedSemaphore(max_concurrent or DEFAULT_MAX_CONCURRENT_CHILDREN)
        self.session_lock = threading.Lock()
        self.used_keys: set[str] = set()
        self.keys_lock = threading.Lock()
        self.root = current_branch(attempt.session.entries)[-1].id if attempt.session.entries else None
        writer = attempt.writer
        self.visit = 1 + sum(1 for step in writer.state.steps if step.node_id == attempt.node_id)
        # Keys are unique within a visit, so only abandoned attempts of this visit can hold a result for one: they
        # are all in the trace before this attempt starts, and one read covers every later run_agent call.
        earlier = [
            event.payload
            for event in iter_trace(writer.bundle.trace_path)
            if event.type == "child_step_finished"
            and event.node_id == attempt.node_id
            and event.payload.get("visit") == self.visit
        ]
        self.earlier_ok: dict[str, Any] = {
            str(payload.get("key")): payload.get("output")
            for payload in earlier
            if payload.get("outcome") == "ok"
        }
        self.earlier_asked = len({str(payload.get("key")) for payload in earlier})
        """Children of this visit that finished in earlier attempts, whatever their outcome (a script's
        ``max_agents`` counts them: ``piw.workflow.script``)."""
        self.in_flight = 0
        self.max_in_flight = 0

    def __call__(
        self,
        prompt: str,
        *,
        key: str,
        expected_output: Any = None,
        tools: tuple[str, ...] | list[str] = (),
        timeout_s: float | None = 1800,
        phase: str | None = None,
    ) -> ChildResult:
        if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
            raise DefinitionError(f"run_agent key {key!r} must match [A-Za-z0-9][A-Za-z0-9._:/-]{{0,127}}")
        if isinstance(expected_output, AssistantMessage):
            raise DefinitionError(
                "run_agent children complete by submission; assistant_message() is not available"
            )
        with self.keys_lock:
            if key in self.used_keys:
                raise DefinitionError(
                    f"run_agent key {key!r} is used twice in one visit of {self.attempt.node_id}"
                )
            self.used_keys.add(key)
        recorded = self._recorded(key)
        if recorded is not None:
            return recorded
        with self.slots:
            self._track(+1)
            try:
                return self._run(prompt, key, expected_output, tuple(tools), timeout_s, phase)
            finally:
                self._track(-1)

    def fan_out(self, children: int) -> int:
        """``ctx.start_fan_out``: the fan-out gate (``piw.agent_steps.fan_out``)."""
        from piw.agent_steps.fan_out import start_fan_out

        return start_fan_out(self.attempt, children)

    def _track(self, delta: int) -> None:
        with self.keys_lock:
            self.in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _recorded(self, key: str) -> ChildResult | None:
        """An ``ok`` result of this key from an earlier attempt of this node visit (read from the trace once)."""
        if key not in self.earlier_ok:
            return None
        return ChildResult("ok", self.attempt.writer.bundle.resolve(self.earlier_ok[key]))

    def _run(
        self,
        prompt: str,
        key: str,
        expected: Any,
        tools: tuple[str, ...],
        timeout_s: float | None,
        phase: str | None = None,
    ) -> ChildResult:
        parent = self.attempt
        started = time.monotonic()
        remaining = parent.remaining_s()
        limits = [t for t in (timeout_s, remaining) if t is not None]
        child_timeout = min(limits) if limits else None
        child_id = f"{parent.node_id}/{key}"
        child_attempt_id = uuid.uuid4().hex
        node = AgentNode(prompt=prompt, expected_output=expected, timeout_s=child_timeout, tools=tools)
        child = Attempt(
            gnode=GraphNode(child_id, key, (*parent.gnode.mount_path, parent.gnode.local_id), node),
            attempt_id=child_attempt_id,
            ctx=replace(parent.ctx, node_id=child_id, attempt_id=child_attempt_id),
            writer=parent.writer,
            session=BranchSession(parent.session, self.session_lock, self.root),  # type: ignore[arg-type]
            timeout_s=child_timeout,
            cancel=parent.cancel,
            origin_session_id=parent.origin_session_id,
            publisher=parent.publisher,
            budget=parent.budget,
        )
        contract = make_contract(
            parent.run_id, parent.ctx.workflow_name, child_id, child_attempt_id, expected
        )
        run = AttemptRun(self.settings, self.provider, child, node, contract, update_owner=parent)
        outcome = run.run(format_step_prompt(prompt, contract)) if prompt.strip() else None
        if outcome is None:
            result = ChildResult("failed", error=f"Child {key}: the prompt is empty.")
            conversation = None
        else:
            result = ChildResult(outcome.outcome, outcome.output, outcome.error)
            conversation = outcome.conversation
            if outcome.usage:
                parent.add_usage(outcome.usage)
        payload: dict[str, Any] = {
            "visit": self.visit,
            "key": key,
            "childAttemptId": child_attempt_id,
            "outcome": result.outcome,
            "durationMs": int((time.monotonic() - started) * 1000),
        }
        if phase is not None:
            payload["phase"] = phase  # a script leaf's phase (docs/dynamic-workflows.md)
        if result.ok:
            payload["output"] = result.output
        else:
            payload["error"] = result.error
        if conversation:
            payload["conversation"] = conversation
        refused = not result.ok and parent.budget is not None and parent.budget.stop is not None
        if parent.active and not parent.cancel.is_set() and not refused:
            # an interrupted or timed-out action records no more, nor does a child its budget stopped
            parent.writer.append(
                "node",
                "child_step_finished",
                payload,
                node_id=parent.node_id,
                attempt_id=parent.attempt_id,
                sync=True,
            )
        return result
