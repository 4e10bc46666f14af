"""Off a terminal a printed message is never hard-wrapped at the console width (issue 26, "confusing").

A pipe, a file or CI gets each message on one line, so a run id or a command in it can be grepped and copied;
the terminal wraps long lines by itself. Views still fit their own lines to the width.
"""

from __future__ import annotations

import json

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

ASK = """
from piw import checkpoint, compute, define_workflow, edge
workflow = define_workflow(name="ask", start_at="ask", nodes={
    "ask": checkpoint("Is it ok?"), "after": compute(lambda ctx: {"got": ctx.outputs["ask"]})},
    edges=[edge("ask", "after")])
"""


def test_messages_stay_one_line_whatever_the_width(cli: Cli, make_workflow: WorkflowMaker) -> None:
    narrow = {"COLUMNS": "60"}
    waiting = json.loads(cli("run", str(make_workflow("ask", ASK)), "--json").stdout)["runId"]
    answered = cli("answer", waiting, '{"ok": true}', env=narrow)
    assert answered.returncode == 0, answered.stderr
    continuation = json.loads(cli("runs", "--json").stdout)[0]["runId"]
    assert (
        f"Recorded the answer for run {waiting} at ask; continuing as run {continuation}."
        in answered.stdout.splitlines()
    )

    crashed = cli.process("run", "hello", env={"PIW_TEST_KILL_AFTER_APPEND": "2"})
    assert crashed.returncode == -9
    listed = cli("runs", env=narrow)
    assert (
        "Interrupted runs have no process writing them; continue one with 'piw resume RUN_ID' "
        "or end it with 'piw cancel RUN_ID'." in listed.stdout.splitlines()
    )
