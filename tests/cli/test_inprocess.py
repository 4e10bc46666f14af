"""The in-process ``cli`` fixture says what the real ``piw`` process says, and leaves the test process as it was.

Most CLI tests run ``piw`` in process for speed (tests/support/inprocess.py); these compare it against a real
subprocess on the same commands, so a difference between the two (prog name, streams, exit codes, terminal
detection, environment) fails here instead of hiding in every other test.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

import piw.tools
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

FLOW = """
import os
from piw import compute, define_workflow, edge
from piw.tools import Tool, register

register("probe_tool", Tool(name="probe_tool", description="d", parameters={"type": "object"},
                            execute=lambda call_id, args, ctx: "x"))
os.environ["LEAKED_BY_WORKFLOW"] = "1"
os.chdir("/")

def boom(ctx):
    raise KeyError("frist")

workflow = define_workflow(name="same", start_at="a", nodes={"a": compute(lambda c: {"cwd": os.getcwd()}),
                           "b": compute(boom)}, edges=[edge("a", "b")])
"""


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),  # the program name, the help width
        (),  # no arguments: help on stdout, exit 2
        ("inspect", "no-such-run"),  # a PiwError: one line on stderr
        ("runs", "--status"),  # a usage error from the parser
    ],
)
def test_in_process_output_matches_a_real_process(cli: Cli, args: tuple[str, ...]) -> None:
    inside, outside = cli(*args), cli.process(*args)
    assert (inside.returncode, inside.stdout, inside.stderr) == (
        outside.returncode,
        outside.stdout,
        outside.stderr,
    )


def test_a_failing_run_matches_a_real_process_and_leaves_no_state_behind(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow("same", FLOW)
    cwd, environ = os.getcwd(), dict(os.environ)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    modules = set(sys.modules)
    inside = cli("run", str(path), "--json")
    assert os.getcwd() == cwd and dict(os.environ) == environ
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    assert "probe_tool" not in piw.tools.registered_names()
    assert not [name for name in set(sys.modules) - modules if name.startswith("piw_workflow_")]
    outside = cli.process("run", str(path), "--json")
    assert inside.returncode == outside.returncode == 1
    first, second = json.loads(inside.stdout), json.loads(outside.stdout)
    assert (first["status"], first["error"]) == (second["status"], second["error"])
    assert first["runId"] != second["runId"]


def test_stdin_is_not_a_terminal(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "echo",
        """
        import sys
        from piw import compute, define_workflow
        workflow = define_workflow(name="echo", start_at="a",
                                   nodes={"a": compute(lambda c: {"tty": sys.stdin.isatty(), "in": c.input})})
        """,
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"tty": False, "in": {}}


LOOP = """
from piw import compute, define_workflow, switch

def step(ctx):
    n = ctx.outputs.get("step", {"n": 0})["n"] + 1
    return {"n": n, "label": "item " + str(n), "more": n < 40}

workflow = define_workflow(
    name="loop",
    start_at="step",
    max_steps=60,
    nodes={"step": compute(step), "done": compute(lambda ctx: ctx.outputs["step"])},
    edges=[switch("step", on="$.more", cases={"true": "step", "false": "done"})],
)
"""


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "damaged"])
def test_read_only_views_print_all_of_their_output_before_a_real_process_ends(
    cli: Cli, make_workflow: WorkflowMaker, damaged: bool
) -> None:
    # A real ``piw`` ends after a view without freeing the state it built (piw/cli/quick_exit.py): whatever it
    # printed, to stdout and stderr, must be complete all the same, and its exit code the same.
    run_id = json.loads(cli("run", str(make_workflow("loop", LOOP)), "--json").stdout)["runId"]
    if damaged:  # a bad line in the middle: the views show the prefix and warn on stderr
        trace = cli.home / "runs" / run_id / "trace.ndjson"
        lines = trace.read_bytes().splitlines(keepends=True)
        lines[31] = b"{not json\n"  # a node_started: the readable prefix ends with a finished step
        trace.write_bytes(b"".join(lines))
    commands = [
        ("inspect", run_id, "--json"),
        ("inspect", run_id, "--view", "steps"),
        ("inspect", run_id, "--view", "trace"),
        ("inspect", run_id, "--at", "20", "--view", "steps"),
    ]
    if (
        not damaged
    ):  # (a damaged run looks interrupted: these show how long its current step has been running)
        commands += [("inspect", run_id), ("watch", run_id, "--once")]
    for args in commands:
        inside, outside = cli(*args), cli.process(*args)
        assert len(outside.stdout) > 200, args
        assert (outside.returncode, outside.stdout, outside.stderr) == (
            inside.returncode,
            inside.stdout,
            inside.stderr,
        ), args
        # (``--at 20`` reads only lines before the damaged one)
        assert ("Warning:" in outside.stderr) == (damaged and "--view" in args and "--at" not in args), args
