"""``piw view`` driven through Textual's headless pilot: every screen and key, on real run bundles.

The runs come from real CLI runs (``tests.support.views.shared_runs``: a completed run with a hostile title, a
failed one, a waiting one, and a running copy cut mid-run) plus bundles written line by line. What is asserted
is what the screen shows (its cells as text), never timings; waits are bounded polls on the screen.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from piw.app.help import HelpScreen
from piw.app.pane import LinesPane
from piw.app.run_screen import RunScreen
from piw.app.runs_screen import RunsScreen
from piw.app.step_screen import StepScreen
from piw.app.viewer import TooSmall, ViewerApp
from tests.support.viewer import (
    NOW,
    PROGRESS_RUN,
    ready,
    run_app,
    settle,
    text,
    write_fork_with_budget,
    write_progress_run,
)
from tests.support.views import RUN_IDS, Runs, assert_terminal_safe, cut_bundle, shared_runs

COMPLETED, FAILED, WAITING = RUN_IDS["completed"], RUN_IDS["failed"], RUN_IDS["waiting"]


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


def viewer(home: Path, run_id: str | None = None, **options: Any) -> ViewerApp:
    return ViewerApp(home, run_id, clock=lambda: NOW, refresh_s=0, **options)


def run_screen(pilot: Any) -> RunScreen:
    screen = pilot.app.screen
    assert isinstance(screen, RunScreen), type(screen)
    return screen


# ---- the runs list -----------------------------------------------------------------------------------------


def test_runs_list_shows_every_run_with_status_title_age_node_and_cost(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        shown = text(pilot)
        assert "3 of 3" in shown and "status: all" in shown
        for header in ("status", "title", "age", "current node", "cost", "run id"):
            assert header in shown
        lines = [line for line in shown.splitlines() if "20260101T" in line]
        assert [line.split()[0] for line in lines] == ["waiting", "failed", "completed"], "newest first"
        assert "$0.0000" in lines[2], "the completed run's model cost"
        assert "Demo \\x1b[2J" in lines[2], "the hostile title is shown as text"
        assert_terminal_safe(shown)

    run_app(viewer(runs.home("completed")), steps)


def test_runs_filter_and_search(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        await pilot.press("f")  # running: none of these
        assert "status: running" in text(pilot) and "No runs match" in text(pilot)
        await pilot.press("f")
        assert "status: waiting" in text(pilot) and "1 of 3" in text(pilot)
        for _ in range(6):  # completed, failed, timed_out, cancelled, unknown (outcome unknown), back to all
            await pilot.press("f")
        assert "status: all" in text(pilot) and "3 of 3" in text(pilot)
        await pilot.press("slash", *"00000002")
        assert "search: 00000002" in text(pilot) and "1 of 3" in text(pilot)
        await pilot.press("enter")
        assert isinstance(pilot.app.screen, RunsScreen)
        await pilot.press("escape")
        assert "3 of 3" in text(pilot)

    run_app(viewer(runs.home("completed")), steps)


def test_runs_list_updates_live_and_keeps_the_cursor(runs: Runs, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(runs.home("completed"), home)

    async def steps(pilot: Any) -> None:
        screen = pilot.app.screen
        assert isinstance(screen, RunsScreen)
        await pilot.press("j")  # the failed run
        assert screen.rows[screen.table.cursor].run_id == FAILED
        shutil.rmtree(home / "runs" / WAITING)
        screen.reload()
        await pilot.pause()
        assert "2 of 2" in text(pilot)
        assert screen.rows[screen.table.cursor].run_id == FAILED, "the cursor stays on its run"

    run_app(viewer(home), steps)


# ---- the run screen ----------------------------------------------------------------------------------------


def test_open_a_run_select_a_step_and_expand_it(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        await pilot.press("k", "k")  # the completed run is the oldest: last row
        await pilot.press("end", "enter")
        screen = run_screen(pilot)
        shown = text(pilot)
        assert "✓ completed" in shown and "■ ended" in shown and "seq 23/23" in shown
        assert "prepare" in shown and "announce" in shown, "graph and steps"
        await pilot.press("j", "j")  # classify
        assert screen.attempt is not None and screen.attempt[0] == "classify"
        await pilot.press("5")  # trace, filtered to classify's attempt
        trace = screen.pane("trace").visible_text()
        assert "agent_prompt" in trace and "crunch" not in trace
        assert "filter: classify · attempt" in text(pilot)
        await pilot.press("1", "enter")
        assert isinstance(pilot.app.screen, StepScreen)
        card = pilot.app.screen.query_one("#detail", LinesPane)
        detail = "\n".join(card.row_text(row) for row in range(card.count))
        for part in ("classify", "prompt", "Classify the rows", "conversation", "workflow", "submission",
                     '"route": "reply"', "usage", "2 model requests"):  # fmt: skip
            assert part in detail, part
        assert_terminal_safe(detail)
        await pilot.press("escape")
        assert pilot.app.screen is screen
        await pilot.press("escape")  # clears the filter
        assert screen.attempt is None and "filter:" not in text(pilot)
        await pilot.press("escape")  # back to the list
        assert isinstance(pilot.app.screen, RunsScreen)

    run_app(viewer(runs.home("completed")), steps)


def test_picking_a_node_in_the_graph_filters_the_other_panes(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        screen = run_screen(pilot)
        screen.graph.focus()
        await pilot.press("j", "j")  # prepare, then crunch
        assert screen.node == "crunch"
        steps_text = screen.pane("steps").visible_text()
        assert "crunch" in steps_text and "classify" not in steps_text
        await pilot.press("3")
        updates = screen.pane("updates").visible_text()
        assert "progress" in updates and "History" in updates
        await pilot.press("4")
        progress = screen.pane("progress").visible_text()
        assert "Rows" in progress and "60%" in progress
        await pilot.press("2")
        assert "No conversation entries." in screen.pane("conversation").visible_text(), "crunch had none"

    run_app(viewer(runs.home("completed"), COMPLETED), steps)


def test_time_travel_shows_every_pane_as_it_was(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        screen = run_screen(pilot)
        await pilot.press("6", "colon", *"17", "enter")
        assert screen.at == 17
        shown = text(pilot)
        assert "seq 17/23" in shown and "time travel 00:00:24.000" in shown
        state = screen.pane("state").visible_text()
        assert "replayed to seq 17" in state and "current   reply (agent)" in state
        await pilot.press("1")
        assert "▶ running" in screen.pane("steps").visible_text()
        await pilot.press("5")
        trace = screen.pane("trace").visible_text()
        assert "agent_prompt" in trace and "node_finished   reply" not in trace
        await pilot.press("comma", "comma")
        assert screen.at == 15 and "seq 15/23" in text(pilot)
        await pilot.press("full_stop")
        assert screen.at == 16
        await pilot.press("left_square_bracket")
        assert screen.at == 6
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert screen.at is None, "past the end is the end"
        await pilot.press("comma", "l")
        assert screen.at is None and "■ ended" in text(pilot)

    run_app(viewer(runs.home("completed"), COMPLETED), steps)


def test_search_help_and_quit(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        screen = run_screen(pilot)
        await pilot.press("5", "slash", *"notifi", "enter")
        pane = screen.pane("trace")
        assert "notification_" in pane.row_text(pane.cursor) and pane.cursor == 20
        await pilot.press("slash", *"no such text", "enter")
        assert any("No match" in note.message for note in pilot.app._notifications)
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen)
        shown = text(pilot)
        for binding in RunScreen.BINDINGS + LinesPane.BINDINGS:
            assert binding.description in shown, binding.description  # type: ignore[union-attr]
        await pilot.press("escape")
        assert pilot.app.screen is screen
        await pilot.press("q")
        assert pilot.app.return_code == 0 and not pilot.app.is_running

    run_app(viewer(runs.home("completed"), COMPLETED), steps)


def test_expanded_conversation_and_mouse(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        screen = run_screen(pilot)
        await pilot.press("2")
        compact = "\n".join(
            screen.pane("conversation").row_text(r) for r in range(screen.pane("conversation").count)
        )
        await pilot.press("x")
        full = "\n".join(
            screen.pane("conversation").row_text(r) for r in range(screen.pane("conversation").count)
        )
        assert "prompt:" in full and "prompt:" not in compact
        assert_terminal_safe(full)
        await pilot.click("#tabs Tab#--content-tab-tab-trace")
        assert screen.active == "trace"

    run_app(viewer(runs.home("completed"), COMPLETED), steps)


# ---- following a live run ----------------------------------------------------------------------------------


def test_follows_a_live_run_that_another_thread_appends_to(runs: Runs, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    cut = cut_bundle(runs.bundle("completed"), home, "update_published", "crunch")
    full = runs.bundle("completed")
    trace_rest = (
        (full / "trace.ndjson")
        .read_bytes()
        .splitlines(keepends=True)[len((cut / "trace.ndjson").read_bytes().splitlines()) :]
    )
    session_rest = (
        (full / "session" / "entries.ndjson")
        .read_bytes()
        .splitlines(keepends=True)[len((cut / "session" / "entries.ndjson").read_bytes().splitlines()) :]
    )
    go = threading.Event()

    def writer() -> None:
        go.wait(30)
        with (cut / "session" / "entries.ndjson").open("ab") as session:
            session.writelines(session_rest)
        with (cut / "trace.ndjson").open("ab") as trace:
            for line in trace_rest:
                trace.write(line)
                trace.flush()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()

    async def steps(pilot: Any) -> None:
        screen = run_screen(pilot)
        assert "▶ running" in text(pilot) and "possibly interrupted" in text(pilot), "no process writes it"
        await pilot.press("j")
        assert screen.pane("steps").cursor == 1
        go.set()
        await settle(pilot, lambda: "seq 23/23" in text(pilot) and "✓ completed" in text(pilot), "the end")
        assert screen.pane("steps").cursor == 1, "the cursor is kept"
        assert "announce" in screen.pane("steps").visible_text()
        assert [note for note in screen.notified if "Done:" in note], "a toast per notification"

    try:
        run_app(viewer(home, COMPLETED, force_polling=True), steps)
    finally:
        go.set()
        thread.join(10)


# ---- progress, bad input, small terminals ------------------------------------------------------------------


def test_progress_pane_draws_a_bar_per_track(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_progress_run(home)

    async def steps(pilot: Any) -> None:
        screen = run_screen(pilot)
        await pilot.press("4")
        progress = screen.pane("progress").visible_text()
        rows = {
            line.split("  ")[-1].split()[0]: line
            for line in progress.splitlines()
            if "%" in line or "/min" in line
        }
        assert "  0%" in progress and " 46%" in progress and "100%" in progress
        assert "items/min" in progress, "the pulse of a track without a total shows its rate"
        assert rows

    run_app(viewer(home, PROGRESS_RUN), steps)


def test_lineage_and_spend_against_the_budget(tmp_path: Path) -> None:
    home = tmp_path / "home"
    parent, fork = write_fork_with_budget(home)

    async def steps(pilot: Any) -> None:
        rows = text(pilot)
        fork_row = next(line for line in rows.splitlines() if fork[:20] in line and "⑂" in line)
        assert "$0.0120" in fork_row, "the budget's ledger is the run's cost"
        pilot.app.open_run(fork)
        await ready(pilot)
        shown = text(pilot)
        assert f"⑂ forked from {parent} at seq 3" in shown
        assert "budget 2 of 5 requests" in shown and "$0.0120 of $2.50" in shown
        await pilot.press("6")
        state = run_screen(pilot).pane("state").visible_text()
        assert "forked from" in state and "budget" in state
        await pilot.press("escape")
        pilot.app.open_run(parent)
        await ready(pilot)
        assert f"forks: {fork}" in text(pilot)

    run_app(viewer(home), steps)


def test_damaged_bundles_show_what_they_can(runs: Runs, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(runs.home("completed"), home)
    torn = home / "runs" / COMPLETED
    lines = (torn / "trace.ndjson").read_bytes().splitlines(keepends=True)
    (torn / "trace.ndjson").write_bytes(b"".join([*lines[:10], b"{not json\n", *lines[11:]]))
    (torn / "state.json").unlink(missing_ok=True)
    (home / "runs" / FAILED / "workflow.json").write_text("{", encoding="utf-8")

    async def steps(pilot: Any) -> None:
        assert "No run 'nosuchrun'" in text(pilot), "an unknown id opens the list and says so"
        pilot.app.open_run(COMPLETED)
        screen = run_screen(pilot)
        await settle(pilot, lambda: "line 11 is damaged" in text(pilot), "the corruption notice")
        assert "seq 10/10" in text(pilot)
        await pilot.press("5")
        assert "update_publis" in screen.pane("trace").visible_text()
        await pilot.press("escape")
        pilot.app.open_run(FAILED)
        await settle(
            pilot, lambda: "workflow.json is missing or damaged" in text(pilot), "the snapshot notice"
        )
        await settle(pilot, lambda: "✗ failed" in text(pilot), "the replayed state")

    run_app(viewer(home, message="No run 'nosuchrun' in …; list runs with 'piw runs'."), steps)


def test_a_small_terminal_gets_a_message(runs: Runs) -> None:
    async def steps(pilot: Any) -> None:
        await pilot.resize_terminal(30, 10)
        await pilot.pause()
        assert isinstance(pilot.app.screen, TooSmall) and "at least 40×12" in text(pilot)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert isinstance(pilot.app.screen, RunScreen)

    run_app(viewer(runs.home("completed"), COMPLETED), steps, size=(80, 24))
