"""The pytest plugin: ``pytest`` in a project collects its piw test cases as items, with readable failures."""

from __future__ import annotations

import shutil

import pytest

from tests.support.cases import edit, recorded_triage
from tests.support.cli import Cli

pytest_plugins = ["pytester"]
QUIET = ("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:textual-snapshot")
"""Plugins of this suite that a nested in-process pytest must not load again."""


def test_pytest_collects_and_runs_a_case_and_reports_its_drift(cli: Cli, pytester: pytest.Pytester) -> None:
    recorded_triage(cli)
    shutil.copytree(cli.cwd, pytester.path, dirs_exist_ok=True)
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")

    passing = pytester.runpytest(*QUIET, "-v")

    passing.assert_outcomes(passed=2)
    passing.stdout.fnmatch_lines(["*piw-tests/bug/case.json::bug PASSED*"])

    edit(pytester.path / "workflows" / "triage.workflow.py", "Write a short reply", "Write a long reply")
    failing = pytester.runpytest(*QUIET)

    failing.assert_outcomes(passed=1, failed=1)
    failing.stdout.fnmatch_lines(
        ["*FAIL   bug*", "*prompt drift of bug:*", "*-Write a short reply for the reporter.*"]
    )
    assert "Traceback" not in failing.stdout.str()
