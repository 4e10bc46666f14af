"""Answering, deciding and topping up continue a run with the provider, model and script it was started with.

A continuation runs the steps after a gate. ``piw answer``/``piw decide`` give it the provider options the waiting
run recorded (as ``piw resume`` does), their own ``--provider``/``--model``/``--script`` override them, and when no
provider can be found for an agent step still ahead the answer is refused before anything is recorded (exit 2,
nothing queued). When only compute steps follow the gate, no provider is needed at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

ASK = """
from pydantic import BaseModel
from piw import agent, checkpoint, define_workflow, edge

class Ok(BaseModel):
    ok: bool

workflow = define_workflow(
    name="ask",
    start_at="first",
    nodes={
        "first": agent(prompt="Say a word.", expected_output="a JSON object with word"),
        "ask": checkpoint(summary="Go on?", answer=Ok),
        "after": agent(prompt="Say another word.", expected_output="a JSON object with word"),
    },
    edges=[edge("first", "ask"), edge("ask", "after")],
)
"""

COMPUTE_AFTER = """
from piw import agent, checkpoint, compute, define_workflow, edge

workflow = define_workflow(
    name="tail",
    start_at="first",
    nodes={
        "first": agent(prompt="Say a word.", expected_output="a JSON object with word"),
        "ask": checkpoint(summary="Go on?"),
        "after": compute(lambda ctx: {"first": ctx.outputs["first"], "answer": ctx.outputs["ask"]}),
    },
    edges=[edge("first", "ask"), edge("ask", "after")],
)
"""

GATE = """
from piw import agent, compute, define_workflow, edge, human_decision, switch

workflow = define_workflow(
    name="gate",
    start_at="first",
    nodes={
        "first": agent(prompt="Say a word.", expected_output="a JSON object with word"),
        "gate": human_decision("reviewers", ["go", "stop"], {"title": "Go on?", "summary": "One more word?"}),
        "after": agent(prompt="Say another word.", expected_output="a JSON object with word"),
        "halt": compute(lambda ctx: {"halted": ctx.outputs["gate"]["choice"]}),
    },
    edges=[edge("first", "gate"), switch("gate", on="$.choice", cases={"go": "after", "stop": "halt"})],
)
"""

TWO = """
from piw import agent, define_workflow, edge

workflow = define_workflow(
    name="two",
    start_at="first",
    nodes={
        "first": agent(prompt="Say a word.", expected_output="a JSON object with word"),
        "after": agent(prompt="Say another word.", expected_output="a JSON object with word"),
    },
    edges=[edge("first", "after")],
)
"""

REPLIES = {"first": [{"submit": {"word": "a"}}], "after": [{"submit": {"word": "b"}}]}


def write_replies(folder: Path, name: str, replies: dict[str, Any]) -> Path:
    """A replies file away from the workflow, so only a recorded ``--script`` finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(replies), encoding="utf-8")
    return path


def run_json(cli: Cli, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = cli(*args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def runs(cli: Cli) -> list[str]:
    return [row["runId"] for row in cli.json("runs")]


@pytest.fixture
def replies(tmp_path: Path) -> Path:
    return write_replies(tmp_path / "elsewhere", "replies.json", REPLIES)


def test_answer_continues_with_the_provider_and_script_the_run_started_with(
    cli: Cli, make_workflow: WorkflowMaker, replies: Path
) -> None:
    flow = make_workflow("ask", ASK)
    waiting = run_json(cli, "run", str(flow), "--provider", "scripted", "--script", str(replies))
    assert waiting["status"] == "waiting"
    done = cli("answer", waiting["runId"], '{"ok": true}', "--json")
    assert done.returncode == 0, done.stderr
    continuation = json.loads(done.stdout)
    assert (continuation["status"], continuation["finalOutput"]) == ("completed", {"word": "b"})


def test_decide_continues_with_the_provider_and_script_the_run_started_with(
    cli: Cli, make_workflow: WorkflowMaker, replies: Path
) -> None:
    flow = make_workflow("gate", GATE)
    waiting = run_json(cli, "run", str(flow), "--provider", "scripted", "--script", str(replies))
    done = cli("decide", waiting["runId"], "go")
    assert done.returncode == 0, done.stderr
    assert "✓ after  ok" in done.stdout and "■ completed" in done.stdout


def test_a_top_up_continues_with_the_provider_and_script_the_run_started_with(
    cli: Cli, make_workflow: WorkflowMaker, replies: Path
) -> None:
    flow = make_workflow("two", TWO)
    args = ("run", str(flow), "--provider", "scripted", "--script", str(replies), "--budget", "requests=1")
    stopped = run_json(cli, *args)
    assert stopped["status"] == "waiting" and stopped["finalOutput"]["blockedNode"] == "after"
    done = cli("answer", stopped["runId"], '{"topUp": {"modelRequests": 1}}', "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"word": "b"}


def test_provider_flags_on_answer_override_the_recorded_ones(
    cli: Cli, make_workflow: WorkflowMaker, replies: Path, tmp_path: Path
) -> None:
    other = write_replies(tmp_path / "other", "other.json", {"after": [{"submit": {"word": "c"}}]})
    flow = make_workflow("ask", ASK)
    waiting = run_json(cli, "run", str(flow), "--provider", "scripted", "--script", str(replies))
    continuation = run_json(cli, "answer", waiting["runId"], '{"ok": true}', "--script", str(other))
    assert continuation["finalOutput"] == {"word": "c"}
    # what the continuation ran with is recorded for it, so resuming it later uses the same options
    from piw.run.runner import recorded_launch

    assert recorded_launch(cli.home, continuation["runId"]).script == str(other)


def test_only_compute_steps_after_the_gate_need_no_provider(cli: Cli, make_workflow: WorkflowMaker) -> None:
    flow = make_workflow("tail", COMPUTE_AFTER)
    write_replies(flow.parent, "tail.replies.json", {"first": REPLIES["first"]})
    # PIW_PROVIDER is not recorded with the run: without it, no provider can be found for an agent step
    waiting = run_json(cli, "run", str(flow), env={"PIW_PROVIDER": "scripted"})
    # ...and none is needed: only a compute step follows the gate
    done = cli("answer", waiting["runId"], '"yes"', "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"first": {"word": "a"}, "answer": "yes"}


def test_a_detached_answer_with_only_compute_steps_ahead_runs_in_a_host_without_a_provider(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("tail", COMPUTE_AFTER)
    write_replies(flow.parent, "tail.replies.json", {"first": REPLIES["first"]})
    waiting = run_json(cli, "run", str(flow), env={"PIW_PROVIDER": "scripted"})
    queued = run_json(cli, "answer", waiting["runId"], '"yes"', "--detach")
    assert queued["status"] == "queued"
    host = cli("host", "--once")
    assert f"{queued['runId']}  completed" in host.stdout, host.stdout
    assert cli.json("inspect", queued["runId"])["finalOutput"] == {"first": {"word": "a"}, "answer": "yes"}


def test_deciding_for_compute_steps_needs_no_provider_and_for_an_agent_step_is_refused_first(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    flow = make_workflow("gate", GATE)
    write_replies(flow.parent, "gate.replies.json", REPLIES)
    first = run_json(cli, "run", str(flow), env={"PIW_PROVIDER": "scripted"})
    refused = cli("decide", first["runId"], "go")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"Error: The continuation of run {first['runId']} runs agent step after")
    assert "No provider selected" in refused.stderr and "Nothing was recorded" in refused.stderr
    # nothing was recorded: another choice is still open, and its branch (compute only) needs no provider
    stopped = run_json(cli, "decide", first["runId"], "stop")
    assert stopped["finalOutput"] == {"halted": "stop"}


def test_an_answer_no_provider_can_continue_is_refused_and_leaves_nothing_queued(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("ask", ASK)
    write_replies(flow.parent, "ask.replies.json", REPLIES)
    waiting = run_json(cli, "run", str(flow), env={"PIW_PROVIDER": "scripted"})
    parent = waiting["runId"]
    refused = cli("answer", parent, '{"ok": true}')
    assert refused.returncode == 2, refused.stderr
    assert "runs agent step after" in refused.stderr and "Nothing was recorded" in refused.stderr
    # nothing is queued for a host to pick up later, and piw runs shows only the waiting run
    host = cli("host", "--once")
    assert host.returncode == 0 and "0 runs claimed" in host.stdout, host.stdout
    assert runs(cli) == [parent]
    # the run still waits for its answer: a different one is not "already answered"
    continuation = run_json(cli, "answer", parent, '{"ok": false}', "--provider", "scripted")
    assert continuation["status"] == "completed"


def test_script_implies_the_scripted_provider(cli: Cli, make_workflow: WorkflowMaker, replies: Path) -> None:
    flow = make_workflow("ask", ASK)
    waiting = run_json(cli, "run", str(flow), "--script", str(replies))
    assert waiting["status"] == "waiting"
    continuation = run_json(cli, "answer", waiting["runId"], '{"ok": true}', "--script", str(replies))
    assert continuation["finalOutput"] == {"word": "b"}


def test_a_continuation_that_cannot_start_after_its_answer_is_recorded_is_queued_visibly_for_a_host(
    cli: Cli, make_workflow: WorkflowMaker, replies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = make_workflow("ask", ASK)
    waiting = run_json(cli, "run", str(flow), "--provider", "scripted", "--script", str(replies))
    parent = waiting["runId"]

    from piw.errors import StorageFull
    from piw.run.engine import Engine

    start = Engine.start_continuation

    def no_space_to_run(self: Engine, spec: Any, **options: Any) -> Any:
        if options.get("begin", True):
            raise StorageFull("No space left on device while the continuation started.")
        return start(self, spec, **options)

    with monkeypatch.context() as patched:
        patched.setattr(Engine, "start_continuation", no_space_to_run)
        failed = cli("answer", parent, '{"ok": true}')
    assert failed.returncode == 75, failed.stderr  # the exit code of a full disk; never 2 (nothing recorded)
    said = " ".join(failed.stderr.split())
    child = next(run for run in runs(cli) if run != parent)
    assert said.startswith("Error: No space left on device while the continuation started.")
    assert f"The answer is recorded, but its continuation run {child} did not start; it is queued" in said
    assert f"'piw host' runs it, or 'piw resume {child}' runs it here." in said
    # piw runs lists it, queued for a host
    listed = cli("runs")
    line = next(row for row in listed.stdout.splitlines() if row.startswith(child))
    assert "running (queued)" in line, listed.stdout
    # the host says which run it picked up and why, then runs it
    host = cli("host", "--once")
    assert host.returncode == 0, host.stderr
    text = " ".join(host.stdout.split())
    assert f"{child} claimed (generation 2): the continuation of {parent} after the answer at ask" in text
    assert f"{child} completed" in text
    assert cli.json("inspect", child)["finalOutput"] == {"word": "b"}


def test_a_continuation_interrupted_before_it_started_is_parked_for_piw_resume(
    cli: Cli, make_workflow: WorkflowMaker, replies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = make_workflow("ask", ASK)
    parent = run_json(cli, "run", str(flow), "--provider", "scripted", "--script", str(replies))["runId"]

    from piw.run.engine import Engine

    start = Engine.start_continuation

    def interrupted(self: Engine, spec: Any, **options: Any) -> Any:
        if options.get("begin", True):
            raise KeyboardInterrupt
        return start(self, spec, **options)

    with monkeypatch.context() as patched:
        patched.setattr(Engine, "start_continuation", interrupted)
        stopped = cli("answer", parent, '{"ok": true}')
    assert stopped.returncode == 130, stopped.stderr
    child = next(run for run in runs(cli) if run != parent)
    assert " ".join(stopped.stderr.split()) == (
        f"Error: Interrupted. The answer is recorded, but its continuation run {child} did not start; it is "
        f"parked; continue it with 'piw resume {child}'."
    )
    # a host leaves it alone, as it does an interrupted foreground run; piw resume runs it
    assert "0 runs claimed" in cli("host", "--once").stdout
    resumed = run_json(cli, "resume", child)
    assert (resumed["status"], resumed["finalOutput"]) == ("completed", {"word": "b"})
