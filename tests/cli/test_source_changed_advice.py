"""The refusal of a run whose workflow file changed suggests commands that work as printed (issue 26.7).

The run was started from a file path that is not discoverable by name, so ``piw run NAME`` would fail: the advice
repeats the path, and it offers ``piw fork RUN --from NODE --workflow FILE``, which keeps the completed steps.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import trace_lines

LINEAR = """
from piw import compute, define_workflow, edge

workflow = define_workflow(
    name="linear-flow",
    start_at="a",
    nodes={"a": compute(lambda ctx: {"a": 1}), "b": compute(lambda ctx: {"b": 2}), "c": compute(lambda ctx: {"c": 3})},
    edges=[edge("a", "b"), edge("b", "c")],
)
"""


def _quoted(message: str, start: str) -> list[str]:
    """The commands in ``message`` quoted as '…' that begin with ``start``."""
    return [part for part in message.split("'")[1::2] if part.startswith(start)]


def test_the_source_changed_refusal_repeats_the_file_and_offers_a_fork_that_keeps_steps(
    cli: Cli, tmp_path: Path
) -> None:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    path = folder / "my_flow.workflow.py"
    path.write_text(LINEAR, encoding="utf-8")
    crashed = cli.process("run", str(path), env={"PIW_TEST_KILL_AFTER_APPEND": "4"})  # in b: a finished
    assert crashed.returncode == -9, crashed.stderr
    (run_id,) = [p.name for p in (cli.home / "runs").iterdir() if not p.name.startswith(".")]
    assert [e["type"] for e in trace_lines(cli.home, run_id)][-1] == "node_started"
    path.write_text(LINEAR.replace('{"c": 3}', '{"c": 30}'), encoding="utf-8")

    refused = cli("resume", run_id)
    assert refused.returncode == 2
    message = refused.stderr
    assert f"piw run {path}" in message
    assert "piw run linear-flow" not in message and "piw run my_flow" not in message
    (fork,) = _quoted(message, "piw fork")
    assert fork == f"piw fork {run_id} --from b --workflow {path}"

    forked = cli(*shlex.split(fork)[1:], "--json")
    assert forked.returncode == 0, forked.stderr
    result = json.loads(forked.stdout)
    assert result["status"] == "completed" and result["finalOutput"] == {"c": 30}
    fork_trace = trace_lines(cli.home, result["runId"])
    assert [e["payload"].get("replayedSteps") for e in fork_trace if e["type"] == "run_resumed"] == [1]

    (again,) = _quoted(message, "piw run")
    started = cli(*shlex.split(again)[1:])
    assert started.returncode == 0, started.stderr
