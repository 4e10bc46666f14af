"""A loopback OpenAI-compatible server for tests: the real adapter talks real HTTP to it, nothing is mocked.

Use the ``openai_stub`` fixture (``pytest_plugins = ["piw.testing"]``) or ``with OpenAIStub() as stub:``. The
stub needs only the standard library, so it works after a plain ``pip install piw`` (the docs' offline adapter
example); the fixture is defined only when pytest is installed.
Tell it what to answer with ``stub.respond``, either a function of the request body or a list of replies
consumed in order, then assert on what it recorded: bodies, headers, offered tool names, request count.

    stub.respond = [StubReply.tool("workflow", {...}), StubReply.text("done")]
    provider = stub.provider(compat={"structured_tool_choice": "required"})

Faults for the provider fault suite: ``http_error(status, retry_after=…)``, ``hold()`` (a hang), ``reset()`` /
``reset(after_chunks=n, text=…)`` (a TCP reset before any byte or mid-stream), ``raw(body, content_type)`` (a
proxy's HTML page), ``empty_choices()``, and ``text(…, finish_reason=None|"odd", end_marker=False)`` for cut
streams and unknown finish reasons.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

try:
    import pytest
except ImportError:  # the stub itself needs no test dependency; only the fixture does
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from piw.providers.openai_compat import OpenAICompatProvider

Responder = Callable[[dict[str, Any]], "StubReply"]


@dataclass(frozen=True)
class StubToolCall:
    name: str
    arguments: Mapping[str, Any]
    call_id: str
    arguments_text: str | None = None
    """Sent verbatim instead of ``json.dumps(arguments)`` when set."""

    def argument_text(self) -> str:
        return self.arguments_text if self.arguments_text is not None else json.dumps(self.arguments)


@dataclass(frozen=True)
class StubReply:
    """One scripted answer. Build it with the class methods rather than the constructor."""

    kind: Literal["text", "tool", "hold", "error", "reset", "raw", "empty"]
    content: str = ""
    thinking: str = ""
    tool_calls: tuple[StubToolCall, ...] = ()
    usage: Mapping[str, Any] | None = None
    finish_reason: str | None = None
    status: int = 200
    retry_after: str | None = None
    chunk_size: int = 4
    end_marker: bool = True
    """Send ``data: [DONE]`` after the last chunk; ``False`` ends the stream as a dropped connection would."""
    content_type: str = "application/json"
    """``raw`` replies: the ``Content-Type`` header sent with ``content``."""
    reset_after: int = 0
    """``reset`` replies: SSE chunks sent (of ``content``) before the connection is reset; 0 sends nothing at all."""
    chunk_delay_s: float = 0.0
    """A pause before each streamed chunk after the first: a slow model, for watching a reply as it streams."""
    hold_after: int | None = None
    """Stop streaming after this many chunks until ``stub.release_stream`` is set (a reply caught mid-stream)."""

    @classmethod
    def text(
        cls,
        text: str,
        usage: Mapping[str, Any] | None = None,
        *,
        thinking: str = "",
        finish_reason: str | None = "stop",
        end_marker: bool = True,
        chunk_delay_s: float = 0.0,
        hold_after: int | None = None,
    ) -> StubReply:
        """Assistant text, streamed a few characters per chunk; ``usage`` is OpenAI-shaped.

        ``finish_reason=None`` sends no finish reason at all (a cut stream); ``end_marker=False`` also
        leaves out ``[DONE]``; ``chunk_delay_s`` streams it slowly, ``hold_after=n`` stops after ``n`` chunks
        until ``stub.release_stream`` is set.
        """
        return cls(
            "text",
            content=text,
            thinking=thinking,
            usage=usage,
            finish_reason=finish_reason,
            end_marker=end_marker,
            chunk_delay_s=chunk_delay_s,
            hold_after=hold_after,
        )

    @classmethod
    def tool(
        cls,
        name: str,
        arguments: Mapping[str, Any],
        call_id: str = "call_1",
        *,
        text: str = "",
        usage: Mapping[str, Any] | None = None,
        finish_reason: str | None = "tool_calls",
        end_marker: bool = True,
        arguments_text: str | None = None,
    ) -> StubReply:
        """One tool call; its JSON arguments arrive split across several chunks.

        ``arguments_text`` sends that exact argument text instead of ``arguments`` as JSON (for a call cut
        off at ``length``, say); ``finish_reason`` and ``end_marker`` as for :meth:`text`.
        """
        reply = cls.tools((name, arguments, call_id), text=text, usage=usage)
        return replace(
            reply,
            finish_reason=finish_reason,
            end_marker=end_marker,
            tool_calls=tuple(replace(call, arguments_text=arguments_text) for call in reply.tool_calls),
        )

    @classmethod
    def tools(
        cls,
        *calls: tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str],
        text: str = "",
        usage: Mapping[str, Any] | None = None,
    ) -> StubReply:
        """Several tool calls in one response, each ``(name, arguments[, call_id])``."""
        built = tuple(
            StubToolCall(call[0], call[1], call[2] if len(call) == 3 else f"call_{index + 1}")
            for index, call in enumerate(calls)
        )
        return cls("tool", content=text, tool_calls=built, usage=usage, finish_reason="tool_calls")

    @classmethod
    def reset(cls, after_chunks: int = 0, text: str = "") -> StubReply:
        """Reset the TCP connection (RST, not a clean close): before a single byte (``after_chunks=0``), or after
        the response headers and that many SSE chunks of ``text``."""
        return cls("reset", content=text, reset_after=after_chunks)

    @classmethod
    def raw(cls, body: str, content_type: str, status: int = 200) -> StubReply:
        """Any body with any ``Content-Type`` (an HTML error page from a proxy, say), whatever was asked."""
        return cls("raw", content=body, content_type=content_type, status=status)

    @classmethod
    def empty_choices(cls, chunks: int = 3) -> StubReply:
        """A stream whose chunks all have ``"choices": []`` (no delta, no finish reason), then ``[DONE]``."""
        return cls("empty", reset_after=chunks)

    @classmethod
    def hold(cls) -> StubReply:
        """Send nothing at all (not even headers) until the client disconnects."""
        return cls("hold")

    @classmethod
    def http_error(cls, status: int, retry_after: float | str | None = None, message: str = "") -> StubReply:
        """An HTTP error with an OpenAI-shaped JSON body and an optional ``Retry-After`` header."""
        detail = message or f"stub error {status}"
        header = None if retry_after is None else str(retry_after)
        return cls("error", content=detail, status=status, retry_after=header)


@dataclass
class _Recorded:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


class OpenAIStub:
    """A ``ThreadingHTTPServer`` on ``127.0.0.1`` (free port) serving ``/v1/models`` and chat completions."""

    def __init__(self, models: Sequence[str] = ("stub-model",)) -> None:
        self.models = list(models)
        self._lock = threading.Lock()
        self._recorded = _Recorded()
        self._queue: list[StubReply] = []
        self._responder: Responder | None = None
        self._closing = threading.Event()
        self.release_stream = threading.Event()
        """Lets a ``hold_after`` reply stream on."""
        self.disconnects = 0
        """Held requests that ended because the client went away."""
        self.in_flight = 0
        self.max_in_flight = 0
        """The most chat-completions requests the stub was serving at once (a shared rate limit's concurrency)."""
        self.errors: list[str] = []
        """Problems inside the stub (a responder raised, the queue ran dry); tests may assert it is empty."""
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="openai-stub", daemon=True
        )
        self._thread.start()

    # --- configuration -----------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def respond(self) -> Responder | list[StubReply]:
        return self._responder or list(self._queue)

    @respond.setter
    def respond(self, value: Responder | Sequence[StubReply] | StubReply) -> None:
        with self._lock:
            if isinstance(value, StubReply):
                self._responder, self._queue = None, [value]
            elif callable(value):
                self._responder, self._queue = value, []
            else:
                self._responder, self._queue = None, list(value)

    def provider(
        self, model: str = "stub-model", name: str = "stub", **settings: Any
    ) -> OpenAICompatProvider:
        """An ``openai-completions`` provider for this stub; ``settings`` are ``ProviderConfig`` fields."""
        from piw.config.settings import ProviderConfig
        from piw.providers.openai_compat import OpenAICompatProvider
        from piw.providers.selection import ProviderSelection

        config = ProviderConfig.model_validate({"base_url": self.base_url, **settings})
        return OpenAICompatProvider(ProviderSelection(name, model, config, config.find_model(model)))

    # --- what was received ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat-completions request body, in arrival order."""
        with self._lock:
            return list(self._recorded.bodies)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """Headers of each chat-completions request, names lower-cased."""
        with self._lock:
            return list(self._recorded.headers)

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self._recorded.bodies)

    @property
    def tool_names(self) -> list[list[str]]:
        """The tool names offered by each request (``[]`` when none)."""
        return [[tool["function"]["name"] for tool in body.get("tools", [])] for body in self.requests]

    # --- lifecycle -----------------------------------------------------------------------------------------

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> StubReply:
        with self._lock:
            self._recorded.bodies.append(body)
            self._recorded.headers.append(headers)
            responder = self._responder
            queued = self._queue.pop(0) if self._queue else None
            if responder is None and queued is None and not self._queue:
                self.errors.append(f"request {len(self._recorded.bodies)} arrived with no reply queued")
        if responder is not None:
            try:
                return responder(body)
            except Exception as exc:
                self.errors.append(f"responder raised {exc!r}")
                return StubReply.http_error(500, message=f"stub responder raised {exc!r}")
        return queued or StubReply.http_error(500, message="the stub has no reply queued for this request")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stub: OpenAIStub

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-request (a cancelled or timed-out attempt) is expected, not an error; any
        other failure is reported on the process's own stderr, never on a ``sys.stderr`` a test is capturing as
        piw's output (piw may run in the same process, as the ``cli`` fixture runs it)."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        print(f"OpenAIStub: error serving {client_address}:", file=sys.__stderr__)
        traceback.print_exc(file=sys.__stderr__)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    @property
    def stub(self) -> OpenAIStub:
        return self.server.stub

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "stub"} for model in self.stub.models
        ]
        self._json(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        stub = self.stub
        with stub._lock:
            stub.in_flight += 1
            stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
        try:
            self._serve(stub._next_reply(body, headers), body)
        finally:
            with stub._lock:
                stub.in_flight -= 1

    def _serve(self, reply: StubReply, body: dict[str, Any]) -> None:
        if reply.kind == "hold":
            self._hold()
        elif reply.kind == "reset":
            self._reset(reply, body)
        elif reply.kind == "raw":
            data = reply.content.encode("utf-8")
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif reply.kind == "empty":
            self._empty(reply, body)
        elif reply.kind == "error":
            extra = {"Retry-After": reply.retry_after} if reply.retry_after is not None else {}
            error = {"message": reply.content, "type": "stub_error", "code": str(reply.status)}
            self._json(reply.status, {"error": error}, extra)
        elif body.get("stream"):
            self._sse(reply, body)
        else:
            self._json(200, _completion(reply, body))

    def _hold(self) -> None:
        connection: socket.socket = self.connection
        while not self.stub._closing.is_set():
            readable, _, _ = select.select([connection], [], [], 0.05)
            if readable:
                try:
                    if not connection.recv(1024):
                        break
                except OSError:
                    break
        else:
            return
        with self.stub._lock:
            self.stub.disconnects += 1
        self.close_connection = True

    def _reset(self, reply: StubReply, body: dict[str, Any]) -> None:
        """Send the headers and ``reset_after`` chunks (none at all for 0), then reset the connection."""
        if reply.reset_after:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for number, chunk in enumerate(_chunks(replace(reply, kind="text", finish_reason=None), body)):
                if number > reply.reset_after:  # the role chunk comes first
                    break
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        connection: socket.socket = self.connection
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN: a reset, as a crashed server gives.
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        connection.close()

    def _empty(self, reply: StubReply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with contextlib.suppress(OSError):
            for _ in range(reply.reset_after):
                self.wfile.write(b"data: " + json.dumps(_envelope(body, [])).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    def _json(self, status: int, payload: Any, extra_headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra_headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, reply: StubReply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for number, chunk in enumerate(_chunks(reply, body)):
                if number and reply.chunk_delay_s and self.stub._closing.wait(reply.chunk_delay_s):
                    return
                if number == reply.hold_after:
                    while not self.stub.release_stream.wait(0.05):
                        if self.stub._closing.is_set():
                            return
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            if reply.end_marker:
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
        except OSError:  # the client went away mid-stream
            return


def _usage(reply: StubReply) -> dict[str, Any]:
    if reply.usage is not None:
        return dict(reply.usage)
    output = max(1, (len(reply.content) + sum(len(c.argument_text()) for c in reply.tool_calls)) // 4)
    return {"prompt_tokens": 10, "completion_tokens": output, "total_tokens": 10 + output}


def _envelope(body: dict[str, Any], choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    model = body.get("model", "stub-model")
    envelope = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time())}
    return {**envelope, "model": model, "choices": choices, **extra}


def _chunks(reply: StubReply, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    def delta(payload: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return _envelope(body, [{"index": 0, "delta": payload, "finish_reason": finish}])

    size = reply.chunk_size
    yield delta({"role": "assistant", "content": ""})
    for start in range(0, len(reply.thinking), size):
        yield delta({"reasoning_content": reply.thinking[start : start + size]})
    for start in range(0, len(reply.content), size):
        yield delta({"content": reply.content[start : start + size]})
    for index, call in enumerate(reply.tool_calls):
        opening = {"index": index, "id": call.call_id, "type": "function"}
        yield delta({"tool_calls": [{**opening, "function": {"name": call.name, "arguments": ""}}]})
        arguments = call.argument_text()
        for start in range(0, len(arguments), 7):
            fragment = {"index": index, "function": {"arguments": arguments[start : start + 7]}}
            yield delta({"tool_calls": [fragment]})
    if reply.finish_reason is not None:
        yield delta({}, reply.finish_reason)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield _envelope(body, [], usage=_usage(reply))


def _completion(reply: StubReply, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.argument_text()},
            }
            for c in reply.tool_calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason or "stop"}
    return {**_envelope(body, [choice], usage=_usage(reply)), "object": "chat.completion"}


_STEP_IN_PROMPT = re.compile(r"step (\S+), attempt ([0-9a-f]{32})")


def _active_step(body: dict[str, Any]) -> tuple[str, str] | None:
    """``(step, attempt)`` of the newest step contract in a chat-completions request (``None`` without one)."""
    for message in reversed(body.get("messages", [])):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            found = _STEP_IN_PROMPT.findall(content)
            if found:
                return found[-1][0].rstrip(","), found[-1][1]
    return None


def replies_responder(script: Mapping[str, Sequence[Mapping[str, Any]]]) -> Responder:
    """Serve a scripted-provider replies mapping (node id → replies) over HTTP, for ``stub.respond``.

    The same ``NAME.replies.json`` that drives ``--provider scripted`` then drives the real adapter: each request
    is matched to its step by the step contract in its prompt, and takes that node's next reply (``*`` serves
    nodes the script does not name). ``{"submit": X}`` becomes a ``workflow`` submit call with the live step and
    attempt ids, ``{"text": T}`` a text reply, ``{"tool": N, "arguments": A}`` a tool call. Usage is reported as
    one token per 4 characters sent or returned, so token figures track prompt size.
    """
    lock = threading.Lock()
    used: dict[str, int] = {}

    def respond(body: dict[str, Any]) -> StubReply:
        step = _active_step(body)
        node = step[0] if step else "*"
        key = node if node in script else "*"
        with lock:
            index = used.get(key, 0)
            used[key] = index + 1
        entries = script.get(key, ())
        if index >= len(entries):
            raise LookupError(f"no reply left for node {node} (request {index + 1} of that node)")
        entry = entries[index]
        sent = sum(len(str(message.get("content") or "")) for message in body.get("messages", []))
        if "submit" in entry:
            if step is None:
                raise LookupError(f"a submit reply for {node} needs a step contract in the prompt")
            arguments = {"action": "submit", "step": step[0], "attempt": step[1], "output": entry["submit"]}
            usage = {"prompt_tokens": sent // 4, "completion_tokens": max(1, len(json.dumps(arguments)) // 4)}
            return StubReply.tool("workflow", arguments, usage=usage)
        if "tool" in entry:
            arguments = dict(entry.get("arguments") or {})
            usage = {"prompt_tokens": sent // 4, "completion_tokens": max(1, len(json.dumps(arguments)) // 4)}
            return StubReply.tool(str(entry["tool"]), arguments, usage=usage)
        text = str(entry.get("text", ""))
        return StubReply.text(text, {"prompt_tokens": sent // 4, "completion_tokens": max(1, len(text) // 4)})

    return respond


if pytest is not None:

    @pytest.fixture
    def openai_stub() -> Iterator[OpenAIStub]:
        """A running stub, shut down after the test."""
        with OpenAIStub() as stub:
            yield stub
