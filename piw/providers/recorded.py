"""The ``replay`` provider of ``piw fork``: answers agent steps from the parent run's recorded replies.

A fork re-runs the steps after its fork point; with ``--provider replay`` every agent step there is answered
with the replies the parent recorded for the same node (the same visit order), as long as the step's prompt is
the one the parent sent. The first step whose prompt differs fails with a message that shows the difference, so
a graph change can be tested offline against a recorded run. No request leaves the machine.

Cassettes (``PIW_PROVIDER_CASSETTE``) are the model-level counterpart: they replay raw requests in order and
fail on any byte of difference; this provider works at the level of workflow steps and ids.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from piw.errors import TraceCorrupt
from piw.providers.base import WORKFLOW_TOOL, ChatRequest, ProviderEvent, StepRef
from piw.providers.builder import MessageBuilder
from piw.providers.messages import (
    MESSAGE_ADAPTER,
    AssistantReply,
    CustomMessage,
    ToolCallBlock,
    Usage,
)
from piw.providers.scripted import ScriptedProvider
from piw.store.bundle import Bundle
from piw.store.session import SessionEntry, read_session
from piw.store.trace import TraceEvent, iter_trace

RECORDED_PROVIDER = "replay"
STEP_MESSAGE = "pi-workflows-agent-step"


@dataclass
class Recording:
    """One recorded agent attempt of the parent: its first step prompt and its replies, in order."""

    node_id: str
    attempt_id: str
    run_id: str
    order: int
    """Trace position of the attempt (its ``node_started``, or its action's for a ``run_agent`` child)."""
    prompt: str = ""
    replies: list[AssistantReply] = field(default_factory=list)


def stream_recorded(
    name: str,
    request: ChatRequest,
    cancel: threading.Event,
    reply: AssistantReply | None,
    problem: str | None,
) -> Iterator[ProviderEvent]:
    """A recorded reply streamed as the model sent it, or, when there is none to give, a free error result that
    says why (``problem``): what every provider that answers from a record sends back."""
    if problem is not None:
        builder = MessageBuilder(name, request.model)
        yield from builder.start()
        yield from builder.fail(problem, Usage(cost=0.0))
        return
    assert reply is not None
    yield from ScriptedProvider([reply], name=name, model=request.model).stream(request, cancel)


class AnswersFromRecord:
    """A provider that answers agent steps from a record (``piw fork --provider replay``, ``piw test``): it keeps
    the requests it was sent and streams what :meth:`_reply` picks, one request at a time."""

    def __init__(self) -> None:
        self.name = RECORDED_PROVIDER
        self.model = "recorded"
        self.requests: list[ChatRequest] = []
        self._lock = threading.Lock()

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        with self._lock:
            self.requests.append(request)
            reply, problem = self._reply(request)
        yield from stream_recorded(self.name, request, cancel, reply, problem)

    def _reply(self, request: ChatRequest) -> tuple[AssistantReply | None, str | None]:
        """The recorded reply for this request, or why there is none (``stream_recorded``'s two cases)."""
        raise NotImplementedError


class RecordedRunProvider(AnswersFromRecord):
    """Serves a parent run's recorded replies to a fork's agent steps (``--provider replay``)."""

    def __init__(self, parent: Bundle) -> None:
        super().__init__()
        self.parent = parent
        self._recordings = recordings(parent)
        self._assigned: dict[str, Recording] = {}
        self._used: set[str] = set()
        self._fork_seq: dict[str, int] = {}

    def _reply(self, request: ChatRequest) -> tuple[AssistantReply | None, str | None]:
        step = request.step
        if step is None:
            return None, "The replay provider answers workflow steps only; this request names no step."
        recording = self._assigned.get(step.attempt_id)
        prompt = step_prompt(request, step)
        if recording is None:
            after = self._fork_point(step.run_id)
            candidates = [
                rec
                for rec in self._recordings
                if rec.node_id == step.node_id and rec.order > after and rec.attempt_id not in self._used
            ]
            if not candidates:
                return None, (
                    f"Replay stopped at step {step.node_id}: run {self.parent.run_id} recorded no further attempt "
                    "of it after the fork point. Fork with a real provider to run it live."
                )
            recording = candidates[0]
            difference = _difference(_normalise(recording.prompt, recording, step), prompt)
            if difference is not None:
                return None, (
                    f"Replay stopped at step {step.node_id}: its prompt differs from the one recorded in run "
                    f"{self.parent.run_id} ({difference}). Fork with a real provider to run it live."
                )
            self._assigned[step.attempt_id] = recording
            self._used.add(recording.attempt_id)
        index = replies_so_far(request, step)
        if index >= len(recording.replies):
            return None, (
                f"Replay stopped at step {step.node_id}: the recording has {len(recording.replies)} replies for "
                f"it and the step asked for reply {index + 1}; the run no longer follows the recording."
            )
        return retarget(recording.replies[index], step), None

    def _fork_point(self, run_id: str) -> int:
        """The parent sequence number a fork left from (its ``run_started.forkedFrom.seq``)."""
        if run_id not in self._fork_seq:
            seq = 0
            trace = self.parent.path.parent / run_id / "trace.ndjson"
            for event in iter_trace(trace):
                forked = event.payload.get("forkedFrom") if event.type == "run_started" else None
                if isinstance(forked, dict) and forked.get("runId") == self.parent.run_id:
                    seq = int(forked.get("seq") or 0)
                break
            self._fork_seq[run_id] = seq
        return self._fork_seq[run_id]


def recordings(parent: Bundle) -> list[Recording]:
    """Every recorded agent attempt of ``parent`` (children included), in trace order."""
    order: dict[str, int] = {}
    action_of: dict[str, str] = {}
    for event in _readable(parent.trace_path):
        if event.type == "node_started" and event.attempt_id:
            order.setdefault(event.attempt_id, event.seq)
        elif event.type == "child_step_finished" and event.attempt_id:
            action_of[str(event.payload.get("childAttemptId"))] = event.attempt_id
    entries = read_session(parent.session_path)
    owner = attempt_owners(entries)
    recordings: dict[str, Recording] = {}
    for entry in entries:
        message = entry.message
        attempt = owner.get(entry.id)
        if attempt is None:
            continue
        if message.get("role") == "custom" and message.get("customType") == STEP_MESSAGE:
            contract = (message.get("details") or {}).get("contract") or {}
            if attempt not in recordings:
                position = order.get(attempt, order.get(action_of.get(attempt, ""), 0))
                recordings[attempt] = Recording(
                    node_id=str(contract.get("nodeId", "")),
                    attempt_id=attempt,
                    run_id=str(contract.get("runId", "")),
                    order=position,
                    prompt=str(message.get("content", "")),
                )
        elif message.get("role") == "assistant" and attempt in recordings and not message.get("retried"):
            try:
                parsed = MESSAGE_ADAPTER.validate_python(message)
            except ValidationError:
                continue
            if isinstance(parsed, AssistantReply):
                recordings[attempt].replies.append(parsed)
    return sorted(recordings.values(), key=lambda rec: rec.order)


def _readable(path: Path) -> Iterator[TraceEvent]:
    """The readable prefix of a trace; a damaged line ends it quietly (a fork works from the intact prefix)."""
    events = iter_trace(path)
    while True:
        try:
            yield next(events)
        except (StopIteration, TraceCorrupt):
            return


def attempt_owners(entries: list[SessionEntry]) -> dict[str, str]:
    """Entry id → the attempt id of the nearest step message at or above it on its branch."""
    by_id = {entry.id: entry for entry in entries}
    owner: dict[str, str] = {}
    for entry in entries:
        chain: list[str] = []
        cursor: SessionEntry | None = entry
        found: str | None = None
        while cursor is not None:
            if cursor.id in owner:
                found = owner[cursor.id]
                break
            message = cursor.message
            if message.get("role") == "custom" and message.get("customType") == STEP_MESSAGE:
                contract = (message.get("details") or {}).get("contract") or {}
                found = contract.get("attemptId")
                chain.append(cursor.id)
                break
            chain.append(cursor.id)
            cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
        if found:
            for entry_id in chain:
                owner[entry_id] = found
    return owner


def step_prompt(request: ChatRequest, step: StepRef) -> str:
    """The first step message of this attempt in the request (its full prompt with the step contract)."""
    for message in request.messages:
        if isinstance(message, CustomMessage) and message.custom_type == STEP_MESSAGE:
            contract = message.details.get("contract") or {}
            if contract.get("attemptId") == step.attempt_id:
                return message.content
    return ""


def replies_so_far(request: ChatRequest, step: StepRef) -> int:
    """How many replies of this attempt the request already holds (this request asks for the next one)."""
    seen = False
    count = 0
    for message in request.messages:
        if isinstance(message, CustomMessage) and message.custom_type == STEP_MESSAGE:
            contract = message.details.get("contract") or {}
            if contract.get("attemptId") == step.attempt_id:
                seen = True
        elif seen and isinstance(message, AssistantReply):
            count += 1
    return count


def _normalise(text: str, recording: Recording, step: StepRef) -> str:
    """The recorded prompt with the parent's run and attempt ids replaced by the fork's."""
    return text.replace(recording.attempt_id, step.attempt_id).replace(recording.run_id, step.run_id)


def _difference(recorded: str, now: str) -> str | None:
    if recorded == now:
        return None
    old, new = recorded.splitlines(), now.splitlines()
    for number, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            return f"line {number}: recorded {_clip(a)!r}, now {_clip(b)!r}"
    shorter = min(len(old), len(new)) + 1
    return f"line {shorter}: one prompt is longer than the other"


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def retarget(reply: AssistantReply, step: StepRef) -> AssistantReply:
    """A recorded reply for the fork's step: ``workflow`` calls name the fork's ids, and it costs nothing."""
    blocks: list[Any] = []
    for block in reply.content:
        if isinstance(block, ToolCallBlock) and block.name == WORKFLOW_TOOL:
            arguments = dict(block.arguments)
            if "step" in arguments:
                arguments["step"] = step.node_id
            if "attempt" in arguments:
                arguments["attempt"] = step.attempt_id
            block = block.model_copy(update={"arguments": arguments})
        blocks.append(block)
    return reply.model_copy(
        update={
            "content": blocks,
            "usage": Usage(cost=0.0),
            "provider": RECORDED_PROVIDER,
            "error_message": None,
        }
    )
