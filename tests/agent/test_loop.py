"""The agent loop (``agent-steps.md`` §4): events, tools, retries and back-off, deadline, cancel, budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piw import DefinitionError, agent
from piw.agent_steps.events import AutoRetryEnd, AutoRetryStart
from piw.agent_steps.loop import AgentLoop, Deadline, LoopTool, TurnBudget
from piw.providers.base import ChatRequest, ProviderEvent
from piw.providers.builder import MessageBuilder
from piw.providers.messages import AssistantReply, Message, ToolSpec, Usage, UserMessage
from piw.providers.scripted import ScriptedProvider
from piw.testing import OpenAIStub, StubReply, openai_stub
from piw.tools import ToolResult
from tests.support.agent_harness import (
    home,
    one_agent,
    piw_cli,
    start,
    start_configured,
    submit_reply,
    write_stub_config,
)

__all__ = ["home", "openai_stub"]

ECHO = ToolSpec(name="echo", description="Echo.", parameters={"type": "object", "properties": {}})


def make_loop(
    provider: Any,
    *,
    tools: list[LoopTool] | None = None,
    timeout_s: float | None = None,
    cancel: threading.Event | None = None,
    limit: int = 50,
    sleeps: list[float] | None = None,
) -> tuple[AgentLoop, list[Any], list[Message]]:
    events: list[Any] = []
    recorded: list[Message] = []

    def sleep(seconds: float, event: threading.Event) -> bool:
        if sleeps is None:
            return event.wait(seconds)
        sleeps.append(seconds)
        return event.is_set()

    loop = AgentLoop(
        provider,
        tools=tools or [],
        budget=TurnBudget(limit=limit),
        deadline=Deadline(timeout_s),
        cancel=cancel or threading.Event(),
        record=recorded.append,
        listeners=[events.append],
        sleep=sleep,
    )
    return loop, events, recorded


def context() -> list[Message]:
    return [UserMessage(content="Go.")]


def test_event_order_for_a_tool_turn_then_text() -> None:
    provider = ScriptedProvider([{"tool": "echo", "arguments": {"x": 1}}, "Done."])
    echo = LoopTool(ECHO, lambda call_id, args, raw: ToolResult(f"echo {args}"))
    loop, events, recorded = make_loop(provider, tools=[echo])
    result = loop.run(context())
    assert result.end == "settled" and isinstance(result.final, AssistantReply)
    assert result.final.visible_text() == "Done."
    kinds = [e.type for e in events if e.type != "message_update"]
    assert kinds == [
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "message_end",
        "turn_end",
        "turn_start",
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
        "agent_settled",
    ]
    assert [e.turn for e in events if e.type == "turn_start"] == [1, 2]
    assert any(e.type == "message_update" and e.delta == "toolcall_delta" for e in events)
    assert [m.role for m in recorded] == ["assistant", "toolResult", "assistant"]
    assert len(events[-2].messages) == 3 and events[-1].aborted is False


def test_unknown_tools_bad_arguments_and_exceptions_become_error_results() -> None:
    from piw.providers.messages import ToolCallBlock

    calls = [
        ToolCallBlock(id="a", name="missing"),
        ToolCallBlock(id="b", name="echo", raw_arguments="[1, 2"),
        ToolCallBlock(id="c", name="boom"),
    ]
    provider = ScriptedProvider([AssistantReply(content=list(calls), stop_reason="toolUse"), "ok"])

    def boom(call_id: str, args: dict[str, Any], raw: str | None) -> ToolResult:
        raise RuntimeError("kaput")

    def echo(call_id: str, args: dict[str, Any], raw: str | None) -> ToolResult:
        return ToolResult(f"bad: {raw}", is_error=True) if raw else ToolResult("fine")

    tools = [LoopTool(ECHO, echo), LoopTool(ECHO.model_copy(update={"name": "boom"}), boom)]
    loop, _, recorded = make_loop(provider, tools=tools)
    loop.run(context())
    results = [m for m in recorded if m.role == "toolResult"]
    assert all(r.is_error for r in results)
    assert results[0].content.startswith("Unknown tool 'missing'")
    assert "[1, 2" in results[1].content
    assert results[2].content == "Tool boom failed: RuntimeError: kaput"
    assert len(provider.requests) == 2  # the turn continued


def _transient(retry_after: float | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"error": "overloaded", "status": 503}
    if retry_after is not None:
        entry["retryAfter"] = retry_after
    return entry


def test_retries_back_off_2_4_8_then_give_up() -> None:
    sleeps: list[float] = []
    provider = ScriptedProvider([_transient()] * 4)
    loop, events, recorded = make_loop(provider, sleeps=sleeps)
    result = loop.run(context())
    assert sleeps == [2.0, 4.0, 8.0]
    assert len(provider.requests) == 4
    starts = [e for e in events if isinstance(e, AutoRetryStart)]
    assert [(e.attempt, e.max_attempts, e.delay_s) for e in starts] == [(1, 3, 2.0), (2, 3, 4.0), (3, 3, 8.0)]
    end = [e for e in events if isinstance(e, AutoRetryEnd)]
    assert len(end) == 1 and end[0].success is False and end[0].final_error == "HTTP 503: overloaded"
    assert result.end == "error" and result.error == "HTTP 503: overloaded"
    assert [m.retried for m in recorded if isinstance(m, AssistantReply)] == [True, True, True, False]
    # retried failures never go back to the model
    assert all(not any(isinstance(m, AssistantReply) for m in r.messages) for r in provider.requests)


@pytest.mark.parametrize(("retry_after", "expected"), [(5.0, 5.0), (60.0, 60.0), (61.0, 2.0), (0.0, 0.0)])
def test_retry_after_is_honoured_up_to_60s(retry_after: float, expected: float) -> None:
    sleeps: list[float] = []
    loop, _, _ = make_loop(ScriptedProvider([_transient(retry_after), "ok"]), sleeps=sleeps)
    assert loop.run(context()).end == "settled"
    assert sleeps == [expected]


def test_non_transient_errors_are_not_retried() -> None:
    provider = ScriptedProvider([{"error": "bad request", "status": 400}])
    loop, events, _ = make_loop(provider, sleeps=[])
    result = loop.run(context())
    assert result.end == "error" and result.error == "HTTP 400: bad request"
    assert len(provider.requests) == 1 and not [e for e in events if isinstance(e, AutoRetryStart)]


class _StreamedThenFails:
    """A provider whose response streams some text and then fails transiently."""

    name = "fake"
    model = "fake"

    def __init__(self) -> None:
        self.requests = 0

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        self.requests += 1
        builder = MessageBuilder(self.name, self.model)
        yield from builder.start()
        yield from builder.text("Half an ans")
        yield from builder.fail("HTTP 502: reset", Usage(), transient=True)


def test_no_retry_once_content_has_streamed() -> None:
    provider = _StreamedThenFails()
    loop, events, _ = make_loop(provider, sleeps=[])
    result = loop.run(context())
    assert provider.requests == 1 and result.end == "error"
    assert not [e for e in events if isinstance(e, AutoRetryStart)]


def test_back_off_honours_the_deadline(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    """A 503 whose 2 s back-off outlives the deadline ends the attempt as timed out, not failed."""
    openai_stub.respond = [StubReply.http_error(503)] * 4
    # The deadline (1.5 s) leaves time to send the first request even on a loaded machine, and ends inside the 2 s
    # back-off that follows its 503.
    flow = one_agent(tmp_path, "agent(prompt='X.', expected_output=assistant_message(), timeout_s=1.5)")
    began = time.monotonic()
    run = start(home, flow, openai_stub.provider())
    assert time.monotonic() - began < 1.5 + 2.0  # did not sit out the 2 s back-off after the deadline
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "timed_out", failed
    assert openai_stub.request_count == 1


def test_back_off_honours_cancel() -> None:
    cancel = threading.Event()
    provider = ScriptedProvider([_transient(30.0), "never"])
    loop, _, _ = make_loop(provider, cancel=cancel)
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    began = time.monotonic()
    result = loop.run(context())
    timer.join()
    assert time.monotonic() - began < 5
    assert result.end == "cancelled"
    assert len(provider.requests) == 1


def test_deadline_aborts_between_tool_turns() -> None:
    def slow(call_id: str, args: dict[str, Any], raw: str | None) -> ToolResult:
        time.sleep(0.3)
        return ToolResult("slow")

    provider = ScriptedProvider([{"tool": "echo", "arguments": {}}] * 5)
    loop, events, _ = make_loop(provider, tools=[LoopTool(ECHO, slow)], timeout_s=0.2)
    result = loop.run(context())
    assert result.end == "timed_out" and len(provider.requests) == 1
    assert events[-1].type == "agent_settled" and events[-1].aborted is True


def test_turn_budget_is_never_exceeded() -> None:
    provider = ScriptedProvider([{"tool": "echo", "arguments": {}}] * 3)
    loop, _, _ = make_loop(provider, tools=[LoopTool(ECHO, lambda *a: ToolResult("x"))], limit=3)
    assert loop.run(context()).end == "max_turns"
    assert len(provider.requests) == 3


# ---- prompts, system prompt, definitions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [
        ("lambda ctx: ''", "the prompt is empty or not a string"),
        ("lambda ctx: 42", "not a string"),
        ("lambda ctx: '   '", "empty"),
        ("lambda ctx: 1 / 0", "prompt failed: ZeroDivisionError"),
    ],
)
def test_bad_prompts_fail_before_any_request(home: Path, tmp_path: Path, prompt: str, needle: str) -> None:
    provider = ScriptedProvider([])
    run = start(home, one_agent(tmp_path, f"agent(prompt={prompt})"), provider)
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "failed" and needle in failed["error"]
    assert provider.requests == [] and run.prompts() == []


def test_system_prompt_and_prompt_function(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub, extra='[agent]\nsystem_prompt = "You are terse."')
    openai_stub.respond = submit_reply({"status": "done"})
    flow = one_agent(tmp_path, "agent(prompt=lambda ctx: f\"Handle {ctx.input['item']}.\")")
    run = start_configured(home, flow, run_input={"item": "ticket-7"})
    messages = openai_stub.requests[0]["messages"]
    assert messages[0] == {"role": "system", "content": "You are terse."}
    assert messages[1]["role"] == "user" and messages[1]["content"].startswith("Handle ticket-7.\n\n---\n")
    assert len(messages) == 2  # nothing else is added: no host files, no extra context
    assert run.terminal("step")["payload"]["output"] == {"status": "done"}


def test_tools_allowlist_rules(home: Path, tmp_path: Path) -> None:
    with pytest.raises(DefinitionError):
        agent(prompt="x", tools=("workflow",))
    flow = one_agent(tmp_path, "agent(prompt='x', tools=('no-such-tool',))")
    result = piw_cli(
        home, "run", str(flow), "--provider", "scripted", "--script", str(tmp_path / "none.json")
    )
    assert result.returncode == 2 and "no-such-tool" in result.stderr
    assert not (home / "runs").exists() or not any(p for p in (home / "runs").iterdir() if p.name[0] != ".")


def test_shipped_tools_are_offered_only_when_listed(home: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the secret is 7\n")
    flow = one_agent(
        tmp_path, "agent(prompt='Read notes.txt.', expected_output=assistant_message(), tools=('read', 'ls'))"
    )
    from tests.support.agent_harness import make_executor

    provider = ScriptedProvider([{"tool": "read", "arguments": {"path": "notes.txt"}}, "It says 7."])
    run = start(home, flow, executor=make_executor(provider, cwd=tmp_path))
    assert provider.requests[0].tool_names() == ["read", "ls"]
    assert "the secret is 7" in run.tool_results()[0]["content"]
    assert run.terminal("step")["payload"]["output"] == "It says 7."


def test_a_workflow_file_may_register_its_own_tool(home: Path, tmp_path: Path) -> None:
    flow = one_agent(
        tmp_path,
        "agent(prompt='Look it up.', expected_output=assistant_message(), tools=('lookup',))",
        header=(
            "from piw.tools import Tool, ToolResult, register\n"
            "register('lookup', Tool('lookup', 'Look up.', {'type': 'object', 'properties': {}},\n"
            "                        lambda call_id, args, ctx: ToolResult('forty-two')))\n"
        ),
    )
    script = tmp_path / "r.json"
    script.write_text(
        '[{"tool": "lookup", "arguments": {}, "text": "Checking."}, {"text": "It is forty-two."}]'
    )
    result = piw_cli(home, "run", str(flow), "--provider", "scripted", "--script", str(script), "--json")
    assert result.returncode == 0, result.stderr
    assert '"finalOutput": "It is forty-two."' in result.stdout
