"""Step cards, terminal safety, notifications and the origin session's output (acceptance tests 25–29)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import Console

from piw.agent_steps.display import AgentDisplay
from piw.agent_steps.events import (
    AutoRetryStart,
    MessageEnd,
    MessageUpdate,
    StepDelivered,
    ToolExecutionEnd,
    ToolExecutionStart,
)
from piw.providers.messages import AssistantReply, CustomMessage, TextBlock, ThinkingBlock
from piw.providers.scripted import ScriptedProvider
from piw.testing import OpenAIStub, StubReply, openai_stub
from piw.views.cards import card_text, compact_card_lines, expanded_card_lines
from tests.support.agent_harness import (
    PIW,
    home,
    one_agent,
    only_run,
    piw_cli,
    start,
    start_configured,
    user_texts,
    write_stub_config,
    write_workflow,
)

__all__ = ["home", "openai_stub"]

WIDTHS = (80, 40, 20, 10, 1)
HOSTILE = "A\x1b[2Jclear \x1b]52;c;ZXZpbA==\x07clip \rreturn \u202eevil\u202c [red]x[/red] tab\there\x00"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def details(
    kind: str = "step",
    *,
    title: str | None = "Nightly check",
    detail: str | None = "Checking the monitored target",
    workflow: str = "monitor",
    node: str = "check",
    completion: str = "submit",
    expected: str | None = "a JSON object with your result",
    max_chars: int | None = None,
) -> dict[str, Any]:
    contract: dict[str, Any] = {
        "runId": "20260101T000000000Z-monitor-0badcafe",
        "workflowName": workflow,
        "nodeId": node,
        "attemptId": "a" * 32,
        "completion": completion,
        "expectedOutput": expected,
    }
    if max_chars is not None:
        contract["maxOutputChars"] = max_chars
    presentation = {k: v for k, v in (("runTitle", title), ("statusDetail", detail)) if v is not None}
    out: dict[str, Any] = {"schema": "pi-workflows.agent-step-message.v1", "kind": kind, "contract": contract}
    if presentation:
        out["presentation"] = presentation
    return out


def render(text: Any, width: int = 80, *, terminal: bool = True, color: bool = False) -> str:
    buffer = StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=terminal,
        color_system="truecolor" if color else None,
        highlight=False,
    )
    console.print(text)
    return buffer.getvalue()


# ---- 25: compact cards -------------------------------------------------------------------------------------


def test_25_compact_card_texts() -> None:
    assert compact_card_lines(details(title="monitor"), 80) == [
        "▶ monitor › check",
        "Checking the monitored target",
    ]
    assert compact_card_lines(details("reminder", title=None), 80) == [
        "↻ monitor › check · reminder",
        "Checking the monitored target",
    ]
    assert (
        compact_card_lines(details("resume", title="Nightly check"), 80)[0]
        == "↻ Nightly check › check · resume"
    )
    assert (
        compact_card_lines(details(title="   "), 80)[0] == "▶ monitor › check"
    )  # blank title: workflow name
    assert compact_card_lines(details(detail=None), 80) == ["▶ Nightly check › check"]  # nothing invented
    assert (
        compact_card_lines(details(node="review/files/scan"), 80)[0]
        == "▶ Nightly check › review › files › scan"
    )
    assert compact_card_lines(details(detail="two\nlines"), 80)[1] == "two lines"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("kind", ["step", "reminder", "resume"])
def test_25_no_line_exceeds_the_width(width: int, kind: str) -> None:
    wide = details(kind, title="Überprüfung 日本語のタイトル " * 4, detail="詳細 " * 30, node="inc/日本/step")
    for d in (wide, details(kind), details(kind, title=None, detail=None)):
        lines = compact_card_lines(d, width)
        assert all(cell_len(line) <= width for line in lines), lines
        if cell_len(f"▶ {d['contract']['workflowName']}") > width:
            assert lines[0].endswith("…")
        rendered = render(card_text(d, "prompt " * 50, width), width).splitlines()
        assert all(cell_len(line) <= width for line in rendered), rendered
        expanded = expanded_card_lines(d, "short prompt", width)
        assert all(cell_len(line) <= width for line in expanded[: expanded.index("  prompt:")])


# ---- 26: the expanded view ---------------------------------------------------------------------------------


def test_26_expanded_view_lists_every_field_and_the_full_prompt() -> None:
    prompt = "Check the target.\n\n---\nWorkflow step: workflow monitor, step check, attempt " + "a" * 32
    lines = expanded_card_lines(details(), prompt, 120)
    text = "\n".join(lines)
    for value in (
        "workflow: monitor",
        "run title: Nightly check",
        "run id: 20260101T000000000Z-monitor-0badcafe",
        "node: check",
        f"attempt: {'a' * 32}",
        "delivery: step",
        "completion: submit",
        "expected output: a JSON object with your result",
    ):
        assert value in text, value
    assert text.endswith("  prompt:\n" + prompt)
    assistant = "\n".join(
        expanded_card_lines(details(completion="assistant", expected=None, max_chars=800), "p", 120)
    )
    assert "completion: assistant response" in assistant and "at most 800 characters" in assistant
    reminder = "\n".join(expanded_card_lines(details("reminder"), "p", 120))
    assert "delivery: reminder" in reminder


def test_26_content_never_changes_the_compact_card() -> None:
    d = details()
    assert card_text(d, "one prompt", 60).plain == card_text(d, "▶ other › card\n" + HOSTILE, 60).plain
    assert compact_card_lines(d, 60) == compact_card_lines(d, 60)


def test_26_verbose_cli_shows_the_expanded_card(home: Path, tmp_path: Path) -> None:
    flow = one_agent(tmp_path, "agent(prompt='Summarise the log.', status_detail='Summarising')")
    script = tmp_path / "r.json"
    script.write_text(json.dumps([{"submit": {"ok": True}}]))
    result = piw_cli(
        home,
        "run",
        str(flow),
        "--provider",
        "scripted",
        "--script",
        str(script),
        "--verbose",
        env={"COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    run = only_run(home)
    attempt = run.of_type("node_started")[0]["attemptId"]
    for value in (
        f"attempt: {attempt}",
        f"run id: {run.run_id}",
        "completion: submit",
        "delivery: step",
        "expected output: a JSON object with your result",
        "Summarising",
    ):
        assert value in result.stdout, value
    assert run.prompts()[0]["prompt"] in result.stdout  # the full prompt, verbatim


# ---- 27: hostile text --------------------------------------------------------------------------------------


def _assert_clean(output: str) -> None:
    assert "\x1b" not in output and "\r" not in output, repr(output)
    assert "\u202e" not in output and "\x07" not in output and "\x00" not in output
    assert "[red]x[/red]" in output  # markup stays literal


@pytest.mark.parametrize("width", WIDTHS)
def test_27_hostile_card_content_is_inert(width: int) -> None:
    d = details(title=HOSTILE, detail=HOSTILE, workflow="wf" + HOSTILE, node="n" + HOSTILE)
    for expanded in (False, True):
        card = card_text(d, HOSTILE, width, expanded=expanded)
        for out in (render(card, width), SGR.sub("", render(card, width, color=True))):
            assert "\x1b" not in out and "\r" not in out and "\x07" not in out, repr(out)
            assert "\u202e" not in out and "\x00" not in out
        if not expanded:
            assert all(cell_len(line) <= width for line in render(card, width).splitlines())
    # wide enough that nothing is clipped or wrapped: the markup is shown literally
    _assert_clean(render(card_text(d, HOSTILE, 400), 400))
    _assert_clean(SGR.sub("", render(card_text(d, HOSTILE, 400, expanded=True), 400, color=True)))


def _display_output(events: list[Any], *, terminal: bool, verbose: bool = False) -> str:
    buffer = StringIO()
    console = Console(file=buffer, width=100, force_terminal=terminal, color_system=None, highlight=False)
    display = AgentDisplay(console, verbose=verbose)
    for event in events:
        display(event)
    return buffer.getvalue()


@pytest.mark.parametrize("terminal", [True, False])
def test_27_hostile_model_output_is_inert(terminal: bool) -> None:
    message = AssistantReply(content=[ThinkingBlock(thinking=HOSTILE), TextBlock(text=HOSTILE)])
    error = AssistantReply(stop_reason="error", error_message="HTTP 500: " + HOSTILE)
    events = [
        StepDelivered(details=details(title=HOSTILE, detail=HOSTILE), content=HOSTILE),
        MessageUpdate(delta="thinking_delta", text=HOSTILE, content_index=0),
        MessageUpdate(delta="text_delta", text=HOSTILE, content_index=1),
        MessageEnd(message=message),
        ToolExecutionStart(tool_call_id="c", tool_name="t" + HOSTILE, args={"q": HOSTILE}),
        ToolExecutionEnd(
            tool_call_id="c", tool_name="t", result={"content": HOSTILE, "is_error": True}, duration_ms=1
        ),
        AutoRetryStart(attempt=1, max_attempts=3, delay_s=2, error=HOSTILE),
        MessageEnd(message=error),
    ]
    for verbose in (False, True):
        output = _display_output(events, terminal=terminal, verbose=verbose)
        _assert_clean(output)
        assert "\\x1b" in output  # escapes are shown visibly, not dropped silently


def test_27_hostile_run_through_the_cli(home: Path, tmp_path: Path) -> None:
    flow = write_workflow(
        tmp_path,
        "hostile",
        f"""
        from piw import agent, assistant_message, define_workflow
        workflow = define_workflow(
            name="hostile", title={HOSTILE!r}, start_at="step",
            nodes={{"step": agent(prompt={HOSTILE!r}, status_detail={HOSTILE!r},
                                  expected_output=assistant_message())}},
        )
        """,
    )
    script = tmp_path / "r.json"
    script.write_text(json.dumps([{"thinking": HOSTILE, "text": HOSTILE}]))
    for extra in ((), ("--verbose",)):
        result = piw_cli(home, "run", str(flow), "--provider", "scripted", "--script", str(script), *extra)
        assert result.returncode == 0, result.stderr
        _assert_clean(result.stdout)
    run = sorted((home / "runs").iterdir())[0]
    trace = (run / "trace.ndjson").read_text()
    assert (
        json.loads(trace.splitlines()[-1])["payload"]["finalOutput"] == HOSTILE
    )  # the data itself is kept exact


# ---- 28: notifications -------------------------------------------------------------------------------------


NOTIFY_FLOW = """
    from piw import agent, assistant_message, define_workflow, edge, notify
    workflow = define_workflow(
        name="notes", start_at="note",
        nodes={"note": notify("Heads-up: the nightly build is red."),
               "reply": agent(prompt="Summarise the situation.", expected_output=assistant_message())},
        edges=[edge("note", "reply")],
    )
    """


def test_28_notification_starts_no_request_and_reaches_the_next_one(
    home: Path, tmp_path: Path, openai_stub: OpenAIStub
) -> None:
    flow = write_workflow(tmp_path, "notes", NOTIFY_FLOW)
    provider = ScriptedProvider(["Build is red; investigating."])
    run = start(home, flow, provider)
    assert len(provider.requests) == 1 and provider.requests[0].step is not None
    assert provider.requests[0].step.node_id == "reply"
    customs = [m for m in provider.requests[0].messages if isinstance(m, CustomMessage)]
    assert [m.custom_type for m in customs] == ["pi-workflows-notification", "pi-workflows-agent-step"]
    assert customs[0].content == "Heads-up: the nightly build is red."
    assert len(run.of_type("notification_queued")) == 1
    assert run.types().index("notification_queued") < run.types().index("agent_prompt_sent")

    write_stub_config(home, openai_stub)
    openai_stub.respond = [StubReply.text("Noted.")]
    start_configured(home, write_workflow(tmp_path / "b", "notes", NOTIFY_FLOW))
    assert openai_stub.request_count == 1
    texts = user_texts(openai_stub.requests[0])
    assert texts[0] == "Heads-up: the nightly build is red."
    assert texts[1].startswith("Summarise the situation.\n\n---\nWorkflow step: workflow notes, step reply")


# ---- 29: interactive output --------------------------------------------------------------------------------


class _Writes(StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []

    def write(self, s: str) -> int:
        self.chunks.append(s)
        return super().write(s)

    def isatty(self) -> bool:
        return True


def test_29_terminal_display_streams_text_as_it_arrives(home: Path, tmp_path: Path) -> None:
    sink = _Writes()
    console = Console(file=sink, width=80, force_terminal=True, color_system=None, highlight=False)
    display = AgentDisplay(console)
    answer = "The build broke because the cache expired. Re-running fixed it."
    order: list[str] = []

    def listen(event: Any) -> None:
        if isinstance(event, MessageUpdate) and event.delta == "text_delta":
            order.append("delta")
        elif isinstance(event, MessageEnd):
            order.append("end")

    run = start(
        home,
        one_agent(tmp_path, "agent(prompt='Why?', expected_output=assistant_message())"),
        ScriptedProvider([answer]),
        listeners=[display, listen],
    )
    assert run.terminal("step")["payload"]["output"] == answer
    streamed = [c for c in sink.chunks if c and c in answer]
    assert len(streamed) > 3 and "".join(streamed) == answer  # piece by piece, not one block at the end
    assert order.count("delta") == len(streamed) and order[-1] == "end"
    assert sink.getvalue().count(answer) == 1  # shown once


def test_29_piped_output_prints_the_answer_once(home: Path, tmp_path: Path) -> None:
    flow = one_agent(tmp_path, "agent(prompt='Why?', expected_output=assistant_message())")
    script = tmp_path / "r.json"
    script.write_text(json.dumps([{"thinking": "private musing", "text": "Because of the cache."}]))
    result = piw_cli(home, "run", str(flow), "--provider", "scripted", "--script", str(script))
    assert result.returncode == 0
    assert result.stdout.count("Because of the cache.") == 1
    assert "private musing" not in result.stdout  # thinking only with --verbose
    verbose = piw_cli(home, "run", str(flow), "--provider", "scripted", "--script", str(script), "--verbose")
    assert "private musing" in verbose.stdout


def test_29_interactive_run_in_a_terminal(home: Path, tmp_path: Path) -> None:
    flow = one_agent(
        tmp_path, "agent(prompt='Why?', expected_output=assistant_message(), status_detail='Asking')"
    )
    script = tmp_path / "r.json"
    script.write_text(json.dumps(["Streaming through a real terminal works."]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PIW_", "NO_COLOR"))}
    env.update(PIW_HOME=str(home), TERM="xterm-256color", COLUMNS="80", LINES="24")
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [PIW, "run", str(flow), "--provider", "scripted", "--script", str(script)],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
        close_fds=True,
    )
    os.close(secondary)
    output = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([primary], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(primary)
    assert proc.wait(timeout=10) == 0, output
    text = SGR.sub("", output.decode("utf-8", "replace"))
    assert "Streaming through a real terminal works." in text
    assert "▶ wf › step" in text and "Asking" in text
    assert only_run(home).state_json["status"] == "completed"


def test_29_verbose_terminal_keeps_thinking_and_answer_apart() -> None:
    events = [
        MessageUpdate(delta="thinking_delta", text="weighing ", content_index=0),
        MessageUpdate(delta="thinking_delta", text="options", content_index=0),
        MessageUpdate(delta="text_delta", text="The ", content_index=1),
        MessageUpdate(delta="text_delta", text="answer.", content_index=1),
        MessageEnd(
            message=AssistantReply(
                content=[ThinkingBlock(thinking="weighing options"), TextBlock(text="The answer.")]
            )
        ),
    ]
    assert _display_output(events, terminal=True, verbose=True).splitlines() == [
        "weighing options",
        "The answer.",
    ]
    assert _display_output(events, terminal=True).splitlines() == ["The answer."]
    assert _display_output(events, terminal=False, verbose=True).splitlines() == [
        "weighing options",
        "The answer.",
    ]
