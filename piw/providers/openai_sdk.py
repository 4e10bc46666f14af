"""The SDK transport of the ``openai-completions`` adapter: the request sent through the official ``openai`` SDK.

Used wherever the lean transport (:mod:`piw.providers.openai_lean`) does not reproduce the SDK exactly: HTTPS,
proxies from the environment, an injected ``httpx2.Client``, redirects (``docs/providers.md``, first model request).
SDK retries are off (``max_retries=0``): the agent loop owns retries, so it can refuse to repeat a response that
already streamed text (``docs/design/agent-steps.md`` §4).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
import openai
from openai import Stream
from openai.types.chat import ChatCompletionChunk


def sdk_timeout(timeout: Any) -> httpx2.Timeout:
    """An ``httpx2.Timeout`` from the provider's timeouts (``Timeouts`` or an ``httpx2.Timeout`` given by a test)."""
    if isinstance(timeout, httpx2.Timeout):
        return timeout
    return httpx2.Timeout(timeout.read, connect=timeout.connect)


def sdk_call(
    base_url: str,
    key: str,
    headers: dict[str, str],
    body: dict[str, Any],
    timeout: Any,
    http_client: httpx2.Client | None,
) -> _HttpCall:
    """One streamed request through the SDK, on the caller's client or on a fresh one closed afterwards."""
    limits = sdk_timeout(timeout)

    def make() -> tuple[openai.OpenAI, bool]:
        own = http_client is None
        client_ = http_client or httpx2.Client(timeout=limits, follow_redirects=True)
        _install_trace_hook(client_)
        client = openai.OpenAI(
            base_url=base_url,
            # The SDK refuses an empty string; a key provider returning "" is its way of saying "no key",
            # and it never falls back to OPENAI_API_KEY.
            api_key=key or _no_key,
            default_headers=headers,
            max_retries=0,
            timeout=limits,
            http_client=client_,
        )
        return client, own

    return _HttpCall(make, body, _auth_override(key, headers))


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
        from piw.providers.openai_compat import NotAStream

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
