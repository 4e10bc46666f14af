"""The agent ``workflow`` tool's ``update`` action, through the real engine (``updates-progress.md`` §3.2, §4;
§9 test 15).

Replies come from the deterministic ``ScriptedProvider`` (reply functions, since the arguments must name the
live attempt) or from the loopback ``openai_stub`` spoken to by the real ``openai-completions`` adapter.
Assertions read the trace, the run state and the requests the model received.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import piw.updates.publishing
from piw.agent_steps.attempt import AgentSettings
from piw.agent_steps.executor import AgentExecutor
from piw.providers.base import ChatRequest, Provider
from piw.providers.messages import AssistantReply, TextBlock, ToolCallBlock, ToolResultMessage
from piw.providers.scripted import ScriptedProvider
from piw.run.runner import ForegroundOptions, start_run
from piw.store.fold import state_to_json
from piw.testing import OpenAIStub, StubReply
from piw.updates.envelope import TokenBucket

PROGRESS = "pi-workflows.progress.v1"
STEP_IN_PROMPT = re.compile(r"step ([^\s,]+), attempt ([0-9a-f]{32})")
Reply = Callable[[ChatRequest, int], AssistantReply]


@pytest.fixture
def home(piw_home: Path) -> Path:
    """The private ``PIW_HOME`` of ``tests/conftest.py`` (no durability override, no model requests)."""
    return piw_home


def agent_workflow(tmp_path: Path, node: str = "agent(prompt='Import the rows.', updates=True)") -> Path:
    path = tmp_path / "wf.workflow.py"
    path.write_text(
        textwrap.dedent(
            f"""
            from piw import agent, assistant_message, define_workflow
            workflow = define_workflow(name="wf", start_at="step", nodes={{"step": {node}}})
            """
        ),
        encoding="utf-8",
    )
    return path


def run(path: Path, home: Path, provider: Provider) -> dict[str, Any]:
    executor = AgentExecutor(AgentSettings(provider_factory=lambda: provider))
    options = ForegroundOptions(agent_executor_factory=lambda _workflow: executor, durability="flush")
    return state_to_json(start_run(str(path), home, None, None, options))


def events(home: Path, run_id: str) -> list[dict[str, Any]]:
    text = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def published(home: Path, run_id: str) -> list[dict[str, Any]]:
    return [e for e in events(home, run_id) if e["type"] == "update_published"]


# ---- scripted replies ------------------------------------------------------------------------------------


def calls(*specs: tuple[str, dict[str, Any]], text: str = "") -> Reply:
    """One assistant response with ``workflow`` calls ``(call_id, arguments)``; ``step``/``attempt`` are
    filled in from the live request unless the arguments name them."""

    def reply(request: ChatRequest, _index: int) -> AssistantReply:
        assert request.step is not None
        live = {"step": request.step.node_id, "attempt": request.step.attempt_id}
        blocks: list[Any] = [TextBlock(text=text)] if text else []
        blocks += [
            ToolCallBlock(id=call_id, name="workflow", arguments={**live, **args}) for call_id, args in specs
        ]
        return AssistantReply(content=blocks)

    return reply


def update(call_id: str, type_: str, key: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return call_id, {"action": "update", "update": {"type": type_, "key": key, "data": data}}


def submit(call_id: str, output: Any) -> tuple[str, dict[str, Any]]:
    return call_id, {"action": "submit", "output": output}


def tool_results(messages: Sequence[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def progress(status: str, completed: int) -> dict[str, Any]:
    return {"schema": PROGRESS, "status": status, "completed": completed, "total": 10, "unit": "rows"}


# ---- publishing -------------------------------------------------------------------------------------------


def test_several_updates_then_one_submit(tmp_path: Path, home: Path) -> None:
    provider = ScriptedProvider(
        [
            calls(update("c1", "progress", "rows", progress("running", 2))),
            calls(update("c2", "note", "phase", {"text": "loading"})),
            calls(update("c3", "progress", "rows", progress("completed", 10))),
            calls(submit("c4", {"imported": 10})),
        ]
    )
    state = run(agent_workflow(tmp_path), home, provider)
    assert state["status"] == "completed"
    assert state["finalOutput"] == {"imported": 10}
    trace = events(home, state["runId"])
    assert [e["type"] for e in trace] == [
        "run_started",
        "node_started",
        "agent_prompt_sent",
        *["update_published"] * 3,
        "node_finished",
        "run_completed",
    ]
    updates = [e for e in trace if e["type"] == "update_published"]
    attempt_id = trace[1]["attemptId"]
    assert [e["payload"]["idempotencyKey"] for e in updates] == ["c1", "c2", "c3"]
    assert {(e["nodeId"], e["attemptId"]) for e in updates} == {("step", attempt_id)}
    # Each update answered with its receipt as a non-terminating tool result, which the model saw.
    results = tool_results(provider.requests[-1].messages)
    assert [r.tool_call_id for r in results] == ["c1", "c2", "c3"]
    for result, event in zip(results, updates, strict=True):
        assert not result.is_error and not result.terminate
        assert json.loads(result.content) == {
            "updateId": event["payload"]["updateId"],
            "seq": event["seq"],
            "at": event["at"],
            "type": event["payload"]["type"],
            "key": event["payload"]["key"],
        }
    assert [(u["type"], u["key"], u["seq"]) for u in state["updates"]] == [
        ("note", "phase", updates[1]["seq"]),
        ("progress", "rows", updates[2]["seq"]),
    ]
    assert state["updates"][1]["data"]["status"] == "completed"


def test_an_update_never_completes_the_step_or_starts_a_turn(tmp_path: Path, home: Path) -> None:
    # Updates around a submit in one response: one request, no reminder, and the submit alone decides the
    # output. The loop finishes the batch (agent-steps.md §3.2), so the later update is recorded too.
    batch = [
        update("u1", "note", "k", {"v": 1}),
        submit("s1", {"done": True}),
        update("u2", "note", "k", {"v": 2}),
    ]
    provider = ScriptedProvider([calls(*batch)])
    state = run(agent_workflow(tmp_path), home, provider)
    assert state["status"] == "completed"
    assert state["finalOutput"] == {"done": True}
    assert len(provider.requests) == 1
    trace = events(home, state["runId"])
    assert sum(e["type"] == "agent_prompt_sent" for e in trace) == 1
    assert [(e["type"], e["payload"].get("idempotencyKey")) for e in trace[3:]] == [
        ("update_published", "u1"),
        ("update_published", "u2"),
        ("node_finished", None),
        ("run_completed", None),
    ]
    assert state["updates"][0]["data"] == {"v": 2}


def test_updates_alone_do_not_finish_the_step(tmp_path: Path, home: Path) -> None:
    # A response holding only an update leads to the model's next turn (to read the receipt), not an output.
    provider = ScriptedProvider(
        [
            calls(update("u1", "note", "k", {})),
            "All done, no submission.",
            calls(submit("s1", {"late": True})),
        ]
    )
    state = run(agent_workflow(tmp_path), home, provider)
    assert state["finalOutput"] == {"late": True}
    trace = events(home, state["runId"])
    deliveries = [e["payload"]["deliveryKind"] for e in trace if e["type"] == "agent_prompt_sent"]
    # The reply without a submit earned a reminder; the update did not.
    assert deliveries == ["step", "reminder"]
    assert len(provider.requests) == 3


def test_a_redelivered_tool_call_id_returns_the_first_receipt(tmp_path: Path, home: Path) -> None:
    first = {"a": 1, "b": [1, 2]}
    provider = ScriptedProvider(
        [
            calls(update("dup", "note", "k", first)),
            calls(update("dup", "note", "k", {"b": [1, 2], "a": 1})),  # same content, other key order
            calls(update("dup", "note", "k", {"a": 2, "b": [1, 2]})),
            calls(update("dup", "note", "k", {"a": True, "b": [1, 2]})),  # True is not 1
            calls(submit("s", {"ok": 1})),
        ]
    )
    state = run(agent_workflow(tmp_path), home, provider)
    assert state["status"] == "completed"
    (event,) = published(home, state["runId"])
    results = tool_results(provider.requests[-1].messages)
    assert results[0].content == results[1].content
    assert json.loads(results[0].content)["seq"] == event["seq"]
    assert not results[1].is_error
    rejection = "update reuses tool call id dup with different content"
    assert [(r.content, r.is_error) for r in results[2:]] == [(rejection, True), (rejection, True)]
    assert state["updates"][0]["data"] == first


def test_a_rejected_update_is_a_tool_error_the_model_sees(tmp_path: Path, home: Path) -> None:
    provider = ScriptedProvider(
        [
            calls(update("bad1", "Progress", "rows", {})),
            calls(
                update("bad2", "progress", "rows", {"schema": PROGRESS, "status": "running", "completed": 3})
            ),
            calls(
                ("bad3", {"action": "update", "update": {"type": "note", "key": "k", "data": {}, "seq": 9}})
            ),
            calls(submit("s", {"ok": True})),
        ]
    )
    state = run(agent_workflow(tmp_path), home, provider)
    assert state["status"] == "completed"
    assert state["finalOutput"] == {"ok": True}
    assert published(home, state["runId"]) == []
    assert state["updates"] == []
    expected = [
        "update.type must match [a-z][a-z0-9.-]{0,63}",
        "progress.unit is required with counts and must be 1 to 32 characters",
        "update.seq is not supported",
    ]
    # Each rejection is in the very next request the model receives.
    for number, message in enumerate(expected, start=1):
        latest = tool_results(provider.requests[number].messages)[-1]
        assert (latest.content, latest.is_error, latest.terminate) == (message, True, False)


def test_step_and_attempt_are_checked_before_the_update(tmp_path: Path, home: Path) -> None:
    bad = {"type": "Bad", "key": "k", "data": {}}  # would be rejected too, but the gate checks come first
    provider = ScriptedProvider(
        [
            calls(("c1", {"action": "update", "step": "other", "update": bad})),
            calls(("c2", {"action": "update", "attempt": "0" * 32, "update": bad})),
            calls(("c3", {"action": "update", "update": bad, "extra": 1})),
            calls(submit("s", 1)),
        ]
    )
    state = run(agent_workflow(tmp_path), home, provider)
    attempt_id = state["steps"][0]["attemptId"]
    results = tool_results(provider.requests[-1].messages)
    assert results[0].content == "Step other is not active. The active step is step."
    assert results[1].content == (
        f"Attempt {'0' * 32} is stale. The active attempt for step step is {attempt_id}."
    )
    assert results[2].content.startswith("Invalid workflow tool call: ")
    assert all(r.is_error for r in results[:3])
    assert published(home, state["runId"]) == []


def test_status_includes_the_projection(tmp_path: Path, home: Path) -> None:
    provider = ScriptedProvider(
        [
            calls(update("u1", "note", "k", {"v": 1})),
            calls(("st", {"action": "status"})),
            calls(submit("s", 1)),
        ]
    )
    state = run(agent_workflow(tmp_path), home, provider)
    status = json.loads(tool_results(provider.requests[-1].messages)[1].content)
    assert status["updates"] == state["updates"]
    assert len(published(home, state["runId"])) == 1  # status is read-only


def test_assistant_completion_steps_cannot_publish(tmp_path: Path, home: Path) -> None:
    provider = ScriptedProvider([calls(update("u1", "note", "k", {})), "Here is the summary."])
    node = "agent(prompt='Summarize.', expected_output=assistant_message())"
    state = run(agent_workflow(tmp_path, node), home, provider)
    assert state["status"] == "completed"
    assert state["finalOutput"] == "Here is the summary."
    assert "workflow" not in provider.requests[0].tool_names()
    (result,) = tool_results(provider.requests[1].messages)
    assert (result.content, result.is_error) == ("The workflow tool is not available on this turn.", True)
    assert published(home, state["runId"]) == []


def test_agent_updates_share_the_run_rate_limit(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(piw.updates.publishing, "TokenBucket", lambda: TokenBucket(clock=lambda: 0.0))
    burst = [update(f"c{i}", "note", f"k{i % 10}", {"i": i}) for i in range(103)]
    provider = ScriptedProvider([calls(*burst), calls(submit("s", 1))])
    state = run(agent_workflow(tmp_path), home, provider)
    assert state["status"] == "completed"
    assert len(published(home, state["runId"])) == 100
    results = tool_results(provider.requests[-1].messages)
    assert [r.content for r in results[100:]] == ["workflow update rate limit exceeded"] * 3
    assert all(r.is_error for r in results[100:]) and not any(r.is_error for r in results[:100])


# ---- the real adapter against the loopback stub ---------------------------------------------------------


def _live_ids(body: dict[str, Any]) -> dict[str, str]:
    for message in reversed(body["messages"]):
        if message["role"] == "user":
            found = STEP_IN_PROMPT.findall(message.get("content") or "")
            if found:
                step, attempt = found[-1]
                return {"step": step, "attempt": attempt}
    raise AssertionError("no step contract in the request")


def test_updates_through_the_openai_adapter(tmp_path: Path, home: Path, openai_stub: OpenAIStub) -> None:
    def update_reply(call_id: str, payload: dict[str, Any]) -> Callable[[dict[str, Any]], StubReply]:
        return lambda body: StubReply.tool(
            "workflow", {"action": "update", **_live_ids(body), "update": payload}, call_id
        )

    replies: Iterator[Callable[[dict[str, Any]], StubReply]] = iter(
        [
            update_reply("call_a", {"type": "progress", "key": "rows", "data": progress("running", 4)}),
            update_reply("call_b", {"type": "progress", "key": "rows", "data": {"status": "running"}}),
            lambda body: StubReply.tool(
                "workflow", {"action": "submit", **_live_ids(body), "output": [1]}, "call_c"
            ),
        ]
    )

    def respond(body: dict[str, Any]) -> StubReply:
        return next(replies)(body)

    openai_stub.respond = respond
    state = run(agent_workflow(tmp_path), home, openai_stub.provider())
    assert state["status"] == "completed", state["error"]
    assert state["finalOutput"] == [1]
    assert openai_stub.request_count == 3
    assert openai_stub.errors == []
    (event,) = published(home, state["runId"])
    assert event["payload"]["idempotencyKey"] == "call_a"
    tool_messages = [m for m in openai_stub.requests[2]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a", "call_b"]
    assert json.loads(tool_messages[0]["content"])["updateId"] == event["payload"]["updateId"]
    assert "progress.schema must equal pi-workflows.progress.v1" in tool_messages[1]["content"]
    assert [u["data"]["completed"] for u in state["updates"]] == [4]
