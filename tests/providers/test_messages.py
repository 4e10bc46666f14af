"""Conversation messages: exact visible text, usage sums, the camelCase wire shape."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from piw.providers.messages import (
    MESSAGE_ADAPTER,
    AssistantReply,
    CustomMessage,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
)


def test_visible_text_joins_text_blocks_exactly_and_ignores_the_rest() -> None:
    message = AssistantReply(
        content=[
            ThinkingBlock(thinking="let me think"),
            TextBlock(text="  **Hello**, "),
            ToolCallBlock(id="c1", name="read", arguments={"path": "x"}),
            TextBlock(text="wörld ✓\n\n"),
        ],
        stop_reason="toolUse",
    )
    assert message.visible_text() == "  **Hello**, wörld ✓\n\n"
    assert [call.id for call in message.tool_calls()] == ["c1"]
    assert message.thinking_text() == "let me think"


def test_usage_add_sums_tokens_and_keeps_an_unknown_cost_unknown() -> None:
    priced = Usage(input=10, output=5, cache_read=2, cache_write=1, cost=0.5)
    unpriced = Usage(input=1, output=1)
    assert priced.add(priced) == Usage(input=20, output=10, cache_read=4, cache_write=2, cost=1.0)
    assert priced.add(unpriced).cost is None
    assert unpriced.add(priced).cost is None
    assert priced.add(unpriced).input == 11
    assert priced.total_tokens == 18


def test_assistant_message_wire_shape_is_camel_case_and_round_trips() -> None:
    message = AssistantReply(
        content=[TextBlock(text="hi"), ToolCallBlock(id="c", name="t", arguments={"a": 1})],
        stop_reason="error",
        error_message="HTTP 500",
        usage=Usage(input=3, cache_read=1, cost=None),
        provider="local",
        model="m",
        retried=True,
        completed_at="2025-01-01T00:00:00.000Z",
    )
    wire = message.model_dump(mode="json", by_alias=True)
    assert wire["stopReason"] == "error"
    assert wire["errorMessage"] == "HTTP 500"
    assert wire["completedAt"] == "2025-01-01T00:00:00.000Z"
    assert wire["usage"]["cacheRead"] == 1
    assert wire["content"][1] == {
        "type": "toolCall",
        "id": "c",
        "name": "t",
        "arguments": {"a": 1},
        "rawArguments": None,
    }
    assert MESSAGE_ADAPTER.validate_python(wire) == message


@pytest.mark.parametrize(
    "message",
    [
        UserMessage(content="hello"),
        ToolResultMessage(
            tool_call_id="c1", tool_name="workflow", content="ok", terminate=True, details={"x": 1}
        ),
        CustomMessage(custom_type="pi-workflows-agent-step", content="prompt", details={"kind": "step"}),
    ],
)
def test_message_union_dispatches_on_role(message: UserMessage | ToolResultMessage | CustomMessage) -> None:
    assert MESSAGE_ADAPTER.validate_json(MESSAGE_ADAPTER.dump_json(message, by_alias=True)) == message


def test_tool_result_uses_camel_case_keys() -> None:
    wire = ToolResultMessage(tool_call_id="c1", tool_name="t", content="x", is_error=True).model_dump(
        by_alias=True
    )
    assert {"toolCallId", "toolName", "isError", "terminate"} <= wire.keys()


def test_messages_are_frozen() -> None:
    message = UserMessage(content="x")
    with pytest.raises(ValidationError):
        message.content = "y"  # type: ignore[misc]


def test_tool_spec_requires_an_object_root_without_union() -> None:
    assert ToolSpec(name="t", description="d").parameters["type"] == "object"
    with pytest.raises(ValidationError):
        ToolSpec(name="t", description="d", parameters={"anyOf": [{"type": "object"}]})
    with pytest.raises(ValidationError):
        ToolSpec(name="t", description="d", parameters={"type": "string"})
