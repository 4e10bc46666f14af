"""The terminating ``workflow`` tool, gating, reminders and the prompt formatter (acceptance tests 15–24)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from piw.agent_steps.contract import contract_text, format_reminder, format_step_prompt, make_contract
from piw.agent_steps.schema import model_schema
from piw.agent_steps.workflow_tool import (
    ASSISTANT_STEP_SUBMIT,
    GATE_CLOSED,
    GENERIC_WORKFLOW_SCHEMA,
    ActiveStep,
    WorkflowTool,
    step_tool_schema,
)
from piw.providers.base import ChatRequest
from piw.providers.messages import AssistantReply, CustomMessage, ToolCallBlock
from piw.providers.scripted import ScriptedProvider
from piw.testing import OpenAIStub, StubReply, openai_stub
from tests.support.agent_harness import (
    Run,
    active_ids,
    home,
    one_agent,
    piw_cli,
    sequence,
    start,
    start_configured,
    submit_args,
    submit_reply,
    user_texts,
    write_stub_config,
    write_workflow,
)

__all__ = ["home", "openai_stub"]

SUBMIT_NODE = "agent(prompt='Classify the report.')"
UPDATES_NODE = "agent(prompt='Classify the report.', updates=True)"


def two_steps(tmp_path: Path, second_prompt: str = "Write a reply.") -> Path:
    """A submit step ``classify`` followed by an assistant step ``reply``."""
    return write_workflow(
        tmp_path,
        "pair",
        f"""
        from piw import agent, assistant_message, define_workflow, edge
        workflow = define_workflow(
            name="pair", start_at="classify",
            nodes={{"classify": agent(prompt="Classify the report."),
                    "reply": agent(prompt={second_prompt!r}, expected_output=assistant_message())}},
            edges=[edge("classify", "reply")],
        )
        """,
    )


# ---- 15–18: gating, against the loopback stub --------------------------------------------------------------


def test_15_first_try_submit_costs_one_request_offering_workflow(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = submit_reply({"label": "bug"})
    run = start_configured(home, one_agent(tmp_path, SUBMIT_NODE))
    assert openai_stub.request_count == 1
    assert openai_stub.tool_names == [["workflow"]]
    body = openai_stub.requests[0]
    assert body["tools"][0]["function"]["parameters"] == step_tool_schema(None, updates=False)
    assert body["tools"][0]["function"]["description"] == "Submit the output of workflow step step."
    assert "tool_choice" not in body  # structured_tool_choice defaults to "auto": nothing forced
    finished = run.terminal("step")["payload"]
    assert finished["output"] == {"label": "bug"}
    assert finished["usage"]["requests"] == 1
    assert run.tool_results()[-1]["content"] == "Output accepted for step step."
    assert run.tool_results()[-1]["terminate"] is True
    assert finished["conversation"]["lastEntryId"] == run.entries[-1]["id"]
    assert finished["conversation"]["firstEntryId"] == run.entries[0]["id"]
    assert openai_stub.errors == []


def test_15_structured_tool_choice_required(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub, compat='structured_tool_choice = "required"')
    openai_stub.respond = sequence(submit_reply({"label": "bug"}), StubReply.text("Thanks!"))
    start_configured(home, two_steps(tmp_path))
    assert openai_stub.request_count == 2
    assert openai_stub.requests[0]["tool_choice"] == "required"
    assert "tool_choice" not in openai_stub.requests[1]  # assistant turns never send "required"
    assert "tools" not in openai_stub.requests[1]


def test_16_plain_turn_is_never_offered_workflow(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = sequence(submit_reply({"label": "bug"}), StubReply.text("Thanks for writing."))
    run = start_configured(home, two_steps(tmp_path))
    assert openai_stub.tool_names == [["workflow"], []]
    assert run.terminal("reply")["payload"]["output"] == "Thanks for writing."


def test_17_submit_on_a_plain_turn_is_blocked_and_the_turn_answers(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    flow = one_agent(tmp_path, "agent(prompt='Answer.', expected_output=assistant_message())")

    def blocked(body: dict[str, Any]) -> StubReply:
        args = submit_args(body, "sneaky")
        return StubReply.tools(("workflow", {"action": "status"}, "c1"), ("workflow", args, "c2"))

    openai_stub.respond = sequence(blocked, StubReply.text("A proper answer."))
    run = start_configured(home, flow)
    assert openai_stub.request_count == 2
    assert openai_stub.tool_names == [[], []]
    tool_messages = [m for m in openai_stub.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [GATE_CLOSED, ASSISTANT_STEP_SUBMIT]
    assert GATE_CLOSED == "The workflow tool is not available on this turn."
    assert [r["isError"] for r in run.tool_results()] == [True, True]
    assert run.terminal("step")["payload"]["output"] == "A proper answer."
    assert not run.of_type("update_published")


def test_18_quoted_contract_text_does_not_open_the_gate(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    quoted = (
        "Please reply. Earlier you were told:\n"
        'Finish this step by calling the `workflow` tool with action "submit" and your result as "output".'
    )
    openai_stub.respond = sequence(submit_reply({"label": "bug"}), StubReply.text("Plain answer."))
    run = start_configured(home, two_steps(tmp_path, quoted))
    second = openai_stub.requests[1]
    texts = user_texts(second)
    assert any("Finish this step by calling the `workflow` tool" in t and "step classify" in t for t in texts)
    assert any(t.startswith("Please reply. Earlier you were told:") for t in texts)
    assert "tools" not in second and "tool_choice" not in second
    assert run.terminal("reply")["payload"]["output"] == "Plain answer."


# ---- 19: schema and per-action validation ------------------------------------------------------------------


def _walk_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _walk_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _walk_keys(v)}
    return set()


def test_19_schema_root_is_an_object_without_unions() -> None:
    for schema in (step_tool_schema(None, False), step_tool_schema(Verdict, True), GENERIC_WORKFLOW_SCHEMA):
        assert schema["type"] == "object" and schema["required"][0] == "action"
        assert schema["additionalProperties"] is False
        assert not set(schema) & {"anyOf", "oneOf", "allOf"}
    assert step_tool_schema(None, False)["properties"]["action"] == {"type": "string", "enum": ["submit"]}
    generic = GENERIC_WORKFLOW_SCHEMA["properties"]["action"]
    assert generic == {"type": "string", "enum": ["submit", "update", "status"]}


def _tool(completion: str = "submit", updates: bool = True) -> WorkflowTool:
    expected = None if completion == "submit" else __import__("piw").assistant_message()
    contract = make_contract("run1", "wf", "step", "a" * 32, expected, updates=updates)
    return WorkflowTool(ActiveStep(contract=contract, accept=lambda value: value), updates=updates)


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        (
            {"action": "submit", "step": "step", "attempt": "a" * 32, "output": 1, "note": "x"},
            "note: Extra inputs are not permitted",
        ),
        (
            {"action": "update", "step": "step", "attempt": "a" * 32, "update": {}, "output": 1},
            "output: Extra inputs are not permitted",
        ),
        ({"action": "status", "output": 1}, "output: Extra inputs are not permitted"),
        ({"action": "submit", "step": "step", "attempt": "a" * 32}, "output: Field required"),
        ({"action": "launch"}, "action must be one of submit, update, status"),
    ],
)
def test_19_per_action_models_reject_bad_calls(arguments: dict[str, Any], reason: str) -> None:
    result = _tool().handle("call_1", arguments)
    assert result.is_error and not result.terminate
    assert result.content == f"Invalid workflow tool call: {reason}"


def test_19_invalid_json_arguments_through_the_loop(home: Path, tmp_path: Path) -> None:
    def broken(request: ChatRequest, index: int) -> AssistantReply:
        call = ToolCallBlock(id="c1", name="workflow", raw_arguments='{"action": "submit", oops')
        return AssistantReply(content=[call], stop_reason="toolUse")

    def good(request: ChatRequest, index: int) -> AssistantReply:
        args = {"action": "submit", "output": [1, 2]}  # step and attempt are optional
        return AssistantReply(
            content=[ToolCallBlock(id="c2", name="workflow", arguments=args)], stop_reason="toolUse"
        )

    run = start(home, one_agent(tmp_path, SUBMIT_NODE), ScriptedProvider([broken, good]))
    first = run.tool_results()[0]
    assert first["isError"] and first["content"].startswith("Invalid workflow tool call: ")
    assert run.terminal("step")["payload"]["output"] == [1, 2]


# ---- 20–22: exact texts, rejection, models -----------------------------------------------------------------


def test_20_exact_texts_and_termination_in_one_batch(home: Path, tmp_path: Path) -> None:
    def batch(request: ChatRequest, index: int) -> AssistantReply:
        assert request.step is not None
        attempt = request.step.attempt_id
        calls = [
            {"action": "submit", "step": "other", "attempt": attempt, "output": 1},
            {"action": "submit", "step": "step", "attempt": "f" * 32, "output": 2},
            {"action": "submit", "step": "step", "attempt": attempt, "output": {"v": 3}},
            {"action": "submit", "step": "step", "attempt": attempt, "output": 4},
            {"action": "status"},
        ]
        blocks = [ToolCallBlock(id=f"c{i}", name="workflow", arguments=c) for i, c in enumerate(calls)]
        return AssistantReply(content=list(blocks), stop_reason="toolUse")

    provider = ScriptedProvider([batch])
    run = start(home, one_agent(tmp_path, UPDATES_NODE), provider)
    attempt = run.of_type("node_started", "step")[0]["attemptId"]
    results = run.tool_results()
    assert [r["content"] for r in results[:4]] == [
        "Step other is not active. The active step is step.",
        f"Attempt {'f' * 32} is stale. The active attempt for step step is {attempt}.",
        "Output accepted for step step.",
        "Step step already has an accepted output.",
    ]
    assert [r["isError"] for r in results[:4]] == [True, True, False, True]
    assert [r["terminate"] for r in results[:4]] == [False, False, True, False]
    status = json.loads(results[4]["content"])
    assert status["nodeId"] == "step" and status["attemptId"] == attempt and status["updates"] == []
    # the batch finishes, then the loop ends without another request: the first accepted output wins
    assert len(provider.requests) == 1
    assert run.terminal("step")["payload"]["output"] == {"v": 3}


PROGRESS = {
    "schema": "pi-workflows.progress.v1",
    "status": "running",
    "completed": 1,
    "total": 3,
    "unit": "files",
}


def test_20_update_publishes_and_never_finishes(home: Path, tmp_path: Path) -> None:
    def update(request: ChatRequest, index: int) -> AssistantReply:
        assert request.step is not None
        args = {
            "action": "update",
            "step": "step",
            "attempt": request.step.attempt_id,
            "update": {"type": "progress", "key": "scan", "data": PROGRESS},
        }
        return AssistantReply(
            content=[ToolCallBlock(id="upd_1", name="workflow", arguments=args)], stop_reason="toolUse"
        )

    provider = ScriptedProvider([update, {"submit": {"ok": True}}])
    run = start(home, one_agent(tmp_path, UPDATES_NODE), provider)
    published = run.of_type("update_published", "step")
    assert len(published) == 1 and published[0]["payload"]["idempotencyKey"] == "upd_1"
    assert published[0]["payload"]["data"] == PROGRESS
    assert published[0]["attemptId"] == run.of_type("node_started", "step")[0]["attemptId"]
    receipt = run.tool_results()[0]
    assert not receipt["isError"] and not receipt["terminate"]
    assert len(provider.requests) == 2
    assert run.terminal("step")["payload"]["output"] == {"ok": True}


def test_21_validate_rejection_then_corrected_resubmission(home: Path, tmp_path: Path) -> None:
    flow = one_agent(
        tmp_path,
        "agent(prompt='Count.', expected_output='an object {\"n\": positive int}', validate=check)",
        header=(
            "def check(value, ctx):\n"
            "    if value.get('n', 0) <= 0:\n"
            "        raise ValueError('n must be positive')\n"
            "    return {'n': value['n'], 'checked': True}\n"
        ),
    )
    provider = ScriptedProvider([{"submit": {"n": -1}}, {"submit": '```json\n{"n": 2}\n```'}])
    run = start(home, flow, provider)
    results = run.tool_results()
    assert results[0]["content"] == "Output rejected for step step: n must be positive"
    assert results[0]["isError"] is True
    assert results[1]["content"] == "Output accepted for step step."
    assert run.terminal("step")["payload"]["output"] == {"n": 2, "checked": True}  # normalized by validate
    assert len(provider.requests) == 2
    assert len({e["attemptId"] for e in run.of_type("agent_prompt_sent")}) == 1  # same attempt
    assert 'Expected output: an object {"n": positive int}' in run.prompts()[0]["prompt"]


class Verdict(BaseModel):
    route: str
    score: int


def test_22_pydantic_schema_in_contract_and_checked_before_validate(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("PIW_TEST_CALLS", str(calls))
    flow = one_agent(
        tmp_path,
        "agent(prompt='Judge.', expected_output=Verdict, validate=check)",
        header=(
            "import os\n"
            "from pydantic import BaseModel\n"
            "class Verdict(BaseModel):\n"
            "    route: str\n"
            "    score: int\n"
            "def check(value, ctx):\n"
            "    with open(os.environ['PIW_TEST_CALLS'], 'a') as f:\n"
            "        f.write(type(value).__name__ + '\\n')\n"
            "    return value\n"
        ),
    )
    provider = ScriptedProvider([{"submit": {"route": "bug"}}, {"submit": {"route": "bug", "score": "7"}}])
    run = start(home, flow, provider)
    schema = json.dumps(model_schema(Verdict), sort_keys=True, separators=(",", ":"))
    assert '"title"' not in schema
    expected = "a JSON value matching this JSON Schema: " + schema
    assert run.step_messages()[0]["details"]["contract"]["expectedOutput"] == expected
    assert f"Expected output: {expected}\n" in run.prompts()[0]["prompt"]
    first = run.tool_results()[0]
    assert first["isError"] and first["content"].startswith(
        "Output rejected for step step: score: Field required"
    )
    assert calls.read_text().splitlines() == ["Verdict"]  # validate ran once, on the model instance
    assert run.terminal("step")["payload"]["output"] == {"route": "bug", "score": 7}


def test_22_unstorable_validator_result_fails_the_attempt(home: Path, tmp_path: Path) -> None:
    flow = one_agent(tmp_path, "agent(prompt='X.', validate=lambda value, ctx: {1, 2})")
    provider = ScriptedProvider([{"submit": {"a": 1}}])
    run = start(home, flow, provider)
    failed = run.terminal("step")["payload"]
    assert failed["outcome"] == "failed" and "not JSON" in failed["error"]
    assert len(provider.requests) == 1  # not shown to the model as something to fix


# ---- 23: one formatter, byte-identical everywhere ----------------------------------------------------------


def test_23_prompt_is_byte_identical_everywhere(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    task = "Classify this:  \n\tüñí — [red]x[/red]\n\n"
    flow = write_workflow(
        tmp_path,
        "exact",
        f"""
        from piw import agent, define_workflow
        workflow = define_workflow(name="exact", start_at="step",
                                   nodes={{"step": agent(prompt={task!r}, expected_output="a label")}})
        """,
    )
    write_stub_config(home, openai_stub)
    openai_stub.respond = submit_reply("bug")
    stub_run = start_configured(home, flow)
    scripted = ScriptedProvider([{"submit": "bug"}])
    scripted_run = start(home, flow, scripted)
    cli = piw_cli(
        home,
        "run",
        str(flow),
        "--provider",
        "scripted",
        "--script",
        str(_script(tmp_path, [{"submit": "bug"}])),
    )
    assert cli.returncode == 0, cli.stderr
    (cli_id,) = set(_run_ids(home)) - {stub_run.run_id, scripted_run.run_id}
    cli_run = Run(cli_id, home / "runs" / cli_id)
    for run, sent in (
        (stub_run, user_texts(openai_stub.requests[0])[0]),
        (scripted_run, _custom_content(scripted.requests[0])),
        (cli_run, None),
    ):
        attempt = run.of_type("node_started")[0]["attemptId"]
        expected = format_step_prompt(task, make_contract(run.run_id, "exact", "step", attempt, "a label"))
        assert expected == task.rstrip() + "\n\n" + contract_text(
            make_contract(run.run_id, "exact", "step", attempt, "a label")
        )
        assert run.prompts()[0]["prompt"] == expected
        assert run.step_messages()[0]["content"] == expected
        if sent is not None:
            assert sent == expected


def _custom_content(request: ChatRequest) -> str:
    customs = [m for m in request.messages if isinstance(m, CustomMessage)]
    return customs[-1].content


def _script(tmp_path: Path, replies: list[Any]) -> Path:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies), encoding="utf-8")
    return path


def _run_ids(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir() if not p.name.startswith("."))


def test_23_contract_texts_match_the_spec() -> None:
    contract = make_contract("r1", "wf", "inc/step", "a1b2", None)
    assert contract_text(contract) == (
        "---\n"
        "Workflow step: workflow wf, step inc/step, attempt a1b2\n\n"
        'Finish this step by calling the `workflow` tool with action "submit" and your result as "output".\n'
        "Expected output: a JSON object with your result\n"
        "The step is finished only when the tool accepts your output. "
        "If the tool returns an error, correct the output and submit again."
    )
    with_updates = make_contract("r1", "wf", "inc/step", "a1b2", None, updates=True)
    assert contract_text(with_updates) == (
        "---\n"
        "Workflow step: workflow wf, step inc/step, attempt a1b2\n\n"
        'Finish this step by calling the `workflow` tool with action "submit" and your result as "output".\n'
        "Expected output: a JSON object with your result\n"
        'You may report progress before finishing by calling the tool with action "update".\n'
        "Updates are recorded but never finish the step.\n"
        "The step is finished only when the tool accepts your output. "
        "If the tool returns an error, correct the output and submit again."
    )
    for text in (contract_text(contract), contract_text(with_updates)):
        assert "<result>" not in text and '"..."' not in text and text.count("a1b2") == 1
    assert with_updates.to_wire()["updates"] is True and "updates" not in contract.to_wire()
    from piw import assistant_message

    assistant = make_contract("r1", "wf", "s", "a1", assistant_message(max_chars=12))
    assert contract_text(assistant) == (
        "---\nWorkflow step: workflow wf, step s, attempt a1\n\n"
        "Reply with a normal assistant message.\n"
        "Do not call the workflow tool to complete this step.\n"
        "Your visible reply becomes the workflow step output.\n"
        "Keep the reply to at most 12 characters."
    )
    assert format_step_prompt("Task.  \n\n", assistant) == "Task.\n\n" + contract_text(assistant)
    assert format_reminder(contract) == (
        "You ended your turn without finishing workflow step inc/step (attempt a1b2). "
        'Call the workflow tool with action "submit" now.\n\n' + contract_text(contract)
    )
    assert contract.to_wire() == {
        "runId": "r1",
        "workflowName": "wf",
        "nodeId": "inc/step",
        "attemptId": "a1b2",
        "completion": "submit",
        "expectedOutput": "a JSON object with your result",
    }
    assert assistant.to_wire()["maxOutputChars"] == 12 and assistant.to_wire()["completion"] == "assistant"


# ---- 24: reminders -----------------------------------------------------------------------------------------


def test_24_two_reminders_then_the_exact_failure(home: Path, tmp_path: Path) -> None:
    provider = ScriptedProvider(["I think it is a bug.", "Still thinking.", "Done, I guess."])
    run = start(home, one_agent(tmp_path, SUBMIT_NODE), provider)
    attempt = run.of_type("node_started", "step")[0]["attemptId"]
    contract = make_contract(run.run_id, "wf", "step", attempt, None)
    assert [p["deliveryKind"] for p in run.prompts()] == ["step", "reminder", "reminder"]
    reminder = format_reminder(contract)
    assert reminder.startswith(
        f"You ended your turn without finishing workflow step step (attempt {attempt}). "
        'Call the workflow tool with action "submit" now.\n\n---\n'
    )
    assert [p["prompt"] for p in run.prompts()[1:]] == [reminder, reminder]
    messages = run.step_messages()
    assert [m["details"]["kind"] for m in messages] == ["step", "reminder", "reminder"]
    assert [m["content"] for m in messages[1:]] == [reminder, reminder]
    assert all(m["details"]["schema"] == "pi-workflows.agent-step-message.v1" for m in messages)
    assert all(set(m["details"]) <= {"schema", "kind", "contract", "presentation"} for m in messages)
    assert all(m["customType"] == "pi-workflows-agent-step" for m in messages)
    failed = run.terminal("step")["payload"]
    assert failed["error"] == f"Agent finished 3 times without submitting step step (attempt {attempt})."
    assert len(provider.requests) == 3
    assert failed["usage"]["requests"] == 3
    assert failed["conversation"]["firstEntryId"] == run.entries[0]["id"]
    # each reminder request carries the conversation so far, ending with the reminder
    assert _custom_content(provider.requests[1]) == reminder


def test_24_reminder_then_submit_succeeds(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub, compat="supports_forced_tool_choice = true")
    openai_stub.respond = sequence(StubReply.text("It's a bug."), submit_reply({"label": "bug"}))
    run = start_configured(home, one_agent(tmp_path, SUBMIT_NODE))
    assert openai_stub.request_count == 2
    assert "tool_choice" not in openai_stub.requests[0]
    assert openai_stub.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "workflow"}}
    assert user_texts(openai_stub.requests[1])[-1].startswith("You ended your turn without finishing")
    assert run.terminal("step")["payload"]["output"] == {"label": "bug"}
    assert active_ids(openai_stub.requests[1])[0] == "step"


def test_24_no_forced_tool_choice_without_support(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    write_stub_config(home, openai_stub)
    openai_stub.respond = sequence(StubReply.text("It's a bug."), submit_reply({"label": "bug"}))
    start_configured(home, one_agent(tmp_path, SUBMIT_NODE))
    assert "tool_choice" not in openai_stub.requests[1]
    assert openai_stub.tool_names == [["workflow"], ["workflow"]]


def test_24_assistant_mode_settling_twice_never_reminds(home: Path, tmp_path: Path) -> None:
    provider = ScriptedProvider(["Only answer."])
    run = start(
        home, one_agent(tmp_path, "agent(prompt='Hi.', expected_output=assistant_message())"), provider
    )
    assert [m["details"]["kind"] for m in run.step_messages()] == ["step"]
    assert run.terminal("step")["payload"]["output"] == "Only answer."


def test_max_turns_text_and_no_extra_request(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    write_stub_config(home, openai_stub, extra="[agent]\nmax_turns = 3")
    # a tool call every turn: the loop would continue forever without the budget
    openai_stub.respond = lambda body: StubReply.tool("workflow", {"action": "status"})
    run = start_configured(home, one_agent(tmp_path, UPDATES_NODE))  # status calls are no rejections
    failed = run.terminal("step")["payload"]
    assert failed["error"] == "Step step used 3 turns without finishing."
    assert openai_stub.request_count == 3
    assert [p["deliveryKind"] for p in run.prompts()] == ["step"]


def test_gate_closes_for_assistant_steps_in_code() -> None:
    assert _tool("submit").gate_open is True
    assert _tool("assistant").gate_open is False
    blocked = _tool("assistant").handle(
        "c",
        {
            "action": "update",
            "step": "step",
            "attempt": "a" * 32,
            "update": {"type": "progress", "key": "k", "data": {}},
        },
    )
    assert blocked.is_error and blocked.content == GATE_CLOSED


def test_update_tool_call_id_is_the_idempotency_key(home: Path, tmp_path: Path) -> None:
    def batch(request: ChatRequest, index: int) -> AssistantReply:
        assert request.step is not None
        base = {"action": "update", "step": "step", "attempt": request.step.attempt_id}
        other = {**PROGRESS, "completed": 2}
        calls = [
            ToolCallBlock(id="u1", name="workflow", arguments={**base, "update": _progress(PROGRESS)}),
            ToolCallBlock(id="u1", name="workflow", arguments={**base, "update": _progress(PROGRESS)}),
            ToolCallBlock(id="u1", name="workflow", arguments={**base, "update": _progress(other)}),
        ]
        return AssistantReply(content=list(calls), stop_reason="toolUse")

    run = start(home, one_agent(tmp_path, UPDATES_NODE), ScriptedProvider([batch, {"submit": 1}]))
    assert len(run.of_type("update_published")) == 1
    first, repeat, changed = run.tool_results()[:3]
    assert not first["isError"] and repeat["content"] == first["content"]
    assert changed["isError"] and changed["content"] == "update reuses tool call id u1 with different content"


def _progress(data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "progress", "key": "scan", "data": data}


def test_snapshot_expected_output_forms(home: Path, tmp_path: Path) -> None:
    flow = write_workflow(
        tmp_path,
        "forms",
        """
        from pydantic import BaseModel
        from piw import agent, assistant_message, define_workflow, edge
        class Out(BaseModel):
            label: str
        workflow = define_workflow(name="forms", start_at="a", nodes={
            "a": agent(prompt="A."),
            "b": agent(prompt="B.", expected_output="a label"),
            "c": agent(prompt="C.", expected_output=Out),
            "d": agent(prompt="D.", expected_output=assistant_message(max_chars=3)),
        }, edges=[edge("a", "b"), edge("b", "c"), edge("c", "d")])
        """,
    )
    replies: list[Any] = [{"submit": {}}, {"submit": "x"}, {"submit": {"label": "y"}}, "ok"]
    nodes = start(home, flow, ScriptedProvider(replies)).snapshot["nodes"]
    assert "expectedOutput" not in nodes["a"]
    assert nodes["b"]["expectedOutput"] == "a label"
    assert nodes["c"]["expectedOutput"]["kind"] == "json-schema"
    assert nodes["c"]["expectedOutput"]["schema"]["properties"] == {
        "label": {"title": "Label", "type": "string"}
    }
    assert nodes["d"]["expectedOutput"] == {"kind": "assistant-message", "maxChars": 3}
