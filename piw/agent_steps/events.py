"""Agent loop events (``docs/design/agent-steps.md`` §4): delivered in order to the loop's listeners, never
persisted."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from piw.providers.messages import AssistantReply, ToolResultMessage


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class AgentStart(_Event):
    type: Literal["agent_start"] = "agent_start"


class AgentEnd(_Event):
    type: Literal["agent_end"] = "agent_end"
    messages: list[Any] = Field(default_factory=list)


class TurnStart(_Event):
    type: Literal["turn_start"] = "turn_start"
    turn: int


class TurnEnd(_Event):
    type: Literal["turn_end"] = "turn_end"
    turn: int
    message: AssistantReply
    tool_results: list[ToolResultMessage] = Field(default_factory=list)


class MessageStart(_Event):
    type: Literal["message_start"] = "message_start"
    message: AssistantReply | None = None


class MessageUpdate(_Event):
    type: Literal["message_update"] = "message_update"
    delta: Literal["text_delta", "thinking_delta", "toolcall_delta"]
    text: str
    content_index: int


class MessageEnd(_Event):
    type: Literal["message_end"] = "message_end"
    message: Any


class ToolExecutionStart(_Event):
    type: Literal["tool_execution_start"] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]


class ToolExecutionEnd(_Event):
    type: Literal["tool_execution_end"] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: dict[str, Any]
    duration_ms: int


class AutoRetryStart(_Event):
    type: Literal["auto_retry_start"] = "auto_retry_start"
    attempt: int
    max_attempts: int
    delay_s: float
    error: str


class AutoRetryEnd(_Event):
    type: Literal["auto_retry_end"] = "auto_retry_end"
    success: bool
    final_error: str | None = None


class AgentSettled(_Event):
    type: Literal["agent_settled"] = "agent_settled"
    aborted: bool = False


class StepDelivered(_Event):
    """Not a loop event proper: the executor announces a step message (for step cards)."""

    type: Literal["step_delivered"] = "step_delivered"
    details: dict[str, Any]
    content: str


class ToolServersNotice(_Event):
    """Something about a step's MCP servers the card shows: one that did not start, or tools that changed since
    the step first listed them (``docs/tools-mcp.md``). Not a trace event: the trace has ``mcp_tools_*``."""

    type: Literal["tool_servers_notice"] = "tool_servers_notice"
    text: str


LoopEvent = Annotated[
    AgentStart
    | AgentEnd
    | TurnStart
    | TurnEnd
    | MessageStart
    | MessageUpdate
    | MessageEnd
    | ToolExecutionStart
    | ToolExecutionEnd
    | AutoRetryStart
    | AutoRetryEnd
    | AgentSettled
    | StepDelivered
    | ToolServersNotice,
    Field(discriminator="type"),
]
