"""The optional ``pi-rpc`` backend against the loopback stub (acceptance test 38; skipped without ``pi``).

A real Pi process talks real HTTP to ``OpenAIStub``; nothing is mocked. The test checks what §8.4 promises:
the exact step prompt reaches the model, the bridge offers ``workflow``, a first-try submission costs exactly
one request, and the run record looks like one made by piw's own loop.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from piw.agent_steps.attempt import AgentSettings
from piw.agent_steps.pi_process import PiLaunch
from piw.agent_steps.pi_rpc import PiRpcExecutor
from piw.agent_steps.workflow_tool import ASSISTANT_STEP_SUBMIT
from piw.config.settings import ProviderConfig
from piw.providers.selection import ProviderSelection
from piw.run.runner import ForegroundOptions, start_run
from piw.testing import OpenAIStub, StubReply, openai_stub
from tests.support.agent_harness import Run, bundle_of, home, one_agent

__all__ = ["home", "openai_stub"]

pytestmark = pytest.mark.skipif(shutil.which("pi") is None, reason="the Pi CLI (pi) is not installed")

IDS = re.compile(r"step (\S+), attempt ([0-9a-f]{32})")


def _texts(body: dict[str, Any]) -> list[str]:
    """User message texts of a request; Pi sends content as a list of text parts."""
    out = []
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        out.append(content or "")
    return out


def _submit(output: Any) -> Any:
    def respond(body: dict[str, Any]) -> StubReply:
        step, attempt = IDS.findall("\n".join(_texts(body)))[-1]
        args = {"action": "submit", "step": step.rstrip(","), "attempt": attempt, "output": output}
        return StubReply.tool("workflow", args, usage={"prompt_tokens": 7, "completion_tokens": 3})

    return respond


def _executor(stub: OpenAIStub, tmp_path: Path) -> PiRpcExecutor:
    settings = ProviderConfig.model_validate({"base_url": stub.base_url, "models": ["m"]})
    launch = PiLaunch(ProviderSelection("stub", "m", settings, settings.find_model("m")), cwd=tmp_path)
    return PiRpcExecutor(launch, AgentSettings(provider_factory=lambda: stub.provider(), cwd=tmp_path))


def start(home: Path, workflow: Path, *, executor: PiRpcExecutor) -> Run:
    """Run ``workflow`` in this process with ``executor`` (what ``piw run`` does once setup picks pi-rpc)."""
    options = ForegroundOptions(agent_executor_factory=lambda _wf: executor)
    state = start_run(str(workflow), home, None, None, options)
    return Run(state.run_id, bundle_of(home, state.run_id), state)


def test_38_pi_rpc_structured_step_makes_one_request(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    openai_stub.respond = _submit({"label": "bug"})
    executor = _executor(openai_stub, tmp_path)
    used: list[Any] = []
    execute = executor.execute

    def execute_and_keep_the_process(attempt: Any) -> Any:
        outcome = execute(attempt)
        used.append(executor._process)  # the run closes the executor when it ends, so keep it here
        return outcome

    executor.execute = execute_and_keep_the_process  # type: ignore[method-assign]
    try:
        run = start(home, one_agent(tmp_path, "agent(prompt='Classify the report.')"), executor=executor)
    finally:
        executor.close()
    (process,) = used
    assert process is not None
    assert process.proc.poll() is not None  # shut down when the run ended: stdin closed, the group signalled
    assert openai_stub.request_count == 1
    assert openai_stub.tool_names == [["workflow"]]
    assert openai_stub.errors == []
    sent = run.prompts("step")
    assert len(sent) == 1 and sent[0]["deliveryKind"] == "step"
    assert _texts(openai_stub.requests[0])[-1] == sent[0]["prompt"]  # exactly format_step_prompt(...)
    finished = run.terminal("step")
    assert finished["type"] == "node_finished"
    payload = finished["payload"]
    assert payload["output"] == {"label": "bug"}
    assert payload["usage"]["requests"] == 1
    assert payload["usage"]["input"] == 7 and payload["usage"]["output"] == 3
    result = run.tool_results()[-1]
    assert result["content"] == "Output accepted for step step."
    assert result["terminate"] is True
    assert run.step_messages()[0]["content"] == sent[0]["prompt"]
    assert payload["conversation"] == {
        "firstEntryId": run.entries[0]["id"],
        "lastEntryId": run.entries[-1]["id"],
    }


def test_pi_rpc_rejected_output_is_returned_and_corrected(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    """Python validates: a rejected submit goes back to Pi as a prompt with the §3.2 text, same attempt."""
    header = "from pydantic import BaseModel\nclass Label(BaseModel):\n    label: str\n"
    flow = one_agent(tmp_path, "agent(prompt='Classify.', expected_output=Label)", header=header)
    replies = iter([_submit({"wrong": 1}), _submit({"label": "ok"})])
    openai_stub.respond = lambda body: next(replies)(body)
    executor = _executor(openai_stub, tmp_path)
    try:
        run = start(home, flow, executor=executor)
    finally:
        executor.close()
    assert openai_stub.request_count == 2
    assert _texts(openai_stub.requests[1])[-1].startswith("Output rejected for step step: label")
    assert run.terminal("step")["payload"]["output"] == {"label": "ok"}
    assert [r["isError"] for r in run.tool_results()] == [True, False]


def test_pi_rpc_assistant_step_is_not_offered_workflow(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    """The gate is the bridge state file, not prompt text: an assistant step's request carries no tool."""
    openai_stub.respond = StubReply.text("Thanks for writing.")
    executor = _executor(openai_stub, tmp_path)
    try:
        run = start(
            home,
            one_agent(tmp_path, "agent(prompt='Reply.', expected_output=assistant_message())"),
            executor=executor,
        )
    finally:
        executor.close()
    assert openai_stub.tool_names == [[]]
    assert run.terminal("step")["payload"]["output"] == "Thanks for writing."


def test_pi_rpc_deadline_aborts_pi(home: Path, tmp_path: Path, openai_stub: OpenAIStub) -> None:
    """A held request past the deadline is aborted with ``{"type": "abort"}``; the attempt is timed out."""
    openai_stub.respond = StubReply.hold()
    executor = _executor(openai_stub, tmp_path)
    try:
        run = start(home, one_agent(tmp_path, "agent(prompt='Wait.', timeout_s=1.0)"), executor=executor)
    finally:
        executor.close()
    finished = run.terminal("step")
    assert finished["payload"]["outcome"] == "timed_out", finished
    assert openai_stub.request_count == 1


def test_pi_rpc_submit_in_assistant_step_gets_the_a11_text(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    """The bridge answers a stray submit with the §3.2 text (not Pi's "not found"), and the turn continues."""
    stray = {"action": "submit", "step": "step", "attempt": "x", "output": 1}
    replies = iter([StubReply.tool("workflow", stray), StubReply.text("Fine.")])
    openai_stub.respond = lambda _body: next(replies)
    executor = _executor(openai_stub, tmp_path)
    try:
        run = start(
            home,
            one_agent(tmp_path, "agent(prompt='Reply.', expected_output=assistant_message())"),
            executor=executor,
        )
    finally:
        executor.close()
    assert openai_stub.tool_names == [[], []]
    assert openai_stub.requests[1]["messages"][-1]["content"] == ASSISTANT_STEP_SUBMIT
    assert run.tool_results()[0]["content"] == ASSISTANT_STEP_SUBMIT
    assert run.terminal("step")["payload"]["output"] == "Fine."
