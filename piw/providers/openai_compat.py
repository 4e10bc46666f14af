"""The ``openai-completions`` adapter: streamed chat completions, sent as the ``openai`` SDK sends them.

Works with any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter, LiteLLM). A plain-HTTP
server gets the SDK's request over the lean transport (``openai_lean``, no SDK import: a second less before the
first request); everything else goes through the SDK itself (``openai_sdk``); ``docs/providers.md`` says when and
why. SDK retries are off: the agent loop owns retries, so it can refuse to repeat a response that already streamed
text. Failures become a final ``error`` event, never an exception (``docs/design/agent-steps.md`` §4).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from piw.config.settings import ModelConfig, resolve_api_key, resolve_headers
from piw.providers import guard_base_url, is_loopback_url
from piw.providers.base import ChatRequest, ConfiguredProvider, ProviderEvent
from piw.providers.builder import MessageBuilder
from piw.providers.failures import (
    connection_message,
    final_on_loopback,
    unfinished_stream,
)
from piw.providers.messages import StopReason, Usage
from piw.providers.openai_lean import (
    Call,
    LeanAPIError,
    LeanCall,
    LeanConnectionError,
    LeanStatusError,
    LeanTimeout,
    Timeouts,
    applies,
    request_headers,
)
from piw.providers.openai_request import build_body
from piw.providers.pump import StreamPump
from piw.providers.selection import ProviderSelection

if TYPE_CHECKING:
    import httpx2

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = Timeouts(600.0, connect=10.0)
"""Local models can think for minutes before their first byte, so reads get the SDK's generous default."""
LOOPBACK_TIMEOUT = Timeouts(600.0, connect=2.0)
"""On this machine a connect is answered at once; one that is not within 2 s will not be (it is not retried)."""

_STOP_REASONS: dict[str, StopReason] = {"stop": "stop", "length": "length", "tool_calls": "toolUse"}
_STOP_REASONS["function_call"] = "toolUse"


class OpenAICompatProvider(ConfiguredProvider):
    """One configured OpenAI-compatible endpoint. Keys and ``$NAME`` headers resolve on every request."""

    def __init__(
        self,
        selection: ProviderSelection,
        *,
        http_client: httpx2.Client | None = None,
        env: Mapping[str, str] | None = None,
        timeout: Timeouts | httpx2.Timeout | None = None,
    ) -> None:
        super().__init__(selection, env=env)
        self.base_url = self.settings.base_url or DEFAULT_BASE_URL
        self._http_client = http_client
        self.timeout: Any = timeout or (
            LOOPBACK_TIMEOUT if is_loopback_url(self.base_url) else DEFAULT_TIMEOUT
        )
        """The HTTP timeouts: a long read for slow local models; a 2 s connect on loopback, 10 s elsewhere."""

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        guard_base_url(self.base_url)
        key = resolve_api_key(self.settings, self._env)
        headers = resolve_headers(self.settings, self._env)
        model_settings = self.settings.find_model(request.model) or (
            self.model_settings if request.model == self.model else None
        )
        body = build_body(request, self.settings.compat, model_settings)
        builder = MessageBuilder(self.name, request.model)
        yield from builder.start()
        if cancel.is_set():
            yield from builder.abort()
            return

        call = self._call(key, headers, body)
        pump: StreamPump[Any] = StreamPump(call.produce, call.abort, f"piw-{self.name}-stream")
        yield from pump.events(
            cancel,
            builder,
            _Chunks(builder, model_settings),
            lambda error, usage: _failure(builder, error, usage, self.base_url),
        )

    def uses_sdk(self) -> bool:
        """Whether requests go through the ``openai`` SDK rather than the lean transport (``docs/providers.md``)."""
        return self._http_client is not None or not applies(self.base_url)

    def _call(self, key: str, headers: dict[str, str], body: dict[str, Any]) -> Call:
        def through_sdk() -> Call:
            from piw.providers.openai_sdk import sdk_call

            return sdk_call(self.base_url, key, headers, body, self.timeout, self._http_client)

        if self.uses_sdk():
            return through_sdk()
        timeouts = Timeouts(read=float(self.timeout.read), connect=float(self.timeout.connect))
        sent = request_headers(key, headers, timeouts.read)
        return LeanCall(self.base_url, sent, body, timeouts, on_redirect=through_sdk)


# --- chunks and failures ---------------------------------------------------------------------------------


def _get(item: Any, name: str) -> Any:
    """A field of a chunk: a JSON object from the lean transport, or the SDK's model (extra fields included)."""
    if isinstance(item, dict):
        return item.get(name)
    return getattr(item, name, None)


class _Chunks:
    """Folds streamed chunks into builder events; tool-call fragments are keyed by their ``index``.

    A chunk is the SDK's ``ChatCompletionChunk`` or the same JSON object from the lean transport; both are read
    field by field with :func:`_get`, so either transport yields the same events.
    """

    def __init__(self, builder: MessageBuilder, model_settings: ModelConfig | None) -> None:
        self._builder = builder
        self._model_settings = model_settings
        self._usage: Any = None
        self.finish_reason: str | None = None

    def feed(self, chunk: Any) -> list[ProviderEvent]:
        usage = _get(chunk, "usage")
        if usage is not None:
            self._usage = usage
        events: list[ProviderEvent] = []
        for choice in (_get(chunk, "choices") or [])[:1]:
            delta = _get(choice, "delta")
            # Ollama, vLLM and OpenRouter stream reasoning in a non-standard field; keep it as thinking.
            reasoning = _get(delta, "reasoning_content") or _get(delta, "reasoning")
            if isinstance(reasoning, str):
                events += self._builder.thinking(reasoning)
            content = _get(delta, "content")
            if content:
                events += self._builder.text(content)
            for call in _get(delta, "tool_calls") or []:
                function = _get(call, "function")
                events += self._builder.tool_call(
                    _get(call, "index"),
                    _get(function, "arguments") or "",
                    call_id=_get(call, "id"),
                    name=_get(function, "name"),
                )
            finish_reason = _get(choice, "finish_reason")
            if finish_reason:
                self.finish_reason = finish_reason
        return events

    def finish(self) -> list[ProviderEvent]:
        """A reply for a known finish reason; a content-filter stop or a cut stream is a failure."""
        if self.finish_reason == "content_filter":
            return self._builder.fail("The provider's content filter stopped the response.", self.usage())
        stop = _STOP_REASONS.get(self.finish_reason or "")
        if stop is None:
            # No (or an unknown) finish reason: the body was cut, so what arrived is not a reply (§4).
            return self._builder.fail(unfinished_stream(self.finish_reason), self.usage(), transient=True)
        return self._builder.finish(stop, self.usage())

    def usage(self) -> Usage:
        """Tokens from the final usage chunk; cost from the server when it reports one, else from config."""
        raw = self._usage
        if raw is None:
            return Usage()
        details = _get(raw, "prompt_tokens_details")
        cache_read = _get(details, "cached_tokens") or 0
        cache_write = _get(details, "cache_write_tokens") or 0
        usage = Usage(  # some servers leave a count out or send null: count it as 0, never fail the reply
            input=max(0, (_get(raw, "prompt_tokens") or 0) - cache_read - cache_write),
            output=_get(raw, "completion_tokens") or 0,
            cache_read=cache_read,
            cache_write=cache_write,
        )
        reported = _get(raw, "cost")
        if isinstance(reported, int | float) and not isinstance(reported, bool):
            return usage.model_copy(update={"cost": float(reported)})
        cost = self._model_settings.cost if self._model_settings else None
        return usage.model_copy(update={"cost": cost.price(usage) if cost else None})


class NotAStream(Exception):
    """A 2xx answer to a streamed request whose ``Content-Type`` is not ``text/event-stream``."""

    def __init__(self, content_type: str) -> None:
        shown = " ".join(content_type.split())[:80] or "none"
        super().__init__(
            f"The provider answered with Content-Type {shown!r}, not an event stream (a proxy or gateway page?)."
        )


def _failure(
    builder: MessageBuilder, error: BaseException, usage: Usage, base_url: str
) -> list[ProviderEvent]:
    """HTTP and network failures become an error result; anything else is a bug and is raised.

    The lean transport's errors are worded as the SDK's are; the SDK's classes are looked up only when the SDK was
    imported (an error cannot be one of them otherwise), so a lean failure never imports it.
    """
    if isinstance(error, NotAStream):
        return builder.fail(str(error), usage, transient=True)  # nothing was shown; a gateway may recover
    if isinstance(error, LeanStatusError):
        return builder.fail_status(error.status_code, error.detail, error.headers, usage)
    openai: Any = sys.modules.get("openai")
    httpx2: Any = sys.modules.get("httpx2")
    if openai is not None and isinstance(error, openai.APIStatusError):
        return builder.fail_status(error.status_code, _detail(error), error.response.headers, usage)
    timed_out = isinstance(error, LeanTimeout) or (
        openai is not None and isinstance(error, openai.APITimeoutError)
    )
    final = final_on_loopback(base_url, error)
    if timed_out and not final:
        return builder.fail("Request timed out.", usage, transient=True)
    wrapper: tuple[type[BaseException], ...] = (LeanConnectionError,)
    transport: tuple[type[BaseException], ...] = (OSError,)
    known: tuple[type[BaseException], ...] = (LeanAPIError, ValueError)
    if openai is not None:
        wrapper += (openai.APIConnectionError,)
        known += (openai.APIError,)
    if httpx2 is not None:
        transport += (httpx2.TransportError,)
        known += (httpx2.HTTPError,)
    if isinstance(error, wrapper + transport):
        cause = error.__cause__ if isinstance(error, wrapper) and error.__cause__ else error
        described = "timed out connecting" if timed_out else _describe(cause)
        return builder.fail(
            connection_message(
                builder.provider, base_url, described, mid_reply=builder.received, final=final
            ),
            usage,
            transient=not final,
        )
    if isinstance(error, known):
        return builder.fail(f"Provider error: {_describe(error)}", usage)
    raise error


def _detail(error: Any) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(message, str) and message:
            return message
    return str(error.message)


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    return text or type(error).__name__
