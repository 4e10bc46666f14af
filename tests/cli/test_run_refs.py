"""Run ids people can type: prefixes, ``latest`` and ``-N`` everywhere, ids never wrapped in ``piw runs``.

Before, ``piw runs`` folded ids over two lines at 80 columns, ``inspect``/``watch``/``resume`` took only a full id,
``piw inspect -1`` was ``No such option: -1``, and an unknown workflow name suggested nothing.
"""

from __future__ import annotations

import json

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

LONG = "a-workflow-whose-name-is-long-enough-to-fill"


def _runs(cli: Cli, make_workflow: WorkflowMaker) -> list[str]:
    """Three finished runs (one with a 40-character slug); their ids, newest first."""
    path = make_workflow(
        "long",
        f"""
        from piw import compute, define_workflow
        workflow = define_workflow(name="{LONG}", start_at="a", nodes={{"a": compute(lambda c: 1)}},
                                   title="A title that is much too long to fit in any narrow column")
        """,
    )
    for reference in ("hello", str(path), "hello"):
        assert cli("run", reference, "--json").returncode == 0
    return [row["runId"] for row in cli.json("runs")]


@pytest.mark.parametrize("columns", [120, 80, 60, 40, 20])
def test_runs_never_wraps_a_run_id(cli: Cli, make_workflow: WorkflowMaker, columns: int) -> None:
    ids = _runs(cli, make_workflow)
    assert max(len(run_id) for run_id in ids) > 60  # the long slug
    shown = cli("runs", env={"COLUMNS": str(columns)}).stdout.splitlines()
    assert shown[0].split()[:3] == ["run", "id", "status"]  # the status stays, however narrow
    for run_id in ids:
        (line,) = [line for line in shown if run_id in line]  # whole, on one line
        assert line.startswith(run_id) and line.split()[1] == "completed"
    widest = max(len(line.rstrip()) for line in shown)
    assert widest <= max(columns, max(len(i) for i in ids) + 2 + len("completed"))
    if columns >= 120:
        assert shown[0].split()[:5] == ["run", "id", "status", "title", "started"]


def test_every_command_taking_a_run_accepts_prefixes_latest_and_negative_positions(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    newest, middle, oldest = _runs(cli, make_workflow)
    # inspect: latest, -1, -2, a unique prefix, and -N after an option
    assert json.loads(cli("inspect", "latest", "--json").stdout)["runId"] == newest
    assert json.loads(cli("inspect", "-1", "--json").stdout)["runId"] == newest
    assert json.loads(cli("inspect", "-2", "--json").stdout)["runId"] == middle
    assert json.loads(cli("inspect", "--json", "-3").stdout)["runId"] == oldest
    prefix = middle[: len(middle) - 6]
    assert json.loads(cli("inspect", prefix, "--json").stdout)["runId"] == middle
    steps = cli("inspect", "--view", "steps", "-2")
    assert steps.returncode == 0 and "✓ ok" in steps.stdout
    # watch
    watched = cli("watch", "-2", "--once")
    assert watched.returncode == 0 and "A title that is much too long" in watched.stdout  # the long-slug run
    assert "A title" not in cli("watch", oldest[:-4], "--once").stdout
    # resume resolves before it refuses a finished run: the refusal names the full id
    for ref in ("-1", "latest", newest[:-3]):
        refused = cli("resume", ref)
        assert refused.returncode == 2
        assert refused.stderr == f"Error: Run {newest} already ended (completed); nothing to resume.\n"


def test_too_far_back_ambiguous_and_unknown_references(cli: Cli, make_workflow: WorkflowMaker) -> None:
    newest, _, oldest = _runs(cli, make_workflow)
    far = cli("inspect", "-9")
    assert far.returncode == 2 and "there are only 3 runs" in far.stderr
    common = newest[:4]  # the year: every run
    ambiguous = cli("inspect", common)
    assert ambiguous.returncode == 2
    assert "ambiguous" in ambiguous.stderr and all(run_id in ambiguous.stderr for run_id in (newest, oldest))
    typo = oldest[:-1] + ("0" if oldest[-1] != "0" else "1")
    unknown = cli("inspect", typo)
    assert unknown.returncode == 2 and f"Did you mean {oldest}?" in unknown.stderr
    assert cli("runs", "--limit", "-1").stderr == "Error: --limit must be at least 1.\n"  # an option's value


def test_an_unknown_workflow_name_suggests_the_closest(cli: Cli) -> None:
    done = cli("run", "helo")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: No workflow named 'helo'. Did you mean 'hello'?")
    far = cli("run", "zzzzzz")
    assert "Did you mean" not in far.stderr and "piw list" in far.stderr
