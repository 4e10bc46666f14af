"""Time travel: ``--at SEQ`` replays only events 1..SEQ, for every view, and matches a trace cut at SEQ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piw.progress import parse_instant
from piw.store.fold import fold, state_to_json
from piw.store.trace import read_trace
from piw.views import VIEW_NAMES, view_for
from piw.views.source import load_run
from tests.support.views import (
    RUN_IDS,
    Runs,
    assert_terminal_safe,
    cut_bundle,
    max_width,
    render,
    shared_runs,
)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


def _events(runs: Runs, kind: str) -> list:  # type: ignore[type-arg]
    return read_trace(runs.bundle(kind) / "trace.ndjson").events


@pytest.mark.parametrize("view", VIEW_NAMES)
def test_every_prefix_renders(runs: Runs, view: str) -> None:
    total = len(_events(runs, "completed"))
    for at in range(1, total + 1):
        text = render(view_for(view, runs.load("completed", at=at)), 60)
        assert text.strip()
        assert max_width(text) <= 60
        assert_terminal_safe(text)


def test_state_at_each_seq_is_the_fold_of_the_prefix(runs: Runs) -> None:
    events = _events(runs, "completed")
    for at in range(1, len(events) + 1):
        state = runs.load("completed", at=at).state
        assert state_to_json(state) == state_to_json(fold(events[:at]))
        assert state.trace_seq == at


def test_at_beyond_the_end_is_the_whole_run(runs: Runs) -> None:
    assert runs.load("completed", at=10_000).state == runs.load("completed").state


@pytest.mark.parametrize("view", [v for v in VIEW_NAMES if v != "state"])
def test_at_matches_a_trace_cut_at_that_seq(runs: Runs, tmp_path: Path, view: str) -> None:
    """``--at K`` of the whole run renders exactly like a run whose trace really ends at K (same clock)."""
    for node, after in (
        ("crunch", "update_published"),
        ("classify", "agent_prompt_sent"),
        ("reply", "node_finished"),
    ):
        home = tmp_path / f"{node}-{after}"
        (home / "runs").mkdir(parents=True)
        cut = cut_bundle(runs.bundle("completed"), home, after, node)
        last = read_trace(cut / "trace.ndjson").events[-1]
        moment = parse_instant(last.at)
        truncated = load_run(home, RUN_IDS["completed"], clock=lambda moment=moment: moment)  # type: ignore[misc]
        travelled = runs.load("completed", at=last.seq)
        assert render(view_for(view, truncated), 80) == render(view_for(view, travelled), 80)


def test_state_view_says_it_was_replayed(runs: Runs) -> None:
    text = render(view_for("state", runs.load("completed", at=5)), 80)
    assert "replayed to seq 5 (--at 5)" in text
    assert "running" in text and "possibly interrupted" not in text


def test_conversation_before_any_prompt_is_empty(runs: Runs) -> None:
    assert (
        render(view_for("conversation", runs.load("completed", at=12)), 80).strip()
        == "No conversation entries."
    )
    before_reply = render(view_for("conversation", runs.load("completed", at=16)), 80)
    assert "› classify" in before_reply and "› reply" not in before_reply


def test_updates_and_progress_grow_with_at(runs: Runs) -> None:
    assert render(view_for("updates", runs.load("completed", at=4)), 80).strip() == "No updates published."
    assert render(view_for("progress", runs.load("completed", at=4)), 80).strip() == "No progress updates."
    two = render(view_for("progress", runs.load("completed", at=6)), 80)
    assert "20/100 rows" in two and "2 samples" in two


def test_cli_at_json_is_the_fold_of_the_prefix(runs: Runs) -> None:
    from tests.support.views import run_cli

    events = _events(runs, "completed")
    for at in (1, 7, 16, len(events)):
        result = run_cli(runs.home("completed"), "inspect", RUN_IDS["completed"], "--at", str(at), "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == json.loads(json.dumps(state_to_json(fold(events[:at]))))
