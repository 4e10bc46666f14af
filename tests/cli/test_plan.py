"""``piw run WORKFLOW --plan`` / ``piw show WORKFLOW --plan`` (issue 29 item 1): a projection of requests, tokens
and cost per node and in total, from the graph, earlier runs, prompt sizes and ``[providers.NAME.prices]``; it
sends no model request (the loopback stub counts) and starts no run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub
from tests.support.agent_harness import submit_reply, write_stub_config

PRICED = 'models = ["m"]\n[providers.stub.prices]\nm = { input = 1.0, output = 2.0, cached = 0.5 }'

THREE = """
from piw import action, agent, compute, define_workflow, edge

WORD = "a JSON object with a word"

def fan(ctx):
    return [ctx.run_agent(f"Task {i}: give a word", key=f"task-{i}").outcome for i in range(ctx.input["n"])]

workflow = define_workflow(
    name="three",
    start_at="first",
    nodes={
        "first": agent(prompt=lambda ctx: "Give a word about " + ctx.input["topic"], expected_output=WORD),
        "fan": action(fan, fan_out=lambda ctx: ctx.input["n"]),
        "last": agent(prompt="Give a last word", expected_output=WORD),
        "done": compute(run=lambda ctx: ctx.outputs["last"]),
    },
    edges=[edge("first", "fan"), edge("fan", "last"), edge("last", "done")],
)
"""

LOOP = """
from piw import agent, define_workflow, switch

workflow = define_workflow(
    name="loop",
    start_at="try",
    nodes={"try": agent(prompt="Try again: give a word and done", expected_output="a JSON object with word and done")},
    edges=[switch("try", on="$.done", cases={"false": "try"})],
)
"""


@pytest.fixture
def stub(piw_home: Path, openai_stub: OpenAIStub) -> OpenAIStub:
    write_stub_config(piw_home, openai_stub, model=PRICED)
    usage = {"prompt_tokens": 100, "completion_tokens": 20}
    openai_stub.respond = lambda body: submit_reply({"word": "w", "done": True}, usage=usage)(body)
    return openai_stub


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.workflow.py"
    path.write_text(text, encoding="utf-8")
    return path


def runs_in(home: Path) -> list[str]:
    runs = home / "runs"
    return [p.name for p in runs.iterdir() if not p.name.startswith(".")] if runs.exists() else []


def test_plan_sends_no_request_starts_no_run_and_bounds_the_declared_fan_out(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = write(tmp_path, "three", THREE)
    done = cli("run", str(flow), "--input", '{"topic": "tea", "n": 3}', "--plan")
    assert done.returncode == 0, done.stderr
    assert stub.request_count == 0 and runs_in(piw_home) == []
    assert "0 model requests sent" in done.stdout and "$1 in / $2 out per million tokens" in done.stdout
    assert "fan  (action)  visits 1 / 1 / 1 × children 1 / 3 / 3" in done.stdout
    plan = cli.json("run", str(flow), "--input", '{"topic": "tea", "n": 3}', "--plan", "--json")
    assert plan["modelRequestsSent"] == 0 and plan["bounded"] is True
    nodes = {node["nodeId"]: node for node in plan["nodes"]}
    assert sorted(nodes) == ["fan", "first", "last"]
    assert nodes["fan"]["children"] == {"low": 1.0, "expected": 3.0, "high": 3.0}
    assert "declared fan_out" in nodes["fan"]["sources"]
    assert nodes["first"]["perVisit"]["input"]["expected"] > 350  # the prompt it could compute, plus overhead
    assert plan["total"]["requests"]["expected"] == 5.0
    assert stub.request_count == 0


def test_with_earlier_runs_the_expected_figure_matches_the_next_run(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = write(tmp_path, "three", THREE)
    for _ in range(2):
        assert cli("run", str(flow), "--input", '{"topic": "tea", "n": 2}').returncode == 0
    plan = cli.json("run", str(flow), "--input", '{"topic": "tea", "n": 2}', "--plan", "--json")
    before = stub.request_count
    done = cli("run", str(flow), "--input", '{"topic": "tea", "n": 2}', "--json")
    measured = cli.json("inspect", json.loads(done.stdout)["runId"])["usage"]
    assert plan["historyRuns"] == 2
    assert plan["total"]["requests"]["expected"] == stub.request_count - before == measured["requests"] == 4
    assert plan["total"]["output"]["expected"] == pytest.approx(measured["output"], rel=0.25)
    assert plan["total"]["cost"]["expected"] == pytest.approx(measured["cost"], rel=0.25)
    assert any("history" in source for node in plan["nodes"] for source in node["sources"])


def test_an_unbounded_loop_around_an_agent_step_says_so_and_gives_the_per_visit_figure(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    flow = write(tmp_path, "loop", LOOP)
    done = cli("run", str(flow), "--plan")
    assert done.returncode == 0, done.stderr
    assert "unbounded: on the loop try, which only max_steps (100) stops; per visit:" in done.stdout
    assert "Total (unbounded: no high figure)" in done.stdout
    plan = cli.json("run", str(flow), "--plan", "--json")
    assert plan["bounded"] is False and plan["unbounded"] == ["try"]
    assert plan["total"]["requests"]["high"] is None and plan["total"]["requests"]["expected"] is None
    assert plan["nodes"][0]["perVisit"]["requests"]["expected"] == 1.0
    assert stub.request_count == 0


def test_show_plan_uses_the_example_input_of_a_built_in(cli: Any, piw_home: Path) -> None:
    plan = cli.json("show", "orchestrate", "--plan", "--json", "--provider", "scripted")
    fan = next(node for node in plan["nodes"] if node["nodeId"] == "fan_out")
    assert fan["children"]["high"] == 4.0  # the example's maxTasks
    assert plan["price"]["local"] is True and plan["total"]["cost"]["expected"] == 0.0


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ("m = { input = -1.0, output = 2.0 }", "providers.stub.prices.m.input"),
        ("m = { inptu = 1.0, output = 2.0 }", "unknown key 'providers.stub.prices.m.inptu'"),
        ("other = { input = 1.0, output = 2.0 }", "providers.stub.prices.other: unknown model 'other'"),
    ],
)
def test_a_bad_price_table_is_one_line_naming_the_key(
    cli: Any, piw_home: Path, openai_stub: OpenAIStub, tmp_path: Path, table: str, needle: str
) -> None:
    write_stub_config(piw_home, openai_stub, model=f'models = ["m"]\n[providers.stub.prices]\n{table}')
    done = cli("run", str(write(tmp_path, "loop", LOOP)), "--plan")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: ") and needle in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_price_table_prices_real_requests(
    cli: Any, piw_home: Path, stub: OpenAIStub, tmp_path: Path
) -> None:
    done = cli("run", str(write(tmp_path, "three", THREE)), "--input", '{"topic": "tea", "n": 1}', "--json")
    usage = cli.json("inspect", json.loads(done.stdout)["runId"])["usage"]
    assert usage["requests"] == 3
    assert usage["cost"] == pytest.approx(3 * (100 * 1.0 + 20 * 2.0) / 1_000_000)
