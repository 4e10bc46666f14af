"""The optional ``pi-rpc`` backend (``docs/design/agent-steps.md`` §8.4): agent attempts run inside the Pi CLI.

Pi owns the model loop, piw owns the step. An attempt is the same as with piw's own loop where it matters for
the run record: the exact ``format_step_prompt`` string, ``agent_prompt_sent`` then the step message, settled
messages appended to the conversation, submissions validated by the same ``WorkflowTool``/``accept`` code,
the same reminders and the same ``node_finished`` output, usage and conversation range. Only how the model
is reached differs, so this module subclasses ``AttemptRun`` and replaces its loop with Pi's event stream.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from typing import Any

from piw.agent_steps import events
from piw.agent_steps.attempt import AgentSettings, AttemptRun, open_step
from piw.agent_steps.contract import AgentStepContract, format_reminder
from piw.agent_steps.loop import LoopResult, result_message
from piw.agent_steps.pi_process import EOF, PiLaunch, PiProcess
from piw.agent_steps.workflow_tool import WORKFLOW_TOOL_NAME
from piw.config.settings import PiwConfig, provider_secrets
from piw.errors import PiwError, ProviderError
from piw.providers.base import Provider
from piw.providers.messages import (
    AssistantReply,
    ContentBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from piw.providers.redaction import redact
from piw.providers.selection import ProviderSelection
from piw.run.executors import Attempt, NodeOutcome
from piw.tools import ToolResult
from piw.wire import now_iso
from piw.workflow.definition import AgentNode
from piw.workflow.loader import LoadedWorkflow

ABORT_GRACE_S = 5.0
DELTAS = ("text_delta", "thinking_delta", "toolcall_delta")


def _no_provider() -> Provider:
    raise ProviderError("pi-rpc: model requests are made by Pi, not by a piw provider.")


class PiRpcExecutor:
    """Executes ``agent`` nodes through one Pi process per run (this executor is built once per run)."""

    session_visible = True

    def __init__(self, launch: PiLaunch, settings: AgentSettings | None = None) -> None:
        self.launch = launch
        self.settings = settings or AgentSettings(provider_factory=_no_provider)
        self._process: PiProcess | None = None
        self._lock = threading.Lock()
        self._turn_lock = threading.Lock()
        """Pi runs one conversation: parallel agent branches of a run take turns on it."""

    def _emit(self, event: Any) -> None:
        for listener in self.settings.listeners:
            listener(event)

    def process(self) -> PiProcess:
        """The run's Pi process, started on first use; the first ``prompt`` waits for ``get_state``."""
        with self._lock:
            if self._process is not None and self._process.proc.poll() is not None:
                self._process.close()  # Pi died with an earlier attempt: later attempts get a fresh one
                self._process = None
            if self._process is None:
                process = PiProcess(self.launch)
                try:
                    process.request({"type": "get_state"})
                    # An auto-retry runs after ``agent_end`` and would make settlement ambiguous on a Pi without
                    # ``agent_settled``; a provider error ends the attempt as with piw's own loop instead.
                    process.request({"type": "set_auto_retry", "enabled": False})
                except BaseException:
                    process.close()
                    raise
                self._process = process
                atexit.register(self.close)
            return self._process

    def close(self) -> None:
        """Shut the Pi process down (idempotent); the runner should call it when the run ends."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None:
            process.close()

    def execute(self, attempt: Attempt) -> NodeOutcome:
        opened = open_step(attempt)
        if isinstance(opened, NodeOutcome):
            return opened
        # Pi's conversation does not survive a piw restart, so a reattached attempt is delivered again.
        kind = "resume" if attempt.reattached else "step"
        with self._turn_lock:
            try:
                process = self.process()
            except PiwError as exc:
                return NodeOutcome.failed(str(exc))
            run = _PiAttemptRun(self.settings, self.launch, process, attempt, opened.node, opened.contract)
            return run.run(opened.prompt, kind)


class _PiAttemptRun(AttemptRun):
    """One attempt whose turns happen in Pi; acceptance, records and outcomes are ``AttemptRun``'s."""

    def __init__(
        self,
        settings: AgentSettings,
        launch: PiLaunch,
        process: PiProcess,
        attempt: Attempt,
        node: AgentNode,
        contract: AgentStepContract,
    ) -> None:
        super().__init__(settings, _no_provider, attempt, node, contract)
        self.launch = launch
        self.process = process
        known = launch.selection.model_settings
        self.cost_known = known is not None and known.cost is not None
        self.verdicts: dict[str, ToolResult] = {}
        self.rejection: str | None = None
        """Python rejected a submit the bridge had let terminate: the model has not seen why yet."""
        self.turn = 0

    def run(self, prompt: str | None, kind: str = "step") -> NodeOutcome:
        assert prompt is not None
        self._deliver(prompt, kind)
        reminders = 0
        text = prompt
        try:
            while True:
                try:
                    result = self._pi_loop(text)
                except ProviderError as exc:
                    return self.fail(str(exc))
                outcome = self._after_loop(result)
                if outcome is not None:
                    return outcome
                if self.rejection is not None:
                    # The bridge terminated on a well-formed submit that Python rejected: say why, same attempt.
                    text, self.rejection = self.rejection, None
                    self._record(UserMessage(content=text))
                    continue
                failed = self._remind(reminders)
                if failed is not None:
                    return failed
                reminders += 1
                text = format_reminder(self.contract)
        finally:
            self.process.write_state({"completion": None})

    # ---- one prompt, until Pi settles ------------------------------------------------------------------

    def _pi_loop(self, text: str) -> LoopResult:
        self.process.write_state(
            {
                "completion": self.contract.completion,
                "step": self.contract.node_id,
                "attempt": self.contract.attempt_id,
                "tools": list(self.node.tools),
            }
        )
        produced: list[Any] = []
        final: AssistantReply | None = None
        ending: str | None = None
        aborted_at: float | None = None
        settle_id: str | None = None
        self.process.send({"type": "prompt", "message": text})
        while True:
            if ending is None:
                ending = self._clock_end() or self._turns_end()
                if ending is not None:
                    self.process.send({"type": "abort"})
                    aborted_at = time.monotonic()
            if aborted_at is not None and time.monotonic() - aborted_at > ABORT_GRACE_S:
                return LoopResult(ending or "error", produced, final, "Pi did not stop after abort.")
            try:
                line = self.process.events.get(timeout=0.05)
            except queue.Empty:
                continue
            if line is EOF:
                self.process.events.put(EOF)  # later attempts must see the dead process too
                return LoopResult("error", produced, final, f"Pi exited: {self.process.describe_exit()}")
            kind = line.get("type")
            if kind == "response":
                if line.get("command") == "prompt" and not line.get("success", False):
                    return LoopResult("error", produced, final, f"Pi refused the prompt: {line.get('error')}")
                if settle_id is not None and line.get("id") == settle_id:
                    settle_id = None
                    if not (line.get("data") or {}).get("isStreaming", False):
                        break
                continue
            if kind == "agent_settled":
                break
            if kind == "agent_end":
                self._emit(events.AgentEnd(messages=list(produced)))
                # A Pi without ``agent_settled``: it is settled once it reports it is no longer streaming.
                settle_id = self.process.send({"type": "get_state"})
                continue
            message = self._on_event(line)
            if message is not None:
                produced.append(message)
                if isinstance(message, AssistantReply):
                    final = message
        self._emit(events.AgentSettled(aborted=ending in ("timed_out", "cancelled")))
        return _settled_result(ending, produced, final)

    def _turns_end(self) -> str | None:
        return "max_turns" if self.budget.used > self.budget.limit else None

    def _clock_end(self) -> str | None:
        if self.attempt.cancel.is_set():
            return "cancelled"
        if self.deadline.expired():
            return "timed_out"
        return None

    def _on_event(self, line: dict[str, Any]) -> AssistantReply | ToolResultMessage | None:
        """Map one Pi event onto §4 events and the §6 record; returns a settled message, if any."""
        kind = line.get("type")
        if kind == "agent_start":
            self._emit(events.AgentStart())
        elif kind == "turn_start":
            self.turn += 1
            self._emit(events.TurnStart(turn=self.turn))
        elif kind == "message_start" and (line.get("message") or {}).get("role") == "assistant":
            self._emit(events.MessageStart())
        elif kind == "message_update":
            delta = line.get("assistantMessageEvent") or {}
            if delta.get("type") in DELTAS:
                self._emit(
                    events.MessageUpdate(
                        delta=delta["type"],
                        text=str(delta.get("delta", "")),
                        content_index=int(delta.get("contentIndex", 0)),
                    )
                )
        elif kind == "tool_execution_start":
            args = line.get("args")
            self._emit(
                events.ToolExecutionStart(
                    tool_call_id=str(line.get("toolCallId")),
                    tool_name=str(line.get("toolName")),
                    args=args if isinstance(args, dict) else {},
                )
            )
            if line.get("toolName") == WORKFLOW_TOOL_NAME:
                self._judge(str(line.get("toolCallId")), line.get("args"))
        elif kind == "tool_execution_end":
            result = line.get("result") or {}
            self._emit(
                events.ToolExecutionEnd(
                    tool_call_id=str(line.get("toolCallId")),
                    tool_name=str(line.get("toolName")),
                    result={
                        "content": _text_of(result.get("content")),
                        "is_error": bool(line.get("isError")),
                    },
                    duration_ms=0,
                )
            )
        elif kind == "message_end":
            return self._settled(line.get("message") or {})
        elif kind == "turn_end":
            message = line.get("message") or {}
            if message.get("role") == "assistant":
                self._emit(events.TurnEnd(turn=self.turn, message=self._assistant(message)))
        return None

    def _judge(self, call_id: str, args: Any) -> None:
        """Python's verdict on a ``workflow`` call, with the exact §3.2 texts; recorded instead of Pi's."""
        arguments = args if isinstance(args, dict) else None
        raw_error = None if arguments is not None else "arguments must be a JSON object"
        self.verdicts[call_id] = self.tool.handle(call_id, arguments, raw_error)

    def _settled(self, message: dict[str, Any]) -> AssistantReply | ToolResultMessage | None:
        role = message.get("role")
        settled: AssistantReply | ToolResultMessage
        if role == "assistant":
            settled = self._assistant(message)
            self.budget.used += 1
        elif role == "toolResult":
            call_id = str(message.get("toolCallId"))
            verdict = self.verdicts.pop(call_id, None)
            if verdict is None:
                verdict = ToolResult(
                    _text_of(message.get("content")),
                    details=_dict_or_none(message.get("details")),
                    is_error=bool(message.get("isError")),
                )
            elif verdict.is_error and not message.get("isError") and not verdict.terminate:
                self.rejection = verdict.content
            settled = result_message(call_id, str(message.get("toolName")), verdict)
        else:
            return None  # the step prompt is already recorded as the step message
        self._record(settled)
        self._emit(events.MessageEnd(message=settled))
        return settled

    def _redacted(self, error: Any) -> str | None:
        """Pi's error text with the provider's secrets removed, as piw's own adapters do (no key in the record)."""
        if not isinstance(error, str):
            return None
        return redact(error, provider_secrets(self.launch.selection.settings))

    def _assistant(self, message: dict[str, Any]) -> AssistantReply:
        blocks: list[ContentBlock] = []
        for block in message.get("content") or []:
            if block.get("type") == "text":
                blocks.append(TextBlock(text=str(block.get("text", ""))))
            elif block.get("type") == "thinking":
                blocks.append(ThinkingBlock(thinking=str(block.get("thinking", ""))))
            elif block.get("type") == "toolCall":
                arguments = block.get("arguments")
                ok = isinstance(arguments, dict)
                blocks.append(
                    ToolCallBlock(
                        id=str(block.get("id")),
                        name=str(block.get("name")),
                        arguments=arguments if ok else {},
                        raw_arguments=None if ok else str(arguments),
                    )
                )
        usage = message.get("usage") or {}
        cost = (usage.get("cost") or {}).get("total") if self.cost_known else None
        stop = message.get("stopReason")
        tokens = Usage(
            input=int(usage.get("input", 0)),
            output=int(usage.get("output", 0)),
            cache_read=int(usage.get("cacheRead", 0)),
            cache_write=int(usage.get("cacheWrite", 0)),
            cost=cost,
        )
        return AssistantReply(
            content=blocks,
            stop_reason=stop if stop in ("stop", "length", "toolUse", "error", "aborted") else "stop",
            error_message=self._redacted(message.get("errorMessage")),
            usage=tokens,
            provider=str(message.get("provider", "")),
            model=str(message.get("model", "")),
            completed_at=now_iso(),
        )


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def _dict_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and value else None


def build_pi_rpc_executor(
    selection: ProviderSelection, config: PiwConfig, workflow: LoadedWorkflow, settings: AgentSettings
) -> PiRpcExecutor:
    """The executor ``piw.agent_steps.setup`` builds when ``[agent] backend = "pi-rpc"``.

    ``--tools`` is fixed when Pi starts, so it is the union of every agent node's tools; the bridge then
    activates each step's own tools.
    """
    tools = sorted(
        {
            name
            for g in workflow.graph.nodes.values()
            if isinstance(g.node, AgentNode)
            for name in g.node.tools
        }
    )
    launch = PiLaunch(selection, tools=tools, system_prompt=config.agent.system_prompt, cwd=settings.cwd)
    return PiRpcExecutor(launch, settings)


def _settled_result(ending: str | None, produced: list[Any], final: AssistantReply | None) -> LoopResult:
    """How a prompt ended once Pi settled: the clock or budget that stopped it, else the last reply's error."""
    if ending is not None:
        return LoopResult(ending, produced, final)
    if final is not None and final.stop_reason == "error":
        return LoopResult("error", produced, final, final.error_message or "provider error")
    return LoopResult("settled", produced, final)
