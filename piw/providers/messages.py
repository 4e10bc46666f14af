"""The conversation's messages: what providers receive and return, and what the run store persists.

Every model is frozen and uses camelCase aliases, so the same values serve the agent loop in memory and the
session entries on disk (``docs/design/agent-steps.md`` §4, §6). Unknown keys are ignored rather than rejected, because
the wire format grows additively and older readers must keep reading newer bundles.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from piw.providers.lazy_adapter import LazyAdapter

StopReason = Literal["stop", "length", "toolUse", "error", "aborted"]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore")


class TextBlock(_Wire):
    """Visible assistant text; the only block kind an assistant-mode step captures (A2, A6)."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Wire):
    """Reasoning the model exposed; kept for the record and the verbose view, never captured as output."""

    type: Literal["thinking"] = "thinking"
    thinking: str


class ToolCallBlock(_Wire):
    """One tool call requested by the model."""

    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    raw_arguments: str | None = None
    """The argument text as the model wrote it, set only when it was not a JSON object.

    ``arguments`` is then empty; keeping the raw text lets the loop answer with an error result naming the
    problem, and lets the next request show the model what it actually sent."""


ContentBlock = Annotated[TextBlock | ThinkingBlock | ToolCallBlock, Field(discriminator="type")]


class Usage(_Wire):
    """Token counts of one response; ``cost`` is USD, ``None`` when neither provider nor config prices it."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float | None = None

    def add(self, other: Usage) -> Usage:
        """Sum two usages; an unknown cost on either side makes the sum unknown rather than too low."""
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            cost=cost,
        )

    @property
    def total_tokens(self) -> int:
        """Every token the request touched, cached or not."""
        return self.input + self.output + self.cache_read + self.cache_write


class AssistantReply(_Wire):
    """One model response; ``error`` and ``aborted`` ones carry ``error_message`` (results, not raises)."""

    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock] = Field(default_factory=list)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    usage: Usage = Field(default_factory=Usage)
    provider: str = ""
    model: str = ""
    retried: bool = False
    """Set on a failed response that was retried: kept in the record, never in model context or output."""
    completed_at: str | None = None

    def visible_text(self) -> str:
        """The text blocks joined in order, exactly as sent: nothing trimmed, added or rewritten (A2)."""
        return "".join(block.text for block in self.content if isinstance(block, TextBlock))

    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool calls, in the order the model made them."""
        return [block for block in self.content if isinstance(block, ToolCallBlock)]

    def thinking_text(self) -> str:
        """The thinking blocks joined in order, for verbose display."""
        return "".join(block.thinking for block in self.content if isinstance(block, ThinkingBlock))


class UserMessage(_Wire):
    """Text from the user or the executor (a plain prompt)."""

    role: Literal["user"] = "user"
    content: str


class ToolResultMessage(_Wire):
    """The outcome of one tool call; ``terminate`` lets a tool end the loop (the ``workflow`` submit)."""

    role: Literal["toolResult"] = "toolResult"
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    terminate: bool = False
    details: dict[str, Any] | None = None


class CustomMessage(_Wire):
    """A piw entry (step message, reminder, notification); providers send ``content`` as a user message."""

    role: Literal["custom"] = "custom"
    custom_type: str
    content: str
    details: dict[str, Any] = Field(default_factory=dict)


Message = Annotated[
    UserMessage | AssistantReply | ToolResultMessage | CustomMessage,
    Field(discriminator="role"),
]


class ToolSpec(_Wire):
    """A tool as offered to a model: name, description and an object-root JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @field_validator("parameters")
    @classmethod
    def _object_root(cls, schema: dict[str, Any]) -> dict[str, Any]:
        # OpenAI-compatible servers reject a union or non-object root (docs/design/agent-steps.md §3.1), so fail at
        # definition time instead of on the first request.
        if schema.get("type") != "object" or any(k in schema for k in ("anyOf", "oneOf", "allOf")):
            raise ValueError("a tool's parameters must be a JSON Schema with an object root and no union")
        return schema


MESSAGE_ADAPTER: LazyAdapter[Message] = LazyAdapter(Message)
"""Parses any message from its JSON shape, dispatching on ``role``."""
