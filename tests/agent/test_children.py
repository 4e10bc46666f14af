"""Agent steps inside actions: ``ctx.run_agent`` (agent-steps.md §10), against the loopback stub."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from piw.agent_steps.attempt import AgentSettings
from piw.agent_steps.executor import AgentExecutor
from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import (
    PIW,
    Run,
    active_ids,
    home,
    only_run,
    piw_cli,
    piw_process,
    start,
    submit_args,
    write_stub_config,
    write_workflow,
)

__all__ = ["home"]

FAN_OUT = """
    from concurrent.futures import ThreadPoolExecutor
    from piw import action, define_workflow

    def fan(ctx):
        with ThreadPoolExecutor({threads}) as pool:
            results = list(pool.map(lambda k: ctx.run_agent(f"Review part {{k}}.", key=f"part-{{k}}"), range(6)))
        return {{"outputs": [r.output for r in results], "outcomes": [r.outcome for r in results]}}

    workflow = define_workflow(name="fan", start_at="fan", nodes={{"fan": action(fan)}})
"""

SEQUENTIAL = """
    from piw import action, define_workflow

    def review(ctx):
        return {"outputs": [ctx.run_agent(f"Review part {k}.", key=f"part-{k}").output for k in range(6)]}

    workflow = define_workflow(name="seq", start_at="review", nodes={"review": action(review)})
"""


def submit_part(body: dict[str, Any]) -> StubReply:
    """Submit ``{"part": <node id>}`` for whichever child asked."""
    step, _ = active_ids(body)
    return StubReply.tool("workflow", submit_args(body, {"part": step}))


def test_six_children_with_concurrency_two_never_exceed_two_in_flight(home: Path, tmp_path: Path) -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def respond(body: dict[str, Any]) -> StubReply:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.15)
        with lock:
            in_flight -= 1
        return submit_part(body)

    workflow = write_workflow(tmp_path / "wf", "fan", FAN_OUT.format(threads=6))
    with OpenAIStub() as stub:
        stub.respond = respond
        provider = stub.provider()
        executor = AgentExecutor(AgentSettings(provider_factory=lambda: provider, max_concurrent_children=2))
        run = start(home, workflow, executor=executor)
        assert stub.request_count == 6
    assert peak == 2
    assert run.state is not None and run.state.status == "completed"
    output = run.state.final_output
    assert output["outcomes"] == ["ok"] * 6
    assert output["outputs"] == [{"part": f"fan/part-{k}"} for k in range(6)]
    finished = run.of_type("child_step_finished", "fan")
    assert sorted(e["payload"]["key"] for e in finished) == [f"part-{k}" for k in range(6)]
    assert {e["payload"]["visit"] for e in finished} == {1}
    assert run.of_type("agent_prompt_sent") == []  # children record their prompts only in the conversation
    usage = run.terminal("fan")["payload"]["usage"]
    assert usage["requests"] == 6


def test_crash_after_three_of_six_children_reruns_only_the_other_three(home: Path, tmp_path: Path) -> None:
    workflow = write_workflow(tmp_path / "wf", "seq", SEQUENTIAL)
    with OpenAIStub() as stub:
        stub.respond = submit_part
        write_stub_config(home, stub)
        # seq 1 run_started, 2 node_started, 3..5 the first three child_step_finished: die right after 5.
        crashed = piw_process(home, "run", str(workflow), env={"PIW_TEST_KILL_AFTER_APPEND": "5"})
        assert crashed.returncode == -signal.SIGKILL
        assert stub.request_count == 3
        resumed = piw_cli(home, "resume", only_run(home).run_id, "--json")
        assert resumed.returncode == 0, resumed.stderr
        assert stub.request_count == 6
    result = json.loads(resumed.stdout)
    assert result["finalOutput"] == {"outputs": [{"part": f"review/part-{k}"} for k in range(6)]}
    run = only_run(home)
    keys = [e["payload"]["key"] for e in run.of_type("child_step_finished", "review")]
    assert keys == [f"part-{k}" for k in range(6)]  # the first three were never run again


def test_a_childs_stale_submission_is_rejected_and_its_correction_accepted(
    home: Path, tmp_path: Path
) -> None:
    workflow = write_workflow(
        tmp_path / "wf",
        "one",
        """
        from piw import action, define_workflow

        def ask(ctx):
            result = ctx.run_agent("Say ok.", key="only")
            return {"outcome": result.outcome, "output": result.output}

        workflow = define_workflow(name="one", start_at="ask", nodes={"ask": action(ask)})
        """,
    )
    stale = "0" * 32

    def respond(body: dict[str, Any]) -> StubReply:
        step, _ = active_ids(body)
        if len([m for m in body["messages"] if m["role"] == "tool"]) == 0:
            args = {"action": "submit", "step": step, "attempt": stale, "output": {"ok": False}}
            return StubReply.tool("workflow", args, call_id="call_stale")
        return StubReply.tool("workflow", submit_args(body, {"ok": True}), call_id="call_good")

    with OpenAIStub() as stub:
        stub.respond = respond
        provider = stub.provider()
        run = start(home, workflow, provider)
    assert run.state is not None and run.state.final_output == {"outcome": "ok", "output": {"ok": True}}
    child_id = run.of_type("child_step_finished")[0]["payload"]["childAttemptId"]
    errors = [m["content"] for m in run.tool_results() if m["isError"]]
    assert errors == [f"Attempt {stale} is stale. The active attempt for step ask/only is {child_id}."]


def test_interrupting_the_run_cancels_every_in_flight_child(home: Path, tmp_path: Path) -> None:
    workflow = write_workflow(tmp_path / "wf", "fan", FAN_OUT.format(threads=3))
    with OpenAIStub() as stub:
        stub.respond = lambda body: StubReply.hold()
        write_stub_config(home, stub)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PIW_"))}
        env.update({"PIW_HOME": str(home), "NO_COLOR": "1"})
        process = subprocess.Popen(
            [PIW, "run", str(workflow)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 20
        while stub.request_count < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub.request_count == 3  # three children hold their requests open
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
        disconnects = stub.disconnects
    assert process.returncode == 130
    assert "was interrupted and parked" in stderr
    assert disconnects >= 3
    run: Run = only_run(home)
    assert not run.of_type("child_step_finished")
    assert run.types()[-1] == "node_started"  # parked: no terminal event, resumable
