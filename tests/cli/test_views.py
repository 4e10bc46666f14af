"""``piw inspect``, ``piw watch`` and ``piw graph`` through the real command line, run in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piw.store.fold import fold, state_to_json
from piw.store.trace import read_trace
from piw.views import VIEW_NAMES, view_for
from tests.support.views import (
    RUN_IDS,
    Runs,
    render,
    run_cli,
    shared_runs,
)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


def _no_escapes(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text


@pytest.mark.parametrize("kind", ["completed", "failed", "waiting"])
def test_inspect_every_view_exits_zero_whatever_the_status(runs: Runs, kind: str) -> None:
    for view in VIEW_NAMES:
        result = run_cli(runs.home(kind), "inspect", RUN_IDS[kind], "--view", view)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip()
        _no_escapes(result.stdout)


def test_inspect_prints_what_the_view_renders(runs: Runs) -> None:
    """The command adds nothing to the view: same text as rendering it in-process at the same width."""
    for view in ("state", "graph", "trace", "conversation"):
        result = run_cli(
            runs.home("completed"), "inspect", RUN_IDS["completed"], "--view", view, "--at", "20"
        )
        assert result.stdout == render(view_for(view, runs.load("completed", at=20)), 80)


def test_inspect_running_run_exits_zero(runs: Runs) -> None:
    result = run_cli(runs.home("running"), "inspect", RUN_IDS["running"])
    assert result.returncode == 0
    assert "possibly interrupted" in result.stdout


def test_inspect_json_is_the_run_state(runs: Runs) -> None:
    result = run_cli(runs.home("failed"), "inspect", RUN_IDS["failed"], "--json", "--view", "trace")
    events = read_trace(runs.bundle("failed") / "trace.ndjson").events
    assert json.loads(result.stdout) == json.loads(json.dumps(state_to_json(fold(events))))


def test_json_output_is_terminal_safe_and_exact(runs: Runs) -> None:
    """The title holds U+202E: ``--json`` escapes it (the same JSON value), so it never reaches a terminal."""
    result = run_cli(runs.home("completed"), "inspect", RUN_IDS["completed"], "--json")
    _no_escapes(result.stdout)
    assert "\u202e" not in result.stdout and "\\u202e" in result.stdout
    events = read_trace(runs.bundle("completed") / "trace.ndjson").events
    assert json.loads(result.stdout) == json.loads(json.dumps(state_to_json(fold(events))))


def test_trace_filters(runs: Runs) -> None:
    home, run_id = runs.home("completed"), RUN_IDS["completed"]
    by_node = run_cli(home, "inspect", run_id, "--view", "trace", "--node", "classify", columns=120).stdout
    rows = by_node.splitlines()[1:]
    assert rows and all(" classify " in row for row in rows)
    attempt = read_trace(runs.bundle("completed") / "trace.ndjson").events[3].attempt_id
    assert attempt is not None
    by_attempt = run_cli(
        home, "inspect", run_id, "--view", "trace", "--attempt", attempt[:8], columns=120
    ).stdout
    assert all(" crunch " in row for row in by_attempt.splitlines()[1:])
    unknown = run_cli(home, "inspect", run_id, "--view", "trace", "--node", "nope")  # an error since issue 26
    assert unknown.returncode == 2 and f"Run {run_id} has no node 'nope'." in unknown.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "20990101T000000000Z-nope-00000000"], "No run"),
        (["inspect", "../etc"], "is not a run id"),
        (["inspect", RUN_IDS["completed"], "--view", "bogus"], "Unknown view"),
        (["inspect", RUN_IDS["completed"], "--at", "0"], "--at"),
        (["inspect", RUN_IDS["completed"], "--node", "crunch"], "--view trace"),
        (["watch", "20990101T000000000Z-nope-00000000", "--once"], "No run"),
        (["graph", "no-such-workflow"], "No workflow"),
    ],
)
def test_usage_errors_exit_two_with_one_line(runs: Runs, args: list[str], message: str) -> None:
    result = run_cli(runs.home("completed"), *args)
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_graph_format_is_checked(runs: Runs) -> None:
    result = run_cli(runs.home("completed"), "graph", str(runs.workflow), "--format", "png")
    assert result.returncode == 2 and "Unknown format" in result.stderr


def test_watch_once_prints_one_frame(runs: Runs) -> None:
    result = run_cli(runs.home("completed"), "watch", RUN_IDS["completed"], "--once")
    assert result.returncode == 0
    assert result.stdout.startswith("● Demo") and "✓ completed" in result.stdout and "◉ end" in result.stdout
    _no_escapes(result.stdout)


def test_watch_defaults_to_the_newest_run_and_ends_with_it(tmp_path: Path, runs: Runs) -> None:
    """Without ``--once`` a finished run prints its frame and exits; with no run id the newest is shown."""
    result = run_cli(runs.home("completed"), "watch")
    assert result.returncode == 0
    assert RUN_IDS["waiting"] in result.stdout and "⏸ waiting on approve" in result.stdout


def test_watch_without_runs_is_an_error(tmp_path: Path) -> None:
    result = run_cli(tmp_path / "empty", "watch", "--once")
    assert result.returncode == 2 and "No runs" in result.stderr


def test_graph_text_of_a_definition(runs: Runs) -> None:
    result = run_cli(runs.home("completed"), "graph", str(runs.workflow))
    assert result.returncode == 0
    for node in ("prepare", "crunch", "classify", "reply", "approve", "announce", "● start", "◉ end"):
        assert node in result.stdout
    assert "assistant response" in result.stdout and "✓" not in result.stdout
    _no_escapes(result.stdout)


def test_graph_json_is_the_snapshot(runs: Runs) -> None:
    result = run_cli(runs.home("completed"), "graph", str(runs.workflow), "--json")
    snapshot = json.loads(result.stdout)
    stored = json.loads((runs.bundle("completed") / "workflow.json").read_text(encoding="utf-8"))
    assert snapshot == stored


def test_graph_mermaid_and_dot_are_valid(runs: Runs) -> None:
    from tests.views.test_graph import parse_dot, parse_mermaid

    mermaid = run_cli(runs.home("completed"), "graph", str(runs.workflow), "--format", "mermaid").stdout
    nodes, edges = parse_mermaid(mermaid)
    assert len(edges) == 10 and len(nodes) == 8
    dot = run_cli(runs.home("completed"), "graph", str(runs.workflow), "--format", "dot").stdout
    nodes, edges = parse_dot(dot)
    assert len(edges) == 10 and len(nodes) == 8


def test_a_damaged_trace_shows_its_valid_prefix_with_a_notice(runs: Runs, tmp_path: Path) -> None:
    import shutil

    home = tmp_path / "home"
    shutil.copytree(runs.home("completed"), home)
    trace = home / "runs" / RUN_IDS["completed"] / "trace.ndjson"
    lines = trace.read_bytes().splitlines(keepends=True)
    lines[6] = b'{"seq": 7, "oops\n'
    trace.write_bytes(b"".join(lines))
    state = run_cli(home, "inspect", RUN_IDS["completed"])
    assert state.returncode == 0
    assert "⚠ trace.ndjson line 7 is damaged; showing the 6 lines before it." in state.stdout
    assert "▶ running" in state.stdout
    steps = run_cli(home, "inspect", RUN_IDS["completed"], "--view", "steps")
    assert steps.returncode == 0 and steps.stderr.startswith("Warning: trace.ndjson line 7 is damaged")
