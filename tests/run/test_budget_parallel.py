"""Budgets stay hard when children run in parallel (issue 29 item 3): every request reserves its share of the
budget before it is sent, so parallel ``run_agent`` children cannot all see room and all send.

The loopback stub counts what was really sent; its worker requests wait (boundedly) for a sibling to be in flight,
so a budget that let two children through at once would show a third request here.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub, StubReply, replies_responder
from tests.support.builtin_harness import BUILTINS


def configure(home: Path, stub: OpenAIStub) -> None:
    (home / "config.toml").write_text(
        f'default = "stub/stub-model"\n[providers.stub]\napi = "openai-completions"\n'
        f'base_url = "{stub.base_url}"\nmodels = ["stub-model"]\n',
        encoding="utf-8",
    )


def orchestrate_input(tasks: int, concurrency: int) -> str:
    example = json.loads((BUILTINS / "orchestrate.input.json").read_text(encoding="utf-8"))
    example["concurrency"], example["maxTasks"] = concurrency, max(tasks, example["maxTasks"])
    return json.dumps(example)


def parallel_workers(tasks: int, marker: str = "fan_out/") -> Any:
    """A responder: the planner plans ``tasks`` tasks; a worker request waits up to 2 s for a second one."""
    plan = [{"agent": "tester", "task": f"Check part {n}."} for n in range(1, tasks + 1)]
    serve = replies_responder(
        {"plan_submit": [{"submit": plan}], "*": [{"submit": {"checked": True}}] * tasks}
    )
    both = threading.Condition()
    workers = 0

    def respond(body: dict[str, Any]) -> StubReply:
        nonlocal workers
        if marker in json.dumps(body["messages"][-1].get("content")):
            with both:
                workers += 1
                both.notify_all()
                both.wait_for(lambda: workers >= 2, timeout=2)
        return serve(body)

    return respond


PARALLEL = """
from concurrent.futures import ThreadPoolExecutor
from piw import action, define_workflow

def fan(ctx):
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(
            lambda i: ctx.run_agent(f"Task {i}: check it", key=f"task-{i}"), range(1, ctx.input["n"] + 1)
        ))
    return [r.outcome for r in results]

workflow = define_workflow(name="parallel", start_at="fan", nodes={"fan": action(run=fan)})
"""


def parallel(folder: Path) -> Path:
    path = folder / "parallel.workflow.py"
    path.write_text(PARALLEL, encoding="utf-8")
    return path


@pytest.mark.parametrize(("children", "budget"), [(2, 1), (4, 3)])
def test_parallel_children_never_send_more_requests_than_the_budget(
    cli: Any, piw_home: Path, tmp_path: Path, children: int, budget: int
) -> None:
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = parallel_workers(children, marker="fan/")
        done = cli(
            "run", str(parallel(tmp_path)), "--input", json.dumps({"n": children}), "--budget",
            f"requests={budget}", "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert stub.errors == []
        assert stub.request_count == budget  # the other children could not reserve a request
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    state = cli.json("inspect", result["runId"])
    assert state["waitingOn"] == "budget"
    assert state["spent"]["requests"] == budget
    assert state["finalOutput"]["limit"] == "modelRequests"


# ---- the fan-out gate (issue 29 item 4) -----------------------------------------------------------------------


def test_a_fan_out_over_budget_parks_before_the_first_child_request_and_a_top_up_continues_it(
    cli: Any, piw_home: Path
) -> None:
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = parallel_workers(3)
        done = cli("run", "orchestrate", "--input", orchestrate_input(3, 2), "--budget", "requests=2")
        assert done.returncode == 0, done.stderr
        assert stub.request_count == 1  # the planner only: no child request was sent
        run_id = cli.json("runs")[0]["runId"]
        state = cli.json("inspect", run_id)
        assert state["status"] == "waiting" and state["waitingOn"] == "budget"
        stop = state["finalOutput"]
        assert stop["blockedNode"] == "fan_out"
        assert stop["fanOut"]["children"] == 3 and stop["fanOut"]["remaining"]["requests"] == 1.0
        assert "the fan-out of 3 children is projected at 3 requests, and the budget has 1 request left" in (
            done.stdout
        )
        assert f"""piw answer {run_id} '{{"maxTasks": 1}}'""" in done.stdout
        topped = cli("answer", run_id, '{"topUp": {"modelRequests": 2}}', "--json")
        assert topped.returncode == 0, topped.stderr
        continuation = json.loads(topped.stdout)
        assert continuation["status"] == "completed", continuation
        assert stub.request_count == 4
    results = continuation["finalOutput"]["results"]
    assert [r["outcome"] for r in results] == ["ok", "ok", "ok"]


def test_an_answer_with_a_smaller_max_tasks_continues_with_fewer_children(cli: Any, piw_home: Path) -> None:
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = parallel_workers(3)
        done = cli(
            "run", "orchestrate", "--input", orchestrate_input(3, 2), "--budget", "requests=2", "--json"
        )
        run_id = json.loads(done.stdout)["runId"]
        assert stub.request_count == 1
        answered = cli("answer", run_id, '{"maxTasks": 1}', "--json")
        assert answered.returncode == 0, answered.stderr
        continuation = json.loads(answered.stdout)
        assert stub.request_count == 2
    assert continuation["status"] == "completed", continuation
    results = continuation["finalOutput"]["results"]
    assert [r["outcome"] for r in results] == ["ok", "skipped", "skipped"]
    assert results[1]["error"] == "Not started: the budget answer allowed 1 of 3 tasks."
    bad = cli("answer", run_id, '{"maxTasks": 0}')
    assert bad.returncode == 2
