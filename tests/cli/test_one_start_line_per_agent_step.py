"""Each agent step prints one ``▶`` line (issue 26, "confusing"): its step card.

``piw run`` printed ``▶ summarize  agent`` from the step log and then ``▶ Review: … › summarize`` from the step card,
two start lines for one step. The card is now the step's start line; a step that ends before its prompt is sent
(so no card) still gets the step log's ``▶`` line before its ``✗``.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


def test_every_agent_step_of_review_starts_with_exactly_one_line(cli: Cli) -> None:
    done = cli("run", "review", "--provider", "scripted")
    assert done.returncode == 0, done.stderr
    starts = [line for line in done.stdout.splitlines() if line.startswith("▶ ")]
    assert starts == [
        "▶ Review: rename config keys › summarize",
        "▶ Review: rename config keys › route",
        "▶ Review: rename config keys › announce",
    ]
    assert "↻ Review: rename config keys › summarize · reminder" in done.stdout  # a reminder is not a start


def test_non_agent_steps_keep_their_start_line(cli: Cli) -> None:
    done = cli("run", "hello")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("▶ ")] == [
        "▶ greet  compute",
        "▶ echo  action",
        "▶ tell  notify",
    ]


EMPTY_PROMPT = """
from piw import agent, define_workflow
workflow = define_workflow(name="blank", start_at="ask", nodes={"ask": agent(prompt=lambda ctx: "")})
"""


def test_a_step_that_fails_before_its_prompt_still_shows_its_start(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    script = tmp_path / "none.replies.json"
    script.write_text("[]", encoding="utf-8")
    done = cli(
        "run", str(make_workflow("blank", EMPTY_PROMPT)), "--provider", "scripted", "--script", str(script)
    )
    lines = done.stdout.splitlines()
    assert "▶ ask  agent" in lines, done.stdout + done.stderr
    assert lines.index("▶ ask  agent") + 1 == next(
        i for i, line in enumerate(lines) if line.startswith("✗ ask")
    )
