"""Assistant completion (``agent-steps.md`` acceptance tests 1–14): the visible reply is the step output."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from piw import DefinitionError, agent, assistant_message
from piw.agent_steps.events import AgentSettled, AutoRetryEnd, AutoRetryStart, MessageEnd
from piw.agent_steps.workflow_tool import ASSISTANT_STEP_SUBMIT
from piw.providers.base import ChatRequest
from piw.providers.messages import AssistantReply, TextBlock, ToolCallBlock
from piw.providers.scripted import ScriptedProvider
from piw.testing import OpenAIStub, StubReply, openai_stub
from piw.tools import Tool, ToolResult, register, unregister
from tests.support.agent_harness import (
    PIW,
    Run,
    home,
    make_executor,
    one_agent,
    only_run,
    resume,
    start,
    start_crashing,
    write_stub_config,
    write_workflow,
)
from tests.support.paths import AGENT_FIXTURES, REPO

__all__ = ["home", "openai_stub"]  # fixtures used by name

ASSISTANT = "agent(prompt='Answer the user.', expected_output=assistant_message())"


def assistant_flow(tmp_path: Path, node: str = ASSISTANT) -> Path:
    return one_agent(tmp_path, node)


@pytest.fixture
def lookup_tool() -> Any:
    calls: list[dict[str, Any]] = []

    def execute(call_id: str, args: dict[str, Any], ctx: Any) -> ToolResult:
        calls.append(args)
        return ToolResult(f"result {len(calls)}")

    register("lookup", Tool("lookup", "Look something up.", {"type": "object", "properties": {}}, execute))
    yield calls
    unregister("lookup")


# ---- 1–5: what the output is -------------------------------------------------------------------------------


def test_01_one_visible_message_completes_the_node_in_one_request(home: Path, tmp_path: Path) -> None:
    provider = ScriptedProvider([{"text": "The answer is 42."}])
    run = start(home, assistant_flow(tmp_path), provider)
    assert run.state is not None and run.state.status == "completed"
    assert run.terminal("step")["payload"]["output"] == "The answer is 42."
    assert len(provider.requests) == 1
    assert [p["completion"] for p in run.prompts()] == ["assistant"]
    receipt = run.of_type("assistant_completion_recorded", "step")
    assert len(receipt) == 1 and receipt[0]["payload"]["adopted"] is False
    # the receipt comes before the terminal event and names the captured entry
    assert run.types().index("assistant_completion_recorded") < run.types().index("node_finished")
    assert receipt[0]["payload"]["assistantEntryId"] == run.entries[-1]["id"]


def test_01_stub_one_request_no_tools(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    openai_stub.respond = [StubReply.text("Hello there.")]
    run = start(home, assistant_flow(tmp_path), openai_stub.provider())
    assert run.terminal("step")["payload"]["output"] == "Hello there."
    assert openai_stub.request_count == 1
    assert openai_stub.tool_names == [[]]
    assert "tool_choice" not in openai_stub.requests[0]


EXACT = "  **Bold** and _emphasis_ — ünïcödé ✓ 日本語\n\n```py\nprint('x')\n```\n\t- item  \n\n"


@pytest.mark.parametrize("via", ["scripted", "stub"])
def test_02_exact_text_is_kept(home: Path, tmp_path: Path, openai_stub: OpenAIStub, via: str) -> None:
    if via == "stub":
        openai_stub.respond = [StubReply.text(EXACT)]
        provider: Any = openai_stub.provider()
    else:
        provider = ScriptedProvider([AssistantReply(content=[TextBlock(text=EXACT)])])
    run = start(home, assistant_flow(tmp_path), provider)
    assert run.terminal("step")["payload"]["output"] == EXACT
    receipt = run.of_type("assistant_completion_recorded")[0]["payload"]
    assert receipt["textSha256"] == "sha256:" + hashlib.sha256(EXACT.encode("utf-8")).hexdigest()
    assert receipt["textPreview"] == EXACT
    assert run.state is not None and run.state.final_output == EXACT
    captured = next(e for e in run.entries if e["id"] == receipt["assistantEntryId"])
    assert "".join(b["text"] for b in captured["message"]["content"] if b["type"] == "text") == EXACT


def test_02_long_reply_preview_is_first_1000_chars(home: Path, tmp_path: Path) -> None:
    text = "é" * 1500
    run = start(home, assistant_flow(tmp_path), ScriptedProvider([text]))
    assert run.terminal("step")["payload"]["output"] == text
    assert run.of_type("assistant_completion_recorded")[0]["payload"]["textPreview"] == text[:1000]


def test_03_thinking_is_excluded(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    openai_stub.respond = [StubReply.text("Visible answer.", thinking="secret reasoning")]
    run = start(home, assistant_flow(tmp_path), openai_stub.provider())
    assert run.terminal("step")["payload"]["output"] == "Visible answer."
    captured = run.assistants()[-1]
    assert [b["type"] for b in captured["content"]] == [
        "thinking",
        "text",
    ]  # kept in the record, not the output

    run2 = start(
        home,
        assistant_flow(tmp_path / "b"),
        ScriptedProvider([{"thinking": "hmm", "text": "Scripted answer."}]),
    )
    assert run2.terminal("step")["payload"]["output"] == "Scripted answer."


def test_04_text_in_a_tool_call_message_is_not_output(home: Path, tmp_path: Path, lookup_tool: Any) -> None:
    node = "agent(prompt='Look it up.', expected_output=assistant_message(), tools=('lookup',))"
    provider = ScriptedProvider(
        [{"tool": "lookup", "arguments": {"q": 1}, "text": "Let me check. "}, {"text": "Found: result 1."}]
    )
    run = start(home, one_agent(tmp_path, node), provider)
    assert run.terminal("step")["payload"]["output"] == "Found: result 1."
    assert lookup_tool == [{"q": 1}]
    assert provider.requests[0].tool_names() == ["lookup"]  # never `workflow`


def test_05_several_tool_turns_complete_after_the_last(home: Path, tmp_path: Path, lookup_tool: Any) -> None:
    node = "agent(prompt='Look it up.', expected_output=assistant_message(), tools=('lookup',))"
    provider = ScriptedProvider(
        [{"tool": "lookup", "arguments": {}, "text": "First."}] * 3 + [{"text": "All done."}]
    )
    run = start(home, one_agent(tmp_path, node), provider)
    assert len(provider.requests) == 4 and len(lookup_tool) == 3
    finished = run.terminal("step")["payload"]
    assert finished["output"] == "All done."
    assert finished["usage"]["requests"] == 4
    receipt = run.of_type("assistant_completion_recorded")[0]["payload"]
    # the captured entry is the last assistant message, after every tool result
    last_assistant = [e for e in run.entries if e["message"]["role"] == "assistant"][-1]
    assert receipt["assistantEntryId"] == last_assistant["id"] == run.entries[-1]["id"]
    assert [m["role"] for m in run.messages] == ["custom"] + ["assistant", "toolResult"] * 3 + ["assistant"]


# ---- 6–7: retries and failures -----------------------------------------------------------------------------


def test_06_retry_before_settlement(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    openai_stub.respond = [StubReply.http_error(503, retry_after=0), StubReply.text("Recovered answer.")]
    seen: list[Any] = []
    run = start(home, assistant_flow(tmp_path), openai_stub.provider(), listeners=[seen.append])
    assert openai_stub.request_count == 2
    retries = [e for e in seen if isinstance(e, AutoRetryStart | AutoRetryEnd)]
    assert [type(e) for e in retries] == [AutoRetryStart, AutoRetryEnd]
    assert isinstance(retries[0], AutoRetryStart)
    assert retries[0].attempt == 1 and "503" in retries[0].error
    assert isinstance(retries[1], AutoRetryEnd) and retries[1].success
    assert run.terminal("step")["payload"]["output"] == "Recovered answer."
    # the failed response is recorded, marked retried, and never sent back to the model
    assistants = run.assistants()
    assert [a.get("retried", False) for a in assistants] == [True, False]
    assert assistants[0]["stopReason"] == "error"
    assert all(m["role"] != "assistant" for m in openai_stub.requests[1]["messages"])
    assert len(run.prompts()) == 1  # one delivery: no re-prompt
    assert run.terminal("step")["payload"]["usage"]["requests"] == 2


FAILURES = {
    "empty": ([StubReply.text("")], 1, "empty"),
    "blank": ([StubReply.text("  \n\t ")], 1, "empty"),
    "length": ([StubReply.text("partial answ", finish_reason="length")], 1, "length"),
    "http400": ([StubReply.http_error(400, message="bad request body")], 1, "HTTP 400"),
    "http503": ([StubReply.http_error(503, retry_after=0)] * 4, 4, "HTTP 503"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_07_failures_fail_once_without_reminder(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, case: str
) -> None:
    replies, requests, needle = FAILURES[case]
    openai_stub.respond = replies
    run = start(home, assistant_flow(tmp_path), openai_stub.provider())
    assert openai_stub.request_count == requests
    failed = run.terminal("step")
    assert failed["type"] == "node_failed" and failed["payload"]["outcome"] == "failed"
    assert needle in failed["payload"]["error"]
    assert [p["deliveryKind"] for p in run.prompts()] == ["step"]
    assert [m["details"]["kind"] for m in run.step_messages()] == ["step"]
    assert not run.of_type("assistant_completion_recorded")
    assert run.state is not None and run.state.status == "failed"


def test_07_tool_only_ending_fails_once(home: Path, tmp_path: Path, lookup_tool: Any) -> None:
    """A reply that ends in tool calls when the turn budget runs out never completes the step."""
    node = "agent(prompt='Look.', expected_output=assistant_message(), tools=('lookup',))"
    provider = ScriptedProvider([{"tool": "lookup", "arguments": {}, "text": "I will look."}] * 2)
    run = start(home, one_agent(tmp_path, node), provider, max_turns=2)
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "failed" and failed["error"] == "Step step used 2 turns without finishing."
    assert len(provider.requests) == 2 and len(run.prompts()) == 1


# ---- 8: user interrupt (park, resume keeps the attempt) ----------------------------------------------------


def test_08_user_interrupt_parks_and_resume_keeps_attempt(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    flow = assistant_flow(tmp_path)
    openai_stub.respond = [StubReply.hold(), StubReply.text("Answer after resume.")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PIW_"))}
    env.update(PIW_HOME=str(home), NO_COLOR="1")
    proc = subprocess.Popen(
        [PIW, "run", str(flow)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 20
    while openai_stub.request_count < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert openai_stub.request_count == 1
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    run = only_run(home)
    assert run.state_json["status"] == "running"
    assert not run.of_type("node_failed") and not run.of_type("node_finished")
    assert [p["deliveryKind"] for p in run.prompts()] == ["step"]  # no reminder
    first_attempt = run.of_type("agent_prompt_sent")[0]["attemptId"]

    from tests.support.agent_harness import piw_cli

    resumed = piw_cli(home, "resume", run.run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "Answer after resume." in resumed.stdout
    finished = run.terminal("step")
    assert finished["attemptId"] == first_attempt
    assert finished["payload"]["output"] == "Answer after resume."
    assert openai_stub.request_count == 2


# ---- 9: timeout and cancellation ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["assistant", "submit"])
def test_09_timeout_closes_a_held_request(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, mode: str
) -> None:
    expected = "expected_output=assistant_message(), " if mode == "assistant" else ""
    flow = one_agent(tmp_path, f"agent(prompt='Answer.', {expected}timeout_s=0.5)")
    openai_stub.respond = [StubReply.hold()]
    began = time.monotonic()
    run = start(home, flow, openai_stub.provider())
    elapsed = time.monotonic() - began
    assert elapsed < 10
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "timed_out"
    assert failed["error"] == "Step step timed out after 0.5s."
    assert run.state is not None and run.state.status == "timed_out"
    assert [p["deliveryKind"] for p in run.prompts()] == ["step"]  # no reminder after a timeout
    _wait_for(lambda: openai_stub.disconnects >= 1)
    assert openai_stub.request_count == 1
    # the partial (empty) message ended aborted and was recorded
    assert run.assistants()[-1]["stopReason"] == "aborted"


def test_09_cancel_closes_a_held_request(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    from piw.run.engine import Engine, RunOptions
    from piw.workflow.loader import load_workflow

    flow = one_agent(tmp_path, ASSISTANT)
    openai_stub.respond = [StubReply.hold()]
    engine = Engine(
        load_workflow(str(flow), home),
        home,
        RunOptions(
            agent_executor=make_executor(openai_stub.provider()),
            origin_session={"id": "ses_test", "startedAt": "2026-01-01T00:00:00.000Z"},
        ),
    )
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.setdefault("state", engine.start(None)))
    thread.start()
    _wait_for(lambda: openai_stub.request_count == 1 and engine.active is not None)
    began = time.monotonic()
    assert engine.active is not None
    engine.active.cancel.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - began < 10
    state = box["state"]
    run = Run(state.run_id, home / "runs" / state.run_id, state)
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "cancelled" and failed["error"] == "Step step was cancelled."
    assert [p["deliveryKind"] for p in run.prompts()] == ["step"]
    _wait_for(lambda: openai_stub.disconnects >= 1)


def test_09_late_submit_from_a_timed_out_attempt_is_stale(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    """The node is revisited after a timeout; a submit quoting the old attempt id is refused as stale."""
    flow = write_workflow(
        tmp_path,
        "retry",
        """
        from piw import agent, compute, define_workflow, switch
        workflow = define_workflow(
            name="retry", start_at="step",
            nodes={"step": agent(prompt="Work.", timeout_s=lambda ctx: 30 if "step" in ctx.results else 0.5),
                   "done": compute(lambda ctx: ctx.outputs["step"])},
            edges=[switch("step", on="$result.outcome", cases={"timed_out": "step", "ok": "done"})],
        )
        """,
    )
    old: dict[str, str] = {}

    def respond(body: dict[str, Any]) -> StubReply:
        from tests.support.agent_harness import active_ids

        step, attempt = active_ids(body)
        number = openai_stub.request_count
        if number == 1:
            old["attempt"] = attempt
            return StubReply.hold()
        if number == 2:
            return StubReply.tool(
                "workflow",
                {"action": "submit", "step": step, "attempt": old["attempt"], "output": {"late": True}},
            )
        return StubReply.tool(
            "workflow", {"action": "submit", "step": step, "attempt": attempt, "output": {"late": False}}
        )

    openai_stub.respond = respond
    run = start(home, flow, openai_stub.provider())
    assert run.state is not None and run.state.status == "completed", run.state
    attempts = [e["attemptId"] for e in run.of_type("node_started", "step")]
    assert len(attempts) == 2 and attempts[0] == old["attempt"]
    stale = f"Attempt {attempts[0]} is stale. The active attempt for step step is {attempts[1]}."
    results = run.tool_results()
    assert results[0]["content"] == stale and results[0]["isError"] is True
    assert run.terminal("done")["payload"]["output"] == {"late": False}


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# ---- 10–11 -------------------------------------------------------------------------------------------------


def test_10_workflow_submit_in_assistant_step_gets_a11_text(home: Path, tmp_path: Path) -> None:
    submit = {"action": "submit", "step": "step", "attempt": "0" * 32, "output": "x"}
    provider = ScriptedProvider([{"tool": "workflow", "arguments": submit}, {"text": "The real answer."}])
    run = start(home, assistant_flow(tmp_path), provider)
    result = run.tool_results()[0]
    assert result["content"] == ASSISTANT_STEP_SUBMIT
    assert (
        result["content"]
        == "This step completes with a normal assistant response. Do not submit workflow output."
    )
    assert result["isError"] is True and not result.get("terminate")
    assert run.terminal("step")["payload"]["output"] == "The real answer."
    assert len(provider.requests) == 2
    assert all(request.tool_names() == [] for request in provider.requests)


def test_11_next_node_starts_only_after_settlement(home: Path, tmp_path: Path) -> None:
    flow = write_workflow(
        tmp_path,
        "two",
        """
        from piw import agent, assistant_message, define_workflow, edge
        workflow = define_workflow(
            name="two", start_at="first",
            nodes={"first": agent(prompt="One.", expected_output=assistant_message()),
                   "second": agent(prompt="Two.", expected_output=assistant_message())},
            edges=[edge("first", "second")],
        )
        """,
    )
    order: list[str] = []

    def reply(text: str) -> Any:
        def make(request: ChatRequest, index: int) -> AssistantReply:
            order.append(f"request:{request.step.node_id if request.step else '?'}")
            return AssistantReply(content=[TextBlock(text=text)])

        return make

    provider = ScriptedProvider({"first": [reply("A")], "second": [reply("B")]})

    def listen(event: Any) -> None:
        if isinstance(event, AgentSettled):
            order.append("settled")
        elif isinstance(event, MessageEnd):
            order.append("message_end")

    run = start(home, flow, provider, listeners=[listen])
    assert order == ["request:first", "message_end", "settled", "request:second", "message_end", "settled"]
    assert run.terminal("second")["payload"]["output"] == "B"


# ---- 12–13: limits and definition errors -------------------------------------------------------------------


def test_12_over_max_chars_fails_once(home: Path, tmp_path: Path) -> None:
    node = "agent(prompt='Short please.', expected_output=assistant_message(max_chars=10))"
    provider = ScriptedProvider(["This reply is far too long."])
    run = start(home, one_agent(tmp_path, node), provider)
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "failed" and "over the limit of 10" in failed["error"]
    assert len(provider.requests) == 1 and len(run.prompts()) == 1
    assert not run.of_type("assistant_completion_recorded")
    assert run.prompts()[0]["prompt"].endswith("\nKeep the reply to at most 10 characters.")
    assert run.snapshot["nodes"]["step"]["expectedOutput"] == {"kind": "assistant-message", "maxChars": 10}


def test_12_exactly_max_chars_passes(home: Path, tmp_path: Path) -> None:
    node = "agent(prompt='Short.', expected_output=assistant_message(max_chars=5))"
    run = start(home, one_agent(tmp_path, node), ScriptedProvider(["ü✓ab "]))
    assert run.terminal("step")["payload"]["output"] == "ü✓ab "


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "3"])
def test_12_bad_max_chars_is_a_definition_error(bad: Any) -> None:
    with pytest.raises(DefinitionError):
        assistant_message(max_chars=bad)


def test_12_unset_max_chars_leaves_no_key(home: Path, tmp_path: Path) -> None:
    run = start(home, assistant_flow(tmp_path), ScriptedProvider(["ok"]))
    assert run.snapshot["nodes"]["step"]["expectedOutput"] == {"kind": "assistant-message"}
    prompt = run.prompts()[0]["prompt"]
    assert "Keep the reply" not in prompt
    assert "maxOutputChars" not in run.step_messages()[0]["details"]["contract"]


def test_13_validate_with_assistant_message_is_rejected() -> None:
    def check(value: Any, ctx: Any) -> Any:
        return value

    with pytest.raises(DefinitionError):
        agent(prompt="x", expected_output=assistant_message(), validate=check)  # type: ignore[call-overload]


def test_13_mypy_reports_call_overload() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            str(AGENT_FIXTURES / "overload_misuse.py"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert "[call-overload]" in result.stdout, result.stdout + result.stderr
    assert "overload_misuse.py:13:" in result.stdout  # only the misuse line, not the valid calls


# ---- 14: crash after message_end ---------------------------------------------------------------------------


class Crash(BaseException):
    """Stands in for ``kill -9``: nothing in piw catches it."""


def _crash_after_message_end(event: Any) -> None:
    if isinstance(event, MessageEnd) and isinstance(event.message, AssistantReply):
        raise Crash


def test_14_crash_after_message_end_adopts_the_recorded_reply(home: Path, tmp_path: Path) -> None:
    flow = assistant_flow(tmp_path)
    first = ScriptedProvider(["Recorded reply."])
    crashed = start_crashing(home, flow, make_executor(first, listeners=[_crash_after_message_end]), Crash)
    assert crashed.assistants()[-1]["content"][0]["text"] == "Recorded reply."
    assert not crashed.of_type("node_finished")
    attempt = crashed.of_type("agent_prompt_sent")[0]["attemptId"]

    later = ScriptedProvider([])  # any request would raise ScriptExhausted
    run = resume(home, crashed.run_id, later)
    assert later.requests == []
    finished = run.terminal("step")
    assert finished["attemptId"] == attempt and finished["payload"]["output"] == "Recorded reply."
    receipt = run.of_type("assistant_completion_recorded")
    assert len(receipt) == 1 and receipt[0]["payload"]["adopted"] is True


def test_14_reply_of_an_earlier_visit_is_never_adopted(home: Path, tmp_path: Path) -> None:
    flow = write_workflow(
        tmp_path,
        "loop",
        """
        from piw import agent, assistant_message, compute, define_workflow, edge, switch
        workflow = define_workflow(
            name="loop", start_at="step",
            nodes={"step": agent(prompt="Say something.", expected_output=assistant_message()),
                   "gate": compute(lambda ctx: {"route": ctx.outputs["step"]}),
                   "end": compute(lambda ctx: ctx.outputs["step"])},
            edges=[edge("step", "gate"),
                   switch("gate", on="$.route", cases={"again": "step", "fresh": "end"})],
        )
        """,
    )
    # visit 1 completes with "again", routing back to the same node; visit 2 crashes before its reply settles

    def second(request: ChatRequest, index: int) -> AssistantReply:
        raise Crash

    crashed = start_crashing(home, flow, make_executor(ScriptedProvider(["again", second])), Crash)
    assert len(crashed.of_type("node_started", "step")) == 2
    later = ScriptedProvider(["fresh"])
    run = resume(home, crashed.run_id, later)
    assert len(later.requests) == 1
    outputs = [e["payload"].get("output") for e in run.of_type("node_finished", "step")]
    assert outputs == ["again", "fresh"]
    assert all(not r["payload"]["adopted"] for r in run.of_type("assistant_completion_recorded"))


def test_14_multiple_tool_blocks_are_not_final(home: Path, tmp_path: Path) -> None:
    """A7: a message ending in tool calls is intermediate even when it holds text."""
    calls = [ToolCallBlock(id="c1", name="nothing", arguments={})]
    provider = ScriptedProvider(
        [AssistantReply(content=[TextBlock(text="Looks final."), *calls], stop_reason="toolUse"), "Final."]
    )
    run = start(home, assistant_flow(tmp_path), provider)
    assert run.terminal("step")["payload"]["output"] == "Final."
    assert run.tool_results()[0]["isError"] is True  # unknown tool → error result, loop continues
