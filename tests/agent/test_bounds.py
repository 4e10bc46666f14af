"""What keeps weak models' steps bounded (``agent-steps.md`` §3–§4, acceptance tests 41–46).

Every test here talks to the real ``openai-completions`` adapter through the loopback stub and asserts on the
requests the stub received and on what the run left on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from piw.agent_steps import loop as agent_loop
from piw.agent_steps.events import MessageEnd
from piw.providers.messages import ToolResultMessage
from piw.testing import OpenAIStub, StubReply, openai_stub
from tests.support.agent_harness import (
    Run,
    home,
    make_executor,
    one_agent,
    resume,
    sequence,
    start,
    start_configured,
    start_crashing,
    write_stub_config,
    write_workflow,
)

__all__ = ["home", "openai_stub"]

ASSISTANT = "agent(prompt='Answer the user.', expected_output=assistant_message())"
MODELS = """
from typing import Literal
from pydantic import BaseModel, Field

class Label(BaseModel):
    name: str = Field(title="Label name")

class Triage(BaseModel):
    route: Literal["bug", "feature"]
    title: str
    labels: list[Label] = []
"""
TRIAGE = "agent(prompt='Triage the report.', expected_output=Triage)"


def submit(output: Any, call_id: str = "call_1") -> StubReply:
    """A bare submission: no ``step`` or ``attempt``, as a small model writes it."""
    return StubReply.tool("workflow", {"action": "submit", "output": output}, call_id)


def tool_of(body: dict[str, Any]) -> dict[str, Any]:
    (tool,) = [t["function"] for t in body["tools"] if t["function"]["name"] == "workflow"]
    return tool


def _walk(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *[item for sub in value.values() for item in _walk(sub)]]
    if isinstance(value, list):
        return [item for sub in value for item in _walk(sub)]
    return []


# ---- 41: a typed workflow tool per step --------------------------------------------------------------------


def test_41_the_tool_carries_the_nodes_schema_without_titles(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = submit({"route": "bug", "title": "Crash", "labels": [{"name": "ui"}]})
    run = start_configured(home, one_agent(tmp_path, TRIAGE, header=MODELS))
    tool = tool_of(openai_stub.requests[0])
    assert tool["description"] == "Submit the output of workflow step step."
    schema = tool["parameters"]
    assert schema["properties"]["action"] == {"type": "string", "enum": ["submit"]}
    assert set(schema["properties"]) == {"action", "step", "attempt", "output"}
    assert schema["required"] == ["action", "output"]  # step and attempt are optional; every call is a submit
    output = schema["properties"]["output"]
    assert output["properties"]["route"] == {"type": "string", "enum": ["bug", "feature"]}
    assert output["properties"]["title"] == {"type": "string"}  # the field called title stays
    assert output["properties"]["labels"]["items"] == {"$ref": "#/$defs/Label"}
    assert "$defs" not in output and schema["$defs"]["Label"]["properties"]["name"] == {"type": "string"}
    assert not [node for node in _walk(schema) if isinstance(node.get("title"), str)]
    accepted = run.terminal("step")["payload"]
    assert accepted["output"] == {"route": "bug", "title": "Crash", "labels": [{"name": "ui"}]}
    assert openai_stub.request_count == 1


def test_41_updates_and_status_only_when_the_node_opts_in(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = sequence(StubReply.tool("workflow", {"action": "status"}), submit({"n": 1}))
    plain = start_configured(home, one_agent(tmp_path, "agent(prompt='Count.')"))
    schema = tool_of(openai_stub.requests[0])["parameters"]
    assert schema["properties"]["action"]["enum"] == ["submit"] and "update" not in schema["properties"]
    assert plain.tool_results()[0]["content"] == (
        'Invalid workflow tool call: action must be "submit" (this step takes no updates)'
    )
    prompt = plain.prompts()[0]["prompt"]
    assert "update" not in prompt and "progress" not in prompt

    openai_stub.respond = sequence(StubReply.tool("workflow", {"action": "status"}), submit({"n": 1}))
    opted = start_configured(home, one_agent(tmp_path / "opted", "agent(prompt='Count.', updates=True)"))
    schema = tool_of(openai_stub.requests[2])["parameters"]
    assert schema["properties"]["action"]["enum"] == ["submit", "update", "status"]
    assert schema["properties"]["update"] == {"type": "object"}
    assert schema["required"] == ["action"]  # an update call has no output
    assert not opted.tool_results()[0]["isError"]
    assert 'calling the tool with action "update"' in opted.prompts()[0]["prompt"]
    assert opted.snapshot["nodes"]["step"]["updates"] is True
    assert "updates" not in plain.snapshot["nodes"]["step"]


def test_41_the_first_request_of_a_one_line_step_is_lean(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    """What a small model would copy is gone: no placeholder, no update example, the attempt id once."""
    write_stub_config(home, openai_stub)
    openai_stub.respond = submit({"route": "bug", "title": "x"})
    run = start_configured(home, one_agent(tmp_path, TRIAGE, header=MODELS))
    (user,) = [m["content"] for m in openai_stub.requests[0]["messages"] if m["role"] == "user"]
    attempt = run.of_type("node_started", "step")[0]["attemptId"]
    assert user.count(attempt) == 1
    assert "<result>" not in user and '"..."' not in user and '"key"' not in user
    assert '"title":"' not in user  # schema titles are gone (a field called title is no title)


# ---- 42: the output cap --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "model", "expected"),
    [
        ("agent(prompt='Count.', max_output_tokens=64)", 'models = [{ id = "m", max_tokens = 300 }]', 64),
        ("agent(prompt='Count.')", 'models = [{ id = "m", max_tokens = 300 }]', 300),
        ("agent(prompt='Count.')", 'models = ["m"]', 2048),
    ],
)
def test_42_every_submit_request_carries_max_tokens(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, node: str, model: str, expected: int
) -> None:
    write_stub_config(home, openai_stub, model=model)
    openai_stub.respond = sequence(StubReply.text("Thinking about it."), submit({"n": 1}))
    start_configured(home, one_agent(tmp_path, node))
    assert openai_stub.request_count == 2  # a reminder request is capped too
    assert [body["max_tokens"] for body in openai_stub.requests] == [expected, expected]


@pytest.mark.parametrize(
    ("model", "expected"), [('models = ["m"]', 200), ('models = [{ id = "m", max_tokens = 300 }]', 300)]
)
def test_42_an_assistant_step_is_capped_by_its_max_chars_unless_configured(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, model: str, expected: int
) -> None:
    write_stub_config(home, openai_stub, model=model)
    openai_stub.respond = StubReply.text("Short.")
    node = "agent(prompt='Reply.', expected_output=assistant_message(max_chars=200))"
    start_configured(home, one_agent(tmp_path, node))
    assert openai_stub.requests[0]["max_tokens"] == expected


def test_42_an_uncapped_assistant_step_sends_no_max_tokens(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = StubReply.text("Any length.")
    start_configured(home, one_agent(tmp_path, ASSISTANT))
    assert "max_tokens" not in openai_stub.requests[0]


# ---- 43: bounded rejections ------------------------------------------------------------------------------


def test_43_the_same_invalid_output_costs_exactly_three_requests(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = lambda body: submit({"route": "question", "title": "x"})
    run = start_configured(home, one_agent(tmp_path, TRIAGE, header=MODELS))
    assert openai_stub.request_count == 3
    reason = "route: Input should be 'bug' or 'feature'"
    identical = "Output rejected for step step: identical to a rejected output; change it."
    assert [r["content"] for r in run.tool_results()] == [
        f"Output rejected for step step: {reason}",
        identical,
        identical,
    ]
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "failed"
    assert failed["error"] == f"Step step: output rejected 3 times; last reason: {reason}"
    assert [p["deliveryKind"] for p in run.prompts()] == ["step"]  # no reminder after the last rejection


def test_43_a_string_that_is_not_json_names_the_parse_error(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub, extra="[agent]\nmax_rejections = 2")
    openai_stub.respond = sequence(submit("route: bug"), submit("Route is bug."))
    run = start_configured(home, one_agent(tmp_path, TRIAGE, header=MODELS))
    assert openai_stub.request_count == 2  # max_rejections = 2
    reason = "output is not valid JSON: Expecting value: line 1 column 1 (char 0)"
    assert run.tool_results()[0]["content"] == f"Output rejected for step step: {reason}"
    assert run.terminal("step")["payload"]["error"] == (
        f"Step step: output rejected 2 times; last reason: {reason}"
    )


def test_43_authors_route_on_the_failed_outcome(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = lambda body: submit("not json")
    flow = write_workflow(
        tmp_path,
        "routed",
        """
        from piw import agent, compute, define_workflow, switch
        workflow = define_workflow(
            name="routed", start_at="classify",
            nodes={"classify": agent(prompt="Classify."),
                   "fallback": compute(run=lambda ctx: {"route": "manual"}),
                   "done": compute(run=lambda ctx: ctx.outputs["classify"])},
            edges=[switch("classify", on="$result.outcome", cases={"failed": "fallback", "ok": "done"})],
        )
        """,
    )
    run = start_configured(home, flow)
    assert openai_stub.request_count == 3
    assert run.terminal("fallback")["payload"]["output"] == {"route": "manual"}


def test_43_rejections_count_across_a_crash(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    class Crash(BaseException):
        pass

    def crash_after_two_rejections(event: Any) -> None:
        message = getattr(event, "message", None)
        rejections = (
            (message.details or {}).get("rejections") if isinstance(message, ToolResultMessage) else None
        )
        if isinstance(event, MessageEnd) and rejections == 2:
            raise Crash  # the second rejection is on disk, the model never saw it

    openai_stub.respond = lambda body: submit({"route": "question", "title": "x"})
    flow = one_agent(tmp_path, TRIAGE, header=MODELS)
    executor = make_executor(openai_stub.provider(), listeners=[crash_after_two_rejections])
    crashed = start_crashing(home, flow, executor, Crash)
    assert openai_stub.request_count == 2
    run = resume(home, crashed.run_id, openai_stub.provider())
    assert openai_stub.request_count == 3  # one more rejection, and the attempt ends
    failed = run.terminal("step")["payload"]
    assert failed["error"].startswith("Step step: output rejected 3 times; last reason: route:")
    assert run.tool_results()[-1]["content"].endswith("identical to a rejected output; change it.")


# ---- 44: a length cut inside a tool call ----------------------------------------------------------------


def test_44_a_call_cut_at_length_is_never_replayed(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    usage = {"prompt_tokens": 50, "completion_tokens": 64, "total_tokens": 114}
    cut = StubReply.tool(
        "workflow",
        {},
        arguments_text='{"action": "submit", "output": {"route": "bug", "title": "aaaaaaa',
        finish_reason="length",
        usage=usage,
    )
    openai_stub.respond = [cut, submit({"route": "bug", "title": "short"})]
    run = start_configured(home, one_agent(tmp_path, TRIAGE, header=MODELS))
    assert openai_stub.request_count == 2
    second = openai_stub.requests[1]["messages"]
    assert not [m for m in second if m["role"] == "assistant" and m.get("tool_calls")]
    assert not [m for m in second if m["role"] == "tool"]
    assert second[-1] == {
        "role": "user",
        "content": "Output was cut off after 64 tokens; submit a shorter output.",
    }
    assert run.terminal("step")["payload"]["output"] == {"route": "bug", "title": "short", "labels": []}
    cut_entry = [m for m in run.messages if m.get("customType") == "pi-workflows-output-cut"]
    assert cut_entry[0]["details"] == {
        "rejections": 1,
        "reason": "output was cut off after 64 tokens",
        "outputTokens": 64,
    }
    assert run.assistants()[0]["stopReason"] == "length"  # recorded as it came


def test_44_cut_offs_count_toward_max_rejections(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub, model='models = [{ id = "m", max_tokens = 16 }]')
    openai_stub.respond = lambda body: StubReply.tool(
        "workflow", {}, arguments_text='{"action": "submit", "output": {"ro', finish_reason="length"
    )
    run = start_configured(home, one_agent(tmp_path, TRIAGE, header=MODELS))
    assert openai_stub.request_count == 3
    tokens = run.assistants()[0]["usage"]["output"]
    assert run.terminal("step")["payload"]["error"] == (
        f"Step step: output rejected 3 times; last reason: output was cut off after {tokens} tokens"
    )


def test_44_an_assistant_step_cut_inside_a_tool_call_fails_once(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    openai_stub.respond = [StubReply.tool("read", {}, arguments_text='{"path": "a', finish_reason="length")]
    node = "agent(prompt='Look.', expected_output=assistant_message(), tools=('read',))"
    run = start(home, one_agent(tmp_path, node), openai_stub.provider())
    assert openai_stub.request_count == 1
    assert not run.tool_results()  # the cut call was never executed
    assert "stopped (length)" in run.terminal("step")["payload"]["error"]


# ---- 46: context="step" ----------------------------------------------------------------------------------


def _two_steps(tmp_path: Path, context: str) -> Path:
    return write_workflow(
        tmp_path,
        "pair",
        f"""
        from piw import agent, define_workflow, edge
        workflow = define_workflow(
            name="pair", start_at="first",
            nodes={{"first": agent(prompt="FIRST-PROMPT: count."),
                    "second": agent(prompt="SECOND-PROMPT: count again.", context={context!r})}},
            edges=[edge("first", "second")],
        )
        """,
    )


@pytest.mark.parametrize("context", ["run", "step"])
def test_46_context_step_sends_only_the_attempts_entries(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, context: str
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = sequence(
        submit({"n": 1}, "c-first"), StubReply.text("Let me think."), submit({"n": 2}, "c-second")
    )
    run = start_configured(home, _two_steps(tmp_path, context))
    assert run.terminal("second")["payload"]["output"] == {"n": 2}
    second_requests = openai_stub.requests[1:]
    assert len(second_requests) == 2  # the step, then its reminder
    for body in second_requests:
        text = json.dumps(body["messages"])
        assert ("FIRST-PROMPT" in text) is (context == "run")
        assert ("c-first" in text) is (context == "run")
        assert "SECOND-PROMPT" in text
    # the reminder request still holds the attempt's own earlier turn
    assert "Let me think." in json.dumps(second_requests[1]["messages"])
    if context == "step":
        assert Run(run.run_id, run.bundle).snapshot["nodes"]["second"]["context"] == "step"


@pytest.fixture
def no_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries go ahead at once: the tests count requests, not seconds."""
    monkeypatch.setattr(agent_loop, "RETRY_DELAYS_S", (0.0, 0.0, 0.0))


# ---- 45: end of stream -----------------------------------------------------------------------------------


def test_45_a_stream_without_finish_reason_is_retried_and_never_output(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, no_back_off: None
) -> None:
    openai_stub.respond = [
        StubReply.text("", finish_reason=None, end_marker=False),
        StubReply.text("The whole answer."),
    ]
    run = start(home, one_agent(tmp_path, ASSISTANT), openai_stub.provider())
    assert openai_stub.request_count == 2
    assert run.terminal("step")["payload"]["output"] == "The whole answer."
    first, second = run.assistants()
    assert first["retried"] is True and first["stopReason"] == "error"
    assert "without a finish reason" in first["errorMessage"]
    assert second["stopReason"] == "stop"


def test_45_a_stream_cut_after_text_fails_the_step_and_keeps_no_output(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, no_back_off: None
) -> None:
    openai_stub.respond = [StubReply.text("Half of the ans", finish_reason=None, end_marker=False)]
    run = start(home, one_agent(tmp_path, ASSISTANT), openai_stub.provider())
    assert openai_stub.request_count == 1  # the text was shown: a retry would show a second answer
    failed = run.terminal("step")
    assert failed["type"] == "node_failed"
    assert "output" not in failed["payload"]
    assert "without a finish reason" in failed["payload"]["error"]
    assert not run.of_type("assistant_completion_recorded")
    assert run.state is not None and run.state.status == "failed"


def test_45_an_unknown_finish_reason_is_no_reply(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub, no_back_off: None
) -> None:
    openai_stub.respond = [StubReply.text("", finish_reason="eaten_by_proxy"), StubReply.text("Answer.")]
    run = start(home, one_agent(tmp_path, ASSISTANT), openai_stub.provider())
    assert openai_stub.request_count == 2
    assert "unknown finish reason 'eaten_by_proxy'" in run.assistants()[0]["errorMessage"]
    assert run.terminal("step")["payload"]["output"] == "Answer."
