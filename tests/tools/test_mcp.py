"""MCP tool servers in agent steps (``docs/tools-mcp.md``), against real servers written with the SDK.

The server (``tests/support/mcp_server.py``) runs as a real subprocess over stdio, or over streamable HTTP on a
free loopback port; the loopback model stub drives the agent. What is asserted is what a user sees: the run's
output, the trace and conversation on disk, the calls the server counted, the requests the stub received.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import (
    PIW,
    _piw_env,
    home,
    only_run,
    piw_cli,
    plain_console,
    sequence,
    start_configured,
    submit_reply,
    write_workflow,
)

__all__ = ["home"]

SERVER = Path(__file__).parents[1] / "support" / "mcp_server.py"

FLOW = """
from piw import agent, define_workflow, mcp

workflow = define_workflow(
    name="notes",
    start_at="look",
    nodes={"look": agent(prompt="Find the note about tea.", tools=(mcp("notes", only=["search", "crash"]),))},
)
"""


def config(home: Path, stub: OpenAIStub, server: str) -> None:
    text = f"""
        default = "stub/m"
        [providers.stub]
        api = "openai-completions"
        base_url = "{stub.base_url}"
        models = ["m"]
        {server}
        """
    (home / "config.toml").write_text(textwrap.dedent(text), encoding="utf-8")


def stdio_table(calls: Path, **extra: str) -> str:
    env = {"MCP_CALLS_FILE": str(calls), **extra}
    pairs = ", ".join(f'{key} = "{value}"' for key, value in env.items())
    return f"""
        [mcp.notes]
        command = ["{sys.executable}", "{SERVER}", "stdio"]
        env = {{ {pairs} }}
        timeout_s = 5
        """


def call_count(calls: Path) -> int:
    return len(calls.read_text(encoding="utf-8").splitlines()) if calls.exists() else 0


def tool_results(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "session" / "entries.ndjson").read_text(encoding="utf-8").splitlines()
    messages = [json.loads(line)["entry"]["message"] for line in lines]
    return [m for m in messages if m.get("role") == "toolResult"]


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    lines = (run_dir / "trace.ndjson").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == kind]


def test_a_step_calls_a_stdio_server_and_its_env_secret_reaches_no_record(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("NOTES_SECRET", "stdio-secret-77d1e0")
    workflow = write_workflow(
        tmp_path / "wf", "notes", FLOW.replace('"search", "crash"', '"search", "whoami"')
    )
    with OpenAIStub() as stub:
        config(home, stub, stdio_table(calls, MCP_TOKEN="$NOTES_SECRET"))
        stub.respond = sequence(
            StubReply.tool("notes__search", {"query": "tea"}),
            StubReply.tool("notes__whoami", {}),
            submit_reply({"note": "tea"}),
        )
        run = start_configured(home, workflow)
        offered = stub.requests[0]["tools"]
        told = stub.requests[2]["messages"]
    assert run.state is not None and run.state.status == "completed", run.state
    assert run.state.final_output == {"note": "tea"}
    assert call_count(calls) == 1
    names = sorted(tool["function"]["name"] for tool in offered)
    assert names == ["notes__search", "notes__whoami", "workflow"]
    search, whoami = [r for r in tool_results(run.bundle) if r["toolName"].startswith("notes__")]
    assert search["content"] == "found 1 note about tea" and not search["isError"]
    [listed] = events(run.bundle, "mcp_tools_listed")
    assert [tool["tool"] for tool in listed["payload"]["servers"][0]["tools"]] == ["search", "whoami"]
    # The server got the secret and the model was told it; no record holds it.
    assert any(m["role"] == "tool" and "stdio-secret-77d1e0" in m["content"] for m in told)
    assert whoami["content"] == "token [redacted]"
    for name in ("trace.ndjson", "state.json", "session/entries.ndjson"):
        assert "stdio-secret-77d1e0" not in (run.bundle / name).read_text(encoding="utf-8"), name
    shown = piw_cli(home, "inspect", run.run_id, "--view", "conversation", "--json")
    assert shown.returncode == 0 and "stdio-secret-77d1e0" not in shown.stdout + shown.stderr


@pytest.mark.long
def test_kill_9_after_the_call_is_committed_and_resume_never_calls_the_server_again(
    home: Path, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    workflow = write_workflow(tmp_path / "wf", "notes", FLOW)
    piw: dict[str, subprocess.Popen[str]] = {}

    def killed_on_the_second_request(body: dict[str, Any]) -> StubReply:
        piw["run"].send_signal(
            signal.SIGKILL
        )  # the tool result is in the conversation: this request carries it
        return StubReply.hold()

    with OpenAIStub() as stub:
        config(home, stub, stdio_table(calls))
        stub.respond = sequence(
            StubReply.tool("notes__search", {"query": "tea"}), killed_on_the_second_request
        )
        piw["run"] = subprocess.Popen(
            [PIW, "run", str(workflow)],
            env=_piw_env(home, None),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        piw["run"].communicate(timeout=120)
        assert piw["run"].returncode == -signal.SIGKILL
        assert call_count(calls) == 1
        run = only_run(home)
        # The server of the resumed visit lists one tool fewer: the step keeps the tools it started with.
        config(home, stub, stdio_table(calls, MCP_HIDE_CRASH="1"))
        stub.respond = submit_reply({"note": "tea"})
        resumed = piw_cli(home, "resume", run.run_id, "--json")
        assert resumed.returncode == 0, resumed.stderr
        last = stub.requests[-1]
    assert json.loads(resumed.stdout)["finalOutput"] == {"note": "tea"}
    assert call_count(calls) == 1  # the committed call was never made again
    assert any(m["role"] == "tool" and "found 1 note about tea" in m["content"] for m in last["messages"])
    assert sorted(t["function"]["name"] for t in last["tools"]) == [
        "notes__crash",
        "notes__search",
        "workflow",
    ]
    [changed] = events(run.bundle, "mcp_tools_changed")
    assert changed["payload"]["changes"] == ["notes: removed crash"]
    assert "MCP tools changed since this step started" in resumed.stderr + resumed.stdout


@pytest.mark.long
def test_a_slow_call_times_out_and_a_crash_is_a_tool_error_with_stderr_and_a_readable_card(
    home: Path, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    flow = FLOW.replace('"search", "crash"', '"search", "crash", "slow", "locked"')
    workflow = write_workflow(tmp_path / "wf", "notes", flow)
    console = plain_console(width=300)
    with OpenAIStub() as stub:
        config(home, stub, stdio_table(calls))  # timeout_s = 5: the 60 s call is abandoned after 5
        stub.respond = sequence(
            StubReply.tool("notes__locked", {}),
            StubReply.tool("notes__slow", {"seconds": 60}),
            StubReply.tool("notes__crash", {}),
            StubReply.tool("notes__search", {"query": "tea"}),
            submit_reply({"note": "none"}),
        )
        run = start_configured(home, workflow, console=console)
        told = stub.requests[3]
    assert run.state is not None and run.state.status == "completed"
    locked, slow, crash, after = [r for r in tool_results(run.bundle) if r["toolName"].startswith("notes__")]
    assert locked["isError"] and "the note is locked" in locked["content"], locked
    assert slow["isError"] and "slow stopped: no reply within 5 s." in slow["content"], slow
    assert crash["isError"] and "exited or closed the connection during crash" in crash["content"]
    assert "fatal: the notes index is corrupt" in crash["content"]
    assert crash["details"]["stderrTail"].strip().endswith("fatal: the notes index is corrupt")
    assert after["isError"] and "is not running" in after["content"]
    assert call_count(calls) == 0
    assert any(m["role"] == "tool" and "fatal: the notes index" in m["content"] for m in told["messages"])
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "✗ MCP server 'notes' exited or closed the connection during crash." in shown
    card = piw_cli(home, "inspect", run.run_id, "--view", "conversation", env={"COLUMNS": "300"})
    assert card.returncode == 0 and "Traceback" not in card.stdout + card.stderr
    assert "fatal: the notes index is corrupt" in card.stdout


def test_a_server_that_fails_to_start_is_offered_as_one_tool_that_reports_why(
    home: Path, tmp_path: Path
) -> None:
    workflow = write_workflow(tmp_path / "wf", "notes", FLOW)
    with OpenAIStub() as stub:
        config(home, stub, stdio_table(tmp_path / "calls.txt", MCP_FAIL_AT_START="1"))
        stub.respond = sequence(StubReply.tool("notes__unavailable", {}), submit_reply({"note": "none"}))
        run = start_configured(home, workflow)
        offered = sorted(t["function"]["name"] for t in stub.requests[0]["tools"])
    assert run.state is not None and run.state.status == "completed"
    assert offered == ["notes__unavailable", "workflow"]
    [listed] = events(run.bundle, "mcp_tools_listed")
    [server] = listed["payload"]["servers"]
    assert "failed" in server["error"] and "cannot open the notes database" in server["stderrTail"]
    [result] = [r for r in tool_results(run.bundle) if r["toolName"] == "notes__unavailable"]
    assert result["isError"] and "cannot open the notes database" in result["content"]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The test server over streamable HTTP on a free loopback port: its URL and its calls file."""
    calls, port_file = tmp_path / "http-calls.txt", tmp_path / "port"
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port_file)],
        env={**_piw_env(tmp_path, None), "MCP_CALLS_FILE": str(calls), "MCP_TOKEN": "unused"},
    )
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text(encoding="utf-8"):
            assert process.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text(encoding='utf-8')}/mcp", calls
    finally:
        process.terminate()
        process.wait(10)


def test_a_streamable_http_server_with_a_secret_header(
    home: Path, tmp_path: Path, http_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, calls = http_server
    monkeypatch.setenv("NOTES_TOKEN", "Bearer http-secret-4f9a2c")
    workflow = write_workflow(tmp_path / "wf", "notes", FLOW)
    table = f"""
        [mcp.notes]
        url = "{url}"
        headers = {{ Authorization = "$NOTES_TOKEN" }}
        """
    with OpenAIStub() as stub:
        config(home, stub, table)
        stub.respond = sequence(
            StubReply.tool("notes__search", {"query": "http-secret-4f9a2c"}), submit_reply({"note": "tea"})
        )
        run = start_configured(home, workflow)
    assert run.state is not None and run.state.status == "completed"
    assert call_count(calls) == 1
    for name in ("trace.ndjson", "state.json", "session/entries.ndjson"):
        assert "http-secret-4f9a2c" not in (run.bundle / name).read_text(encoding="utf-8"), name
    shown = piw_cli(home, "inspect", run.run_id, "--json")
    assert shown.returncode == 0 and "http-secret-4f9a2c" not in shown.stdout
