"""Input checked at the door: without an input model the input is a JSON object; @file and - work.

Before, ``--input '[1,2]'`` was accepted and the run then failed inside a node with ``AttributeError``, and
``--input -`` was read as JSON text (``-``) instead of standard input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


def _no_runs(home: Path) -> None:
    runs = home / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".")]


@pytest.mark.parametrize(
    ("raw", "kind"),
    [("[1, 2]", "an array"), ('"text"', "a string"), ("3", "a number"), ("true", "a boolean")],
)
def test_without_an_input_model_the_input_must_be_an_object(
    cli: Cli, make_workflow: WorkflowMaker, raw: str, kind: str
) -> None:
    plain = make_workflow(  # (the shipped hello has an input model since issue 26.10)
        "plain",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="plain", start_at="a", nodes={"a": compute(lambda ctx: ctx.input)})
        """,
    )
    done = cli("run", str(plain), "--input", raw)
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"Error: Invalid input for plain: without an input model the input must be a JSON object ({{...}}), "
        f"not {kind}"
    )
    assert "input= in define_workflow" in done.stderr and done.stderr.count("\n") == 1
    assert done.stdout == ""
    _no_runs(cli.home)  # refused before anything was recorded


def test_a_normaliser_or_model_decides_for_itself(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "listy",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="listy", start_at="a", input=lambda raw: {"items": list(raw)},
                                   nodes={"a": compute(lambda c: len(c.input["items"]))})
        """,
    )
    done = cli("run", str(path), "--input", "[1, 2, 3]", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == 3


def test_input_from_a_file_and_from_stdin(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "echo",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="echo", start_at="a", nodes={"a": compute(lambda c: c.input)})
        """,
    )
    (cli.cwd / "in.json").write_text('{"from": "file"}', encoding="utf-8")
    from_file = cli("run", str(path), "--input", "@in.json", "--json")
    assert json.loads(from_file.stdout)["finalOutput"] == {"from": "file"}
    from_stdin = cli("run", str(path), "--input", "-", "--json", input='{"from": "stdin"}\n')
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert json.loads(from_stdin.stdout)["finalOutput"] == {"from": "stdin"}
    empty = cli("run", str(path), "--input", "-", input="")
    assert empty.returncode == 2 and "read nothing from standard input" in empty.stderr
    array = cli("run", str(path), "--input", "-", input="[1]")
    assert array.returncode == 2 and "must be a JSON object" in array.stderr
