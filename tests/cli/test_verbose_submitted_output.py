"""``piw run --verbose`` shows what a submit-mode step submitted (issue 26, "confusing").

The tool-call line ``  ⚙ workflow {"action": "submit", "step": …, "attempt": …`` is clipped to the width, so the
submitted output itself (after the step and attempt ids) never showed, even with ``--verbose``. Now ``--verbose``
prints the output in full under the call; without it the log stays one clipped line per call.
"""

from __future__ import annotations

from tests.support.cli import Cli

SUBMITTED = '    output: {"route": "bug", "reason": "Saving crashes the app."}'


def test_verbose_prints_the_submitted_output_under_the_call(cli: Cli) -> None:
    done = cli("run", "triage", "--provider", "scripted", "--verbose")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    call = next(i for i, line in enumerate(lines) if line.startswith("  ⚙ workflow "))
    assert lines[call + 1] == SUBMITTED


def test_without_verbose_the_call_stays_one_line(cli: Cli) -> None:
    done = cli("run", "triage", "--provider", "scripted")
    assert done.returncode == 0, done.stderr
    assert "    output:" not in done.stdout
    assert sum(line.startswith("  ⚙ workflow ") for line in done.stdout.splitlines()) == 1


def test_each_rejected_and_accepted_submission_is_shown(cli: Cli) -> None:
    """review's summarize step submits five points (rejected by its validator), then three (accepted)."""
    done = cli("run", "review", "--provider", "scripted", "--verbose", env={"COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    outputs = [line for line in done.stdout.splitlines() if line.startswith("    output: ")]
    assert len(outputs) == 3  # summarize twice, route once
    assert '"points": [' in outputs[0] and outputs[0].count('", "') >= 4
