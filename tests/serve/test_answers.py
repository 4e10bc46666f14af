"""Answering over HTTP (issue 31.1, 31.2): scope ``answer`` answers and decides, ``read`` is refused, a stale
request digest is refused, one continuation whatever races, and ``answered_by`` is the token's name.

Everything runs for real: ``piw serve`` is a subprocess on a loopback port, the client is httpx, the answers land
in the test's ``piw.sqlite``.
"""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker
from tests.support.serve import create_token, served

GATE = """
from piw import compute, define_workflow, edge, human_decision

workflow = define_workflow(
    name="gate",
    start_at="gate",
    nodes={
        "gate": human_decision("ops", ["yes", "no"], "Ship it?"),
        "after": compute(lambda ctx: {"got": ctx.outputs["gate"]}),
    },
    edges=[edge("gate", "after")],
)
"""

ASK = """
from pydantic import BaseModel
from piw import checkpoint, compute, define_workflow, edge

class Ok(BaseModel):
    ok: bool

workflow = define_workflow(
    name="ask",
    start_at="ask",
    nodes={"ask": checkpoint("Is it ok?", answer=Ok), "after": compute(lambda ctx: {"got": ctx.outputs["ask"]})},
    edges=[edge("ask", "after")],
)
"""


def waiting_run(cli: Cli, path: Path) -> dict[str, Any]:
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    return dict(result)


@pytest.fixture
def gate(make_workflow: WorkflowMaker) -> Path:
    return make_workflow("gate", GATE)


def test_decide_needs_scope_answer_and_records_the_token_name(cli: Cli, gate: Path) -> None:
    run = waiting_run(cli, gate)
    run_id, digest = run["runId"], run["finalOutput"]["requestSha256"]
    reader = create_token(cli, "dashboard", "read")
    answerer = create_token(cli, "alice-phone", "answer")
    body = {"choice": "yes", "requestSha256": digest}
    with served(cli) as api:
        anonymous = api.post(f"/api/runs/{run_id}/decide", None, body)
        wrong = api.post(f"/api/runs/{run_id}/decide", "piw_" + "x" * 43, body)
        read_only = api.post(f"/api/runs/{run_id}/decide", reader, body)
        stale = api.post(
            f"/api/runs/{run_id}/decide", answerer, {**body, "requestSha256": "sha256:" + "0" * 64}
        )
        decided = api.post(f"/api/runs/{run_id}/decide", answerer, body)
        again = api.post(f"/api/runs/{run_id}/decide", answerer, body)
        other = api.post(f"/api/runs/{run_id}/decide", answerer, {**body, "choice": "no"})
        state = api.get(f"/api/runs/{run_id}", reader)
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert anonymous.json() == wrong.json()  # never says which part was wrong
    assert read_only.status_code == 403, read_only.text
    assert "scope read" in read_only.json()["error"]
    assert stale.status_code == 409 and "look at it again" in stale.json()["error"]
    assert decided.status_code == 200, decided.text
    receipt = decided.json()
    assert receipt["humanDecision"]["answeredBy"] == "alice-phone"
    assert receipt["adopted"] is False
    assert again.json()["adopted"] is True
    assert again.json()["continuationRunId"] == receipt["continuationRunId"]
    assert other.status_code == 409 and "already resolved" in other.json()["error"]
    decision = state.json()["decision"]
    assert decision["status"] == "resolved" and decision["answeredBy"] == "alice-phone"
    assert decision["continuationRunId"] == receipt["continuationRunId"]
    # the continuation is queued for a host, as with 'piw decide --detach': a host runs it to the end
    host = cli("host", "--once")
    assert host.returncode == 0, host.stderr
    finished = cli.json("inspect", receipt["continuationRunId"])
    assert finished["status"] == "completed"
    assert finished["finalOutput"]["got"]["choice"] == "yes"


def test_a_checkpoint_is_answered_over_http_and_a_bad_answer_is_one_line(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    run_id = waiting_run(cli, make_workflow("ask", ASK))["runId"]
    reader = create_token(cli, "ro", "read")
    answerer = create_token(cli, "bob", "answer")
    with served(cli) as api:
        refused = api.post(f"/api/runs/{run_id}/answer", reader, {"answer": {"ok": True}})
        bad = api.post(f"/api/runs/{run_id}/answer", answerer, {"answer": {"ok": "maybe"}})
        shapeless = api.post(f"/api/runs/{run_id}/answer", answerer, {"reply": 1})
        top_up = api.post(f"/api/runs/{run_id}/answer", answerer, {"answer": {"topUp": {"costUsd": 5}}})
        answered = api.post(f"/api/runs/{run_id}/answer", answerer, {"answer": {"ok": True}})
        unknown = api.post("/api/runs/no-such-run/answer", answerer, {"answer": {"ok": True}})
    assert refused.status_code == 403
    assert bad.status_code == 422 and bad.json()["error"].startswith("The answer does not fit checkpoint ask")
    assert "\n" not in bad.json()["error"]
    assert shapeless.status_code == 422
    assert top_up.status_code == 403 and "needs operate" in top_up.json()["error"]
    assert answered.status_code == 200, answered.text
    assert answered.json()["answer"] == {"ok": True}
    assert unknown.status_code == 404
    cli_error = cli(
        "answer", run_id, '{"ok": "maybe"}'
    )  # the CLI said the same line (about this run, answered)
    assert cli_error.returncode == 2


@pytest.mark.long
def test_ten_http_answers_and_a_cli_answer_give_one_continuation(
    cli: Cli, gate: Path, piw_home: Path
) -> None:
    run = waiting_run(cli, gate)
    run_id, digest = run["runId"], run["finalOutput"]["requestSha256"]
    token = create_token(cli, "racer", "answer")
    with served(cli) as api:

        def decide(index: int) -> tuple[int, dict[str, Any]]:
            body = {"choice": "yes" if index % 2 else "no", "requestSha256": digest}
            response = api.post(f"/api/runs/{run_id}/decide", token, body)
            return response.status_code, response.json()

        terminal = cli.popen("decide", run_id, "yes", "--detach", "--json")
        with ThreadPoolExecutor(10) as pool:
            results = list(pool.map(decide, range(10)))
        out, err = terminal.communicate(timeout=60)
    assert {status for status, _ in results} <= {200, 409}, results
    winners = {body["continuationRunId"] for status, body in results if status == 200}
    if terminal.returncode == 0:
        winners.add(json.loads(out)["runId"])
    else:
        assert "already resolved" in err
    assert len(winners) == 1, (results, out, err)
    with sqlite3.connect(piw_home / "piw.sqlite") as db:
        rows = db.execute("SELECT run_id FROM run_queue WHERE parent_run_id = ?", (run_id,)).fetchall()
    assert [row[0] for row in rows] == list(winners)
    losers = [body for status, body in results if status == 409]
    assert all("already resolved" in body["error"] for body in losers)
