"""Shared provider machinery: complete(), the message builder, failure hints, the Anthropic request body."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest

from piw.config.settings import ProviderConfig
from piw.errors import ProviderError
from piw.providers.anthropic_messages import StreamState as _AnthropicState
from piw.providers.anthropic_messages import build_body as anthropic_body
from piw.providers.base import (
    ChatRequest,
    DoneEvent,
    ErrorEvent,
    ProviderEvent,
    StartEvent,
    TextDeltaEvent,
    complete,
    force_tool,
)
from piw.providers.builder import MessageBuilder
from piw.providers.failures import is_transient_status, parse_retry_after, status_message
from piw.providers.messages import (
    AssistantReply,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.selection import ProviderSelection
from piw.testing import OpenAIStub, StubReply


class Silent:
    """A provider that forgets its final event: a bug ``complete`` must name, not hide."""

    name = "silent"
    model = "m"

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        yield StartEvent()


def test_complete_requires_a_final_event() -> None:
    with pytest.raises(ProviderError, match="silent"):
        complete(Silent(), ChatRequest(model="m"))


def test_builder_numbers_blocks_and_forces_tool_use() -> None:
    builder = MessageBuilder("p", "m")
    events = builder.start() + builder.thinking("hm") + builder.text("Hi ") + builder.text("there")
    events += builder.tool_call(0, '{"a":', call_id="c1", name="read") + builder.tool_call(0, " 1}")
    events += builder.tool_call(1, "not json", call_id="c2", name="bad")
    events += builder.finish("stop", Usage(input=1))
    indexes = {(event.type, event.content_index) for event in events}
    assert ("thinking_end", 0) in indexes and ("text_end", 1) in indexes and ("toolcall_end", 3) in indexes
    final = events[-1]
    assert isinstance(final, DoneEvent)
    message = final.message
    assert message.stop_reason == "toolUse" and message.visible_text() == "Hi there"
    good, bad = message.tool_calls()
    assert (good.arguments, good.raw_arguments) == ({"a": 1}, None)
    assert (bad.arguments, bad.raw_arguments) == ({}, "not json")


def test_failures_after_content_are_flagged_and_aborts_are_never_transient() -> None:
    builder = MessageBuilder("p", "m")
    builder.text("partial")
    [*_, error] = builder.fail("HTTP 503", transient=True)
    assert isinstance(error, ErrorEvent) and error.content_streamed and error.transient
    [aborted] = MessageBuilder("p", "m").fail("stop", aborted=True, transient=True)
    assert isinstance(aborted, ErrorEvent)
    assert aborted.message.stop_reason == "aborted" and not aborted.transient


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "12"}) == 12.0
    assert parse_retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    soon = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= (parse_retry_after({"Retry-After": soon}) or 0) <= 31
    assert parse_retry_after({"Retry-After": "whenever"}) is None
    assert parse_retry_after({}) is None
    assert [is_transient_status(s) for s in (400, 401, 404, 429, 500, 503, 599)] == [False] * 3 + [True] * 4
    assert status_message(502, "  bad\n gateway ") == "HTTP 502: bad gateway"


def test_an_injected_http_client_is_used_cancellable_and_left_open() -> None:
    with OpenAIStub() as stub, httpx2.Client() as client:
        config = ProviderConfig(base_url=stub.base_url)
        provider = OpenAICompatProvider(ProviderSelection("stub", "stub-model", config), http_client=client)
        stub.respond = [StubReply.text("ok"), StubReply.hold(), StubReply.text("again")]
        request = ChatRequest(model="stub-model", messages=[UserMessage(content="hi")])
        assert complete(provider, request).visible_text() == "ok"
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        started = time.monotonic()
        assert complete(provider, request, cancel).stop_reason == "aborted"
        assert time.monotonic() - started < 5
        assert complete(provider, request).visible_text() == "again"
        assert not client.is_closed


def test_anthropic_body_keeps_the_system_prompt_apart_and_groups_tool_results() -> None:
    call_a = ToolCallBlock(id="a", name="read", arguments={"p": 1})
    call_b = ToolCallBlock(id="b", name="read", arguments={"p": 2})
    request = ChatRequest(
        model="claude",
        system_prompt="sys",
        tools=[ToolSpec(name="workflow", description="d")],
        tool_choice=force_tool("workflow"),
        messages=[
            UserMessage(content="go"),
            AssistantReply(content=[TextBlock(text="reading"), call_a, call_b], stop_reason="toolUse"),
            ToolResultMessage(tool_call_id="a", tool_name="read", content="one"),
            ToolResultMessage(tool_call_id="b", tool_name="read", content="two", is_error=True),
        ],
    )
    body = anthropic_body(request, ProviderConfig(api="anthropic-messages"), None)
    assert body["system"] == "sys" and body["max_tokens"] == 4096
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [block["tool_use_id"] for block in body["messages"][2]["content"]] == ["a", "b"]
    assert body["tools"][0]["input_schema"] == {"type": "object", "properties": {}}
    assert "tool_choice" not in body
    forced = ProviderConfig(api="anthropic-messages", compat={"supports_forced_tool_choice": True})
    assert anthropic_body(request, forced, None)["tool_choice"] == {"type": "tool", "name": "workflow"}


def _anthropic_events(*events: dict[str, Any]) -> list[Any]:
    """Messages API stream events as the SDK yields them (attribute access), without the SDK."""

    def wrap(value: Any) -> Any:
        if isinstance(value, dict):
            return SimpleNamespace(**{key: wrap(item) for key, item in value.items()})
        return value

    return [wrap(event) for event in events]


_TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}


def _text_delta(text: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}


@pytest.mark.parametrize(
    ("events", "stop", "error"),
    [
        ([_TEXT_START, _text_delta("Hel")], None, "without a finish reason"),
        ([], None, "without a finish reason"),
        (
            [_text_delta("x"), {"type": "message_delta", "delta": {"stop_reason": "mystery"}, "usage": None}],
            None,
            "unknown finish reason 'mystery'",
        ),
        ([_text_delta("ok"), {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}], "stop", None),
        (
            [_text_delta("o"), {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}],
            "length",
            None,
        ),
    ],
)
def test_anthropic_stream_without_a_known_stop_reason_is_no_reply(
    events: list[dict[str, Any]], stop: str | None, error: str | None
) -> None:
    """The Anthropic adapter's end of stream follows §4: only a known stop reason makes a reply."""
    builder = MessageBuilder("claude", "sonnet")
    state = _AnthropicState(builder, None)
    streamed = [out for event in _anthropic_events(*events) for out in state.feed(event)]
    final = state.finish()[-1]
    if stop is None:
        assert isinstance(final, ErrorEvent) and final.transient
        assert final.message.stop_reason == "error" and error in (final.message.error_message or "")
        assert final.content_streamed == any(isinstance(e, TextDeltaEvent) for e in streamed)
    else:
        assert isinstance(final, DoneEvent) and final.message.stop_reason == stop
