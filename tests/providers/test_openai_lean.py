"""The lean transport of openai-completions against the loopback stub: it sends the SDK's request and reads every
answer, fault included, as the SDK path reads it (``docs/providers.md``, first model request).

Each comparison runs the same request twice, once over the lean transport and once through the official SDK (the
provider told to use it), against the same real HTTP server, and compares what the stub received and what the
caller got. Nothing is mocked.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from piw.config.settings import ProviderConfig
from piw.providers.base import ChatRequest, ErrorEvent, ProviderEvent, complete
from piw.providers.messages import AssistantReply, ToolCallBlock, ToolResultMessage, ToolSpec, UserMessage
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.openai_lean import Timeouts, applies
from piw.providers.selection import ProviderSelection
from piw.testing import OpenAIStub, StubReply

READ = ToolSpec(name="read", description="Read a file.", parameters={"type": "object", "properties": {}})


class SdkProvider(OpenAICompatProvider):
    """The same provider, made to send through the official SDK (what every request did before)."""

    def uses_sdk(self) -> bool:
        return True


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        yield running


def providers(base_url: str, **settings: Any) -> tuple[OpenAICompatProvider, OpenAICompatProvider]:
    timeout = settings.pop("_timeout", None)
    config = ProviderConfig.model_validate({"base_url": base_url, "models": ["stub-model"], **settings})
    selection = ProviderSelection("stub", "stub-model", config, config.find_model("stub-model"))
    return OpenAICompatProvider(selection, timeout=timeout), SdkProvider(selection, timeout=timeout)


def rich_request() -> ChatRequest:
    earlier = AssistantReply(
        content=[ToolCallBlock(id="call_9", name="read", arguments={"path": "ä.txt"})],
        stop_reason="toolUse",
        provider="stub",
        model="stub-model",
    )
    return ChatRequest(
        model="stub-model",
        system_prompt="Be brief — très.",
        messages=[
            UserMessage(content="read ä.txt ✓"),
            earlier,
            ToolResultMessage(tool_call_id="call_9", tool_name="read", content="contents"),
        ],
        tools=[READ],
        tool_choice="auto",
        max_tokens=64,
    )


def drive(provider: OpenAICompatProvider, request: ChatRequest) -> tuple[list[ProviderEvent], AssistantReply]:
    events: list[ProviderEvent] = []
    message = complete(provider, request, threading.Event(), on_event=events.append)
    return events, message


def outcome(events: list[ProviderEvent]) -> list[dict[str, Any]]:
    """Every event as JSON, the final message's completion time left out (it differs between two runs)."""
    shown = [event.model_dump(mode="json") for event in events]
    for event in shown:
        if "message" in event:
            event["message"].pop("completed_at", None)
    return shown


def both(
    stub: OpenAIStub, reply: StubReply, request: ChatRequest | None = None, **settings: Any
) -> list[Any]:
    """Run the request over each transport with the same reply; return both outcomes (lean first)."""
    lean, sdk = providers(stub.base_url, **settings)
    results = []
    for provider in (lean, sdk):
        stub.respond = [reply]
        events, _ = drive(provider, request or rich_request())
        results.append(outcome(events))
    return results


def test_the_lean_request_is_the_sdks_request(stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("LEAN_TOKEN", "tok-2")
    lean, sdk = providers(
        stub.base_url, api_key="sk-test", headers={"X-Client": "piw", "X-Token": "$LEAN_TOKEN"}
    )
    for provider in (lean, sdk):
        stub.respond = [StubReply.text("ok")]
        drive(provider, rich_request())
    lean_body, sdk_body = stub.requests
    assert lean_body == sdk_body and lean_body["tools"][0]["function"]["name"] == "read"
    lean_headers, sdk_headers = (
        {name: value for name, value in headers.items() if name != "content-length"}
        for headers in stub.request_headers
    )
    assert lean_headers == sdk_headers
    assert (
        lean_headers["authorization"] == "Bearer sk-test" and lean_headers["openai-organization"] == "org-1"
    )
    assert lean_headers["x-token"] == "tok-2" and lean_headers["user-agent"].startswith("OpenAI/Python ")


def test_without_a_key_neither_transport_sends_authorization(stub: OpenAIStub) -> None:
    lean, sdk = providers(stub.base_url)
    for provider in (lean, sdk):
        stub.respond = [StubReply.text("ok")]
        drive(provider, rich_request())
    lean_headers, sdk_headers = (
        {name: value for name, value in headers.items() if name != "content-length"}
        for headers in stub.request_headers
    )
    assert lean_headers == sdk_headers
    assert all("authorization" not in headers for headers in stub.request_headers)


@pytest.mark.parametrize(
    "reply",
    [
        StubReply.text("Hello wörld ✓", thinking="hm", usage={"prompt_tokens": 9, "completion_tokens": 3}),
        StubReply.tools(("read", {"path": "a"}, "call_a"), ("read", {"path": "b"}, "call_b"), text="two"),
        StubReply.text("cut", finish_reason=None, end_marker=False),
        StubReply.text("odd", finish_reason="eaten"),
        StubReply.empty_choices(),
        StubReply.http_error(429, retry_after=3),
        StubReply.http_error(503, message="overloaded"),
        StubReply.http_error(400, message="context length exceeded"),
        StubReply.raw("<html>bad gateway</html>", "text/html", status=502),
        StubReply.raw('{"error": {"error": {"message": "deep"}}}', "application/json", status=500),
        StubReply.raw("<html>login</html>", "text/html"),
        StubReply.raw('data: {"error": {"message": "boom in stream"}}\n\n', "text/event-stream"),
        StubReply.raw("data: not json\n\n", "text/event-stream"),
        StubReply.reset(),
        StubReply.reset(after_chunks=3, text="half an answer"),
    ],
    ids=lambda reply: f"{reply.kind}-{reply.status}-{reply.finish_reason}-{reply.reset_after}",
)
def test_every_answer_reads_as_through_the_sdk(stub: OpenAIStub, reply: StubReply) -> None:
    lean, sdk = both(stub, reply)
    assert lean == sdk
    assert lean[-1]["type"] in ("done", "error")


def test_a_read_timeout_reads_as_through_the_sdk(stub: OpenAIStub) -> None:
    lean, sdk = both(stub, StubReply.hold(), _timeout=Timeouts(read=0.5, connect=2.0))
    assert lean == sdk
    assert lean[-1]["message"]["error_message"] == "Request timed out." and lean[-1]["transient"]


def test_a_refused_connection_reads_as_through_the_sdk() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lean, sdk = providers(f"http://127.0.0.1:{port}/v1")
    (lean_events, _), (sdk_events, _) = drive(lean, rich_request()), drive(sdk, rich_request())
    assert outcome(lean_events) == outcome(sdk_events)
    final = lean_events[-1]
    assert isinstance(final, ErrorEvent) and not final.transient
    assert "Connection refused" in (final.message.error_message or "")


class _Odd(BaseHTTPRequestHandler):
    """Answers the stub's way but chunked and gzipped, or with a redirect to the stub."""

    protocol_version = "HTTP/1.1"
    target = ""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/moved/"):
            self.send_response(307)
            self.send_header("Location", self.target + "/chat/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        events = [
            {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]} for word in "ab"
        ]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        text = "".join(f"data: {json.dumps(event)}\r\n\r\n" for event in events) + "data: [DONE]\n\n"
        packed = gzip.compress(text.encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for start in range(0, len(packed), 5):
            piece = packed[start : start + 5]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def odd_server(stub: OpenAIStub) -> Iterator[str]:
    handler = type("Handler", (_Odd,), {"target": stub.base_url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_chunked_gzipped_stream_reads_as_through_the_sdk(odd_server: str) -> None:
    lean, sdk = providers(odd_server + "/v1")
    (lean_events, message), (sdk_events, _) = drive(lean, rich_request()), drive(sdk, rich_request())
    assert outcome(lean_events) == outcome(sdk_events) and message.visible_text() == "ab"


def test_a_redirect_is_followed_through_the_sdk(stub: OpenAIStub, odd_server: str) -> None:
    stub.respond = [StubReply.text("moved on")]
    lean, _ = providers(odd_server + "/moved/v1")
    _, message = drive(lean, rich_request())
    assert message.visible_text() == "moved on" and stub.request_count == 1


def test_the_lean_path_leaves_the_sdk_unimported(stub: OpenAIStub) -> None:
    stub.respond = [StubReply.text("ok")]
    script = f"""
import sys, threading
from piw.providers.base import ChatRequest, complete
from piw.config.settings import ProviderConfig
from piw.providers.messages import UserMessage
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.selection import ProviderSelection
provider = OpenAICompatProvider(ProviderSelection("s", "m", ProviderConfig(base_url={stub.base_url!r})))
message = complete(provider, ChatRequest(model="m", messages=[UserMessage(content="hi")]))
print(message.visible_text(), "openai" in sys.modules, "httpx2" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["ok", "False", "False"], done.stderr


def test_what_the_sdk_keeps() -> None:
    assert applies("http://127.0.0.1:8080/v1", {})
    assert applies("http://gpu-box.lan:11434/v1", {"NO_PROXY": "x"})
    assert not applies("https://api.openai.com/v1", {})
    assert not applies("http://127.0.0.1:8080/v1", {"HTTP_PROXY": "http://proxy:3128"})
    assert not applies("http://127.0.0.1:8080/v1", {"all_proxy": "socks5://proxy"})
    assert not applies("http://127.0.0.1:8080/v1", {"OPENAI_CUSTOM_HEADERS": "X-A: b"})
    assert not applies("http://user:pw@127.0.0.1:8080/v1", {})
    assert not applies("http://127.0.0.1:8080/v1?key=1", {})
