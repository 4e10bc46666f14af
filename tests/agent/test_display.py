"""What the origin session prints of agent steps is bounded, so a huge reply cannot eat the step's deadline.

The display runs on the agent loop's thread, where printing megabytes (wrapping, sanitising, a slow terminal) would
take minutes against a 20 s deadline. A reply shows at most ``SHOWN_CHARS`` characters and one elision marker
naming the command that shows it whole; the bundle keeps every character.
"""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from piw.agent_steps.display import SHOWN_CHARS, AgentDisplay
from piw.agent_steps.events import MessageEnd, MessageUpdate, StepDelivered, ToolExecutionStart
from piw.providers.messages import AssistantReply, TextBlock
from piw.testing import OpenAIStub, StubReply, openai_stub
from tests.support.agent_harness import home, one_agent, only_run, piw_cli, write_stub_config

__all__ = ["home", "openai_stub"]

HUGE = 2_000_000  # characters; the 10 MB case is in bench/bench_faults.py


@pytest.mark.parametrize("verbose", [False, True])
def test_a_huge_reply_prints_a_bounded_card_and_the_bundle_keeps_all_of_it(
    verbose: bool, home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    text = "word " * (HUGE // 5)
    openai_stub.respond = lambda body: replace(StubReply.text(text), chunk_size=65536)
    write_stub_config(home, openai_stub)
    flow = one_agent(tmp_path, "agent(prompt='Go.', expected_output=assistant_message(), timeout_s=20)")
    done = piw_cli(home, "run", str(flow), *(["--verbose"] if verbose else []))
    assert done.returncode == 0, done.stderr[-2000:]
    run = only_run(home)
    printed = done.stdout + done.stderr
    assert len(printed) < SHOWN_CHARS + 5_000, len(printed)
    assert f"{HUGE - SHOWN_CHARS:,} more characters not shown" in printed
    assert f"piw inspect {run.run_id} --view conversation" in printed
    state = json.loads(piw_cli(home, "inspect", run.run_id, "--json").stdout)
    assert state["status"] == "completed"
    output = piw_cli(home, "run", str(flow), "--json")  # the JSON shape is the data: never cut
    assert len(json.loads(output.stdout)["finalOutput"]) == HUGE


def _console(terminal: bool) -> tuple[Console, StringIO]:
    out = StringIO()
    return Console(file=out, width=80, force_terminal=terminal, color_system=None), out


def _reply(text: str) -> AssistantReply:
    return AssistantReply(content=[TextBlock(text=text)], stop_reason="stop")


def test_streaming_on_a_terminal_stops_at_the_budget_and_says_so() -> None:
    console, out = _console(terminal=True)
    display = AgentDisplay(console)
    display(StepDelivered(details={"contract": {"runId": "r1", "nodeId": "s"}}, content="Go."))
    chunk = "x" * 4096
    for _ in range(100):
        display(MessageUpdate(delta="text_delta", text=chunk, content_index=0))
    display(MessageEnd(message=_reply(chunk * 100)))
    text = out.getvalue()
    streamed = text.split("\n")[1]
    assert streamed == "x" * SHOWN_CHARS
    assert f"{4096 * 100 - SHOWN_CHARS:,} more characters not shown" in text and "piw inspect r1" in text


def test_a_huge_tool_call_is_cut_before_it_is_sanitised() -> None:
    console, out = _console(terminal=False)
    AgentDisplay(console)(
        ToolExecutionStart(tool_call_id="c", tool_name="bash", args={"command": "\x1b" * 10**6})
    )
    line = out.getvalue()
    assert len(line) < 200 and "\x1b" not in line and "\\u001b" in line
