"""Snapshots of every view for a completed, a failed, a running and a waiting run, at 80 and 40 columns.

The runs are real (see ``test_views_support``); rendering goes through a plain ``Console`` with no colour, so
the snapshot is exactly what a pipe would receive.
"""

from __future__ import annotations

import pytest
from test_views_support import (
    RUN_IDS,
    Runs,
    assert_terminal_safe,
    check_snapshot,
    max_width,
    render,
    shared_runs,
)

from piw.views import VIEW_NAMES, view_for
from piw.views.frame import FrameModel

KINDS = ("completed", "failed", "running", "waiting")
WIDTHS = (80, 40)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", VIEW_NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_view_snapshot(runs: Runs, kind: str, view: str, width: int) -> None:
    text = render(view_for(view, runs.load(kind)), width)
    assert text.strip(), "a view never prints nothing"
    assert max_width(text) <= width
    assert_terminal_safe(text)
    check_snapshot(f"{kind}-{view}-{width}", text)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("kind", KINDS)
def test_frame_snapshot(runs: Runs, kind: str, width: int) -> None:
    """The live frame (``piw watch --once``): summary, graph, step card, progress, notifications."""
    data = runs.load(kind)
    model = FrameModel(data.snapshot)
    model.add_events(data.events())
    model.add_entries(data.entries())
    assert model.state == data.state
    text = render(model.frame(data.now, live=data.live), width)
    assert max_width(text) <= width
    assert_terminal_safe(text)
    check_snapshot(f"{kind}-frame-{width}", text)


def test_frame_is_bounded_by_height(runs: Runs) -> None:
    data = runs.load("running")
    model = FrameModel(data.snapshot)
    model.add_events(data.events())
    model.add_entries(data.entries())
    text = render(model.frame(data.now, live=False, height=20), 80, height=20)
    lines = text.splitlines()
    assert len(lines) <= 20
    assert any("┏" in line for line in lines), "the current node stays in view when the graph is cut"
    assert "Progress" in text and "▶ Demo" in text


@pytest.mark.parametrize("kind", KINDS)
def test_views_show_hostile_text_literally(runs: Runs, kind: str) -> None:
    """Markup in data stays literal and control characters become visible escapes, in every view."""
    data = runs.load(kind)
    combined = "".join(render(view_for(view, data), 200) for view in VIEW_NAMES)
    assert_terminal_safe(combined)
    assert "[red]x[/red]" in combined
    assert "\\x1b[2J" in combined


def test_running_run_reads_as_possibly_interrupted(runs: Runs) -> None:
    text = render(view_for("state", runs.load("running")), 100)
    assert "▶ running · possibly interrupted" in text
    assert "reply (agent)" in text and "waiting for the model" in text


def test_expanded_conversation_shows_prompt_and_thinking(runs: Runs) -> None:
    data = runs.load("completed")
    compact = render(view_for("conversation", data), 100)
    expanded = render(view_for("conversation", data, expanded=True), 100)
    assert "Classify the rows" not in compact
    assert "Classify the rows \\x1b[2J" in expanded
    assert "attempt: " in expanded and "completion: assistant response" in expanded
    assert "hmm \\x1b[2J" in expanded and "hmm" not in compact
    assert "↻ Demo" in compact and "· reminder" in compact
    assert "⚙ workflow" in compact and "↳ workflow: Output accepted" in compact


def test_run_ids_are_normalised(runs: Runs) -> None:
    for kind, run_id in RUN_IDS.items():
        assert runs.load(kind).state.run_id == run_id


@pytest.mark.parametrize("width", (80, 40, 17, 3))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ("steps", "trace"))
def test_the_plain_tables_are_the_rich_ones_without_styles(
    runs: Runs, kind: str, width: int, name: str
) -> None:
    """Off a terminal ``inspect --view steps|trace`` writes plain lines straight out; they are what rich would
    print (hostile text included: the fixtures carry markup, escapes and wide characters)."""
    view = view_for(name, runs.load(kind))
    assert "\n".join(view.plain_lines(width)) + "\n" == render(view, width)  # type: ignore[attr-defined]


def test_row_numbers_of_a_run_past_99999_steps_are_shown_whole() -> None:
    """The ``#`` column is five wide; from row 100,000 on it read ``1000…`` on every row."""
    from datetime import UTC, datetime

    from piw.store.replay import RunState, StepList, StepRecord
    from piw.views.steps import steps_view

    steps = [
        StepRecord(attempt_id=f"a{n}", node_id="work", node_type="compute", outcome="ok",
                   finished_at="2026-01-01T00:00:00.000Z", prompt=None, output=n)
        for n in range(100_002)
    ]  # fmt: skip
    view = steps_view(RunState(run_id="r", steps=StepList(steps)), datetime(2026, 1, 1, tzinfo=UTC))
    plain = list(view.plain_lines(100))  # type: ignore[union-attr]
    assert plain[-1].split()[:3] == ["100002", "work", "✓"] and plain[1].split()[:2] == ["1", "work"]
    rich = [line.plain for line in [view.header(100), *view.row_lines(100_000, 100_002, 100)]]
    assert rich == [plain[0], plain[-2], plain[-1]]  # the pager's rows (the viewer) are the same
