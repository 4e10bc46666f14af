"""The agent executor: runs one attempt of an ``agent`` node in submit or assistant mode.

Order for every attempt (``persistence.md`` §9): ``agent_prompt_sent`` is durable, then the step message
entry, then model turns whose settled messages are appended to the conversation before the next request.
Submit mode ends on an accepted ``workflow`` submission (no further request); assistant mode takes the final
visible reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from piw.agent_steps.contract import AgentStepContract, format_reminder, format_step_prompt, make_contract
from piw.agent_steps.events import StepDelivered
from piw.agent_steps.loop import AgentLoop, Deadline, LoopListener, LoopResult, LoopTool, TurnBudget
from piw.agent_steps.workflow_tool import (
    DEFAULT_MAX_REJECTIONS,
    OUTPUT_CUT_TYPE,
    ActiveStep,
    WorkflowTool,
    step_tool_spec,
)
from piw.errors import AttemptInactive
from piw.providers.base import Provider, StepRef, force_tool
from piw.providers.config import config_path
from piw.providers.messages import (
    MESSAGE_ADAPTER,
    AssistantMessage,
    CustomMessage,
    Message,
    ToolResultMessage,
    ToolSpec,
)
from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate, to_json_output
from piw.store.session import SessionLog, current_branch
from piw.tools import Tool, ToolContext, ToolResult, registry
from piw.wire import AGENT_STEP_MESSAGE_SCHEMA, sha256_hex
from piw.workflow.definition import AgentNode
from piw.workflow.user_code import call_user

STEP_CUSTOM_TYPE = "pi-workflows-agent-step"
MAX_REMINDERS = 2
DEFAULT_MAX_OUTPUT_TOKENS = 2048
"""``max_tokens`` of submit-mode requests when neither the node nor the model entry sets one (§4 output cap)."""
NO_ORIGIN = "Assistant completion requires an origin session."


def message_to_entry(message: Message) -> dict[str, Any]:
    """A settled message as stored in ``session/entries.ndjson``."""
    return message.model_dump(by_alias=True, mode="json", exclude_none=True)


def branch_messages(session: SessionLog) -> list[Message]:
    """The current conversation branch as messages (what the next request carries)."""
    return [MESSAGE_ADAPTER.validate_python(entry.message) for entry in current_branch(session.entries)]


def usage_of(messages: list[Message]) -> dict[str, Any] | None:
    """Requests and tokens summed over an attempt's assistant messages; ``cost`` only if all are known."""
    assistants = [m for m in messages if isinstance(m, AssistantMessage)]
    if not assistants:
        return None
    total: dict[str, Any] = {
        "requests": len(assistants),
        "input": 0,
        "output": 0,
        "cacheRead": 0,
        "cacheWrite": 0,
    }
    cost: float | None = 0.0
    for message in assistants:
        usage = message.usage
        total["input"] += usage.input
        total["output"] += usage.output
        total["cacheRead"] += usage.cache_read
        total["cacheWrite"] += usage.cache_write
        cost = None if cost is None or usage.cost is None else cost + usage.cost
    if cost is not None:
        total["cost"] = cost
    return total


@dataclass
class AgentSettings:
    """How agent attempts run: the provider, limits, the system prompt and where tools may look."""

    provider_factory: Callable[[], Provider]
    max_turns: int = 50
    max_rejections: int = DEFAULT_MAX_REJECTIONS
    system_prompt: str | None = None
    model_max_tokens: int | None = None
    """The selected model's ``max_tokens`` from ``config.toml``; caps requests unless the node sets its own."""
    cwd: Path = field(default_factory=Path.cwd)
    tool_env: tuple[str, ...] = ()
    """``[agent] tool_env``: environment variables tool processes may see besides the base allow-list."""
    protected_paths: tuple[Path, ...] = ()
    """Paths the file tools refuse besides ``PIW_HOME`` and its config file (which are always refused)."""
    session_visible: bool = True
    max_concurrent_children: int = 8
    listeners: list[LoopListener] = field(default_factory=list)


class AgentExecutor:
    """Executes ``agent`` nodes for the engine."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self._provider: Provider | None = None

    @property
    def provider(self) -> Provider:
        if self._provider is None:
            self._provider = self.settings.provider_factory()
        return self._provider

    def _emit(self, event: Any) -> None:
        for listener in self.settings.listeners:
            listener(event)

    def close(self) -> None:
        """Release the provider when the run ends (the ``llamacpp`` provider stops its server)."""
        provider, self._provider = self._provider, None
        close = getattr(provider, "close", None)
        if callable(close):
            close()

    def child_runner(self, attempt: Attempt) -> Any:
        """The ``ctx.run_agent`` of an action attempt (``agent-steps.md`` §10)."""
        from piw.agent_steps.children import ChildRunner

        return ChildRunner(self, attempt, self.settings.max_concurrent_children)

    def can_reattach(self, session: SessionLog, run_id: str, node_id: str, attempt_id: str) -> bool:
        """True when the attempt's step prompt is already in the conversation (``persistence.md`` §9)."""
        from piw.agent_steps.recovery import matching_prompts

        return bool(matching_prompts(current_branch(session.entries), run_id, node_id, attempt_id))

    def execute(self, attempt: Attempt) -> NodeOutcome:
        node = attempt.gnode.node
        assert isinstance(node, AgentNode)
        if attempt.reattached:
            from piw.agent_steps.recovery import recover

            return recover(self, attempt, node)
        if node.completion == "assistant" and attempt.origin_session_id is None:
            return NodeOutcome.failed(NO_ORIGIN)
        try:
            task = evaluate(node.prompt, attempt.ctx)
        except Exception as exc:
            return NodeOutcome.failed(f"prompt failed: {describe_exception(exc)}", exception=exc)
        if not isinstance(task, str) or not task.strip():
            return NodeOutcome.failed(f"Step {attempt.node_id}: the prompt is empty or not a string.")
        contract = make_contract(
            attempt.run_id,
            attempt.ctx.workflow_name,
            attempt.node_id,
            attempt.attempt_id,
            node.expected_output,
            updates=node.updates,
        )
        return _AttemptRun(self, attempt, node, contract).run(format_step_prompt(task, contract))


def _wants_object(node: AgentNode) -> bool:
    """Whether the step's output schema is an object, so a string that is not JSON can never be accepted."""
    expected = node.expected_output
    if expected is None:
        return True
    if isinstance(expected, type) and issubclass(expected, BaseModel):
        return expected.model_json_schema().get("type") == "object"
    return False


def registry_loop_tool(tool: Tool, context: ToolContext) -> LoopTool:
    """Offer a registry tool to the loop; unparsable arguments become an error result, never a call."""

    def execute(call_id: str, args: dict[str, Any], raw_error: str | None) -> ToolResult:
        if raw_error is not None:
            return ToolResult(f"Invalid {tool.name} call: {raw_error}", is_error=True)
        return tool.execute(call_id, args, context)

    spec = ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
    return LoopTool(spec, execute)


class _AttemptRun:
    """The state of one agent attempt across its step and reminder deliveries."""

    def __init__(
        self,
        executor: AgentExecutor,
        attempt: Attempt,
        node: AgentNode,
        contract: AgentStepContract,
        *,
        child: bool = False,
    ) -> None:
        self.executor = executor
        self.child = child
        """A ``ctx.run_agent`` child: its prompts live only in the conversation, never in the trace."""
        self.update_owner: Attempt | None = None
        """For a child: the action attempt whose ``nodeId``/``attemptId`` its updates are recorded under."""
        self.settings = executor.settings
        self.attempt = attempt
        self.node = node
        self.contract = contract
        self.budget = TurnBudget(limit=self.settings.max_turns)
        self.deadline = Deadline(attempt.timeout_s)
        self.messages: list[Message] = []
        self.first_entry_id: str | None = None
        self.last_entry_id: str | None = None
        self.last_assistant_entry: str | None = None
        self.step = ActiveStep(contract=contract, accept=self._accept, wants_object=_wants_object(node))
        self.tool = WorkflowTool(
            self.step,
            publish=self._publish,
            status=self._status,
            updates=node.updates,
            max_rejections=self.settings.max_rejections,
        )

    # ---- submit-mode acceptance (§1.1 steps 2–4) -------------------------------------------------------

    def _accept(self, value: Any) -> Any:
        expected = self.node.expected_output
        if isinstance(expected, type) and issubclass(expected, BaseModel):
            value = call_user(expected.model_validate, value)  # author validators may raise anything
        if self.node.validate is not None:
            value = call_user(self.node.validate, value, self.attempt.ctx)
        return to_json_output(value, self.attempt.node_id)

    def _publish(self, update: dict[str, Any], call_id: str) -> dict[str, Any]:
        owner = self.update_owner or self.attempt
        publisher = owner.publisher
        if publisher is None:
            raise AttemptInactive(owner.node_id, owner.attempt_id)
        receipt = publisher.publish(
            owner.node_id, owner.attempt_id, update, is_active=owner.is_live, idempotency_key=call_id
        )
        return receipt.to_json()

    def _status(self) -> dict[str, Any]:
        from piw.store.fold import update_to_json

        return {"updates": [update_to_json(r) for r in self.attempt.writer.state.sorted_updates()]}

    # ---- deliveries ------------------------------------------------------------------------------------

    def _deliver(self, content: str, kind: str) -> None:
        writer, session = self.attempt.writer, self.attempt.session
        if not self.child:
            payload = {"prompt": content, "completion": self.contract.completion, "deliveryKind": kind}
            writer.append("agent", "agent_prompt_sent", payload, node_id=self.attempt.node_id,
                          attempt_id=self.attempt.attempt_id, sync=True)  # fmt: skip
        state = writer.state
        presentation = {
            k: v for k, v in (("runTitle", state.run_title), ("statusDetail", self.node.status_detail)) if v
        }
        details: dict[str, Any] = {
            "schema": AGENT_STEP_MESSAGE_SCHEMA,
            "kind": kind,
            "contract": self.contract.to_wire(),
        }
        if presentation:
            details["presentation"] = presentation
        entry = session.append(message_to_entry(CustomMessage(custom_type=STEP_CUSTOM_TYPE, content=content,
                                                              details=details)))  # fmt: skip
        if self.first_entry_id is None:
            self.first_entry_id = entry.id
        self._emit(StepDelivered(details=details, content=content))

    def _emit(self, event: Any) -> None:
        self.executor._emit(event)

    def _record(self, message: Message) -> None:
        entry = self.attempt.session.append(message_to_entry(message))
        self.messages.append(message)
        if isinstance(message, ToolResultMessage) and message.terminate and not message.is_error:
            self.last_entry_id = entry.id
        if isinstance(message, AssistantMessage) and not message.retried:
            self.last_assistant_entry = entry.id

    def _loop(self, tool_choice: Any) -> LoopResult:
        spec = step_tool_spec(self.contract.node_id, self.node.expected_output, self.node.updates)
        workflow = LoopTool(spec, self.tool.handle)
        offered = [workflow] if self.tool.gate_open else []
        submit = self.contract.completion == "submit"
        loop = AgentLoop(
            self._provider(),
            tools=[*offered, *self._registry_tools()],
            hidden_tools=[] if offered else [workflow],
            budget=self.budget,
            deadline=self.deadline,
            cancel=self.attempt.cancel,
            record=self._record,
            listeners=self.settings.listeners,
            system_prompt=self.settings.system_prompt,
            tool_choice=tool_choice,
            max_tokens=self._max_tokens(),
            step=StepRef(
                run_id=self.attempt.run_id, node_id=self.attempt.node_id, attempt_id=self.attempt.attempt_id
            ),
            stop_when=lambda: self.step.accepted or self.step.closed,
            cut_off=self._cut_off if submit else None,
        )
        return loop.run(self._context())

    def _max_tokens(self) -> int | None:
        """The output cap (§4): the node's, else the model's, else 2048 in submit mode or ``max_chars``."""
        configured = self.node.max_output_tokens or self.settings.model_max_tokens
        if configured is not None:
            return configured
        if self.contract.completion == "submit":
            return DEFAULT_MAX_OUTPUT_TOKENS
        return self.contract.max_output_chars

    def _cut_off(self, message: AssistantMessage, max_tokens: int | None) -> Message:
        """Answer a response cut off inside a tool call: never replayed, it counts as a rejection (§4)."""
        tokens = message.usage.output or max_tokens or 0
        text, details = self.tool.cut_off(tokens)
        return CustomMessage(custom_type=OUTPUT_CUT_TYPE, content=text, details=details)

    def _context(self) -> list[Message]:
        """What the next request carries: the branch, or with ``context="step"`` only this attempt's entries."""
        entries = current_branch(self.attempt.session.entries)
        if self.node.context == "step" and self.first_entry_id is not None:
            ids = [entry.id for entry in entries]
            if self.first_entry_id in ids:
                entries = entries[ids.index(self.first_entry_id) :]
        return [MESSAGE_ADAPTER.validate_python(entry.message) for entry in entries]

    def _provider(self) -> Provider:
        """The executor's provider, behind the run's budget gate when the run has one."""
        gate = self.attempt.budget
        if gate is None or not gate.active:
            return self.executor.provider
        from piw.agent_steps.budgeted import BudgetedProvider

        owner = self.update_owner or self.attempt
        child_key = self.attempt.gnode.local_id if self.child else None
        return BudgetedProvider(self.executor.provider, gate, owner, self.attempt.attempt_id, child_key)

    def _registry_tools(self) -> list[LoopTool]:
        """The node's ``tools=`` from the registry, scoped to the working directory and the attempt's clock."""
        home = self.attempt.writer.bundle.path.parent.parent  # bundles live in $PIW_HOME/runs/<id>
        context = ToolContext(
            cwd=self.settings.cwd,
            timeout_s=self.deadline.remaining(),
            cancel=self.attempt.cancel,
            env_allow=self.settings.tool_env,
            protected=(*self.settings.protected_paths, home, config_path(home)),
        )
        return [registry_loop_tool(registry.get(name), context) for name in self.node.tools]

    # ---- the attempt -------------------------------------------------------------------------------------

    def run(self, prompt: str | None, kind: str = "step") -> NodeOutcome:
        """Deliver ``prompt`` (``None``: continue a reattached loop without a new message), then run."""
        if prompt is not None:
            self._deliver(prompt, kind)
        reminders = 0
        # None: the adapter applies its structured_tool_choice knob while `workflow` is offered
        tool_choice: Any = None
        while True:
            result = self._loop(tool_choice)
            outcome = self._after_loop(result)
            if outcome is not None:
                return outcome
            if reminders >= MAX_REMINDERS:
                node_id, attempt_id = self.contract.node_id, self.contract.attempt_id
                return self._fail(
                    f"Agent finished {MAX_REMINDERS + 1} times without submitting step {node_id} "
                    f"(attempt {attempt_id})."
                )
            reminders += 1
            self._deliver(format_reminder(self.contract), "reminder")
            # adapters without forced tool choice fall back to their knob
            tool_choice = force_tool("workflow")

    def _after_loop(self, result: LoopResult) -> NodeOutcome | None:
        """The attempt's outcome after a loop settles, or ``None`` when a reminder is due."""
        node_id = self.contract.node_id
        if self.step.invalid_output is not None:
            return self._fail(str(self.step.invalid_output))
        if self.step.failure is not None:
            return self._fail(self.step.failure)
        if self.contract.completion == "submit" and self.step.accepted:
            self.step.closed = True
            return self._ok(self.step.output)
        if result.end == "timed_out":
            self.step.closed = True
            return self._fail(f"Step {node_id} timed out after {self.attempt.timeout_s:g}s.", "timed_out")
        if result.end == "cancelled":
            self.step.closed = True
            return self._fail(f"Step {node_id} was cancelled.", "cancelled")
        if result.end == "max_turns":
            return self._fail(f"Step {node_id} used {self.budget.limit} turns without finishing.")
        if result.end == "error":
            return self._fail(result.error or "provider error")
        if self.contract.completion == "submit":
            return None
        return self._assistant_outcome(result.final)

    def _assistant_outcome(self, final: AssistantMessage | None, *, adopted: bool = False) -> NodeOutcome:
        node_id = self.contract.node_id
        if final is None or final.stop_reason != "stop" or final.tool_calls():
            reason = (
                "ended with tool calls only"
                if final and final.tool_calls() and final.stop_reason != "length"
                else f"stopped ({final.stop_reason if final else 'no reply'})"
            )
            return self._fail(f"Step {node_id} did not finish with a visible reply: the model {reason}.")
        text = final.visible_text()
        if not text.strip():
            return self._fail(f"Step {node_id} got an empty reply.")
        limit = self.contract.max_output_chars
        if limit is not None and len(text) > limit:
            return self._fail(f"Step {node_id} reply has {len(text)} characters, over the limit of {limit}.")
        assistant_entry = self.last_assistant_entry
        conversation = {"firstEntryId": self.first_entry_id, "lastEntryId": assistant_entry}
        self.attempt.writer.append(
            "agent",
            "assistant_completion_recorded",
            {
                "promptEntryId": self.first_entry_id,
                "assistantEntryId": assistant_entry,
                "textSha256": "sha256:" + sha256_hex(text),
                "textPreview": text[:1000],
                "conversation": conversation,
                "adopted": adopted,
            },
            node_id=node_id,
            attempt_id=self.contract.attempt_id,
            sync=True,
        )
        return NodeOutcome.ok(text, usage=usage_of(self.messages), conversation=conversation)

    def _conversation(self) -> dict[str, Any] | None:
        if self.first_entry_id is None:
            return None
        return {"firstEntryId": self.first_entry_id, "lastEntryId": self.last_entry_id or self.first_entry_id}

    def _ok(self, output: Any) -> NodeOutcome:
        return NodeOutcome.ok(output, usage=usage_of(self.messages), conversation=self._conversation())

    def _fail(self, error: str, outcome: str = "failed") -> NodeOutcome:
        self.step.closed = True
        return NodeOutcome.failed(
            error, outcome, usage=usage_of(self.messages), conversation=self._conversation()
        )
