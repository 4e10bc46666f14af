"""The ``anthropic-messages`` adapter, on the optional ``anthropic`` SDK (``pip install 'piw[anthropic]'``).

The SDK is imported only when this provider is selected, so piw installs and runs without it. The adapter
follows the same rules as the OpenAI one (``docs/design/agent-steps.md`` §8.2): SDK retries off, failures as
``error`` events, a worker thread so cancellation returns at once. It is deliberately small and is not
exercised against a server in the suite.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from piw.config.settings import ModelConfig, ProviderConfig, resolve_api_key, resolve_headers
from piw.errors import ProviderError
from piw.providers import guard_base_url
from piw.providers.base import WORKFLOW_TOOL, ChatRequest, ConfiguredProvider, ProviderEvent
from piw.providers.builder import MessageBuilder
from piw.providers.failures import (
    connection_message,
    final_on_loopback,
    unfinished_stream,
)
from piw.providers.messages import (
    AssistantReply,
    CustomMessage,
    StopReason,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from piw.providers.pump import StreamPump
from piw.providers.selection import ProviderSelection

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
"""The Messages API requires ``max_tokens``; used when neither request nor model entry sets one."""
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "toolUse",
}


def import_sdk() -> Any:
    """The ``anthropic`` module, or a ``ProviderError`` saying how to install it."""
    try:
        return importlib.import_module("anthropic")
    except ImportError as exc:
        raise ProviderError(
            "The anthropic-messages provider needs the anthropic SDK: pip install 'piw[anthropic]'"
        ) from exc


class AnthropicProvider(ConfiguredProvider):
    """One configured Anthropic Messages endpoint."""

    def __init__(self, selection: ProviderSelection, *, env: Mapping[str, str] | None = None) -> None:
        self._sdk = import_sdk()
        super().__init__(selection, env=env)
        self.base_url = self.settings.base_url or DEFAULT_BASE_URL

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        guard_base_url(self.base_url)
        # An empty string rather than None, so the SDK never falls back to ANTHROPIC_API_KEY.
        client = self._sdk.Anthropic(
            api_key=resolve_api_key(self.settings, self._env),
            base_url=self.base_url,
            default_headers=resolve_headers(self.settings, self._env),
            max_retries=0,
        )
        model_settings = self.settings.find_model(request.model) or self.model_settings
        body = build_body(request, self.settings, model_settings)
        builder = MessageBuilder(self.name, request.model)
        yield from builder.start()
        opened: list[Any] = []

        def produce(emit: Callable[[Any], None]) -> None:
            response = client.messages.create(**body, stream=True)
            opened.append(response)
            with response:
                for event in response:
                    emit(event)

        def abort() -> None:
            for response in opened:  # best effort: closing from this thread ends the worker's read
                with contextlib.suppress(Exception):
                    response.close()

        pump: StreamPump[Any] = StreamPump(produce, abort, f"piw-{self.name}-stream")
        yield from pump.events(
            cancel,
            builder,
            StreamState(builder, model_settings),
            lambda error, usage: self._failure(builder, error, usage),
        )

    def _failure(self, builder: MessageBuilder, error: BaseException, usage: Usage) -> list[ProviderEvent]:
        sdk = self._sdk
        if isinstance(error, sdk.APIStatusError):
            detail = getattr(error, "message", "") or str(error)
            return builder.fail_status(error.status_code, detail, dict(error.response.headers), usage)
        if isinstance(error, sdk.APIConnectionError | OSError):
            cause = str(error.__cause__ or error).strip() or type(error).__name__
            final = final_on_loopback(self.base_url, error)
            message = connection_message(
                self.name, self.base_url, cause, mid_reply=builder.received, final=final
            )
            return builder.fail(message, usage, transient=not final)
        if isinstance(error, sdk.APIError | ValueError):
            return builder.fail(f"Provider error: {error}", usage)
        raise error


def build_body(
    request: ChatRequest, settings: ProviderConfig, model_settings: ModelConfig | None
) -> dict[str, Any]:
    """The Messages API body: system prompt apart, tool results as user ``tool_result`` blocks."""
    max_tokens = request.max_tokens or (model_settings.max_tokens if model_settings else None)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
        "messages": _messages(request),
    }
    if request.system_prompt:
        body["system"] = request.system_prompt
    if request.tools:
        body["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
        choice = _tool_choice(request, settings)
        if choice is not None:
            body["tool_choice"] = choice
    return body


def _tool_choice(request: ChatRequest, settings: ProviderConfig) -> dict[str, Any] | None:
    wanted = request.tool_choice
    if isinstance(wanted, dict):
        name = (wanted.get("function") or {}).get("name") or wanted.get("name")
        if settings.compat.supports_forced_tool_choice and name:
            return {"type": "tool", "name": name}
        wanted = None
    if wanted is None:
        required = (
            WORKFLOW_TOOL in request.tool_names() and settings.compat.structured_tool_choice == "required"
        )
        return {"type": "any"} if required else None
    return {"type": {"required": "any"}.get(wanted, wanted)}


def _messages(request: ChatRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, UserMessage | CustomMessage):
            out.append({"role": "user", "content": message.content})
        elif isinstance(message, ToolResultMessage):
            block = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
                "is_error": message.is_error,
            }
            # Results of one batch share a single user turn, as the API requires.
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif isinstance(message, AssistantReply) and not message.retried:
            content: list[dict[str, Any]] = []
            if message.visible_text():
                content.append({"type": "text", "text": message.visible_text()})
            # Cut-off calls (``length``) have half-written input: never replayed (§4 output cap).
            for call in [] if message.stop_reason == "length" else message.tool_calls():
                content.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                )
            if content:
                out.append({"role": "assistant", "content": content})
    return out


class StreamState:
    """Folds Messages API stream events into builder events."""

    def __init__(self, builder: MessageBuilder, model_settings: ModelConfig | None) -> None:
        self._builder = builder
        self._model_settings = model_settings
        self._tokens = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        self._seen_usage = False
        self.stop_reason: str | None = None

    def feed(self, event: Any) -> list[ProviderEvent]:
        kind = getattr(event, "type", "")
        if kind == "message_start":
            self._read_usage(getattr(event.message, "usage", None))
        elif kind == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            return self._builder.tool_call(event.index, call_id=block.id, name=block.name)
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                return self._builder.text(delta.text)
            if delta.type == "thinking_delta":
                return self._builder.thinking(delta.thinking)
            if delta.type == "input_json_delta":
                return self._builder.tool_call(event.index, delta.partial_json)
        elif kind == "message_delta":
            self.stop_reason = getattr(event.delta, "stop_reason", None) or self.stop_reason
            self._read_usage(getattr(event, "usage", None))
        return []

    def finish(self) -> list[ProviderEvent]:
        """The final events of a stream that ended without an exception.

        Only a known ``stop_reason`` makes a reply; a stream cut before its ``message_delta`` (or naming a reason
        this adapter does not know) is a transient failure, retried while nothing has streamed (§4 end of stream).
        """
        if self.stop_reason == "refusal":
            return self._builder.fail("The model refused to answer.", self.usage())
        stop = _STOP_REASONS.get(self.stop_reason or "")
        if stop is None:
            return self._builder.fail(unfinished_stream(self.stop_reason), self.usage(), transient=True)
        return self._builder.finish(stop, self.usage())

    def _read_usage(self, usage: Any) -> None:
        if usage is None:
            return
        self._seen_usage = True
        for field, attribute in (
            ("input", "input_tokens"),
            ("output", "output_tokens"),
            ("cache_read", "cache_read_input_tokens"),
            ("cache_write", "cache_creation_input_tokens"),
        ):
            value = getattr(usage, attribute, None)
            if isinstance(value, int) and value:
                self._tokens[field] = value

    def usage(self) -> Usage:
        if not self._seen_usage:
            return Usage()
        usage = Usage.model_validate(self._tokens)
        cost = self._model_settings.cost if self._model_settings else None
        return usage.model_copy(update={"cost": cost.price(usage) if cost else None})
