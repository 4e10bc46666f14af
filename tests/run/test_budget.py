"""Budgets: limits recorded with the run, spend counted from the trace, a stop before the request that would
overrun them, a top-up that continues the run, and children drawing from the same budget.

Each test drives the real ``piw`` command against the loopback model stub and counts the requests it received.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from piw import Budget, DefinitionError
from piw.testing import OpenAIStub, openai_stub
from piw.workflow.budget import parse_budget
from tests.support.agent_harness import submit_reply, write_stub_config

__all__ = ["openai_stub"]

STEPS = """
from piw import Budget, agent, compute, define_workflow, edge

workflow = define_workflow(
    name="steps",
    start_at="s1",
    nodes={
        **{f"s{i}": agent(prompt=f"Step {i}: give a word", expected_output="a JSON object with a word")
           for i in range(1, 6)},
        "done": compute(run=lambda ctx: [ctx.outputs[f"s{i}"]["word"] for i in range(1, 6)]),
    },
    edges=[*(edge(f"s{i}", f"s{i + 1}") for i in range(1, 5)), edge("s5", "done")],
    BUDGET
)
"""

FAN = """
from piw import action, define_workflow

def fan(ctx):
    results = [ctx.run_agent(f"Task {i}: give a word", key=f"task-{i}") for i in range(1, 5)]
    return [r.outcome for r in results]

workflow = define_workflow(name="fan", start_at="fan", nodes={"fan": action(run=fan)})
"""


def write_steps(folder: Path, budget: str = "") -> Path:
    path = folder / "steps.workflow.py"
    path.write_text(STEPS.replace("BUDGET", budget), encoding="utf-8")
    return path


def words(stub: OpenAIStub) -> None:
    counter = iter(range(1, 1000))
    usage = {"prompt_tokens": 10, "completion_tokens": 5}
    stub.respond = lambda body: submit_reply({"word": f"w{next(counter)}"}, usage=usage)(body)


def trace(home: Path, run_id: str) -> list[dict[str, Any]]:
    text = (home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def stub(piw_home: Path, openai_stub: OpenAIStub) -> OpenAIStub:
    write_stub_config(piw_home, openai_stub)
    words(openai_stub)
    return openai_stub


def test_a_budget_of_n_requests_stops_before_request_n_plus_one(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = write_steps(tmp_path)
    done = cli("run", str(flow), "--budget", "requests=3")
    assert done.returncode == 0, done.stderr
    assert stub.request_count == 3
    run_id = cli.json("runs")[0]["runId"]
    state = cli.json("inspect", run_id)
    assert state["status"] == "waiting" and state["waitingOn"] == "budget"
    assert state["budget"] == {"modelRequests": 3}
    assert state["spent"]["requests"] == 3 and state["spent"]["tokens"] == 45
    stop = state["finalOutput"]
    assert stop["blockedNode"] == "s4" and stop["limit"] == "modelRequests"
    assert sorted(stop["byNode"]) == ["s1", "s2", "s3"]
    # The end of the run says what was spent, on what, and the exact commands that continue or stop it.
    assert "Stopped by its budget before a model request of s4:" in done.stdout
    assert "the budget allows 3 model requests and 3 were made." in done.stdout
    assert f"""piw answer {run_id} '{{"topUp": {{"modelRequests": 3}}}}'""" in done.stdout
    assert f"piw cancel {run_id}" in done.stdout
    run_started = trace(piw_home, run_id)[0]
    assert run_started["payload"]["budget"] == {"modelRequests": 3}
    assert sum(line["type"] == "usage_recorded" for line in trace(piw_home, run_id)) == 3


def test_the_count_survives_a_crash_and_a_resume_then_a_top_up_continues(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = write_steps(tmp_path, "budget=Budget(max_model_requests=4),")
    first = cli("run", str(flow), "--json")
    first_id = json.loads(first.stdout)["runId"]
    kill_at = [line["seq"] for line in trace(piw_home, first_id) if line["type"] == "usage_recorded"][1]
    requests_before = stub.request_count
    crashed = cli.process("run", str(flow), env={"PIW_TEST_KILL_AFTER_APPEND": str(kill_at)})
    assert crashed.returncode == -9
    run_id = next(run["runId"] for run in cli.json("runs") if run["runId"] != first_id)
    assert stub.request_count - requests_before == 2
    resumed = cli("resume", run_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "waiting"
    assert stub.request_count - requests_before == 4  # 2 before the crash, 2 after: the count was not reset
    assert cli.json("inspect", run_id)["spent"]["requests"] == 4
    # The response to the second request was lost with the process, so the resumed step asked again: that
    # request is charged too. Two more requests finish s4 and s5.
    topped = cli("answer", run_id, '{"topUp": {"modelRequests": 2}}', "--json")
    assert topped.returncode == 0, topped.stderr
    continuation = json.loads(topped.stdout)
    assert continuation["status"] == "completed"
    assert stub.request_count - requests_before == 6
    state = cli.json("inspect", continuation["runId"])
    assert state["budget"] == {"modelRequests": 6}
    assert state["spent"]["requests"] == 6
    assert state["finalOutput"] == ["w5", "w7", "w8", "w9", "w10"]


def test_children_draw_from_the_same_budget(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = tmp_path / "fan.workflow.py"
    flow.write_text(FAN, encoding="utf-8")
    done = cli("run", str(flow), "--budget", "requests=2", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "waiting"
    assert stub.request_count == 2
    state = cli.json("inspect", json.loads(done.stdout)["runId"])
    assert state["spent"]["requests"] == 2 and state["spent"]["agentSteps"] == 2
    assert sorted(state["finalOutput"]["byNode"]) == ["fan/task-1", "fan/task-2"]


def test_the_flag_tightens_the_workflow_budget_and_never_loosens_it(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = write_steps(tmp_path, "budget=Budget(max_model_requests=2, max_tokens=1000),")
    done = cli("run", str(flow), "--budget", "requests=10,cost=2.5", "--json")
    run_id = json.loads(done.stdout)["runId"]
    assert trace(piw_home, run_id)[0]["payload"]["budget"] == {
        "costUsd": 2.5,
        "tokens": 1000,
        "modelRequests": 2,
    }
    assert stub.request_count == 2


def test_an_unknown_price_is_said_not_shown_as_zero(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    done = cli("run", str(write_steps(tmp_path)), "--budget", "requests=1", "--json")
    view = cli("inspect", json.loads(done.stdout)["runId"])
    assert "cost unknown (no price configured)" in view.stdout
    assert "$0.0000" not in view.stdout


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("cost=-1", "give a number of 0 or more"),
        ("bogus=1", "is not KEY=VALUE"),
        ("tokens=1.5", "give a whole number"),
        ("requests=2,requests=3", "given twice"),
        ("", "needs at least one limit"),
    ],
)
def test_a_malformed_budget_is_one_clear_line_and_starts_nothing(
    cli: Any, piw_home: Path, tmp_path: Path, flag: str, needle: str
) -> None:
    done = cli("run", str(write_steps(tmp_path)), "--budget", flag)
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and needle in done.stderr, done.stderr
    assert not (piw_home / "runs").exists() or not any((piw_home / "runs").iterdir())


def test_a_top_up_of_a_run_that_is_not_waiting_on_its_budget_is_refused(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    done = cli("run", str(write_steps(tmp_path)), "--json")
    run_id = json.loads(done.stdout)["runId"]
    refused = cli("answer", run_id, '{"topUp": {"modelRequests": 1}}')
    assert refused.returncode == 2
    assert "not waiting" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    stopped = cli("run", str(write_steps(tmp_path)), "--budget", "requests=1", "--json")
    waiting = json.loads(stopped.stdout)["runId"]
    wrong = cli("answer", waiting, '{"topUp": {"dollars": 1}}')
    assert wrong.returncode == 2 and "Unknown top-up key 'dollars'" in wrong.stderr
    assert cli.json("inspect", waiting)["status"] == "waiting"


def test_the_budget_dsl_and_flag_parsing() -> None:
    assert parse_budget("cost=2.50,tokens=200k,requests=20,steps=5") == Budget(
        max_cost_usd=2.5, max_tokens=200_000, max_model_requests=20, max_agent_steps=5
    )
    assert parse_budget("tokens=1.5m").max_tokens == 1_500_000
    with pytest.raises(DefinitionError, match="max_tokens"):
        Budget(max_tokens=-1)
    with pytest.raises(DefinitionError, match="whole number"):
        Budget(max_model_requests=True)  # type: ignore[arg-type]
    assert Budget(max_model_requests=5).tightened(Budget(max_model_requests=9, max_tokens=3)) == Budget(
        max_model_requests=5, max_tokens=3
    )
    assert Budget(max_model_requests=5).topped_up(Budget(max_model_requests=2, max_tokens=9)) == Budget(
        max_model_requests=7
    )


def test_provider_prices_price_the_requests_and_a_cost_budget_stops_the_run(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, tmp_path: Path
) -> None:
    priced = 'models = ["m"]\nprice_per_mtok_in = 1.0\nprice_per_mtok_out = 2.0'
    write_stub_config(piw_home, openai_stub, model=priced)
    words(openai_stub)
    done = cli("run", str(write_steps(tmp_path)), "--budget", "cost=0.00005", "--json")
    assert json.loads(done.stdout)["status"] == "waiting"
    assert openai_stub.request_count == 2  # each request costs $0.00002: a third would pass $0.00005
    state = cli.json("inspect", json.loads(done.stdout)["runId"])
    assert state["spent"]["cost"] == pytest.approx(0.00004)
    assert state["finalOutput"]["limit"] == "costUsd"
    assert "unpricedRequests" not in state["spent"]
