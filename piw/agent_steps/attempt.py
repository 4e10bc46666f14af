"""One agent attempt: its deliveries, model turns, submissions and outcome (``docs/design/agent-steps.md`` §1–§4).

Order for every attempt (``docs/design/persistence.md`` §9): ``agent_prompt_sent`` is durable, then the step message
entry, then model turns whose settled messages are appended to the conversation before the next request.
Submit mode ends on an accepted ``workflow`` submission (no further request); assistant mode takes the final
visible reply. The executor, the ``pi-rpc`` backend, recovery on resume and ``ctx.run_agent`` children all
open and run attempts here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from piw.agent_steps.budgeted import BudgetedProvider
from piw.agent_steps.contract import AgentStepContract, format_reminder, format_step_prompt, make_contract
from piw.agent_steps.events import StepDelivered
from piw.agent_steps.fenced import FencedProvider
from piw.agent_steps.live_stream import stream_listeners
from piw.agent_steps.loop import AgentLoop, Deadline, LoopListener, LoopResult, LoopTool, TurnBudget
from piw.agent_steps.workflow_tool import (
    DEFAULT_MAX_REJECTIONS,
    OUTPUT_CUT_TYPE,
    ActiveStep,
    WorkflowTool,
    step_tool_spec,
)
from piw.config.mcp_servers import McpServerConfig
from piw.config.path import config_path
from piw.errors import AttemptInactive
from piw.providers.base import Provider, StepRef, force_tool
from piw.providers.messages import (
    MESSAGE_ADAPTER,
    AssistantReply,
    CustomMessage,
    Message,
    ToolResultMessage,
    ToolSpec,
)
from piw.run.executors import Attempt, NodeOutcome, describe_exception, evaluate, to_json_output
from piw.store.fold import update_to_json
from piw.store.place import home_of
from piw.store.session import SessionEntry, current_branch
from piw.tools import Tool, ToolContext, ToolResult, registry
from piw.wire import AGENT_STEP_MESSAGE_SCHEMA, sha256_hex
from piw.workflow.definition import AgentNode
from piw.workflow.schemas import json_schema
from piw.workflow.user_code import call_user

if TYPE_CHECKING:
    from piw.toolservers.toolset import StepToolServers

STEP_CUSTOM_TYPE = "pi-workflows-agent-step"
MAX_REMINDERS = 2
DEFAULT_MAX_OUTPUT_TOKENS = 2048
"""``max_tokens`` of submit-mode requests when neither the node nor the model entry sets one (§4 output cap)."""
NO_ORIGIN = "Assistant completion requires an origin session."


def message_to_entry(message: Message) -> dict[str, Any]:
    """A settled message as stored in ``session/entries.ndjson``."""
    return message.model_dump(by_alias=True, mode="json", exclude_none=True)


def messages_of(entries: list[SessionEntry]) -> list[Message]:
    """Conversation entries as messages (what a request carries)."""
    return [MESSAGE_ADAPTER.validate_python(entry.message) for entry in entries]


def usage_of(messages: list[Message]) -> dict[str, Any] | None:
    """Requests and tokens summed over an attempt's assistant messages; ``cost`` only if all are known."""
    assistants = [m for m in messages if isinstance(m, AssistantReply)]
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
    mcp_servers: Mapping[str, McpServerConfig] = field(default_factory=dict)
    """``[mcp.NAME]`` tables: the MCP servers a node's ``mcp("NAME")`` may start (``docs/tools-mcp.md``)."""


def step_contract(attempt: Attempt, node: AgentNode) -> AgentStepContract:
    """The contract of an agent node's attempt: its run, workflow, node and attempt ids and the node's mode."""
    return make_contract(
        attempt.run_id,
        attempt.ctx.workflow_name,
        attempt.node_id,
        attempt.attempt_id,
        node.expected_output,
        updates=node.updates,
    )


@dataclass(frozen=True)
class OpenedStep:
    """A new attempt of an agent node, ready for its first delivery."""

    node: AgentNode
    contract: AgentStepContract
    prompt: str
    """``format_step_prompt(task, contract)``: the exact text every executor sends (§2)."""


def open_step(attempt: Attempt) -> OpenedStep | NodeOutcome:
    """The node, contract and step prompt of a new attempt, or the failure that ends it before any request.

    An assistant-mode step needs an origin session; the prompt function runs once per attempt and must return
    a non-empty string (§1).
    """
    node = attempt.gnode.node
    assert isinstance(node, AgentNode)
    if node.completion == "assistant" and attempt.origin_session_id is None:
        return NodeOutcome.failed(NO_ORIGIN)
    try:
        task = evaluate(node.prompt, attempt.ctx)
    except Exception as exc:
        return NodeOutcome.failed(f"prompt failed: {describe_exception(exc)}", exception=exc)
    if not isinstance(task, str) or not task.strip():
        return NodeOutcome.failed(f"Step {attempt.node_id}: the prompt is empty or not a string.")
    contract = step_contract(attempt, node)
    return OpenedStep(node, contract, format_step_prompt(task, contract))


def _wants_object(node: AgentNode) -> bool:
    """Whether the step's output schema is an object, so a string that is not JSON can never be accepted."""
    expected = node.expected_output
    if expected is None:
        return True
    if isinstance(expected, type) and issubclass(expected, BaseModel):
        return json_schema(expected).get("type") == "object"
    return False


def registry_loop_tool(
    tool: Tool, context: ToolContext, started: Callable[[str, Tool], None] | None = None
) -> LoopTool:
    """Offer a registry tool to the loop; unparsable arguments become an error result, never a call.

    ``started`` records a ``once`` tool's call durably before it runs (``docs/effects.md``, "Tool calls"): a
    resume that finds that record without the call's result tells the model its outcome is unknown."""

    def execute(call_id: str, args: dict[str, Any], raw_error: str | None) -> ToolResult:
        if raw_error is not None:
            return ToolResult(f"Invalid {tool.name} call: {raw_error}", is_error=True)
        if started is not None and tool.effect == "once":
            started(call_id, tool)
        return tool.execute(call_id, args, context)

    spec = ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
    return LoopTool(spec, execute)


class AttemptRun:
    """The state of one agent attempt across its step and reminder deliveries.

    It takes the run's settings and a callable that returns the run's provider (the executor builds the provider
    once, on the first request), so the executor, the ``pi-rpc`` backend, recovery and ``ctx.run_agent``
    children all run attempts through this one class without importing each other.
    """

    def __init__(
        self,
        settings: AgentSettings,
        provider: Callable[[], Provider],
        attempt: Attempt,
        node: AgentNode,
        contract: AgentStepContract,
        *,
        update_owner: Attempt | None = None,
    ) -> None:
        self.settings = settings
        self.run_provider = provider
        """The run's provider, built on first use; requests go through :meth:`_provider` (the budget gate)."""
        self.child = update_owner is not None
        """A ``ctx.run_agent`` child: its prompts live only in the conversation, never in the trace."""
        self.update_owner = update_owner
        """For a child: the action attempt whose ``nodeId``/``attemptId`` its updates are recorded under."""
        self.attempt = attempt
        self.node = node
        self.contract = contract
        self.budget = TurnBudget(limit=self.settings.max_turns)
        self.deadline = Deadline(attempt.timeout_s)
        self.messages: list[Message] = []
        self.first_entry_id: str | None = None
        self.last_entry_id: str | None = None
        self.last_assistant_entry: str | None = None
        self.servers: StepToolServers | None = None
        """The node's MCP servers, started by the attempt's first loop and stopped when :meth:`run` returns."""
        self.step = ActiveStep(contract=contract, accept=self.accept, wants_object=_wants_object(node))
        self.tool = WorkflowTool(
            self.step,
            publish=self._publish,
            status=self._status,
            updates=node.updates,
            max_rejections=self.settings.max_rejections,
        )

    # ---- submit-mode acceptance (§1.1 steps 2–4) -------------------------------------------------------

    def accept(self, value: Any) -> Any:
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
        return {"updates": [update_to_json(r) for r in self.attempt.writer.state.sorted_updates()]}

    # ---- deliveries ------------------------------------------------------------------------------------

    def _deliver(self, content: str, kind: str) -> None:
        writer, session = self.attempt.writer, self.attempt.session
        if not self.child:
            payload = {"prompt": content, "completion": self.contract.completion, "deliveryKind": kind}
            writer.append(
                "agent",
                "agent_prompt_sent",
                payload,
                node_id=self.attempt.node_id,
                attempt_id=self.attempt.attempt_id,
                sync=True,
            )
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
        entry = session.append(
            message_to_entry(CustomMessage(custom_type=STEP_CUSTOM_TYPE, content=content, details=details))
        )
        if self.first_entry_id is None:
            self.first_entry_id = entry.id
        self._emit(StepDelivered(details=details, content=content))

    def _emit(self, event: Any) -> None:
        for listener in self.settings.listeners:
            listener(event)

    def record(self, message: Message) -> None:
        """Append a settled message to the attempt's conversation (recovery answers interrupted calls so)."""
        self._record(message)

    def _record(self, message: Message) -> None:
        entry = self.attempt.session.append(message_to_entry(message))
        self.messages.append(message)
        if isinstance(message, ToolResultMessage) and message.terminate and not message.is_error:
            self.last_entry_id = entry.id
        if isinstance(message, AssistantReply) and not message.retried:
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
            listeners=[
                *self.settings.listeners,
                *stream_listeners(self.attempt),
            ],  # + the watchers' side file
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

    def _cut_off(self, message: AssistantReply, max_tokens: int | None) -> Message:
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
        return messages_of(entries)

    def _provider(self) -> Provider:
        """The executor's provider, behind the run's budget gate when the run has one."""
        gate = self.attempt.budget
        provider = FencedProvider(self.run_provider(), self.attempt.writer)  # a request is an effect: fenced
        if gate is None or not gate.active:
            return provider
        owner = self.update_owner or self.attempt
        child_key = self.attempt.gnode.local_id if self.child else None
        return BudgetedProvider(provider, gate, owner, self.attempt.attempt_id, child_key)

    def _registry_tools(self) -> list[LoopTool]:
        """The node's ``tools=`` from the registry, scoped to the working directory and the attempt's clock."""
        # Bundles live in $PIW_HOME/runs/<id> (in database mode, mirrors in $PIW_HOME/pg/<database id>/runs/<id>).
        home = home_of(self.attempt.writer.bundle.path.parent.parent)
        context = ToolContext(
            cwd=self.settings.cwd,
            timeout_s=self.deadline.remaining(),
            cancel=self.attempt.cancel,
            env_allow=self.settings.tool_env,
            protected=(*self.settings.protected_paths, home, config_path(home)),
        )
        tools = [registry.get(name) for name in self.node.tools] + self._server_tools()
        started = (
            None if self.child else self._tool_started
        )  # (a child's calls are its parent action's effect)
        return [registry_loop_tool(tool, context, started) for tool in tools]

    def _server_tools(self) -> list[Tool]:
        """The node's MCP tools; the servers start (and their listing is recorded) on the first call."""
        if not self.node.mcp:
            return []
        if self.servers is None:
            from piw.agent_steps.tool_servers import open_tool_servers  # the SDK only for steps that use it

            self.servers = open_tool_servers(
                self.attempt,
                self.node,
                self.settings.mcp_servers,
                self.settings.cwd,
                durable=not self.child,
                emit=self._emit,
            )
        return self.servers.tools()

    def close_servers(self) -> None:
        """Stop the attempt's MCP servers (idempotent); :meth:`run` calls it when the attempt's delivery ends."""
        servers, self.servers = self.servers, None
        if servers is not None:
            servers.close()

    def _tool_started(self, call_id: str, tool: Tool) -> None:
        """``tool_call_started``, durable before the call's effect begins (an effect point)."""
        self.attempt.writer.append(
            "agent",
            "tool_call_started",
            {"toolCallId": call_id, "toolName": tool.name, "effect": tool.effect},
            node_id=self.attempt.node_id,
            attempt_id=self.attempt.attempt_id,
            sync=True,
        )

    # ---- the attempt -------------------------------------------------------------------------------------

    def run(self, prompt: str | None, kind: str = "step") -> NodeOutcome:
        """Deliver ``prompt`` (``None``: continue a reattached loop without a new message), then run."""
        try:
            return self._run(prompt, kind)
        finally:
            self.close_servers()

    def _run(self, prompt: str | None, kind: str) -> NodeOutcome:
        self._server_tools()  # servers start, and their listing is recorded, before the step's prompt
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
            failed = self._remind(reminders)
            if failed is not None:
                return failed
            reminders += 1
            # adapters without forced tool choice fall back to their knob
            tool_choice = force_tool("workflow")

    def _remind(self, sent: int) -> NodeOutcome | None:
        """Deliver the next reminder (§3.3), or fail the attempt when :data:`MAX_REMINDERS` have been sent."""
        if sent >= MAX_REMINDERS:
            node_id, attempt_id = self.contract.node_id, self.contract.attempt_id
            return self.fail(
                f"Agent finished {MAX_REMINDERS + 1} times without submitting step {node_id} "
                f"(attempt {attempt_id})."
            )
        self._deliver(format_reminder(self.contract), "reminder")
        return None

    def _after_loop(self, result: LoopResult) -> NodeOutcome | None:
        """The attempt's outcome after a loop settles, or ``None`` when a reminder is due."""
        node_id = self.contract.node_id
        if self.step.invalid_output is not None:
            return self.fail(str(self.step.invalid_output))
        if self.step.failure is not None:
            return self.fail(self.step.failure)
        if self.contract.completion == "submit" and self.step.accepted:
            self.step.closed = True
            return self.succeed(self.step.output)
        if result.end == "timed_out":
            self.step.closed = True
            return self.fail(f"Step {node_id} timed out after {self.attempt.timeout_s:g}s.", "timed_out")
        if result.end == "cancelled":
            self.step.closed = True
            return self.fail(f"Step {node_id} was cancelled.", "cancelled")
        if result.end == "max_turns":
            return self.fail(f"Step {node_id} used {self.budget.limit} turns without finishing.")
        if result.end == "error":
            return self.fail(result.error or "provider error")
        if self.contract.completion == "submit":
            return None
        return self.assistant_outcome(result.final)

    def assistant_outcome(self, final: AssistantReply | None, *, adopted: bool = False) -> NodeOutcome:
        node_id = self.contract.node_id
        if final is None or final.stop_reason != "stop" or final.tool_calls():
            reason = (
                "ended with tool calls only"
                if final and final.tool_calls() and final.stop_reason != "length"
                else f"stopped ({final.stop_reason if final else 'no reply'})"
            )
            return self.fail(f"Step {node_id} did not finish with a visible reply: the model {reason}.")
        text = final.visible_text()
        if not text.strip():
            return self.fail(f"Step {node_id} got an empty reply.")
        limit = self.contract.max_output_chars
        if limit is not None and len(text) > limit:
            return self.fail(f"Step {node_id} reply has {len(text)} characters, over the limit of {limit}.")
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

    def succeed(self, output: Any) -> NodeOutcome:
        return NodeOutcome.ok(output, usage=usage_of(self.messages), conversation=self._conversation())

    def fail(self, error: str, outcome: str = "failed") -> NodeOutcome:
        self.step.closed = True
        return NodeOutcome.failed(
            error, outcome, usage=usage_of(self.messages), conversation=self._conversation()
        )
