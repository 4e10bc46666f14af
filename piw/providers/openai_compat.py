"""The ``openai-completions`` adapter: streamed chat completions through the ``openai`` SDK.

Works with any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter, LiteLLM). SDK
retries are off (``max_retries=0``): the agent loop owns retries, so it can refuse to repeat a response that
already streamed text. Failures become a final ``error`` event, never an exception (``docs/design/agent-steps.md`` §4).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx2
import openai
from openai import Stream
from openai.types.chat import ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

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
from piw.providers.openai_request import build_body
from piw.providers.pump import StreamPump
from piw.providers.selection import ProviderSelection

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = httpx2.Timeout(600.0, connect=10.0)
"""Local models can think for minutes before their first byte, so reads get the SDK's generous default."""
LOOPBACK_TIMEOUT = httpx2.Timeout(600.0, connect=2.0)
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
        timeout: httpx2.Timeout | None = None,
    ) -> None:
        super().__init__(selection, env=env)
        self.base_url = self.settings.base_url or DEFAULT_BASE_URL
        self._http_client = http_client
        self.timeout = timeout or (LOOPBACK_TIMEOUT if is_loopback_url(self.base_url) else DEFAULT_TIMEOUT)
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

        call = _HttpCall(self._client_factory(key, headers), body, _auth_override(key, headers))
        pump: StreamPump[ChatCompletionChunk] = StreamPump(
            call.produce, call.abort, f"piw-{self.name}-stream"
        )
        yield from pump.events(
            cancel,
            builder,
            _Chunks(builder, model_settings),
            lambda error, usage: _failure(builder, error, usage, self.base_url),
        )

    def _client_factory(self, key: str, headers: dict[str, str]) -> Callable[[], tuple[openai.OpenAI, bool]]:
        def make() -> tuple[openai.OpenAI, bool]:
            own = self._http_client is None
            http_client = self._http_client or httpx2.Client(timeout=self.timeout, follow_redirects=True)
            _install_trace_hook(http_client)
            client = openai.OpenAI(
                base_url=self.base_url,
                # The SDK refuses an empty string; a key provider returning "" is its way of saying "no key",
                # and it never falls back to OPENAI_API_KEY.
                api_key=key or _no_key,
                default_headers=headers,
                max_retries=0,
                timeout=self.timeout,
                http_client=http_client,
            )
            return client, own

        return make


def _no_key() -> str:
    return ""


def _auth_override(key: str, headers: Mapping[str, str]) -> dict[str, Any]:
    """Without a key, omit ``Authorization`` altogether (unless the config sets that header itself)."""
    if key or any(name.lower() == "authorization" for name in headers):
        return {}
    return {"Authorization": openai.omit}


# --- the HTTP call, run in the pump's worker thread ---------------------------------------------------------

_CURRENT = threading.local()


def _attach_trace(request: httpx2.Request) -> None:
    """httpx request hook: let the call running in this thread see the sockets its request opens."""
    call = getattr(_CURRENT, "call", None)
    if isinstance(call, _HttpCall):
        request.extensions["trace"] = call.trace


def _install_trace_hook(client: httpx2.Client) -> None:
    hooks = client.event_hooks
    if _attach_trace not in hooks["request"]:
        hooks["request"].append(_attach_trace)


class _HttpCall:
    """One streamed request. ``abort`` shuts its socket down, which wakes a read blocked in the worker."""

    def __init__(
        self,
        make_client: Callable[[], tuple[openai.OpenAI, bool]],
        body: dict[str, Any],
        extra_headers: dict[str, Any],
    ) -> None:
        self._make_client = make_client
        self._body = body
        self._extra_headers = extra_headers
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._aborted = False

    def produce(self, emit: Callable[[ChatCompletionChunk], None]) -> None:
        _CURRENT.call = self
        client, own = self._make_client()
        try:
            response: Stream[ChatCompletionChunk] = client.chat.completions.create(
                **self._body, extra_headers=self._extra_headers
            )
            with response:
                self._adopt(response.response.extensions.get("network_stream"))
                kind = response.response.headers.get("content-type", "")
                if "text/event-stream" not in kind.lower():
                    # An HTML page from a proxy, a JSON body from a server ignoring stream=true: the SDK would
                    # find no events in it and the stream would look merely cut. Say what came instead.
                    raise NotAStream(kind)
                for chunk in response:
                    emit(chunk)
        finally:
            _CURRENT.call = None
            if own:
                client.close()

    def trace(self, name: str, info: Mapping[str, Any]) -> None:
        if name == "connection.connect_tcp.complete":
            self._adopt(info.get("return_value"))

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def _adopt(self, network_stream: Any) -> None:
        sock = getattr(network_stream, "get_extra_info", lambda _: None)("socket")
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            aborted = self._aborted
        if aborted:  # the abort came while the connection was being made
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


# --- chunks and failures ---------------------------------------------------------------------------------


class _Chunks:
    """Folds streamed chunks into builder events; tool-call fragments are keyed by their ``index``."""

    def __init__(self, builder: MessageBuilder, model_settings: ModelConfig | None) -> None:
        self._builder = builder
        self._model_settings = model_settings
        self._usage: CompletionUsage | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: ChatCompletionChunk) -> list[ProviderEvent]:
        if chunk.usage is not None:
            self._usage = chunk.usage
        events: list[ProviderEvent] = []
        for choice in chunk.choices[:1]:
            delta = choice.delta
            # Ollama, vLLM and OpenRouter stream reasoning in a non-standard field; keep it as thinking.
            reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
            if isinstance(reasoning, str):
                events += self._builder.thinking(reasoning)
            if delta.content:
                events += self._builder.text(delta.content)
            for call in delta.tool_calls or []:
                function = call.function
                events += self._builder.tool_call(
                    call.index,
                    (function.arguments if function else None) or "",
                    call_id=call.id,
                    name=function.name if function else None,
                )
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
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
        details = raw.prompt_tokens_details
        cache_read = (details.cached_tokens if details else None) or 0
        cache_write = getattr(details, "cache_write_tokens", None) or 0
        usage = Usage(  # some servers leave a count out or send null: count it as 0, never fail the reply
            input=max(0, (raw.prompt_tokens or 0) - cache_read - cache_write),
            output=raw.completion_tokens or 0,
            cache_read=cache_read,
            cache_write=cache_write,
        )
        reported = getattr(raw, "cost", None)
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
    """HTTP and network failures become an error result; anything else is a bug and is raised."""
    if isinstance(error, NotAStream):
        return builder.fail(str(error), usage, transient=True)  # nothing was shown; a gateway may recover
    if isinstance(error, openai.APIStatusError):
        return builder.fail_status(error.status_code, _detail(error), error.response.headers, usage)
    final = final_on_loopback(base_url, error)
    if isinstance(error, openai.APITimeoutError) and not final:
        return builder.fail("Request timed out.", usage, transient=True)
    if isinstance(error, openai.APIConnectionError | httpx2.TransportError | OSError):
        cause = error.__cause__ if isinstance(error, openai.APIConnectionError) and error.__cause__ else error
        described = "timed out connecting" if isinstance(error, openai.APITimeoutError) else _describe(cause)
        return builder.fail(
            connection_message(
                builder.provider, base_url, described, mid_reply=builder.received, final=final
            ),
            usage,
            transient=not final,
        )
    if isinstance(error, openai.APIError | httpx2.HTTPError | ValueError):
        return builder.fail(f"Provider error: {_describe(error)}", usage)
    raise error


def _detail(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(message, str) and message:
            return message
    return error.message


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    return text or type(error).__name__
