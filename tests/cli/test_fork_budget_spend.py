"""A fork with ``--budget`` counts the spend of the steps it adopts, whether or not its parent had a budget
(``docs/fork-replay-budgets.md``: "a fork adopts the spend of the steps it adopts"), and a cost cap says how it
was checked when it stops a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

FOUR = """
from piw import agent, define_workflow, edge

workflow = define_workflow(
    name="four",
    start_at="a",
    nodes={name: agent(prompt=f"Step {name}: give a word", expected_output="a JSON object with word")
           for name in "abcd"},
    edges=[edge("a", "b"), edge("b", "c"), edge("c", "d")],
)
"""


def reply(word: str, cost: float = 0.0) -> dict[str, Any]:
    return {"submit": {"word": word}, "usage": {"input": 10, "output": 5, "cost": cost}}


@pytest.fixture
def four(make_workflow: WorkflowMaker) -> Path:
    flow = make_workflow("four", FOUR)
    replies = {name: [reply(name, 0.01)] for name in "abcd"}
    (flow.parent / "four.replies.json").write_text(json.dumps(replies), encoding="utf-8")
    return flow


def run_json(cli: Cli, *args: str) -> dict[str, Any]:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("parent_budget", [None, "requests=10"])
def test_a_fork_with_a_budget_counts_the_spend_of_the_steps_it_adopts(
    cli: Cli, four: Path, parent_budget: str | None
) -> None:
    args = ("--budget", parent_budget) if parent_budget else ()
    parent = run_json(cli, "run", str(four), "--provider", "scripted", *args)
    assert parent["status"] == "completed"
    fork = run_json(
        cli, "fork", parent["runId"], "--from", "c", "--provider", "scripted", "--budget", "requests=3"
    )
    # a and b were adopted with their 2 requests: c is the third the budget allows, d is refused
    assert fork["status"] == "waiting", fork
    assert fork["finalOutput"]["blockedNode"] == "d"
    state = cli.json("inspect", fork["runId"])
    assert state["spent"]["requests"] == 3 and state["spent"]["tokens"] == 45
    assert state["spent"]["cost"] == pytest.approx(0.03)
    assert sorted(state["spentByNode"]) == ["a", "b", "c"]


def test_a_fork_runs_with_the_provider_and_script_its_parent_was_started_with(
    cli: Cli, four: Path, tmp_path: Path
) -> None:
    script = tmp_path / "elsewhere.json"
    script.write_text(json.dumps({name: [reply(name.upper())] for name in "abcd"}), encoding="utf-8")
    parent = run_json(cli, "run", str(four), "--script", str(script))  # --script alone: the scripted provider
    assert parent["finalOutput"] == {"word": "D"}
    fork = run_json(cli, "fork", parent["runId"], "--from", "c", "--budget", "requests=3")
    assert (fork["status"], fork["finalOutput"]["blockedNode"]) == ("waiting", "d")
    topped = run_json(cli, "answer", fork["runId"], '{"topUp": {"modelRequests": 1}}')
    assert (topped["status"], topped["finalOutput"]) == ("completed", {"word": "D"})


def test_a_cost_cap_says_it_is_checked_before_each_request_against_an_estimate(cli: Cli, four: Path) -> None:
    done = cli("run", str(four), "--provider", "scripted", "--budget", "cost=0.025")
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "Stopped by its budget before a model request of c:" in said
    assert "$0.0200 of $0.0250 was spent, and the next request is estimated at $0.0100." in said, said
    assert "A cost cap is checked before each request, against this run's average cost a request." in said
    run_id = cli.json("runs")[0]["runId"]
    stop = cli.json("inspect", run_id)["finalOutput"]
    assert stop["limit"] == "costUsd" and stop["estimatedCostUsd"] == pytest.approx(0.01)
