"""The live display of ``piw run``: a ``Live`` frame on a terminal, plain step lines otherwise.

Runs here go through the real engine (``piw.run.runner.start_run``) with :class:`piw.cli.live.LiveDisplay` as the
listener, exactly as ``piw run`` installs it.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from piw.cli.live import LiveDisplay, StepLog
from piw.run.runner import ForegroundOptions, start_run
from piw.store.fold import RunState, fold
from piw.store.trace import read_trace
from tests.support.views import RUN_IDS, Runs, assert_terminal_safe, render, shared_runs

WORKFLOW = """
from piw import action, compute, define_workflow, edge, notify

HOSTILE = "\\x1b[2J\\r\\u202e[red]x[/red]"


def work(ctx):
    for done in (1, 2, 3):
        ctx.publish_update("progress", "items", {"schema": "pi-workflows.progress.v1", "status": "running",
                                                 "label": "Items " + HOSTILE, "completed": done, "total": 4,
                                                 "unit": "items"})
    return {"done": 3}


workflow = define_workflow(
    name="live-demo",
    start_at="plan",
    nodes={"plan": compute({"ok": True}), "work": action(work), "tell": notify("Finished " + HOSTILE)},
    edges=[edge("plan", "work"), edge("work", "tell")],
)
"""


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


def _run(tmp_path: Path, console: Console) -> tuple[RunState, LiveDisplay]:
    path = tmp_path / "live_demo.workflow.py"
    path.write_text(WORKFLOW, encoding="utf-8")
    home = tmp_path / "home"
    display = LiveDisplay(console, home=home)
    try:
        state = start_run(
            str(path), home, {}, "Live " + "\x1b]0;t\x07", ForegroundOptions(listeners=[display])
        )
    finally:
        display.close()
    return state, display


def test_plain_console_gets_step_lines(tmp_path: Path) -> None:
    out = io.StringIO()
    state, _ = _run(tmp_path, Console(file=out, width=100, color_system=None))
    assert state.status == "completed"
    text = out.getvalue()
    assert "▶ plan  compute" in text and "✓ work  ok" in text and "■ completed" in text
    assert "✉ Finished \\x1b[2J\\x0d\\u202e[red]x[/red]" in text, "the notification's text, not only its id"
    assert "\x1b" not in text and "\r" not in text


def test_the_plain_log_and_the_rich_log_say_the_same_thing(runs: Runs, tmp_path: Path) -> None:
    """Off a terminal the step log is written as plain text; on one it is rich ``Text``: the words are the same."""
    _run(
        tmp_path, Console(file=io.StringIO(), width=100, color_system=None)
    )  # one more run, with progress lines
    plain_out = io.StringIO()
    plain = StepLog(Console(file=plain_out, width=100, color_system=None))
    rich_console = Console(file=io.StringIO(), width=10_000, force_terminal=True, record=True)
    styled = StepLog(rich_console)
    assert plain.plain and not styled.plain
    traces = [runs.bundle(name) / "trace.ndjson" for name in RUN_IDS]
    traces += list((tmp_path / "home" / "runs").glob("*/trace.ndjson"))
    kinds = set()
    for trace in traces:
        events = read_trace(trace).events
        for index, event in enumerate(events):
            state = fold(events[: index + 1])
            plain(event, state)
            styled(event, state)
            rich_line = styled.line(event, state)
            assert styled.plain_line(event, state) == (None if rich_line is None else rich_line.plain)
            kinds.add(event.type)
    assert {
        "node_started",
        "node_finished",
        "node_failed",
        "update_published",
        "notification_queued",
    } <= kinds
    assert plain_out.getvalue() == rich_console.export_text(styles=False)
    assert "\x1b" not in plain_out.getvalue()


def test_terminal_console_gets_a_live_frame(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, height=40, force_terminal=True, color_system="standard")
    state, display = _run(tmp_path, console)
    assert state.status == "completed"
    final = render(display.frame(), 80)
    assert "✓ completed" in final and "◉ end" in final and "Progress" in final and "3/4 items" in final
    assert "✉ Finished" in final
    assert_terminal_safe(final)
    assert "\x1b]0;t\x07" not in out.getvalue() and "\u202e" not in out.getvalue()
    display.close()


def test_a_resumed_run_starts_the_frame_from_the_trace(runs: Runs) -> None:
    """The first event a resume delivers is not ``run_started``; the frame still has the earlier progress."""
    events = read_trace(runs.bundle("completed") / "trace.ndjson").events
    console = Console(file=io.StringIO(), width=80, height=50, force_terminal=True)
    display = LiveDisplay(console, home=runs.home("completed"))
    try:
        for index in range(12, len(events)):
            display(events[index], fold(events[: index + 1]))
        frame = render(display.frame(), 160)
    finally:
        display.close()
    assert "Rows" in frame and "60/100 rows" in frame and "✓ completed" in frame
    assert RUN_IDS["completed"] in frame


def test_unknown_bundle_falls_back_to_step_lines(runs: Runs, tmp_path: Path) -> None:
    events = read_trace(runs.bundle("completed") / "trace.ndjson").events
    out = io.StringIO()
    display = LiveDisplay(Console(file=out, width=80, force_terminal=True), home=tmp_path / "elsewhere")
    for index, event in enumerate(events):
        display(event, fold(events[: index + 1]))
    display.close()
    assert "■ completed" in out.getvalue()


def test_streamed_text_shows_under_the_card_until_the_step_ends(runs: Runs) -> None:
    events = read_trace(runs.bundle("completed") / "trace.ndjson").events
    reply_started = next(
        i for i, e in enumerate(events) if e.type == "agent_prompt_sent" and e.node_id == "reply"
    )
    console = Console(file=io.StringIO(), width=100, height=80, force_terminal=True)
    display = LiveDisplay(console, home=runs.home("completed"))
    try:
        for index in range(reply_started + 1):
            display(events[index], fold(events[: index + 1]))
        display.stream_text("Thanks \x1b[2J so ")
        display.stream_text("far [red]x[/red]")
        during = render(display.frame(), 100)
        finished = next(i for i, e in enumerate(events) if e.type == "node_finished" and e.node_id == "reply")
        for index in range(reply_started + 1, finished + 1):
            display(events[index], fold(events[: index + 1]))
        after = render(display.frame(), 100)
    finally:
        display.close()
    assert "Thanks \\x1b[2J so far [red]x[/red]" in during
    assert "Thanks" not in after
