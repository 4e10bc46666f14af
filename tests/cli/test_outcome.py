"""``piw run`` ends with what the run produced: the output, the error, or what it waits for.

Before, a completed run ended with ``■ completed`` and nothing else; the output needed ``--json`` or ``inspect``.
"""

from __future__ import annotations

import json
import re

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

RUN_ID = re.compile(r"\d{8}T\d{9}Z-[a-z0-9-]+-[0-9a-f]{8}")


def _after_status(stdout: str, status: str) -> list[str]:
    lines = stdout.splitlines()
    index = lines.index(f"■ {status}")
    return lines[index + 1 :]


def test_a_completed_run_prints_its_output_after_the_status(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "answer",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="answer", start_at="a",
                                   nodes={"a": compute(lambda c: {"answer": 42, "why": "it is"})})
        """,
    )
    done = cli("run", str(path))
    assert done.returncode == 0, done.stderr
    tail = _after_status(done.stdout, "completed")
    assert tail[0] == "output  {"
    assert '"answer": 42' in "\n".join(tail) and '"why": "it is"' in "\n".join(tail)
    assert "more line" not in done.stdout  # it fitted: no pointer to the whole output


def test_a_string_output_is_shown_as_text(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "greet",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="greet", start_at="a", nodes={"a": compute(lambda c: "Hello, Ada!")})
        """,
    )
    done = cli("run", str(path))
    assert done.returncode == 0, done.stderr
    assert _after_status(done.stdout, "completed") == ["output  Hello, Ada!"]


def test_a_long_output_is_clipped_with_the_command_that_shows_it_whole(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "long",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="long", start_at="a",
                                   nodes={"a": compute(lambda c: "\\n".join(f"line {i}" for i in range(60)))})
        """,
    )
    done = cli("run", str(path), env={"LINES": "24", "COLUMNS": "120"})
    tail = _after_status(done.stdout, "completed")
    assert tail[0] == "output  line 0"
    assert len(tail) <= 20  # bounded by the terminal height, not the 60 lines
    assert "line 59" not in done.stdout
    run_id = RUN_ID.search(done.stdout)
    assert run_id is not None
    hint = f"… {61 - len(tail)} more lines; the whole output: piw inspect {run_id[0]} --view output"
    assert tail[-1].strip() == hint
    whole = cli("inspect", run_id[0], "--view", "output")
    assert whole.returncode == 0
    assert whole.stdout.splitlines() == [f"line {i}" for i in range(60)]


def test_a_wide_output_is_cut_to_the_width_and_says_so(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "wide",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="wide", start_at="a", nodes={"a": compute(lambda c: "x" * 300)})
        """,
    )
    done = cli("run", str(path), env={"COLUMNS": "80"})
    tail = _after_status(done.stdout, "completed")
    assert all(len(line) <= 80 for line in tail)
    run_id = RUN_ID.search(done.stdout)
    assert run_id is not None
    assert tail[0].endswith("…") and tail[1].strip() == "… clipped; the whole output:"
    assert tail[2].strip() == f"piw inspect {run_id[0]} --view output"  # the command whole, on its own line
    whole = cli("inspect", run_id[0], "--view", "output", env={"COLUMNS": "80"})
    assert whole.stdout.replace("\n", "") == "x" * 300  # wrapped, not cut


def test_a_failed_run_shows_its_error_and_node(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "broken",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="broken", start_at="a", nodes={"a": compute(lambda c: 1 / 0)})
        """,
    )
    done = cli("run", str(path))
    assert done.returncode == 1
    tail = _after_status(done.stdout, "failed")
    assert tail[0].startswith("error   a: ZeroDivisionError: division by zero  at broken.workflow.py:2")


def test_a_waiting_run_shows_what_it_waits_for(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "gate",
        """
        from piw import checkpoint, define_workflow
        workflow = define_workflow(name="gate", start_at="ask",
                                   nodes={"ask": checkpoint(lambda c: {"question": "Ship it?"})})
        """,
    )
    done = cli("run", str(path))
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    status = next(i for i, line in enumerate(lines) if line.startswith("■ waiting"))
    waits = "\n".join(lines[status + 1 :])
    assert "ask" in waits and "Ship it?" in waits


def test_json_output_is_unchanged_by_the_outcome_block(cli: Cli) -> None:
    done = cli("run", "hello", "--json")
    assert json.loads(done.stdout)["status"] == "completed"  # stdout is still only the JSON


def test_the_output_view_of_a_running_or_failed_run(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "fails",
        """
        from piw import compute, define_workflow
        def boom(ctx):
            raise RuntimeError("disk \\x1b[2J full")
        workflow = define_workflow(name="fails", start_at="a", nodes={"a": compute(boom)})
        """,
    )
    run_id = json.loads(cli("run", str(path), "--json").stdout)["runId"]
    shown = cli("inspect", run_id, "--view", "output")
    assert shown.returncode == 0
    assert "a failed:" in shown.stdout and "RuntimeError: disk \\x1b[2J full" in shown.stdout
    assert "\x1b" not in shown.stdout
