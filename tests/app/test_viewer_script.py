"""``piw view`` of a script run (issue 35 item 5, ``docs/dynamic-workflows.md``): the state pane shows its phases
and the script step's screen shows each phase's leaves as step cards, read from a real run's bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from piw.app.pane import LinesPane
from piw.app.step_screen import StepScreen
from piw.app.viewer import ViewerApp
from piw.testing import OpenAIStub
from tests.agent.test_script import N
from tests.support.agent_harness import home, start
from tests.support.scripts import LeafStub, three_phase_workflow
from tests.support.viewer import NOW, run_app, settle, text

__all__ = ["home"]


def test_the_viewer_shows_a_scripts_phases_and_its_leaves_as_step_cards(home: Path, tmp_path: Path) -> None:
    workflow = three_phase_workflow(tmp_path / "wf")
    with OpenAIStub() as stub:
        stub.respond = LeafStub()
        run = start(home, workflow, stub.provider(), run_input={"n": N})
    assert run.state.status == "completed", run.state.error

    async def steps(pilot: Any) -> None:
        await pilot.press("6")  # the state pane
        await settle(pilot, lambda: "phases" in text(pilot), "the state pane")
        shown = text(pilot)
        assert "✓ draft  8/8 leaves" in shown and "✓ verify  4/4 leaves" in shown
        assert "✓ synthesis  1/1 leaves" in shown
        await pilot.press("1", "enter")  # the steps pane, then the script step's screen
        await settle(pilot, lambda: isinstance(pilot.app.screen, StepScreen), "the step screen")
        card = pilot.app.screen.query_one("#detail", LinesPane)
        detail = "\n".join(card.row_text(row) for row in range(card.count))
        assert "leaves" in detail and "phase draft · 8/8 leaves" in detail and "phase verify · 4/4" in detail
        assert "✓ orchestrate › draft/outline-write.0/1-outline/outline" in detail
        assert "✓ orchestrate › synthesis/main" in detail

    run_app(ViewerApp(home, run.run_id, clock=lambda: NOW, refresh_s=0), steps)
