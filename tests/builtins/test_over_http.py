"""plain-summary, autoplan and orchestrate end to end over HTTP: ``piw run`` with a configured openai-completions
provider talking to the loopback stub (``piw.testing``), answered from each built-in's shipped replies file.
"""

from __future__ import annotations

import json
import threading
import time
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


def shipped(builtin_id: str) -> tuple[str, dict[str, Any]]:
    replies = json.loads((BUILTINS / f"{builtin_id}.replies.json").read_text(encoding="utf-8"))
    return f"@{BUILTINS / f'{builtin_id}.input.json'}", replies


def run(cli: Any, builtin_id: str, input_arg: str) -> dict[str, Any]:
    done = cli("run", builtin_id, "--input", input_arg, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def usage_of(cli: Any, run_id: str) -> dict[str, Any]:
    usage: dict[str, Any] = cli.json("inspect", run_id)["usage"]
    return usage


def test_plain_summary_over_http(cli: Any, piw_home: Path) -> None:
    input_arg, replies = shipped("plain-summary")
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = replies_responder(replies)
        result = run(cli, "plain-summary", input_arg)
        assert stub.errors == [] and stub.request_count == 1
        assert stub.tool_names == [[]]  # no tools, and the workflow tool is not offered in assistant mode
        body = stub.requests[0]
    assert result["finalOutput"] == {"text": replies["summarize"][0]["text"]}
    prompt = body["messages"][-1]["content"]
    assert "<<<DATA SOURCE " in prompt and "Reply with the summary text only." in prompt
    assert usage_of(cli, result["runId"])["requests"] == 1


def test_autoplan_over_http(cli: Any, piw_home: Path) -> None:
    input_arg, replies = shipped("autoplan")
    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = replies_responder(replies)
        result = run(cli, "autoplan", input_arg)
        assert stub.errors == []
        assert (
            stub.request_count == 6
        )  # frame, propose, ideal, choose, plan: one submit each; one summary reply
        offered = stub.tool_names
    assert offered[:5] == [["workflow"]] * 5 and offered[5] == []
    out = result["finalOutput"]
    assert out["status"] == "ready" and out["selection"]["selectedId"] == "stream-rows"
    assert out["plainSummary"]["text"] == replies["ready_summary/summarize"][0]["text"]
    usage = usage_of(cli, result["runId"])
    assert usage["requests"] == 6 and usage["input"] > 0


def test_orchestrate_over_http_runs_workers_at_once_within_the_bound(cli: Any, piw_home: Path) -> None:
    input_arg, replies = shipped("orchestrate")
    example = json.loads(Path(input_arg[1:]).read_text(encoding="utf-8"))
    example["concurrency"], example["maxTasks"] = 2, 6
    plan = [{"agent": "tester", "task": f"Check part {n}."} for n in range(1, 7)]
    replies = {"plan_submit": [{"submit": plan}], "*": [{"submit": {"checked": True}}] * 6}
    serve = replies_responder(replies)
    both = threading.Condition()
    in_flight = peak = 0

    def respond(body: dict[str, Any]) -> StubReply:
        nonlocal in_flight, peak
        worker = "fan_out/" in json.dumps(body["messages"][-1].get("content"))
        if not worker:
            return serve(body)
        with both:
            in_flight += 1
            peak = max(peak, in_flight)
            both.notify_all()
            # Hold a worker request until a second one is in flight (or 2 s pass, e.g. for the last task), then
            # a little longer, so a third request beyond the bound would be seen here.
            both.wait_for(lambda: in_flight >= 2, timeout=2)
        time.sleep(0.05)
        with both:
            in_flight -= 1
        return serve(body)

    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = respond
        result = run(cli, "orchestrate", json.dumps(example))
        assert stub.errors == [] and stub.request_count == 7, (stub.errors, result)
    assert peak == 2  # workers were in flight at the same time, and never more than concurrency
    results = result["finalOutput"]["results"]
    assert [r["index"] for r in results] == [1, 2, 3, 4, 5, 6]
    assert all(r["outcome"] == "ok" and r["output"] == {"checked": True} for r in results)
    assert usage_of(cli, result["runId"])["requests"] == 7


@pytest.mark.long
def test_piw_cancel_during_the_fan_out_aborts_workers_in_flight_and_starts_none(
    cli: Any, piw_home: Path
) -> None:
    from piw.testing import StubReply as Reply

    example = json.loads((BUILTINS / "orchestrate.input.json").read_text(encoding="utf-8"))
    example["concurrency"] = 2
    plan = [{"agent": "tester", "task": f"Check part {n}."} for n in range(1, 5)]
    serve = replies_responder({"plan_submit": [{"submit": plan}]})

    def respond(body: dict[str, Any]) -> StubReply:
        if "fan_out/" in json.dumps(body["messages"][-1].get("content")):
            return Reply.hold()  # a worker the model never answers
        return serve(body)

    with OpenAIStub() as stub:
        configure(piw_home, stub)
        stub.respond = respond
        process = cli.popen("run", "orchestrate", "--input", json.dumps(example))
        try:
            deadline = time.monotonic() + 60
            while stub.request_count < 3 and time.monotonic() < deadline:
                assert process.poll() is None
                time.sleep(0.05)
            assert stub.request_count == 3  # the planner, then two workers in flight
            (run_id,) = [p.name for p in (piw_home / "runs").iterdir() if not p.name.startswith(".")]
            done = cli("cancel", run_id)
            assert done.returncode == 0, done.stderr
            process.wait(30)
        finally:
            if process.poll() is None:
                process.kill()
        deadline = time.monotonic() + 10
        while stub.disconnects < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stub.disconnects == 2 and stub.request_count == 3  # both aborted, no third worker started
    lines = (piw_home / "runs" / run_id / "trace.ndjson").read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert events[-1]["type"] == "run_cancelled"
    assert [
        e["payload"]["outcome"] for e in events if e.get("nodeId") == "fan_out" and e["type"] == "node_failed"
    ] == ["cancelled"]
    assert not any(e["type"] == "child_step_finished" for e in events)
