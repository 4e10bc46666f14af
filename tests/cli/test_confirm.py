"""``--confirm-above COST`` and ``[budget] confirm_above`` (issue 29 item 2): a run whose projected cost is over the
line asks before its first model request; with stdin not a terminal it refuses unless ``--yes``; a detached run
waits on its ``budget`` gate with the projection, and ``piw answer RUN '{"confirm": true}'`` starts it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub
from tests.support.agent_harness import submit_reply, write_stub_config

PRICED = 'models = ["m"]\n[providers.stub.prices]\nm = { input = 1.0, output = 2.0 }'
TWO = """
from piw import agent, define_workflow, edge

workflow = define_workflow(
    name="two",
    start_at="a",
    nodes={"a": agent(prompt="Give a word", expected_output="a JSON object with a word"),
           "b": agent(prompt="Give another word", expected_output="a JSON object with a word")},
    edges=[edge("a", "b")],
)
"""


@pytest.fixture
def stub(piw_home: Path, openai_stub: OpenAIStub) -> OpenAIStub:
    write_stub_config(piw_home, openai_stub, model=PRICED)
    openai_stub.respond = lambda body: submit_reply(
        {"word": "w"}, usage={"prompt_tokens": 500, "completion_tokens": 20}
    )(body)
    return openai_stub


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "two.workflow.py"
    path.write_text(TWO, encoding="utf-8")
    return path


def runs_in(home: Path) -> list[str]:
    runs = home / "runs"
    return [p.name for p in runs.iterdir() if not p.name.startswith(".")] if runs.exists() else []


def test_over_the_line_without_a_terminal_it_refuses_and_starts_nothing(
    cli: Any, piw_home: Path, stub: OpenAIStub, flow: Path
) -> None:
    done = cli("run", str(flow), "--confirm-above", "0.0001")
    assert done.returncode == 2
    assert (
        done.stderr.startswith("Error: Not started: projected cost $0.00")
        and len(done.stderr.splitlines()) == 1
    )
    assert "is above confirm_above $0.0001, and stdin is not a terminal to ask; pass --yes" in done.stderr
    assert stub.request_count == 0 and runs_in(piw_home) == []
    confirmed = cli("run", str(flow), "--confirm-above", "0.0001", "--yes", "--json")
    assert confirmed.returncode == 0, confirmed.stderr
    assert json.loads(confirmed.stdout)["status"] == "completed" and stub.request_count == 2


def test_under_the_line_it_runs_without_asking(
    cli: Any, piw_home: Path, stub: OpenAIStub, flow: Path
) -> None:
    done = cli("run", str(flow), "--confirm-above", "$5", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed" and stub.request_count == 2


def test_the_config_line_applies_and_the_flag_overrides_it(
    cli: Any, piw_home: Path, stub: OpenAIStub, flow: Path
) -> None:
    config = piw_home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8") + "\n[budget]\nconfirm_above = 0.0001\n", encoding="utf-8"
    )
    refused = cli("run", str(flow))
    assert refused.returncode == 2 and "confirm_above $0.0001" in refused.stderr
    assert stub.request_count == 0
    assert cli("run", str(flow), "--confirm-above", "10").returncode == 0
    assert stub.request_count == 2


def test_a_detached_run_over_the_line_waits_on_its_budget_with_the_projection_and_confirm_starts_it(
    cli: Any, piw_home: Path, stub: OpenAIStub, flow: Path
) -> None:
    queued = cli("run", str(flow), "--confirm-above", "0.0001", "--detach")
    assert queued.returncode == 0, queued.stderr
    assert "Waiting for confirmation before the first model request:" in queued.stdout
    (run_id,) = runs_in(piw_home)
    assert f"""piw answer {run_id} '{{"confirm": true}}'""" in queued.stdout
    state = cli.json("inspect", run_id)
    assert state["status"] == "waiting" and state["waitingOn"] == "budget"
    stop = state["finalOutput"]
    assert stop["limit"] == "confirmAbove" and stop["blockedNode"] == "a"
    assert stop["confirm"]["above"] == 0.0001 and stop["confirm"]["projection"]["requests"]["expected"] == 2.0
    assert "is above confirm_above $0.0001" in stop["reason"]
    assert stub.request_count == 0
    wrong = cli("answer", run_id, '{"confirm": false}')
    assert wrong.returncode == 2 and stub.request_count == 0
    started = cli("answer", run_id, '{"confirm": true}', "--json")
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["status"] == "completed"
    assert stub.request_count == 2


def test_a_bad_cost_is_one_clear_line(cli: Any, piw_home: Path, stub: OpenAIStub, flow: Path) -> None:
    done = cli("run", str(flow), "--confirm-above", "lots")
    assert done.returncode == 2 and "give a cost in USD of 0 or more" in done.stderr
    (piw_home / "config.toml").write_text("[budget]\nconfirm_above = -1\n", encoding="utf-8")
    bad = cli("run", str(flow))
    assert bad.returncode == 2 and "budget.confirm_above" in bad.stderr
