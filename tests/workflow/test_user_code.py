"""Workflow code cannot take piw down: every ``BaseException`` it raises becomes a failed node or a load error.

``sys.exit()`` in a node, a ``BaseException`` subclass, ``SystemExit`` while a workflow file is imported: each
ends in one clear message and a run status that tells the truth. ``KeyboardInterrupt`` still parks the run.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

HEADER = """
import sys
from piw import action, agent, checkpoint, compute, define_workflow, edge, notify, shell, switch, ShellUpdates

class Boom(BaseException):
    pass

def boom(*args):
    raise Boom("out of band")

def leave(*args):
    sys.exit(3)
"""

# Every place a node runs author code; each must fail the node (and route on), never end the process.
NODE_CASES = {
    "compute-exit": "compute(leave)",
    "compute-base": "compute(boom)",
    "action-exit": "action(leave)",
    "action-base": "action(boom)",
    "action-exit-deadline": "action(leave, timeout_s=5)",
    "action-timeout-fn": "action(lambda c: 1, timeout_s=leave)",
    "shell-exec": "shell(leave)",
    "shell-parse": 'shell({"command": sys.executable, "args": ["-c", "print(1)"]}, parse=leave)',
    "shell-lines": (
        'shell({"command": sys.executable, "args": ["-c", "print(1)"]},'
        " updates=ShellUpdates(parse_line=leave))"
    ),
    "notify-message": "notify(leave)",
    "checkpoint-summary": "checkpoint(summary=leave)",
}


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_base_exception_in_a_node_fails_the_node_and_the_run_goes_on(
    case: str, cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "bx",
        HEADER
        + f"""
workflow = define_workflow(
    name="bx", start_at="bad",
    nodes={{"bad": {NODE_CASES[case]}, "after": compute(lambda c: {{"routed": c.results["bad"]["outcome"]}})}},
    edges=[switch("bad", on="$result.outcome", cases={{"failed": "after", "ok": "after"}})],
)
""",
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert result["status"] == "completed" and result["finalOutput"] == {"routed": "failed"}
    failed = [line for line in trace_lines(cli.home, result["runId"]) if line["type"] == "node_failed"]
    (event,) = failed
    error = event["payload"]["error"]
    assert ("SystemExit" in error and "sys.exit(3)" in error) or "Boom: out of band" in error, error
    assert "Traceback" not in done.stderr


def test_sys_exit_without_a_route_fails_the_run_with_a_clear_message(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "ex", HEADER + 'workflow = define_workflow(name="ex", start_at="a", nodes={"a": action(leave)})\n'
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert result["status"] == "failed"
    assert "sys.exit(3)" in result["error"]
    listed = cli.json("runs")
    assert [row["status"] for row in listed] == ["failed"]


def test_base_exception_at_import_is_a_load_error(cli: Cli, make_workflow: WorkflowMaker) -> None:
    exits = make_workflow("exits", "import sys\nsys.exit(4)\n")
    base = make_workflow("base", "class Boom(BaseException):\n    pass\n\nraise Boom('at import')\n")
    for path, expected in ((exits, "sys.exit(4)"), (base, "Boom: at import")):
        for command in (("validate", str(path)), ("run", str(path)), ("graph", str(path))):
            done = cli(*command)
            assert done.returncode == 2, (command, done.stdout, done.stderr)
            assert done.stderr.startswith("Error: ") and expected in done.stderr, done.stderr
            assert f"{path}:" in done.stderr and "Traceback" not in done.stderr


def test_piw_list_names_a_file_that_exits_at_import(cli: Cli) -> None:
    folder = cli.cwd / ".piw" / "workflows"
    folder.mkdir(parents=True)
    (folder / "quits.workflow.py").write_text("raise SystemExit(4)\n", encoding="utf-8")
    done = cli("list")
    assert done.returncode == 0, done.stderr
    assert "quits" in done.stdout and "cannot load" in done.stdout and "sys.exit(4)" in done.stdout
    rows = {row["id"]: row for row in cli.json("list")}
    assert "sys.exit(4)" in rows["quits"]["description"]


def test_input_normaliser_and_title_that_exit_are_input_errors(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    for name, where in (("norm", "input=leave"), ("titled", "title=leave")):
        path = make_workflow(
            name,
            HEADER + f'workflow = define_workflow(name="{name}", start_at="a", {where},'
            ' nodes={"a": compute(lambda c: 1)})\n',
        )
        done = cli("run", str(path))
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert done.stderr.startswith("Error: ") and "sys.exit(3)" in done.stderr, done.stderr
        assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())


def test_keyboard_interrupt_still_parks_the_run(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    path = make_workflow(
        "slow",
        f"""
import time
from pathlib import Path
from piw import action, define_workflow

def wait(ctx):
    Path({str(started)!r}).write_text("x")
    time.sleep(30)
    return 1

workflow = define_workflow(name="slow", start_at="a", nodes={{"a": action(wait)}})
""",
    )
    process = cli.popen("run", str(path))
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stderr
    assert "piw resume" in stderr
    (row,) = cli.json("runs")
    assert row["status"] == "running"


@pytest.mark.parametrize("where", ["prompt=leave", 'prompt="Go.", validate=leave'])
def test_agent_prompt_or_validator_that_exits_fails_the_attempt(
    where: str, cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"submit": {"a": 1}}]), encoding="utf-8")
    path = make_workflow(
        "ag", HEADER + f'workflow = define_workflow(name="ag", start_at="a", nodes={{"a": agent({where})}})\n'
    )
    done = cli("run", str(path), "--provider", "scripted", "--script", str(script), "--json")
    assert done.returncode == 1, (done.stdout, done.stderr)
    result = json.loads(done.stdout)
    assert result["status"] == "failed" and "sys.exit(3)" in result["error"], result
