"""Failures say where: the workflow frames of a node's exception are in the trace and on screen.

Before, ``✗ second failed 0 ms KeyError: 'frist'`` named no file and no line, and nothing recorded one.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

FLOW = """
import json
from piw import compute, define_workflow, edge


def helper(ctx):
    return ctx.input["frist"]


def second(ctx):
    json.loads("{}")  # a library frame that must not be recorded
    return {"name": helper(ctx)}


workflow = define_workflow(
    name="flow",
    start_at="first",
    nodes={"first": compute(lambda ctx: {"ok": True}), "second": compute(second)},
    edges=[edge("first", "second")],
)
"""


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def _run(cli: Cli, path: Path, *extra: str) -> tuple[str, str]:
    done = cli("run", str(path), *extra)
    assert done.returncode == 1, done.stderr
    (run_id,) = [p.name for p in (cli.home / "runs").iterdir() if not p.name.startswith(".")]
    return run_id, done.stdout


def test_the_failure_event_records_the_workflow_frames(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("flow", FLOW)
    run_id, _ = _run(cli, path)
    (failed,) = [e for e in trace_lines(cli.home, run_id) if e["type"] == "node_failed"]
    assert failed["payload"]["error"] == "KeyError: 'frist'"
    frames = failed["payload"]["traceback"]
    assert frames == [
        {"file": str(path.resolve()), "line": _line_of(path, 'return {"name"'), "function": "second",
         "code": 'return {"name": helper(ctx)}'},
        {"file": str(path.resolve()), "line": _line_of(path, 'ctx.input["frist"]'), "function": "helper",
         "code": 'return ctx.input["frist"]'},
    ]  # fmt: skip
    state = json.loads(cli("inspect", run_id, "--json").stdout)
    assert state["steps"][-1]["traceback"] == frames  # folded into the state (steps[])


def test_the_failure_line_and_the_outcome_name_file_and_line(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("flow", FLOW)
    _, stdout = _run(cli, path)
    line = _line_of(path, 'ctx.input["frist"]')
    assert f"✗ second  failed  0 ms  KeyError: 'frist'  at flow.workflow.py:{line}" in stdout.replace(
        "1 ms", "0 ms"
    )
    assert f"error   second: KeyError: 'frist'  at flow.workflow.py:{line}" in stdout


def test_steps_view_shows_the_whole_traceback_for_a_node_or_with_verbose(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow("flow", FLOW)
    run_id, _ = _run(cli, path)
    plain = cli("inspect", run_id, "--view", "steps").stdout
    assert f"KeyError: 'frist'  at flow.workflow.py:{_line_of(path, 'ctx.input')}" in plain
    assert "Traceback" not in plain
    for extra in (("--node", "second"), ("--verbose",)):
        shown = cli("inspect", run_id, "--view", "steps", *extra, env={"COLUMNS": "200"}).stdout
        assert "Traceback (workflow frames, most recent call last):" in shown
        assert f'File "{path.resolve()}", line {_line_of(path, "helper(ctx)}")}, in second' in shown
        assert 'return ctx.input["frist"]' in shown and "KeyError: 'frist'" in shown
        assert "json" not in shown.split("Traceback", 1)[1].replace("json.loads", "")  # no library frames
    only = cli("inspect", run_id, "--view", "steps", "--node", "second").stdout
    assert "first" not in only
    verbose_run = cli("run", str(path), "--verbose").stdout
    assert 'return ctx.input["frist"]' in verbose_run


def test_the_traceback_is_sanitised_and_keeps_secrets_out(cli: Cli, make_workflow: WorkflowMaker) -> None:
    secret = "sk-live-0123456789abcdef"
    path = make_workflow(
        "leaky",
        """
        import os
        from piw import compute, define_workflow
        def boom(ctx):
            key = os.environ["SERVICE_API_KEY"]
            raise RuntimeError("bad key " + key + " \x1b[2J")
        workflow = define_workflow(name="leaky", start_at="a", nodes={"a": compute(boom)})
        """,
    )
    done = cli("run", str(path), "--verbose", env={"SERVICE_API_KEY": secret})
    assert done.returncode == 1
    run_id = json.loads(cli("runs", "--json").stdout)[0]["runId"]
    bundle = cli.home / "runs" / run_id
    for file in bundle.rglob("*"):
        if file.is_file():
            assert secret not in file.read_text(encoding="utf-8", errors="replace"), file
    assert "[redacted]" in done.stdout and secret not in done.stdout
    for view in (["--view", "steps", "--verbose"], ["--view", "output"]):
        shown = cli("inspect", run_id, *view, env={"SERVICE_API_KEY": secret}).stdout
        assert "\x1b" not in shown and "\\x1b[2J" in shown
        assert secret not in shown


def test_a_failure_outside_workflow_code_records_no_traceback(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "bad_output",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="bad_output", start_at="a", nodes={"a": compute(lambda c: {1, 2})})
        """,
    )
    run_id, stdout = _run(cli, path)
    (failed,) = [e for e in trace_lines(cli.home, run_id) if e["type"] == "node_failed"]
    assert "not JSON" in failed["payload"]["error"]
    assert "traceback" not in failed["payload"]  # piw's own frames are never recorded
    assert "at bad_output.workflow.py" not in stdout
