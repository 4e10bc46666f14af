"""What every provider shares: the request, the streamed events, the ``Provider`` protocol and ``complete()``.

A provider streams; nothing else about it is assumed. The agent loop forwards deltas to its listeners and
keeps only the final message, which arrives on exactly one ``done`` or ``error`` event. HTTP, network and
model failures are such ``error`` events, never exceptions (``docs/design/agent-steps.md`` §4): only programming and
configuration errors raise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from piw.errors import ProviderError
from piw.providers.lazy_adapter import LazyAdapter
from piw.providers.messages import AssistantReply, Message, ToolCallBlock, ToolSpec

if TYPE_CHECKING:  # a name in annotations only: importing it would load the whole config layer (PiwConfig)
    from piw.providers.selection import ProviderSelection


class _Frozen(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")


class StepRef(_Frozen):
    """The step a request serves. Scripted replies and cassettes read it; no adapter ever sends it."""

    run_id: str
    node_id: str
    attempt_id: str


ToolChoice = str | dict[str, Any]

WORKFLOW_TOOL = "workflow"
"""The reserved step-completion tool; offered only while a submit-mode step is active (§3.2)."""


def force_tool(name: str) -> dict[str, Any]:
    """The ``tool_choice`` that asks for one named tool (honoured only where the compat knob allows it)."""
    return {"type": "function", "function": {"name": name}}


class ChatRequest(_Frozen):
    """One model request. Keys and headers are never here, so a request can be hashed and recorded safely.

    ``tool_choice`` states what the caller wants; an adapter may weaken it to what its server supports
    (``docs/design/agent-steps.md`` §8.2): ``None`` lets the adapter apply ``structured_tool_choice`` when the
    ``workflow`` tool is offered, and a forced tool (``force_tool``) falls back to that when forcing is off.
    """

    model: str
    messages: list[Message] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoice | None = None
    max_tokens: int | None = None
    system_prompt: str | None = None
    step: StepRef | None = None

    def tool_names(self) -> list[str]:
        """Names of the offered tools, in order."""
        return [tool.name for tool in self.tools]


# --- events ---------------------------------------------------------------------------------------------


class StartEvent(_Frozen):
    """The stream began; no content yet."""

    type: Literal["start"] = "start"
    content_index: int = 0


class TextStartEvent(_Frozen):
    type: Literal["text_start"] = "text_start"
    content_index: int


class TextDeltaEvent(_Frozen):
    type: Literal["text_delta"] = "text_delta"
    content_index: int
    delta: str


class TextEndEvent(_Frozen):
    type: Literal["text_end"] = "text_end"
    content_index: int
    text: str


class ThinkingStartEvent(_Frozen):
    type: Literal["thinking_start"] = "thinking_start"
    content_index: int


class ThinkingDeltaEvent(_Frozen):
    type: Literal["thinking_delta"] = "thinking_delta"
    content_index: int
    delta: str


class ThinkingEndEvent(_Frozen):
    type: Literal["thinking_end"] = "thinking_end"
    content_index: int
    thinking: str


class ToolCallStartEvent(_Frozen):
    type: Literal["toolcall_start"] = "toolcall_start"
    content_index: int
    id: str
    name: str


class ToolCallDeltaEvent(_Frozen):
    """A fragment of a tool call's JSON argument text."""

    type: Literal["toolcall_delta"] = "toolcall_delta"
    content_index: int
    delta: str


class ToolCallEndEvent(_Frozen):
    type: Literal["toolcall_end"] = "toolcall_end"
    content_index: int
    tool_call: ToolCallBlock


class DoneEvent(_Frozen):
    """The response finished (``stop``, ``length`` or ``toolUse``); ``message`` is authoritative."""

    type: Literal["done"] = "done"
    content_index: int
    message: AssistantReply


class ErrorEvent(_Frozen):
    """The response failed or was aborted; ``message`` has ``stop_reason`` ``error`` or ``aborted``.

    ``transient`` and ``retry_after_s`` feed the loop's retry policy; ``content_streamed`` tells it whether a
    retry could repeat visible output (it then must not retry).
    """

    type: Literal["error"] = "error"
    content_index: int
    message: AssistantReply
    transient: bool = False
    retry_after_s: float | None = None
    content_streamed: bool = False


ProviderEvent = Annotated[
    StartEvent
    | TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | DoneEvent
    | ErrorEvent,
    Field(discriminator="type"),
]

EVENT_ADAPTER: LazyAdapter[ProviderEvent] = LazyAdapter(ProviderEvent)
"""Parses a recorded event back from its JSON shape (cassettes)."""


class Provider(Protocol):
    """A configured model endpoint. ``stream`` must end with exactly one ``done`` or ``error`` event.

    Setting ``cancel`` must end the stream within about a second, even when the server sends nothing, with
    an ``error`` event whose message has ``stop_reason == "aborted"``.
    """

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]: ...


class ConfiguredProvider:
    """An adapter built for one selection: the provider's name and table, the model and its entry.

    ``env`` stands in for ``os.environ`` when keys and ``$NAME`` headers are resolved (tests pass their own).
    """

    def __init__(self, selection: ProviderSelection, *, env: Mapping[str, str] | None = None) -> None:
        self.selection = selection
        self.name = selection.provider
        self.model = selection.model
        self.settings = selection.settings
        self.model_settings = selection.model_settings
        self._env = env


class WrappedProvider:
    """A provider in front of another: same name and model, ``stream`` changed by the subclass (redaction of
    secrets, a run's budget)."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model(self) -> str:
        return self.inner.model


def complete(
    provider: Provider,
    request: ChatRequest,
    cancel: threading.Event | None = None,
    on_event: Callable[[ProviderEvent], None] | None = None,
) -> AssistantReply:
    """Drain ``provider.stream`` and return its final message; ``on_event`` sees every event on the way."""
    final: AssistantReply | None = None
    for event in provider.stream(request, cancel or threading.Event()):
        if on_event is not None:
            on_event(event)
        if isinstance(event, DoneEvent | ErrorEvent):
            final = event.message
    if final is None:
        raise ProviderError(f"Provider {provider.name} ended its stream without a final message (a piw bug).")
    return final
