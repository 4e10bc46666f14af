"""Watching a live agent step from another terminal (``docs/views.md``, "Watching live steps").

A real ``piw run`` subprocess streams a reply from the loopback model stub, which holds the stream part-way; a
second process, ``piw watch --once``, shows the partial reply from the bundle's ``live-stream.ndjson``; once the
stream is released the run completes, and nothing in the trace or the fold came from the side file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from piw.testing import OpenAIStub, StubReply
from tests.support.agent_harness import write_stub_config
from tests.support.cli import Cli

REPLY = "The quick brown fox jumps over the lazy dog."
WORKFLOW = """
from piw import agent, assistant_message, define_workflow

workflow = define_workflow(
    name="speak",
    start_at="say",
    nodes={"say": agent(prompt="Say the sentence.", expected_output=assistant_message())},
)
"""


def _wait(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def _streamed(side: Path) -> str:
    """The text the side file holds so far (its ``text`` records, joined)."""
    if not side.exists():
        return ""
    records = [json.loads(line) for line in side.read_text(encoding="utf-8").splitlines()]
    return "".join(record.get("text", "") for record in records if record["kind"] == "text")


@pytest.fixture
def stub() -> OpenAIStub:
    with OpenAIStub(models=("m",)) as running:
        yield running


def test_a_second_terminal_sees_the_reply_while_it_streams(
    cli: Cli, stub: OpenAIStub, piw_home: Path
) -> None:
    write_stub_config(piw_home, stub)
    stub.respond = [StubReply.text(REPLY, hold_after=5)]  # the role chunk, then 4 × 4 characters
    flow = cli.cwd / "speak.workflow.py"
    flow.write_text(WORKFLOW, encoding="utf-8")
    running = cli.popen("run", str(flow), "--json")
    try:
        runs = piw_home / "runs"
        assert _wait(lambda: runs.is_dir() and any(p.name[0].isdigit() for p in runs.iterdir()))
        (bundle,) = [p for p in runs.iterdir() if p.name[0].isdigit()]
        side = bundle / "live-stream.ndjson"
        assert _wait(lambda: "The quick brown" in _streamed(side))

        watched = cli.process("watch", "--once", bundle.name)
        assert watched.returncode == 0, watched.stderr
        assert "The quick brown ▍" in watched.stdout  # the partial reply, still streaming
        assert "lazy dog" not in watched.stdout  # the stub has not sent it yet
        assert not any(  # nothing committed yet: the text came from the side file
            json.loads(line)["entry"]["message"].get("role") == "assistant"
            for line in (bundle / "session" / "entries.ndjson").read_text().splitlines()
        )
    finally:
        stub.release_stream.set()
    out, err = running.communicate(timeout=60)
    assert running.returncode == 0, err
    assert json.loads(out)["status"] == "completed"

    records = [json.loads(line) for line in side.read_text(encoding="utf-8").splitlines()]
    assert [r["kind"] for r in records[:2]] == ["file", "start"] and records[-1]["kind"] == "end"
    assert _streamed(side) == REPLY
    assert oct(side.stat().st_mode & 0o777) == "0o600"
    trace = (bundle / "trace.ndjson").read_text(encoding="utf-8")
    assert "live-stream" not in trace
    side.unlink()  # the side file is no input of the fold: the views read the same run without it
    state = cli.json("inspect", bundle.name)
    assert state["outputs"]["say"] == REPLY


@pytest.mark.long
def test_a_secret_in_the_stream_never_reaches_the_side_file(
    cli: Cli, stub: OpenAIStub, piw_home: Path
) -> None:
    secret = "sk-watch-secret-0123456789abcdef"
    write_stub_config(piw_home, stub, model='models = ["m"]\napi_key = "$WATCH_KEY"')
    stub.respond = [StubReply.text(f"Your key is {secret}, keep it safe.")]
    flow = cli.cwd / "speak.workflow.py"
    flow.write_text(WORKFLOW, encoding="utf-8")
    done = cli.process("run", str(flow), "--json", env={"WATCH_KEY": secret})
    assert done.returncode == 0, done.stderr
    (side,) = (piw_home / "runs").glob("*/live-stream.ndjson")
    assert secret not in side.read_text(encoding="utf-8")
    assert _streamed(side) == "Your key is [redacted], keep it safe."
