"""The scripted provider: every entry kind, per-node scripts, exhaustion, streaming and cancellation."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from piw.errors import ProviderError, ScriptExhausted
from piw.providers.base import ChatRequest, ErrorEvent, ProviderEvent, StepRef, complete
from piw.providers.messages import AssistantReply, TextBlock, ThinkingBlock, UserMessage
from piw.providers.scripted import ScriptedProvider, load_script


def request(node: str | None = "check", attempt: str = "a" * 32, text: str = "go") -> ChatRequest:
    step = StepRef(run_id="r" * 32, node_id=node, attempt_id=attempt) if node else None
    return ChatRequest(model="scripted", messages=[UserMessage(content=text)], step=step)


def run(provider: ScriptedProvider, req: ChatRequest) -> tuple[list[ProviderEvent], AssistantReply]:
    events: list[ProviderEvent] = []
    return events, complete(provider, req, threading.Event(), on_event=events.append)


def test_text_streams_in_small_deltas_and_stays_exact() -> None:
    text = "  Line one, **bold** ✓\n\nline two  "
    events, message = run(ScriptedProvider([{"text": text}]), request())
    assert message.visible_text() == text and message.stop_reason == "stop"
    deltas = [event.delta for event in events if event.type == "text_delta"]
    assert len(deltas) > 3 and "".join(deltas) == text
    assert message.usage.cost == 0.0


def test_thinking_then_text() -> None:
    _, message = run(ScriptedProvider([{"thinking": "hmm, let me see", "text": "answer"}]), request())
    assert isinstance(message.content[0], ThinkingBlock) and message.content[0].thinking == "hmm, let me see"
    assert message.visible_text() == "answer"


def test_tool_call_entry() -> None:
    events, message = run(ScriptedProvider([{"tool": "read", "arguments": {"path": "README.md"}}]), request())
    assert message.stop_reason == "toolUse"
    [call] = message.tool_calls()
    assert (call.name, call.arguments) == ("read", {"path": "README.md"})
    assert call.id == "call_1"
    assert any(event.type == "toolcall_delta" for event in events)


def test_submit_entry_uses_the_active_step_ids() -> None:
    _, message = run(ScriptedProvider([{"submit": {"route": "bug"}}]), request("classify", "f" * 32))
    [call] = message.tool_calls()
    assert call.name == "workflow"
    assert call.arguments == {
        "action": "submit",
        "step": "classify",
        "attempt": "f" * 32,
        "output": {"route": "bug"},
    }


def test_submit_without_a_step_is_a_script_error() -> None:
    with pytest.raises(ProviderError, match="no step"):
        run(ScriptedProvider([{"submit": 1}]), request(node=None))


@pytest.mark.parametrize(("status", "transient"), [(503, True), (429, True), (400, False)])
def test_error_entries_are_error_results_classified_like_http(status: int, transient: bool) -> None:
    events, message = run(
        ScriptedProvider([{"error": "overloaded", "status": status, "retryAfter": 2}]), request()
    )
    assert message.stop_reason == "error" and message.error_message == f"HTTP {status}: overloaded"
    final = events[-1]
    assert isinstance(final, ErrorEvent) and final.transient is transient and final.retry_after_s == 2.0


def test_length_stop() -> None:
    _, message = run(ScriptedProvider([{"stop": "length", "text": "cut of"}]), request())
    assert message.stop_reason == "length" and message.visible_text() == "cut of"


def test_assistant_messages_and_functions_as_entries() -> None:
    seen: list[tuple[str, int]] = []

    def echo(req: ChatRequest, index: int) -> AssistantReply:
        last = req.messages[-1]
        assert isinstance(last, UserMessage)
        seen.append((last.content, index))
        return AssistantReply(content=[TextBlock(text=f"echo {index}")])

    fixed = AssistantReply(content=[TextBlock(text="fixed")])
    provider = ScriptedProvider([fixed, echo, "bare string"])
    assert complete(provider, request(text="one")).visible_text() == "fixed"
    assert complete(provider, request(text="two")).visible_text() == "echo 1"
    assert complete(provider, request(text="three")).visible_text() == "bare string"
    assert seen == [("two", 1)]


def test_per_node_scripts_consume_their_own_lists() -> None:
    provider = ScriptedProvider(
        {"a": [{"text": "a1"}, {"text": "a2"}], "b": [{"text": "b1"}], "*": [{"text": "any"}]}
    )
    assert complete(provider, request("b")).visible_text() == "b1"
    assert complete(provider, request("a")).visible_text() == "a1"
    assert complete(provider, request("other")).visible_text() == "any"
    assert complete(provider, request("a")).visible_text() == "a2"
    assert provider.pending() == 0
    assert [req.step.node_id for req in provider.requests if req.step] == ["b", "a", "other", "a"]


def test_a_request_beyond_the_script_raises_naming_number_and_node() -> None:
    provider = ScriptedProvider([{"text": "only"}])
    complete(provider, request("check"))
    with pytest.raises(ScriptExhausted, match=r"request 2 \(node check\)"):
        complete(provider, request("check"))
    per_node = ScriptedProvider({"a": [{"text": "x"}]})
    with pytest.raises(ScriptExhausted, match=r"request 1 \(node b\)"):
        complete(per_node, request("b"))


def test_cancel_mid_stream_aborts_with_the_partial_text() -> None:
    provider = ScriptedProvider([{"text": "one two three four five six"}])
    cancel = threading.Event()
    stream = provider.stream(request(), cancel)
    seen = []
    for event in stream:
        seen.append(event)
        if event.type == "text_delta":
            cancel.set()
    final = seen[-1]
    assert isinstance(final, ErrorEvent) and final.message.stop_reason == "aborted"
    assert final.message.visible_text() == "one "
    assert final.content_streamed


def test_load_script_reads_lists_and_per_node_mappings(tmp_path: Path) -> None:
    flat = tmp_path / "flat.replies.json"
    flat.write_text(json.dumps([{"text": "hi"}, {"submit": {"ok": True}}]), encoding="utf-8")
    assert ScriptedProvider.from_file(flat).pending() == 2
    nodes = tmp_path / "nodes.json"
    nodes.write_text(
        json.dumps({"plan": [{"text": "p"}], "work": [{"text": "w1"}, {"text": "w2"}]}), encoding="utf-8"
    )
    assert load_script(nodes) == {"plan": [{"text": "p"}], "work": [{"text": "w1"}, {"text": "w2"}]}
    assert ScriptedProvider.from_file(nodes).pending() == 3


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"a": 1}', "mapping from node id"),
        ("[1, 2", "Cannot parse"),
        ('[{"txet": "typo"}]', "needs one of"),
        ('[{"text": "x", "colour": "red"}]', "unknown keys: colour"),
        ('[{"stop": "stop", "text": "x"}]', '"stop" must be "length"'),
        ('[{"tool": "read", "arguments": [1]}]', '"arguments" must be an object'),
    ],
)
def test_malformed_scripts_fail_when_loaded(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ProviderError, match=fragment):
        ScriptedProvider.from_file(path)
