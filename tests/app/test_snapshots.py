"""SVG snapshots (pytest-textual-snapshot) of every screen of ``piw view`` at 80×24 and 120×40.

The runs are the real CLI runs of ``tests.support.views`` (the completed one has a hostile title, prompts and
replies: escape sequences, OSC 52, a carriage return, U+202E and rich markup) and a run with progress tracks at
0 %, partial and 100 %, and one without a total. The clock is fixed and live following is off, so every frame is
the same on every machine. ``pytest --snapshot-update`` rewrites them after a deliberate change; look at the
SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from piw.app.viewer import ViewerApp
from tests.support.paths import REPO
from tests.support.viewer import NOW, PROGRESS_RUN, ready, write_progress_run
from tests.support.views import RUN_IDS, Runs, shared_runs

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


@pytest.fixture(scope="session")
def progress_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("progress-home")
    write_progress_run(home)
    return home


def app(home: Path, run_id: str | None = None) -> ViewerApp:
    return ViewerApp(home, run_id, clock=lambda: NOW, refresh_s=0, follow=False)


async def indexed(pilot: Any) -> None:
    """Wait until the runs are read and the run screen has read its trace (worker threads)."""
    await ready(pilot)


@pytest.mark.parametrize("size", SIZES)
def test_runs_list(snap_compare: Any, runs: Runs, size: tuple[int, int]) -> None:
    assert snap_compare(app(runs.home("completed")), terminal_size=size, run_before=indexed)


@pytest.mark.parametrize("size", SIZES)
def test_run_screen_of_a_hostile_run(snap_compare: Any, runs: Runs, size: tuple[int, int]) -> None:
    assert snap_compare(
        app(runs.home("completed"), RUN_IDS["completed"]), terminal_size=size, run_before=indexed
    )


@pytest.mark.parametrize("size", SIZES)
def test_time_travel_in_the_trace(snap_compare: Any, runs: Runs, size: tuple[int, int]) -> None:
    async def before(pilot: Any) -> None:
        await indexed(pilot)
        await pilot.press("5", "colon", "1", "7", "enter")
        await pilot.pause()

    assert snap_compare(
        app(runs.home("completed"), RUN_IDS["completed"]), terminal_size=size, run_before=before
    )


@pytest.mark.parametrize("size", SIZES)
def test_step_card(snap_compare: Any, runs: Runs, size: tuple[int, int]) -> None:
    async def before(pilot: Any) -> None:
        await indexed(pilot)
        await pilot.press("j", "j", "enter")
        await pilot.pause()

    assert snap_compare(
        app(runs.home("completed"), RUN_IDS["completed"]), terminal_size=size, run_before=before
    )


@pytest.mark.parametrize("size", SIZES)
def test_help_overlay(snap_compare: Any, runs: Runs, size: tuple[int, int]) -> None:
    async def before(pilot: Any) -> None:
        await indexed(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(
        app(runs.home("completed"), RUN_IDS["completed"]), terminal_size=size, run_before=before
    )


@pytest.mark.parametrize("size", SIZES)
def test_progress_bars(snap_compare: Any, progress_home: Path, size: tuple[int, int]) -> None:
    async def before(pilot: Any) -> None:
        await indexed(pilot)
        await pilot.press("4")
        await pilot.pause()

    assert snap_compare(app(progress_home, PROGRESS_RUN), terminal_size=size, run_before=before)


def test_too_small(snap_compare: Any, runs: Runs) -> None:
    assert snap_compare(
        app(runs.home("completed"), RUN_IDS["completed"]), terminal_size=(39, 11), run_before=indexed
    )


DOC_IMAGES = {
    "view-runs.svg": "test_runs_list[80x24].svg",
    "view-run.svg": "test_run_screen_of_a_hostile_run[120x40].svg",
    "view-time-travel.svg": "test_time_travel_in_the_trace[120x40].svg",
    "view-step.svg": "test_step_card[80x24].svg",
    "view-progress.svg": "test_progress_bars[120x40].svg",
    "view-help.svg": "test_help_overlay[80x24].svg",
}


@pytest.mark.parametrize("image", sorted(DOC_IMAGES))
def test_the_docs_show_the_pinned_screens(image: str) -> None:
    """docs/images/view-*.svg are copies of these snapshots, so the documentation never drifts from the app."""
    docs = REPO / "docs" / "images" / image
    pinned = Path(__file__).resolve().parent / "__snapshots__" / "test_snapshots" / DOC_IMAGES[image]
    assert docs.read_bytes() == pinned.read_bytes(), f"copy {pinned.name} to docs/images/{image}"
