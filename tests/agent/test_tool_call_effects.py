"""Agent tool calls are effects (``docs/effects.md``, "Tool calls"): a call whose result was committed is never run
again on resume, and a ``bash`` call interrupted mid-flight is not rerun silently: the model is told it was
interrupted with an unknown outcome, and the conversation marks it.

A real ``piw run`` against the loopback stub is killed with SIGKILL; the bash command counts its runs in a file.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import one_agent, submit_args, write_stub_config
from tests.support.cli import Cli
from tests.support.runs import trace_lines

AGENT = "agent(prompt='Send the mail.', expected_output='what happened', tools=('bash',))"


def _bash(tmp_path: Path, wait: bool) -> dict[str, str]:
    counter, release = tmp_path / "sent.txt", tmp_path / "release"
    command = f"echo sent >> {counter}"
    if wait:
        command += f"; while [ ! -f {release} ]; do sleep 0.05; done"
    return {"command": command}


def _tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [message for message in body["messages"] if message["role"] == "tool"]


def _kill_when(process: Any, ready: Any) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_bash_call_interrupted_mid_flight_is_reported_as_unknown_not_rerun(
    cli: Cli, tmp_path: Path
) -> None:
    counter = tmp_path / "sent.txt"
    seen: list[dict[str, Any]] = []
    with OpenAIStub() as stub:

        def respond(body: dict[str, Any]) -> StubReply:
            seen.append(body)
            if len(seen) == 1:
                return StubReply.tool("bash", _bash(tmp_path, wait=True), call_id="call_send")
            return StubReply.tool("workflow", submit_args(body, "checked the outbox"), call_id="call_done")

        stub.respond = respond
        write_stub_config(cli.home, stub)
        flow = one_agent(tmp_path, AGENT)
        process = cli.popen("run", str(flow), "--json")
        _kill_when(process, lambda: _lines(counter) == 1)
        (tmp_path / "release").write_text("")  # the orphaned command may end now
        run_id = sorted((cli.home / "runs").iterdir())[-1].name
        done = cli("resume", run_id, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "completed"
    assert _lines(counter) == 1  # the command ran once
    (result,) = _tool_results(seen[-1])
    assert result["tool_call_id"] == "call_send"
    assert "interrupted" in result["content"] and "outcome is unknown" in result["content"]
    started = [e for e in trace_lines(cli.home, run_id) if e["type"] == "tool_call_started"]
    assert [e["payload"]["toolCallId"] for e in started] == ["call_send"]
    shown = cli("inspect", run_id, "--view", "conversation")
    assert "⚠ interrupted, outcome unknown" in shown.stdout


def test_a_tool_call_whose_result_was_committed_is_never_run_again(cli: Cli, tmp_path: Path) -> None:
    counter = tmp_path / "sent.txt"
    seen: list[dict[str, Any]] = []
    with OpenAIStub() as stub:

        def respond(body: dict[str, Any]) -> StubReply:
            seen.append(body)
            if len(seen) == 1:
                return StubReply.tool("bash", _bash(tmp_path, wait=False), call_id="call_send")
            if len(seen) == 2:
                return StubReply.hold()  # the result is committed; piw dies while the model "thinks"
            return StubReply.tool("workflow", submit_args(body, "sent once"), call_id="call_done")

        stub.respond = respond
        write_stub_config(cli.home, stub)
        process = cli.popen("run", str(one_agent(tmp_path, AGENT)), "--json")
        _kill_when(process, lambda: len(seen) == 2)
        run_id = sorted((cli.home / "runs").iterdir())[-1].name
        done = cli("resume", run_id, "--json")
        assert done.returncode == 0, done.stderr
    assert _lines(counter) == 1
    (result,) = _tool_results(seen[-1])
    assert result["tool_call_id"] == "call_send" and "interrupted" not in result["content"]
