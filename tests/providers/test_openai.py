"""The openai-completions adapter against the loopback stub, over real HTTP (the SDK is never mocked)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import piw.providers
from piw.config.settings import ProviderConfig
from piw.errors import NeedsKey, ProviderError
from piw.providers import guard_base_url, is_loopback_url
from piw.providers.base import ChatRequest, ErrorEvent, ProviderEvent, complete, force_tool
from piw.providers.messages import (
    AssistantReply,
    CustomMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.selection import ProviderSelection
from piw.testing import OpenAIStub, StubReply

WORKFLOW = ToolSpec(name="workflow", description="Finish the step.", parameters={"type": "object"})
READ = ToolSpec(name="read", description="Read a file.", parameters={"type": "object"})


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        yield running


def ask(text: str = "hi", **fields: Any) -> ChatRequest:
    return ChatRequest(model="stub-model", messages=[UserMessage(content=text)], **fields)


def run(provider: OpenAICompatProvider, request: ChatRequest) -> tuple[list[ProviderEvent], AssistantReply]:
    events: list[ProviderEvent] = []
    message = complete(provider, request, threading.Event(), on_event=events.append)
    return events, message


def test_streams_text_in_deltas_and_keeps_it_exact(stub: OpenAIStub) -> None:
    text = "  Hello **wörld** ✓\n\nsecond line "
    stub.respond = [StubReply.text(text)]
    events, message = run(stub.provider(), ask())
    assert message.visible_text() == text
    assert message.stop_reason == "stop"
    assert message.provider == "stub" and message.model == "stub-model"
    assert message.completed_at is not None and message.completed_at.endswith("Z")
    types = [event.type for event in events]
    assert types[0] == "start" and types[-1] == "done"
    assert types.count("text_delta") > 3
    assert "".join(e.delta for e in events if e.type == "text_delta") == text
    assert stub.request_count == 1


def test_reasoning_content_becomes_a_thinking_block(stub: OpenAIStub) -> None:
    stub.respond = [StubReply.text("answer", thinking="pondering")]
    events, message = run(stub.provider(), ask())
    assert isinstance(message.content[0], ThinkingBlock) and message.content[0].thinking == "pondering"
    assert message.visible_text() == "answer"
    assert any(event.type == "thinking_delta" for event in events)


def test_tool_call_fragments_accumulate_by_index(stub: OpenAIStub) -> None:
    big = {"path": "src/" + "x" * 40, "nested": {"list": [1, 2, 3], "ü": "ß"}}
    stub.respond = [StubReply.tools(("read", big, "call_a"), ("workflow", {"action": "status"}, "call_b"))]
    events, message = run(stub.provider(), ask(tools=[READ, WORKFLOW]))
    assert message.stop_reason == "toolUse"
    calls = message.tool_calls()
    assert [(call.id, call.name) for call in calls] == [("call_a", "read"), ("call_b", "workflow")]
    assert calls[0].arguments == big and calls[1].arguments == {"action": "status"}
    assert sum(1 for event in events if event.type == "toolcall_delta") > 4
    assert [event.type for event in events if event.type.startswith("toolcall_")].count("toolcall_end") == 2


def test_usage_comes_from_the_final_chunk_and_cost_from_configured_prices(stub: OpenAIStub) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 400}}
    stub.respond = [StubReply.text("ok", usage=usage)]
    models = [{"id": "stub-model", "cost": {"input": 2.0, "output": 10.0, "cache_read": 0.5}}]
    _, message = run(stub.provider(models=models), ask())
    assert (message.usage.input, message.usage.output, message.usage.cache_read) == (600, 200, 400)
    assert message.usage.cost == pytest.approx((600 * 2.0 + 200 * 10.0 + 400 * 0.5) / 1_000_000)
    assert stub.requests[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("usage", [{"prompt_tokens": 7}, {"prompt_tokens": 7, "completion_tokens": None}])
def test_a_usage_chunk_without_completion_tokens_counts_them_as_zero(
    stub: OpenAIStub, usage: dict[str, Any]
) -> None:
    stub.respond = [StubReply.text("ok", usage=usage)]
    _, message = run(stub.provider(models=["stub-model"]), ask())
    assert message.visible_text() == "ok" and (message.usage.input, message.usage.output) == (7, 0)


def test_cost_is_none_for_an_unpriced_model(stub: OpenAIStub) -> None:
    stub.respond = [StubReply.text("ok", usage={"prompt_tokens": 5, "completion_tokens": 1})]
    _, message = run(stub.provider(models=["stub-model"]), ask())
    assert message.usage.input == 5 and message.usage.cost is None


def test_without_usage_in_streaming_no_stream_options_are_sent(stub: OpenAIStub) -> None:
    stub.respond = [StubReply.text("ok")]
    _, message = run(stub.provider(compat={"supports_usage_in_streaming": False}), ask())
    assert "stream_options" not in stub.requests[0]
    assert message.usage.total_tokens == 0 and message.usage.cost is None


def test_http_400_is_an_error_result_not_an_exception(stub: OpenAIStub) -> None:
    stub.respond = [StubReply.http_error(400, message="context length exceeded")]
    events, message = run(stub.provider(), ask())
    assert message.stop_reason == "error"
    assert message.error_message == "HTTP 400: context length exceeded"
    final = events[-1]
    assert isinstance(final, ErrorEvent) and not final.transient and not final.content_streamed


@pytest.mark.parametrize(
    ("status", "retry_after", "expected"), [(503, "7", 7.0), (429, None, None), (500, "0.5", 0.5)]
)
def test_rate_limits_and_server_errors_are_transient(
    stub: OpenAIStub, status: int, retry_after: str | None, expected: float | None
) -> None:
    stub.respond = [StubReply.http_error(status, retry_after=retry_after)]
    events, message = run(stub.provider(), ask())
    final = events[-1]
    assert isinstance(final, ErrorEvent)
    assert message.stop_reason == "error" and message.error_message is not None
    assert message.error_message.startswith(f"HTTP {status}")
    assert final.transient and final.retry_after_s == expected


def test_connection_refused_on_loopback_is_a_final_error_result() -> None:
    """Not retried on loopback (issue 26; tests/providers/test_loopback_unreachable.py); elsewhere it is transient."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAICompatProvider(
        ProviderSelection("dead", "m", ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1"))
    )
    events, message = run(provider, ChatRequest(model="m"))
    final = events[-1]
    assert isinstance(final, ErrorEvent) and not final.transient
    assert message.stop_reason == "error" and (message.error_message or "").startswith("Connection error")


def test_cancel_closes_a_held_request_promptly(stub: OpenAIStub) -> None:
    stub.respond = [StubReply.hold()]
    cancel = threading.Event()

    def cancel_once_the_stub_holds_the_request() -> None:
        # Cancel only once the request reached the stub (on a loaded machine 0.3 s may not be enough to send it):
        # the test is about closing a request in flight, not one that was never sent.
        deadline = time.monotonic() + 30
        while stub.request_count < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        cancel.set()

    threading.Thread(target=cancel_once_the_stub_holds_the_request, daemon=True).start()
    started = time.monotonic()
    message = complete(stub.provider(), ask(), cancel)
    assert time.monotonic() - started < 30
    assert message.stop_reason == "aborted" and message.error_message
    deadline = time.monotonic() + 5
    while stub.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stub.disconnects == 1, "the stub never saw the client disconnect"


def test_a_cancel_set_before_the_request_sends_nothing(stub: OpenAIStub) -> None:
    cancel = threading.Event()
    cancel.set()
    message = complete(stub.provider(), ask(), cancel)
    assert message.stop_reason == "aborted"
    assert stub.request_count == 0


def test_structured_tool_choice_is_sent_only_while_workflow_is_offered(stub: OpenAIStub) -> None:
    stub.respond = lambda body: StubReply.text("ok")
    provider = stub.provider(compat={"structured_tool_choice": "required"})
    run(provider, ask(tools=[WORKFLOW, READ]))
    run(provider, ask(tools=[READ]))
    run(provider, ask())
    assert stub.requests[0]["tool_choice"] == "required"
    assert "tool_choice" not in stub.requests[1]
    assert "tools" not in stub.requests[2]
    assert stub.tool_names == [["workflow", "read"], ["read"], []]


def test_a_forced_tool_is_sent_only_when_the_server_supports_it(stub: OpenAIStub) -> None:
    stub.respond = lambda body: StubReply.text("ok")
    run(stub.provider(), ask(tools=[WORKFLOW], tool_choice=force_tool("workflow")))
    run(
        stub.provider(compat={"supports_forced_tool_choice": True}),
        ask(tools=[WORKFLOW], tool_choice=force_tool("workflow")),
    )
    assert "tool_choice" not in stub.requests[0]
    assert stub.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "workflow"}}


def test_max_tokens_field_follows_the_compat_knob(stub: OpenAIStub) -> None:
    stub.respond = lambda body: StubReply.text("ok")
    run(stub.provider(compat={"max_tokens_field": "max_completion_tokens"}), ask(max_tokens=55))
    run(stub.provider(models=[{"id": "stub-model", "max_tokens": 77}]), ask())
    run(stub.provider(), ask())
    assert stub.requests[0]["max_completion_tokens"] == 55 and "max_tokens" not in stub.requests[0]
    assert stub.requests[1]["max_tokens"] == 77
    assert "max_tokens" not in stub.requests[2] and "max_completion_tokens" not in stub.requests[2]


def test_no_authorization_header_without_a_key_even_with_openai_api_key_set(
    stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    stub.respond = [StubReply.text("ok")]
    _, message = run(stub.provider(), ask())
    assert message.stop_reason == "stop"
    assert "authorization" not in stub.request_headers[0]


def test_key_and_headers_resolve_dollar_names_at_request_time(
    stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = stub.provider(api_key="$PIW_TEST_KEY", headers={"X-Client": "piw", "X-Team": "$PIW_TEST_TEAM"})
    monkeypatch.setenv("PIW_TEST_KEY", "sk-test-123")
    monkeypatch.setenv("PIW_TEST_TEAM", "blue")
    stub.respond = [StubReply.text("ok")]
    run(provider, ask())
    headers = stub.request_headers[0]
    assert headers["authorization"] == "Bearer sk-test-123"
    assert (headers["x-client"], headers["x-team"]) == ("piw", "blue")


def test_an_unset_key_variable_raises_needs_key_before_any_request(stub: OpenAIStub) -> None:
    provider = stub.provider(api_key="$PIW_TEST_SURELY_UNSET")
    with pytest.raises(NeedsKey) as caught:
        complete(provider, ask())
    assert caught.value.variable == "PIW_TEST_SURELY_UNSET"
    assert "PIW_TEST_SURELY_UNSET" in str(caught.value)
    assert stub.request_count == 0


def test_conversation_maps_onto_openai_roles(stub: OpenAIStub) -> None:
    call = ToolCallBlock(id="c1", name="read", arguments={"path": "a"})
    failed = AssistantReply(content=[TextBlock(text="partial")], stop_reason="error", retried=True)
    request = ChatRequest(
        model="stub-model",
        system_prompt="You are careful.",
        messages=[
            CustomMessage(custom_type="pi-workflows-agent-step", content="Do the step."),
            failed,
            AssistantReply(
                content=[ThinkingBlock(thinking="hm"), TextBlock(text="Reading."), call],
                stop_reason="toolUse",
            ),
            ToolResultMessage(tool_call_id="c1", tool_name="read", content="file text"),
        ],
    )
    stub.respond = [StubReply.text("ok")] * 2
    run(stub.provider(), request)
    run(stub.provider(compat={"requires_tool_result_name": True}), request)
    sent = stub.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[0]["content"] == "You are careful." and sent[1]["content"] == "Do the step."
    assert sent[2]["content"] == "Reading."
    assert sent[2]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}}
    ]
    assert sent[3] == {"role": "tool", "tool_call_id": "c1", "content": "file text"}
    assert stub.requests[1]["messages"][3]["name"] == "read"


def test_stub_serves_models_and_plain_json(stub: OpenAIStub) -> None:
    with urllib.request.urlopen(stub.base_url + "/models", timeout=5) as response:
        assert [model["id"] for model in json.load(response)["data"]] == ["stub-model"]
    stub.respond = [StubReply.tool("read", {"path": "x"})]
    body = json.dumps({"model": "stub-model", "messages": [], "stream": False}).encode()
    post = urllib.request.Request(stub.base_url + "/chat/completions", data=body, method="POST")
    with urllib.request.urlopen(post, timeout=5) as response:
        completion = json.load(response)
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert completion["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read"
    assert stub.request_count == 1 and not stub.errors


def test_guard_refuses_non_loopback_before_any_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_sockets(*args: object) -> None:
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(piw.providers, "ALLOW_MODEL_REQUESTS", False)
    monkeypatch.setattr(socket.socket, "connect", no_sockets)
    monkeypatch.setattr(socket, "getaddrinfo", no_sockets)
    provider = OpenAICompatProvider(
        ProviderSelection("remote", "m", ProviderConfig(base_url="http://example.invalid/v1"))
    )
    with pytest.raises(ProviderError, match=r"example\.invalid"):
        complete(provider, ChatRequest(model="m"))


def test_guard_allows_loopback_while_requests_are_disallowed(
    stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(piw.providers, "ALLOW_MODEL_REQUESTS", False)
    stub.respond = [StubReply.text("ok")]
    _, message = run(stub.provider(), ask())
    assert message.visible_text() == "ok"
    for url in ("http://localhost:1/v1", "http://127.9.0.1/v1", "http://[::1]:8/v1"):
        guard_base_url(url)
    assert not is_loopback_url("https://api.openai.com/v1")
    assert not is_loopback_url("http://127.0.0.1.example.com/v1")


@pytest.mark.parametrize(
    ("reply", "streamed", "needle"),
    [
        (StubReply.text("", finish_reason=None, end_marker=False), False, "without a finish reason"),
        (
            StubReply.text("Half an ans", finish_reason=None, end_marker=False),
            True,
            "without a finish reason",
        ),
        (StubReply.text("All of it", finish_reason=None), True, "without a finish reason"),
        (
            StubReply.tool("workflow", {}, arguments_text='{"action": "sub', finish_reason=None),
            False,  # a partial tool call is never shown, so a retry repeats nothing visible
            "finish",
        ),
        (StubReply.text("", finish_reason="weird"), False, "unknown finish reason 'weird'"),
    ],
)
def test_a_stream_without_a_known_finish_reason_is_a_transient_error(
    stub: OpenAIStub, reply: StubReply, streamed: bool, needle: str
) -> None:
    """A cut stream never counts as ``stop`` (§4 end of stream): it is an error the loop may retry."""
    stub.respond = [reply]
    events, message = run(stub.provider(), ask())
    final = events[-1]
    assert isinstance(final, ErrorEvent) and final.transient and final.content_streamed is streamed
    assert message.stop_reason == "error" and needle in (message.error_message or "")
