"""``piw run NAME`` with ``./NAME.workflow.py`` in the current folder answers with the path to type (issue 26.8).

A bare name is looked up only in the documented places (project folder, user folder, built-ins, examples): a file
in whatever folder the shell is in is not imported by name, and a name is never taken from there in front of (or
behind) a built-in or example of the same name. When nothing matches and the current folder holds the file, the
error says exactly what to type instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import Cli

FLOW = """
from piw import compute, define_workflow
workflow = define_workflow(name="mine", start_at="a", nodes={"a": compute(lambda ctx: {"ok": True})})
"""


@pytest.mark.parametrize("command", ["run", "show", "validate", "graph"])
def test_a_name_found_only_in_the_current_folder_is_answered_with_its_path(cli: Cli, command: str) -> None:
    (cli.cwd / "my_flow.workflow.py").write_text(FLOW, encoding="utf-8")
    done = cli(command, "my_flow")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: No workflow named 'my_flow'.")
    assert "Did you mean './my_flow.workflow.py'?" in done.stderr
    assert "Traceback" not in done.stderr
    again = cli(command, "./my_flow.workflow.py")
    assert again.returncode == 0, again.stderr


def test_without_such_a_file_the_error_is_as_before(cli: Cli) -> None:
    done = cli("run", "my_flow")
    assert done.returncode == 2
    assert "./my_flow.workflow.py" not in done.stderr


def test_a_file_in_the_current_folder_never_hides_a_shipped_example(cli: Cli, tmp_path: Path) -> None:
    (cli.cwd / "hello.workflow.py").write_text(FLOW.replace('"mine"', '"not-the-example"'), encoding="utf-8")
    done = cli("run", "hello")
    assert done.returncode == 0, done.stderr
    assert "● hello" in done.stdout and "not-the-example" not in done.stdout
