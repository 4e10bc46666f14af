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


def parallel_workers(tasks: int) -> Any:
    """A responder: the planner plans ``tasks`` tasks; a worker request waits up to 2 s for a second one."""
    plan = [{"agent": "tester", "task": f"Check part {n}."} for n in range(1, tasks + 1)]
    serve = replies_responder(
        {"plan_submit": [{"submit": plan}], "*": [{"submit": {"checked": True}}] * tasks}
    )
    both = threading.Condition()
    workers = 0

    def respond(body: dict[str, Any]) -> StubReply:
        nonlocal workers
        if "fan_out/" in json.dumps(body["messages"][-1].get("content")):
            with both:
                workers += 1
                both.notify_all()
                both.wait_for(lambda: workers >= 2, timeout=2)
        return serve(body)

    return respond


def test_parallel_children_never_send_more_requests_than_the_budget(cli: Any, piw_home: Path) -> None:
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = parallel_workers(2)
        done = cli(
            "run", "orchestrate", "--input", orchestrate_input(2, 2), "--budget", "requests=2", "--json"
        )
        assert done.returncode == 0, done.stderr
        assert stub.errors == []
        assert stub.request_count == 2  # the planner and one worker: the second worker could not reserve
    result = json.loads(done.stdout)
    assert result["status"] == "waiting"
    state = cli.json("inspect", result["runId"])
    assert state["waitingOn"] == "budget"
    assert state["spent"]["requests"] == 2
    assert state["finalOutput"]["limit"] == "modelRequests"


def test_a_budget_of_n_holds_with_four_parallel_children(cli: Any, piw_home: Path) -> None:
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = parallel_workers(4)
        done = cli(
            "run", "orchestrate", "--input", orchestrate_input(4, 4), "--budget", "requests=3", "--json"
        )
        assert done.returncode == 0, done.stderr
        assert stub.request_count == 3
    state = cli.json("inspect", json.loads(done.stdout)["runId"])
    assert state["status"] == "waiting" and state["spent"]["requests"] == 3
