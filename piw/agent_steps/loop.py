"""The agent loop (``docs/design/agent-steps.md`` §4): one delivery (step, reminder or resume) run against a
provider until it settles.

Provider failures arrive as messages with ``stop_reason == "error"``; transient ones are retried only while no
content has streamed, so no visible text repeats. A watchdog turns the deadline or the cancel event into an
abort of the in-flight request within about a second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from piw.agent_steps.events import (
    AgentEnd,
    AgentSettled,
    AgentStart,
    AutoRetryEnd,
    AutoRetryStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
)
from piw.errors import PiwError
from piw.providers.base import (
    ChatRequest,
    DoneEvent,
    ErrorEvent,
    Provider,
    StepRef,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallDeltaEvent,
    ToolChoice,
)
from piw.providers.messages import AssistantReply, Message, ToolCallBlock, ToolResultMessage, ToolSpec
from piw.tools import ToolResult
from piw.workflow.user_code import call_user

MAX_RETRIES = 3
RETRY_DELAYS_S = (2.0, 4.0, 8.0)
MAX_RETRY_AFTER_S = 60.0
LoopListener = Callable[[Any], None]


@dataclass
class Deadline:
    """Monotonic time budget of an attempt, counted over the time its loops run."""

    timeout_s: float | None
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float | None:
        if self.timeout_s is None:
            return None
        return self.timeout_s - (time.monotonic() - self.started)

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0


@dataclass
class LoopTool:
    """A tool the loop may call: its spec and ``execute(call_id, args, raw_error)``."""

    spec: ToolSpec
    execute: Callable[[str, dict[str, Any], str | None], ToolResult]


@dataclass
class LoopResult:
    """How one loop ended: ``settled``, else ``error``, ``timed_out``, ``cancelled`` or ``max_turns``."""

    end: str
    messages: list[Message]
    final: AssistantReply | None = None
    error: str | None = None


@dataclass
class TurnBudget:
    """Turns used by the attempt so far (shared across its step, reminder and resume loops)."""

    limit: int = 50
    used: int = 0


def result_message(call_id: str, tool_name: str, result: ToolResult) -> ToolResultMessage:
    """A tool call's result as the conversation records it (§6)."""
    return ToolResultMessage(
        tool_call_id=call_id,
        tool_name=tool_name,
        content=result.content,
        is_error=result.is_error,
        terminate=result.terminate,
        details=result.details,
    )


def _wait(seconds: float, event: threading.Event) -> bool:
    return event.wait(seconds)


@dataclass
class AgentLoop:
    """Runs turns until the model stops calling tools, a terminating result arrives, or the attempt ends."""

    provider: Provider
    _: KW_ONLY
    tools: list[LoopTool]
    budget: TurnBudget
    deadline: Deadline
    cancel: threading.Event
    record: Callable[[Message], None]
    listeners: list[LoopListener] = field(default_factory=list)
    system_prompt: str | None = None
    tool_choice: ToolChoice | None = None
    max_tokens: int | None = None
    step: StepRef | None = None
    stop_when: Callable[[], bool] = lambda: False
    sleep: Callable[[float, threading.Event], bool] = _wait
    """Waits out a retry back-off; returns True when ``event`` was set meanwhile."""
    hidden_tools: list[LoopTool] = field(default_factory=list)
    """Answered when called but never offered (a closed ``workflow`` gate answers with its error text)."""
    cut_off: Callable[[AssistantReply, int | None], Message] | None = None
    """Answers a response cut off at ``length`` inside a tool call; ``None``: such a response ends the loop."""

    def __post_init__(self) -> None:
        self._offered = {tool.spec.name: tool for tool in self.tools}
        self._hidden = {tool.spec.name: tool for tool in self.hidden_tools}

    def _emit(self, event: Any) -> None:
        for listener in self.listeners:
            listener(event)

    def run(self, context: list[Message]) -> LoopResult:
        """Run one delivery; ``context`` (the conversation branch) is extended in place with settled ones."""
        produced: list[Message] = []
        self._emit(AgentStart())
        result = self._turns(context, produced)
        self._emit(AgentEnd(messages=list(produced)))
        self._emit(AgentSettled(aborted=result.end in ("timed_out", "cancelled")))
        return result

    def _ended_by_clock(self) -> str | None:
        if self.cancel.is_set():
            return "cancelled"
        if self.deadline.expired():
            return "timed_out"
        return None

    def _turns(self, context: list[Message], produced: list[Message]) -> LoopResult:
        final: AssistantReply | None = None
        while True:
            ended = self._ended_by_clock()
            if ended:
                return LoopResult(ended, produced, final)
            if self.budget.used >= self.budget.limit:
                return LoopResult("max_turns", produced, final)
            self.budget.used += 1
            turn = self.budget.used
            self._emit(TurnStart(turn=turn))
            message = self._request(context)
            final = message
            self._settle(message, context, produced)
            if message.stop_reason in ("error", "aborted"):
                self._emit(TurnEnd(turn=turn, message=message))
                # A deadline or cancel that struck during the request or its back-off decides the outcome.
                ended = self._ended_by_clock()
                return LoopResult(
                    ended or "error", produced, final, message.error_message or "provider error"
                )
            if message.stop_reason == "length" and message.tool_calls():
                # The calls' arguments were cut mid-way: never executed, never sent back as calls (§4).
                if self.cut_off is None:
                    self._emit(TurnEnd(turn=turn, message=message))
                    return LoopResult("settled", produced, final)
                self._settle(self.cut_off(message, self.max_tokens), context, produced)
                self._emit(TurnEnd(turn=turn, message=message))
                if self.stop_when():
                    return LoopResult("settled", produced, final)
                continue
            results = [self._call_tool(call, context, produced) for call in message.tool_calls()]
            self._emit(TurnEnd(turn=turn, message=message, tool_results=results))
            if not results or all(r.terminate for r in results) or self.stop_when():
                return LoopResult("settled", produced, final)

    def _settle(self, message: Message, context: list[Message], produced: list[Message]) -> None:
        self.record(message)
        context.append(message)
        produced.append(message)
        self._emit(MessageEnd(message=message))

    def _call_tool(
        self, call: ToolCallBlock, context: list[Message], produced: list[Message]
    ) -> ToolResultMessage:
        self._emit(ToolExecutionStart(tool_call_id=call.id, tool_name=call.name, args=call.arguments))
        started = time.monotonic()
        tool = self._offered.get(call.name) or self._hidden.get(call.name)
        if tool is None:
            result = ToolResult(
                f"Unknown tool {call.name!r}; available: {', '.join(self._offered) or 'none'}.", is_error=True
            )
        else:
            raw_error = None
            if call.raw_arguments is not None:
                raw_error = f"arguments are not a JSON object: {call.raw_arguments[:200]}"
            try:
                result = call_user(tool.execute, call.id, call.arguments, raw_error)
            except Exception as exc:
                result = ToolResult(f"Tool {call.name} failed: {type(exc).__name__}: {exc}", is_error=True)
        message = result_message(call.id, call.name, result)
        duration = int((time.monotonic() - started) * 1000)
        self._emit(
            ToolExecutionEnd(
                tool_call_id=call.id,
                tool_name=call.name,
                result={
                    "content": result.content,
                    "details": result.details,
                    "is_error": result.is_error,
                    "terminate": result.terminate,
                },
                duration_ms=duration,
            )
        )
        self._settle(message, context, produced)
        return message

    def _request(self, context: list[Message]) -> AssistantReply:
        request = ChatRequest(
            model=self.provider.model,
            messages=[m for m in context if not (isinstance(m, AssistantReply) and m.retried)],
            tools=[tool.spec for tool in self._offered.values()],
            tool_choice=self.tool_choice,
            max_tokens=self.max_tokens,
            system_prompt=self.system_prompt,
            step=self.step,
        )
        retries = 0
        while True:
            message, error = self._stream_once(request)
            retry = (
                error is not None
                and error.transient
                and not error.content_streamed
                and retries < MAX_RETRIES
                and not self._ended_by_clock()
            )
            if retry:
                delay = RETRY_DELAYS_S[retries]
                if (
                    error is not None
                    and error.retry_after_s is not None
                    and error.retry_after_s <= MAX_RETRY_AFTER_S
                ):
                    delay = error.retry_after_s
                retries += 1
                self._emit(
                    AutoRetryStart(
                        attempt=retries,
                        max_attempts=MAX_RETRIES,
                        delay_s=delay,
                        error=message.error_message or "",
                    )
                )
                remaining = self.deadline.remaining()
                wait = delay if remaining is None else max(0.0, min(delay, remaining))
                if not (self.sleep(wait, self.cancel) or self.deadline.expired()):
                    # Recorded only once the retry really goes ahead; an interrupted back-off leaves this
                    # response as the turn's final message instead (recorded once, by the caller).
                    self.record(message.model_copy(update={"retried": True}))
                    continue
            if retries:
                success = message.stop_reason not in ("error", "aborted")
                self._emit(
                    AutoRetryEnd(success=success, final_error=None if success else message.error_message)
                )
            return message

    def _stream_once(self, request: ChatRequest) -> tuple[AssistantReply, ErrorEvent | None]:
        abort = threading.Event()
        done = threading.Event()
        watchdog = threading.Thread(target=self._watch, args=(abort, done), daemon=True)
        watchdog.start()
        final: AssistantReply | None = None
        error: ErrorEvent | None = None
        self._emit(MessageStart())
        try:
            for event in self.provider.stream(request, abort):
                if isinstance(event, TextDeltaEvent | ThinkingDeltaEvent | ToolCallDeltaEvent):
                    self._emit(
                        MessageUpdate(delta=event.type, text=event.delta, content_index=event.content_index)
                    )
                elif isinstance(event, DoneEvent):
                    final = event.message
                elif isinstance(event, ErrorEvent):
                    final, error = event.message, event
        except PiwError as exc:
            # Configuration met at request time (an unset $KEY, an exhausted script) ends the attempt as a
            # recorded failure rather than crashing the run half-way.
            final = AssistantReply(
                stop_reason="error",
                error_message=str(exc),
                provider=self.provider.name,
                model=self.provider.model,
            )
        finally:
            done.set()
        if final is None:
            final = AssistantReply(
                stop_reason="error",
                error_message="The provider ended without a response.",
                provider=self.provider.name,
                model=self.provider.model,
            )
        return final, error

    def _watch(self, abort: threading.Event, done: threading.Event) -> None:
        while not done.is_set():
            if self.cancel.is_set() or self.deadline.expired():
                abort.set()
                return
            remaining = self.deadline.remaining()
            done.wait(0.05 if remaining is None else max(0.001, min(0.05, remaining)))
