"""Assemble streamed fragments into provider events and the final ``AssistantReply``.

Every adapter (OpenAI, Anthropic, scripted) feeds the same builder, so block numbering, the order of
start/delta/end events and the shape of partial messages on errors or aborts are identical whichever
provider produced them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from piw.providers.base import (
    DoneEvent,
    ErrorEvent,
    ProviderEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from piw.providers.failures import is_transient_status, parse_retry_after, status_message
from piw.providers.messages import (
    AssistantReply,
    ContentBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    Usage,
)

ABORTED_MESSAGE = "Request aborted."


def now_timestamp() -> str:
    """The ``docs/design/persistence.md`` §2 time format: UTC, milliseconds, ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_arguments(text: str) -> tuple[dict[str, Any], str | None]:
    """Tool-call argument text → ``(arguments, raw)``; ``raw`` is set only when the text is not a JSON object.

    An empty string means "no arguments" (some servers send nothing for argument-less tools).
    """
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        return {}, text
    return (value, None) if isinstance(value, dict) else ({}, text)


@dataclass
class _Block:
    kind: Literal["text", "thinking", "toolCall"]
    index: int
    buffer: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    open: bool = True

    def freeze(self) -> ContentBlock:
        text = "".join(self.buffer)
        if self.kind == "text":
            return TextBlock(text=text)
        if self.kind == "thinking":
            return ThinkingBlock(thinking=text)
        arguments, raw = parse_arguments(text)
        return ToolCallBlock(id=self.call_id, name=self.name, arguments=arguments, raw_arguments=raw)


class MessageBuilder:
    """Collects one response. Each method returns the events to yield, in order.

    Text and thinking blocks close as soon as another kind of content starts; tool calls stay open until
    the end because servers key their argument fragments by call index and may interleave them.
    """

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self._blocks: list[_Block] = []
        self._calls: dict[int | str, _Block] = {}
        self._finished = False

    @property
    def content_streamed(self) -> bool:
        """Whether visible content (text or thinking) reached listeners; a retry would then repeat it.

        A partial tool call is not visible: no display shows tool-call deltas (a call is shown once it runs), so a
        stream cut inside one is retried like a stream that sent nothing (``docs/design/agent-steps.md`` §4,
        end of stream).
        """
        return any(block.buffer for block in self._blocks if block.kind != "toolCall")

    @property
    def received(self) -> bool:
        """Whether any content (text, thinking or a tool call) arrived: the server was reached and replying."""
        return bool(self._blocks)

    @property
    def has_tool_calls(self) -> bool:
        return any(block.kind == "toolCall" for block in self._blocks)

    def start(self) -> list[ProviderEvent]:
        return [StartEvent()]

    def text(self, delta: str) -> list[ProviderEvent]:
        return self._prose("text", delta)

    def thinking(self, delta: str) -> list[ProviderEvent]:
        return self._prose("thinking", delta)

    def tool_call(
        self, key: int | str, delta: str = "", *, call_id: str | None = None, name: str | None = None
    ) -> list[ProviderEvent]:
        """A fragment of the tool call ``key`` (the server's call index); the first one opens the block."""
        events: list[ProviderEvent] = []
        block = self._calls.get(key)
        if block is None:
            events += self._close_prose()
            block = _Block("toolCall", len(self._blocks), call_id=call_id or "", name=name or "")
            if not block.call_id:
                block.call_id = f"call_{len(self._blocks)}"
            self._blocks.append(block)
            self._calls[key] = block
            events.append(ToolCallStartEvent(content_index=block.index, id=block.call_id, name=block.name))
        else:
            # Later fragments may complete an id or name that the first one lacked.
            block.call_id = call_id or block.call_id
            block.name = block.name or name or ""
        if delta:
            block.buffer.append(delta)
            events.append(ToolCallDeltaEvent(content_index=block.index, delta=delta))
        return events

    def finish(self, stop_reason: StopReason, usage: Usage) -> list[ProviderEvent]:
        """Close every block and end with ``done``; a response holding tool calls stops with ``toolUse``."""
        if self.has_tool_calls and stop_reason == "stop":
            stop_reason = "toolUse"
        events = self._close_all()
        message = self._message(stop_reason, None, usage)
        return [*events, DoneEvent(content_index=len(self._blocks), message=message)]

    def fail(
        self,
        error_message: str,
        usage: Usage | None = None,
        *,
        aborted: bool = False,
        transient: bool = False,
        retry_after_s: float | None = None,
    ) -> list[ProviderEvent]:
        """Close every block and end with ``error``; partial content stays in the message for the record."""
        streamed = self.content_streamed
        events = self._close_all()
        message = self._message("aborted" if aborted else "error", error_message, usage or Usage())
        error = ErrorEvent(
            content_index=len(self._blocks),
            message=message,
            transient=transient and not aborted,
            retry_after_s=retry_after_s,
            content_streamed=streamed,
        )
        return [*events, error]

    def fail_status(
        self, status: int, detail: str, headers: Mapping[str, str], usage: Usage | None = None
    ) -> list[ProviderEvent]:
        """End with the error an HTTP status gives: retried when the status is transient (429, 5xx), after the
        server's ``Retry-After`` when it sent one (``piw.providers.failures``)."""
        return self.fail(
            status_message(status, detail),
            usage,
            transient=is_transient_status(status),
            retry_after_s=parse_retry_after(headers),
        )

    def abort(self, usage: Usage | None = None) -> list[ProviderEvent]:
        return self.fail(ABORTED_MESSAGE, usage, aborted=True)

    # --- internals -------------------------------------------------------------------------------------

    def _prose(self, kind: Literal["text", "thinking"], delta: str) -> list[ProviderEvent]:
        if not delta:
            return []
        events: list[ProviderEvent] = []
        current = self._blocks[-1] if self._blocks else None
        if current is None or current.kind != kind or not current.open:
            events += self._close_prose()
            current = _Block(kind, len(self._blocks))
            self._blocks.append(current)
            start = TextStartEvent if kind == "text" else ThinkingStartEvent
            events.append(start(content_index=current.index))
        current.buffer.append(delta)
        delta_event = TextDeltaEvent if kind == "text" else ThinkingDeltaEvent
        events.append(delta_event(content_index=current.index, delta=delta))
        return events

    def _close_prose(self) -> list[ProviderEvent]:
        return [event for block in self._blocks if block.kind != "toolCall" for event in self._close(block)]

    def _close_all(self) -> list[ProviderEvent]:
        return [event for block in self._blocks for event in self._close(block)]

    def _close(self, block: _Block) -> list[ProviderEvent]:
        if not block.open:
            return []
        block.open = False
        frozen = block.freeze()
        if isinstance(frozen, TextBlock):
            return [TextEndEvent(content_index=block.index, text=frozen.text)]
        if isinstance(frozen, ThinkingBlock):
            return [ThinkingEndEvent(content_index=block.index, thinking=frozen.thinking)]
        return [ToolCallEndEvent(content_index=block.index, tool_call=frozen)]

    def _message(self, stop_reason: StopReason, error_message: str | None, usage: Usage) -> AssistantReply:
        return AssistantReply(
            content=[block.freeze() for block in self._blocks],
            stop_reason=stop_reason,
            error_message=error_message,
            usage=usage,
            provider=self.provider,
            model=self.model,
            completed_at=now_timestamp(),
        )
