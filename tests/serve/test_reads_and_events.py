"""Reading over HTTP and live events (issue 31.1): the state is ``piw inspect --json``, the lists are ``piw runs``'s,
steps, updates, progress and the waiting request have their routes, and the event stream delivers events that
are committed while a client listens. Acts that change a run's life (cancel, pause, resume, start) need scope
``operate``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.serve.test_answers import GATE, waiting_run
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker
from tests.support.serve import create_token, served

PROGRESS = """
from piw import action, compute, define_workflow, edge

P = "pi-workflows.progress.v1"

def crunch(ctx):
    for done in (10, 50, 90):
        ctx.publish_update("progress", "rows", {"schema": P, "status": "running", "label": "Rows",
                                                "completed": done, "total": 100, "unit": "rows"})
    ctx.publish_update("note", "last", {"msg": "hello"})
    return {"rows": 90}

workflow = define_workflow(
    name="crunch",
    start_at="prepare",
    nodes={"prepare": compute(lambda ctx: {"n": 1}), "crunch": action(crunch)},
    edges=[edge("prepare", "crunch")],
)
"""


@pytest.fixture
def token(cli: Cli) -> str:
    return create_token(cli, "reader", "read")


def test_a_runs_state_is_the_json_of_inspect(cli: Cli, make_workflow: WorkflowMaker, token: str) -> None:
    path = make_workflow("crunch", PROGRESS)
    done = cli("run", str(path), "--json")
    run_id = json.loads(done.stdout)["runId"]
    gate = waiting_run(cli, make_workflow("gate", GATE))["runId"]
    with served(cli) as api:
        state = api.get(f"/api/runs/{run_id}", token)
        by_prefix = api.get(f"/api/runs/{run_id[:22]}", token)
        gate_state = api.get(f"/api/runs/{gate}", token)
        runs = api.get("/api/runs", token)
        waiting = api.get("/api/runs", token, status="waiting")
        filtered = api.get("/api/runs", token, workflow="crunch", since="1d")
        bad_since = api.get("/api/runs", token, since="whenever")
        bad = api.get("/api/runs", token, status="sleeping")
        steps = api.get(f"/api/runs/{run_id}/steps", token)
        paged = api.get(f"/api/runs/{run_id}/steps", token, offset=1, limit=5)
        light = api.get(f"/api/runs/{run_id}", token, steps="none")
        updates = api.get(f"/api/runs/{run_id}/updates", token)
        progress = api.get(f"/api/runs/{run_id}/progress", token)
        request = api.get(f"/api/runs/{gate}/waiting", token)
        not_waiting = api.get(f"/api/runs/{run_id}/waiting", token)
        missing = api.get("/api/runs/nope", token)
        schema = api.get("/openapi.json")
    assert state.json() == cli.json("inspect", run_id)
    assert by_prefix.json() == state.json()
    assert gate_state.json() == cli.json("inspect", gate)
    assert runs.json() == cli.json("runs")
    assert [row["runId"] for row in waiting.json()] == [gate]
    assert filtered.json() == cli.json("runs", "--workflow", "crunch", "--since", "1d")
    assert [row["runId"] for row in filtered.json()] == [run_id]
    cli_since = cli("runs", "--since", "whenever")
    assert bad_since.status_code == 400 and f"Error: {bad_since.json()['error']}" == cli_since.stderr.strip()
    cli_bad = cli("runs", "--status", "sleeping")
    assert bad.status_code == 400 and f"Error: {bad.json()['error']}" == cli_bad.stderr.strip()
    assert [(step["nodeId"], step["outcome"]) for step in steps.json()] == [
        ("prepare", "ok"),
        ("crunch", "ok"),
    ]
    assert paged.json() == steps.json()[1:]
    assert light.json() == {**state.json(), "steps": []}
    assert [item["key"] for item in updates.json()["history"]] == ["rows", "rows", "rows", "last"]
    assert {(item["type"], item["key"]) for item in updates.json()["current"]} == {
        ("progress", "rows"),
        ("note", "last"),
    }
    [track] = progress.json()
    assert track["key"] == "rows" and track["data"]["completed"] == 90 and "Rows" in track["line"]
    assert request.json()["kind"] == "human_decision"
    assert request.json()["request"]["requestSha256"].startswith("sha256:")
    assert not_waiting.status_code == 400
    assert missing.status_code == 404
    paths = schema.json()["paths"]
    for route in (
        "/api/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/decide",
        "/api/runs/{run_id}/events",
    ):
        assert route in paths


def test_the_event_stream_delivers_events_committed_while_listening(
    cli: Cli, make_workflow: WorkflowMaker, token: str
) -> None:
    path = make_workflow("crunch", PROGRESS)
    queued = cli("run", str(path), "--detach", "--json")
    run_id = json.loads(queued.stdout)["runId"]
    received: list[tuple[str, str]] = []
    connected = threading.Event()
    with served(cli) as api:

        def listen() -> None:
            with (
                api.client(token, timeout=60) as client,
                client.stream("GET", f"/api/runs/{run_id}/events") as sse,
            ):
                kind = ""
                for line in sse.iter_lines():
                    if line.startswith(": connected"):
                        connected.set()
                    elif line.startswith("event: "):
                        kind = line[len("event: ") :]
                    elif line.startswith("data: "):
                        received.append((kind, line[len("data: ") :]))
                        if kind == "end":
                            return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert connected.wait(30)
        host = cli("host", "--once")
        assert host.returncode == 0, host.stderr
        listener.join(60)
    assert not listener.is_alive()
    trace = [json.loads(data) for kind, data in received if kind == "trace"]
    types = [event["type"] for event in trace]
    assert "run_started" not in types, "only what was committed after connecting"
    assert types[-1] == "run_completed" and "node_started" in types
    assert [event["seq"] for event in trace] == sorted(event["seq"] for event in trace)
    progress = [json.loads(data) for kind, data in received if kind == "progress"]
    assert [item["data"]["completed"] for item in progress] == [10, 50, 90]
    assert received[-1][0] == "end"


def test_a_reconnect_gets_what_followed_its_last_event(
    cli: Cli, make_workflow: WorkflowMaker, token: str
) -> None:
    done = cli("run", str(make_workflow("crunch", PROGRESS)), "--json")
    run_id = json.loads(done.stdout)["runId"]
    with served(cli) as api, api.client(token) as client:
        with client.stream("GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": "3"}) as sse:
            ids = [int(line[4:]) for line in sse.iter_lines() if line.startswith("id: ")]
        with client.stream("GET", f"/api/runs/{run_id}/events") as sse:
            finished = [line for line in sse.iter_lines() if line.startswith("data: ")]
    assert ids and min(ids) == 4
    assert len(finished) == 1 and json.loads(finished[0][6:])["status"] == "completed"


def _act(api: Any, token: str, run_id: str, verb: str) -> Any:
    return api.post(f"/api/runs/{run_id}/{verb}", token)


@pytest.mark.long
def test_pause_resume_cancel_and_start_need_scope_operate(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    (piw_home / "workflows").mkdir()
    (piw_home / "workflows" / "crunch.workflow.py").write_text(PROGRESS.lstrip(), encoding="utf-8")
    answerer = create_token(cli, "answers", "answer")
    operator = create_token(cli, "ops", "operate")
    with served(cli) as api:
        refused = api.post("/api/runs", answerer, {"workflow": "crunch"})
        unknown = api.post("/api/runs", operator, {"workflow": "../../etc/passwd"})
        started = api.post("/api/runs", operator, {"workflow": "crunch", "title": "from the API"})
        run_id = started.json()["runId"]
        paused = _act(api, operator, run_id, "pause")
        not_allowed = _act(api, answerer, run_id, "cancel")
        resumed = _act(api, operator, run_id, "resume")
        cancelled = _act(api, operator, run_id, "cancel")
        again = _act(api, operator, run_id, "cancel")
        listed = api.get("/api/workflows", operator)
    assert refused.status_code == 403
    assert unknown.status_code == 400 and "'piw list' shows" in unknown.json()["error"]
    assert started.status_code == 201, started.text
    assert paused.status_code == 200 and paused.json()["done"] is True
    assert not_allowed.status_code == 403
    assert resumed.status_code == 200 and resumed.json()["queueStatus"] == "queued"
    assert cancelled.json()["status"] == "cancelled"
    assert again.status_code == 400 and "already ended" in again.json()["error"]
    assert "crunch" in [item["id"] for item in listed.json()]
    assert cli.json("inspect", run_id)["runTitle"] == "from the API"
