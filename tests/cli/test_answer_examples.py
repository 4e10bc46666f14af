"""The example answer piw prints for a checkpoint fits its answer model: the waiting message, the refusals of an
answer that is not JSON or does not fit, and ``piw decide`` on a plain checkpoint show the same example, and
``piw answer`` accepts it as it is (``docs/checkpoints.md``)."""

from __future__ import annotations

import textwrap

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


@pytest.mark.parametrize("command", ["answer", "decide"])
def test_answers_print_an_example_that_fits_the_answer_model(
    cli: Cli, make_workflow: WorkflowMaker, command: str
) -> None:
    flow = make_workflow(
        "form",
        textwrap.dedent(
            """
            from typing import Literal
            from pydantic import BaseModel, Field
            from piw import checkpoint, compute, define_workflow, edge

            class Reviewer(BaseModel):
                name: str = Field(min_length=2)

            class Verdict(BaseModel):
                decision: Literal["ship", "hold"]
                score: int = Field(ge=1, le=5)
                reviewers: list[Reviewer] = Field(min_length=1)
                note: str | None = None

            workflow = define_workflow(
                name="form",
                start_at="ask",
                nodes={"ask": checkpoint(summary="Verdict?", answer=Verdict), "done": compute(lambda ctx: 1)},
                edges=[edge("ask", "done")],
            )
            """
        ),
    )
    waiting = cli("run", str(flow), env={"COLUMNS": "300"})
    run_id = next(line.split()[-1] for line in waiting.stdout.splitlines() if line.startswith("●"))
    command_line = next(line for line in waiting.stdout.splitlines() if line.startswith("Answer with: "))
    example = command_line.split(f"piw answer {run_id} ", 1)[1]
    assert example.startswith("'") and example.endswith("'")
    example = example[1:-1]
    # every message that tells how to answer shows that same example, and it is accepted as it is
    if command == "decide":
        wrong = cli("decide", run_id, "ship")
        assert wrong.returncode == 2
        assert f"piw answer {run_id} '{example}'" in wrong.stderr, wrong.stderr
    else:
        bad = cli("answer", run_id, "{not json")
        assert bad.returncode == 2 and f"e.g. '{example}'" in bad.stderr, bad.stderr
        unfit = cli("answer", run_id, '{"decision": "maybe"}')
        assert unfit.returncode == 2 and f"e.g. '{example}'" in unfit.stderr, unfit.stderr
    done = cli("answer", run_id, example)
    assert done.returncode == 0, done.stderr
