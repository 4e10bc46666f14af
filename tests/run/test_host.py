"""Detached runs and ``piw host`` with real processes (``agent-steps.md`` acceptance 30–32, ``persistence.md`` §10.2).

Agent steps talk to the loopback stub (``piw.testing``) over real HTTP from the host subprocess; the queue is the
real ``piw.sqlite``. Runs are queued through the library call ``piw run --detach`` makes (``queue_run``) where
the queueing itself is not what a test checks, to keep the suite fast.
"""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from piw.run.launch import LaunchOptions
from piw.run.runner import ForegroundOptions, queue_run
from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import active_ids, write_stub_config
from tests.support.cli import PIW_COMMAND, Cli
from tests.support.runs import WorkflowMaker, trace_lines

TWO_STEPS = """
from pydantic import BaseModel
from piw import agent, assistant_message, define_workflow, edge

class Plan(BaseModel):
    topic: str

workflow = define_workflow(
    name="answer",
    start_at="plan",
    nodes={
        "plan": agent(prompt="Pick a topic.", expected_output=Plan),
        "reply": agent(prompt="Answer the user.", expected_output=assistant_message()),
    },
    edges=[edge("plan", "reply")],
)
"""

SHORT = """
from piw import action, compute, define_workflow, edge
import time

def work(ctx):
    time.sleep(0.05)
    return {"n": ctx.input.get("n")}

workflow = define_workflow(
    name="short",
    start_at="work",
    nodes={"work": action(work), "done": compute(lambda ctx: ctx.outputs["work"])},
    edges=[edge("work", "done")],
)
"""


def queue_row(home: Path, run_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(home / "piw.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        return dict(conn.execute("SELECT * FROM run_queue WHERE run_id = ?", (run_id,)).fetchone())
    finally:
        conn.close()


def gated_flow(make_workflow: WorkflowMaker, gate: Path) -> Path:
    """A run whose one action writes ``<gate>.started`` and waits until ``gate`` exists."""
    return make_workflow(
        "gated",
        textwrap.dedent(
            f"""
            from pathlib import Path
            from piw import action, compute, define_workflow, edge

            def wait(ctx):
                Path({str(gate)!r} + ".started").write_text("x")
                while not Path({str(gate)!r}).exists():
                    ctx.sleep(0.05)
                return {{"ok": True}}

            workflow = define_workflow(name="gated", start_at="wait",
                nodes={{"wait": action(wait), "done": compute(lambda ctx: 1)}}, edges=[edge("wait", "done")])
            """
        ),
    )


def host_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PIW_"))}
    env.update(PIW_HOME=str(home), NO_COLOR="1", COLUMNS="200")
    return env


def detach_from_a_terminal(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``piw run --detach`` with a terminal on stdin, as a person types it (so an origin session is recorded)."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*PIW_COMMAND, "run", *args, "--detach", "--json"],
            stdin=follower,
            capture_output=True,
            text=True,
            cwd=cwd,
            env=host_env(home),
            timeout=60,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    return done


def submit_then_reply(stub: OpenAIStub, reply: str) -> None:
    def respond(body: dict[str, Any]) -> StubReply:
        step, attempt = active_ids(body)
        if step == "plan":
            return StubReply.tool(
                "workflow", {"action": "submit", "step": step, "attempt": attempt, "output": {"topic": "tea"}}
            )
        return StubReply.text(reply)

    stub.respond = respond


def test_30_32_a_host_runs_submit_steps_and_parks_before_an_assistant_step_for_its_origin_session(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, openai_stub: OpenAIStub
) -> None:
    write_stub_config(piw_home, openai_stub)
    submit_then_reply(openai_stub, "Green tea, brewed at 80 °C.")
    flow = make_workflow("answer", TWO_STEPS)
    queued = detach_from_a_terminal(piw_home, cli.cwd, str(flow))
    assert queued.returncode == 0, queued.stderr
    run_id = json.loads(queued.stdout)["runId"]
    started = trace_lines(piw_home, run_id)[0]["payload"]
    assert started["originSession"]["id"].startswith("ses_")  # typed in a terminal, no --no-origin
    assert queue_row(piw_home, run_id)["status"] == "queued" and openai_stub.request_count == 0

    host = cli("host", "--once")
    assert host.returncode == 0, host.stderr
    assert f"{run_id}  parked (needs-origin-session)" in host.stdout and f"piw resume {run_id}" in host.stdout
    lines = trace_lines(piw_home, run_id)
    assert [(line["type"], line.get("nodeId")) for line in lines if line["type"].startswith("node_")] == [
        ("node_started", "plan"),
        ("node_finished", "plan"),  # 32: the submit-mode step completed in the host
    ]
    assert openai_stub.request_count == 1  # 30: nothing was asked for the assistant step
    row = queue_row(piw_home, run_id)
    assert (row["status"], row["park_reason"]) == ("parked", "needs-origin-session")
    assert cli("host", "--once").stdout.count(run_id) == 0  # hosts leave it for a person

    resumed = cli("resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("Green tea, brewed at 80 °C.") == 1  # the reply is shown once, here
    assert openai_stub.request_count == 2
    lines = trace_lines(piw_home, run_id)
    assert lines[-1]["type"] == "run_completed"
    assert lines[-1]["payload"]["finalOutput"] == "Green tea, brewed at 80 °C."
    assert [line["nodeId"] for line in lines if line["type"] == "node_started"] == ["plan", "reply"]


def test_31_a_detached_run_without_origin_fails_the_assistant_step_before_prompting(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, openai_stub: OpenAIStub
) -> None:
    write_stub_config(piw_home, openai_stub)
    submit_then_reply(openai_stub, "never asked")
    flow = make_workflow("answer", TWO_STEPS)
    queued = detach_from_a_terminal(piw_home, cli.cwd, str(flow), "--no-origin")
    assert queued.returncode == 0, queued.stderr
    run_id = json.loads(queued.stdout)["runId"]
    assert "originSession" not in trace_lines(piw_home, run_id)[0]["payload"]
    host = cli("host", "--once")
    assert host.returncode == 0, host.stderr
    failed = [line for line in trace_lines(piw_home, run_id) if line["type"] == "node_failed"]
    assert len(failed) == 1 and failed[0]["nodeId"] == "reply"
    assert failed[0]["payload"]["error"] == "Assistant completion requires an origin session."
    assert not [line for line in trace_lines(piw_home, run_id) if line["type"] == "agent_prompt_sent"
                and line["nodeId"] == "reply"]  # fmt: skip
    assert openai_stub.request_count == 1  # only the submit step asked the model
    assert trace_lines(piw_home, run_id)[-1]["type"] == "run_failed"
    assert queue_row(piw_home, run_id)["status"] == "failed"


def test_detach_validates_before_anything_is_queued(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow(
        "typed",
        """
        from pydantic import BaseModel
        from piw import compute, define_workflow

        class In(BaseModel):
            n: int

        workflow = define_workflow(name="typed", start_at="a", input=In, nodes={"a": compute(lambda c: 1)})
        """,
    )
    done = cli("run", str(flow), "--detach", "--input", '{"n": "many"}')
    assert done.returncode == 2 and "n" in done.stderr
    assert not (piw_home / "runs").exists() or not list((piw_home / "runs").iterdir())
    if (piw_home / "piw.sqlite").exists():
        conn = sqlite3.connect(piw_home / "piw.sqlite")
        assert conn.execute("SELECT count(*) FROM run_queue").fetchone()[0] == 0
        conn.close()
    assert cli("run", str(flow), "--no-origin").returncode == 2  # --no-origin needs --detach


def test_two_hosts_race_for_twenty_runs_and_each_runs_once(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("short", SHORT)
    ids = [
        queue_run(str(flow), piw_home, {"n": n}, None, ForegroundOptions(record_origin=False)).run_id
        for n in range(20)
    ]
    hosts = [cli.popen("host", "--once", "--concurrency", "2") for _ in range(2)]
    outputs = []
    for host in hosts:
        out, err = host.communicate(timeout=300)
        assert host.returncode == 0, err
        outputs.append(out)
    finished = Counter(
        line.split()[0] for out in outputs for line in out.splitlines() if line.endswith("  completed")
    )
    assert sorted(finished) == sorted(ids) and set(finished.values()) == {1}  # each run executed once
    claims = [line.split()[0] for out in outputs for line in out.splitlines() if "  claimed (" in line]
    assert sorted(claims) == sorted(ids)  # every run claimed by exactly one host, once
    for run_id in ids:
        lines = trace_lines(piw_home, run_id)  # every line parses: nothing interleaved or torn
        assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
        kinds = [line["type"] for line in lines]
        assert kinds == ["run_started", "node_started", "node_finished", "node_started", "node_finished",
                         "run_completed"], kinds  # fmt: skip
        row = queue_row(piw_home, run_id)
        assert (row["status"], row["claim_generation"]) == (
            "done",
            2,
        )  # the enqueuer's claim, then one host's


def test_stopping_a_host_parks_the_run_in_flight_for_the_next_host(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    flow = gated_flow(make_workflow, gate)
    run_id = queue_run(str(flow), piw_home, {}, None, ForegroundOptions(record_origin=False)).run_id
    host = cli.popen("host")
    deadline = time.monotonic() + 60
    while not Path(str(gate) + ".started").exists():
        assert time.monotonic() < deadline and host.poll() is None
        time.sleep(0.05)
    host.terminate()  # SIGTERM: the host parks what it runs
    _, err = host.communicate(timeout=60)
    assert host.returncode == 0, err
    row = queue_row(piw_home, run_id)
    assert (row["status"], row["park_reason"], row["claim_token"]) == ("parked", None, None)
    assert [line["type"] for line in trace_lines(piw_home, run_id)][
        -1
    ] == "node_started"  # no outcome recorded
    gate.write_text("open")
    again = cli("host", "--once")
    assert again.returncode == 0, again.stderr
    lines = trace_lines(piw_home, run_id)
    assert lines[-1]["type"] == "run_completed"
    resumed = next(line for line in lines if line["type"] == "run_resumed")
    assert resumed["payload"]["abandonedAttemptId"] == lines[1]["attemptId"]  # the step reran


@pytest.mark.parametrize("where", ["foreground", "host"])
def test_cancel_during_a_model_request_closes_it(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, openai_stub: OpenAIStub, where: str
) -> None:
    write_stub_config(piw_home, openai_stub)
    openai_stub.respond = [StubReply.hold()]
    flow = make_workflow("answer", TWO_STEPS)
    if where == "foreground":
        command = ["run", str(flow)]
    else:
        queue_run(
            str(flow),
            piw_home,
            {},
            None,
            ForegroundOptions(record_origin=False, launch=LaunchOptions(provider="stub")),
        )
        command = ["host", "--once"]
    runner = subprocess.Popen(
        [*PIW_COMMAND, *command], env=host_env(piw_home), cwd=cli.cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while openai_stub.request_count < 1:
        assert time.monotonic() < deadline and runner.poll() is None, "the request never came"
        time.sleep(0.02)
    run_id = next(p.name for p in (piw_home / "runs").iterdir() if not p.name.startswith("."))
    done = cli.process("cancel", run_id)
    assert done.returncode == 0, done.stderr
    runner.communicate(timeout=60)
    assert runner.returncode == (1 if where == "foreground" else 0)  # a host goes on serving
    deadline = time.monotonic() + 10
    while openai_stub.disconnects < 1:
        assert time.monotonic() < deadline, "the held request was never closed"
        time.sleep(0.02)
    lines = trace_lines(piw_home, run_id)
    assert [line["type"] for line in lines[-2:]] == ["node_failed", "run_cancelled"]
    assert lines[-2]["payload"]["outcome"] == "cancelled" and openai_stub.request_count == 1
    assert queue_row(piw_home, run_id)["status"] == "cancelled"


GATED_AGENT = """
from pathlib import Path
from pydantic import BaseModel
from piw import action, agent, define_workflow, edge

class Plan(BaseModel):
    topic: str

def wait(ctx):
    Path({gate!r} + ".started").write_text("x")
    while not Path({gate!r}).exists():
        ctx.sleep(0.05)
    return {{"ok": True}}

workflow = define_workflow(
    name="later",
    start_at="wait",
    nodes={{"wait": action(wait), "plan": agent(prompt="Pick a topic.", expected_output=Plan)}},
    edges=[edge("wait", "plan")],
)
"""


def test_resume_reuses_the_provider_the_run_was_started_with(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, openai_stub: OpenAIStub, tmp_path: Path
) -> None:
    (piw_home / "config.toml").write_text(
        textwrap.dedent(
            f"""
            default = "elsewhere/m"
            [providers.elsewhere]
            api = "openai-completions"
            base_url = "http://127.0.0.1:9/v1"
            api_key = "$PIW_TEST_NEVER_SET"
            models = ["m"]
            [providers.stub]
            api = "openai-completions"
            base_url = "{openai_stub.base_url}"
            models = ["m"]
            """
        ),
        encoding="utf-8",
    )
    submit_then_reply(openai_stub, "unused")
    gate = tmp_path / "gate"
    flow = make_workflow("later", GATED_AGENT.format(gate=str(gate)))
    runner = subprocess.Popen(
        [*PIW_COMMAND, "run", str(flow), "--provider", "stub"], env=host_env(piw_home), cwd=cli.cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not Path(str(gate) + ".started").exists():
        assert time.monotonic() < deadline and runner.poll() is None, runner.stderr
        time.sleep(0.05)
    runner.send_signal(2)  # Ctrl-C: parked
    runner.communicate(timeout=60)
    assert runner.returncode == 130
    run_id = next(p.name for p in (piw_home / "runs").iterdir() if not p.name.startswith("."))
    options = json.loads(queue_row(piw_home, run_id)["options_json"])
    assert options == {"provider": "stub"}  # how it was started; never a key
    gate.write_text("open")
    resumed = cli("resume", run_id)  # no --provider: the recorded one, not the configured default
    assert resumed.returncode == 0, resumed.stderr
    assert openai_stub.request_count == 1
    assert trace_lines(piw_home, run_id)[-1]["type"] == "run_completed"
