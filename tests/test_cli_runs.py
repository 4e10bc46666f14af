"""End-to-end tests of ``piw run``, ``resume``, ``runs``, ``list`` and ``validate`` through the ``cli`` fixture."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

BAD_DEFINITIONS = {
    "syntax-error": (
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="x", start_at="a", nodes={"a": compute(lambda c: 1)}
        """,
        ["syntax error", ":2:"],
    ),
    "no-workflow": (
        """
        from piw import compute, define_workflow
        flow = define_workflow(name="x", start_at="a", nodes={"a": compute(lambda c: 1)})
        """,
        ["does not bind `workflow`", "workflow = define_workflow"],
    ),
    "not-a-definition": ("workflow = 42\n", ["define_workflow", "int"]),
    "helper-value": (
        """
        from piw import agent, define_workflow
        workflow = define_workflow(name="x", start_at="a", nodes={"a": agent(prompt=5)})
        """,
        ["prompt must be", ":2:"],
    ),
    "helper-missing-argument": (
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="x", start_at="a", nodes={"a": compute()})
        """,
        ["compute()", "run", ":2:"],
    ),
    "helper-assistant-with-validate": (
        """
        from piw import agent, assistant_message, define_workflow
        node = agent(prompt="hi", expected_output=assistant_message(), validate=lambda v, c: v)
        workflow = define_workflow(name="x", start_at="a", nodes={"a": node})
        """,
        ["validate", "assistant_message"],
    ),
    "bad-node-id": (
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="x", start_at="a b", nodes={"a b": compute(1)})
        """,
        ["'a b'", "[A-Za-z_]"],
    ),
    "unknown-start": (
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="x", start_at="missing", nodes={"a": compute(1)})
        """,
        ["start_at 'missing'", "not a node"],
    ),
    "unknown-edge-target": (
        """
        from piw import compute, define_workflow, edge
        workflow = define_workflow(name="x", start_at="a", nodes={"a": compute(1)},
                                   edges=[edge("a", "nowhere")])
        """,
        ["'a'", "unknown node 'nowhere'"],
    ),
    "duplicate-outgoing-edges": (
        """
        from piw import compute, define_workflow, edge
        workflow = define_workflow(
            name="x", start_at="a",
            nodes={"a": compute(1), "b": compute(2), "c": compute(3)},
            edges=[edge("a", "b"), edge("a", "c")],
        )
        """,
        ["node 'a'", "more than one outgoing edge", "switch"],
    ),
    "unreachable-node": (
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="x", start_at="a", nodes={"a": compute(1), "orphan": compute(2)})
        """,
        ["node 'orphan'", "unreachable"],
    ),
    "include-cycle": (
        """
        from piw import compute, define_workflow, edge, include
        child = define_workflow(name="child", start_at="s", nodes={"s": compute(1)})
        workflow = define_workflow(
            name="parent", start_at="c", nodes={"after": compute(2)},
            includes={"c": include(child)}, edges=[edge("c", "after")],
        )
        child.includes["back"] = include(workflow)  # the only way to close a loop of definitions
        """,
        ["include cycle", "parent → child → parent"],
    ),
    "import-error": (
        """
        import piw_no_such_module
        """,
        ["ModuleNotFoundError", "piw_no_such_module", ":1:"],
    ),
}


def assert_one_error_line(done, *needles: str) -> str:
    """Exactly one ``Error: …`` line on stderr, exit code 2, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: "), lines[0]
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_no_bundle(home: Path) -> None:
    runs = home / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir()], list(runs.iterdir())


@pytest.mark.parametrize("case", sorted(BAD_DEFINITIONS))
def test_bad_definition_is_one_error_line_and_leaves_nothing(
    case: str, cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    source, needles = BAD_DEFINITIONS[case]
    path = make_workflow(case, source)
    for command in ("run", "validate"):
        line = assert_one_error_line(cli(command, str(path)), *needles)
        assert str(path) in line  # names the file to fix
    assert_no_bundle(piw_home)


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ("{bad", ["--input is not valid JSON", "line 1 column 2"]),
        ('{"x": NaN}', ["--input is not valid JSON", "NaN"]),
        ("[1, Infinity]", ["not valid JSON", "Infinity"]),
        ("@does-not-exist.json", ["--input file does-not-exist.json: cannot read it"]),
    ],
)
def test_invalid_input_json(value: str, needles: list[str], cli: Cli, piw_home: Path) -> None:
    assert_one_error_line(cli("run", "hello", "--input", value), *needles)
    assert_no_bundle(piw_home)


def test_input_file_and_model_errors_name_the_field(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    path = make_workflow(
        "typed",
        """
        from pydantic import BaseModel
        from piw import compute, define_workflow

        class In(BaseModel):
            count: int

        workflow = define_workflow(name="typed", start_at="a", input=In,
                                   nodes={"a": compute(lambda c: c.input)})
        """,
    )
    assert_one_error_line(
        cli("run", str(path), "--input", '{"count": "many"}'), "Invalid input for typed", "count"
    )
    assert_one_error_line(cli("run", str(path)), "count")  # --input omitted means {}
    assert_no_bundle(piw_home)
    (cli.cwd / "in.json").write_text('{"count": 3}', encoding="utf-8")
    done = cli("run", str(path), "--input", "@in.json", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"count": 3}


def test_normaliser_returning_non_json_is_rejected_before_any_bundle(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    path = make_workflow(
        "norm",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="norm", start_at="a", input=lambda raw: {"s": {1, 2}},
                                   nodes={"a": compute(1)})
        """,
    )
    assert_one_error_line(cli("run", str(path)), "Invalid input for norm", "not JSON")
    assert_no_bundle(piw_home)


def test_unknown_run_ids_and_workflows(cli: Cli, piw_home: Path) -> None:
    assert_one_error_line(cli("resume", "20260101T000000000Z-nope-00000000"), "No run", "piw runs")
    assert_one_error_line(cli("resume", "../../etc"), "is not a run id")
    assert_one_error_line(cli("run", "no-such-workflow"), "No workflow named 'no-such-workflow'", "piw list")
    assert_one_error_line(cli("run", "./missing.workflow.py"), "does not exist")
    assert_one_error_line(cli("runs", "--status", "sleeping"), "Unknown status")
    assert_one_error_line(cli("run"), "Missing argument")
    assert_one_error_line(cli("run", "hello", "--bogus"), "No such option")
    assert_no_bundle(piw_home)


def test_a_bare_name_never_imports_a_stray_file_in_the_cwd(cli: Cli) -> None:
    (cli.cwd / "hello").write_text("raise SystemExit('imported the wrong file')\n", encoding="utf-8")
    done = cli("run", "hello", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"


def test_multi_line_user_errors_are_folded_into_one_line(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow("multi", 'raise ValueError("first line\\nsecond line")\n')
    assert_one_error_line(cli("validate", str(path)), "first line second line")


# ---- piw run --json and exit codes ---------------------------------------------------------------------


RUN_KEYS = {"runId", "status", "finalOutput", "error"}


def test_run_json_completed_is_the_only_stdout(cli: Cli, piw_home: Path) -> None:
    done = cli("run", "hello", "--input", '{"name": "Ada"}', "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert set(payload) == RUN_KEYS
    assert payload["status"] == "completed" and payload["error"] is None
    assert set(payload["finalOutput"]) == {"notificationId", "runId", "targetSessionId"}
    assert "tell" in done.stderr  # the step log went to stderr
    assert (piw_home / "runs" / payload["runId"] / "trace.ndjson").is_file()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ('"a": compute(lambda c: 1 / 0)', "failed", 1),
        ('"a": action(lambda c: c.sleep(5), timeout_s=0.2)', "timed_out", 1),
        ('"a": checkpoint(lambda c: {"question": "ok?"})', "waiting", 0),
        ('"a": compute(lambda c: {"fine": True})', "completed", 0),
    ],
)
def test_run_exit_code_reflects_status(
    body: str, status: str, code: int, cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "status",
        f"""
        from piw import action, checkpoint, compute, define_workflow
        workflow = define_workflow(name="status", start_at="a", nodes={{{body}}})
        """,
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == code, done.stderr
    payload = json.loads(done.stdout)
    assert set(payload) == RUN_KEYS and payload["status"] == status
    if status in ("failed", "timed_out"):
        assert payload["finalOutput"] is None and payload["error"]
    else:
        assert payload["error"] is None and payload["finalOutput"] is not None


def test_run_without_json_prints_the_step_log(cli: Cli) -> None:
    done = cli("run", "hello")
    assert done.returncode == 0, done.stderr
    assert "greet" in done.stdout and "completed" in done.stdout
    assert "\x1b" not in done.stdout  # not a terminal: plain text


# ---- piw runs ------------------------------------------------------------------------------------------

SUMMARY_KEYS = {
    "runId",
    "workflowName",
    "runTitle",
    "status",
    "startedAt",
    "finishedAt",
    "currentNode",
    "currentPhase",
    "damage",
    "usage",
    "wait",
    "parentRunId",
    "schedule",
    "sizeBytes",
}


def test_runs_json_shape_order_filters(cli: Cli, make_workflow: WorkflowMaker) -> None:
    assert cli.json("runs") == []
    failing = make_workflow(
        "failing",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="failing", start_at="a", nodes={"a": compute(lambda c: 1 / 0)})
        """,
    )
    first = json.loads(cli("run", "hello", "--json", "--title", "first one").stdout)["runId"]
    second = json.loads(cli("run", str(failing), "--json").stdout)["runId"]
    rows = cli.json("runs")
    assert [row["runId"] for row in rows] == [second, first]  # newest first
    for row in rows:
        assert set(row) == SUMMARY_KEYS
    assert rows[0]["status"] == "failed" and rows[0]["runTitle"] is None and rows[0]["currentNode"] is None
    assert rows[1]["runTitle"] == "first one" and rows[1]["workflowName"] == "hello"
    assert rows[1]["finishedAt"] >= rows[1]["startedAt"]
    assert [r["runId"] for r in cli.json("runs", "--status", "completed")] == [first]
    assert [r["runId"] for r in cli.json("runs", "--limit", "1")] == [second]
    text = cli("runs")
    assert text.returncode == 0 and first in text.stdout and second in text.stdout


def test_runs_shows_an_interrupted_run_as_running_with_its_node(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    path = make_workflow(
        "stuck",
        """
        from piw import compute, define_workflow, edge
        workflow = define_workflow(name="stuck", start_at="a", nodes={"a": compute(1), "b": compute(2)},
                                   edges=[edge("a", "b")])
        """,
    )
    done = cli.process("run", str(path), env={"PIW_TEST_KILL_AFTER_APPEND": "4"})  # after node_started(b)
    assert done.returncode == -9
    (row,) = cli.json("runs")
    assert row["status"] == "running" and row["currentNode"] == "b" and row["finishedAt"] is None


# ---- piw list and validate -----------------------------------------------------------------------------

LIST_KEYS = {"id", "revision", "contractId", "description", "source"}


def test_list_json_covers_project_user_and_shipped_workflows(cli: Cli, piw_home: Path) -> None:
    project = cli.cwd / ".piw" / "workflows"
    project.mkdir(parents=True)
    source = textwrap.dedent(
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="proj", start_at="a", nodes={"a": compute(1)}, contract_id="c.v1",
                                   revision=3, description="A project workflow.")
        """
    )
    (project / "proj.workflow.py").write_text(source, encoding="utf-8")
    (piw_home / "workflows").mkdir()
    (piw_home / "workflows" / "broken.workflow.py").write_text("workflow = (\n", encoding="utf-8")
    rows = {row["id"]: row for row in cli.json("list")}
    for row in rows.values():
        assert set(row) == LIST_KEYS
    proj = rows["proj"]
    assert (proj["revision"], proj["contractId"], proj["description"]) == (3, "c.v1", "A project workflow.")
    assert proj["source"]["kind"] == "file" and proj["source"]["path"].endswith("proj.workflow.py")
    assert len(proj["source"]["hash"]) == 64
    assert rows["hello"]["revision"] is None and rows["hello"]["contractId"] is None
    broken = rows["broken"]
    assert broken["description"].startswith("(cannot load:") and len(broken["source"]["hash"]) == 64
    assert cli("list").returncode == 0


def test_project_workflow_shadows_a_shipped_one_by_name(cli: Cli) -> None:
    project = cli.cwd / ".piw" / "workflows"
    project.mkdir(parents=True)
    (project / "hello.workflow.py").write_text(
        "from piw import compute, define_workflow\n"
        'workflow = define_workflow(name="mine", start_at="a", nodes={"a": compute({"mine": True})})\n',
        encoding="utf-8",
    )
    payload = json.loads(cli("run", "hello", "--json").stdout)
    assert payload["finalOutput"] == {"mine": True}


def test_validate_ok(cli: Cli, make_workflow: WorkflowMaker, piw_home: Path) -> None:
    done = cli("validate", "hello")
    assert done.returncode == 0 and done.stdout.startswith("OK hello: 3 nodes, start greet")
    path = make_workflow(
        "tools",
        """
        from piw import agent, define_workflow
        workflow = define_workflow(name="tools", start_at="a",
                                   nodes={"a": agent(prompt="x", tools=["no_such_tool"])})
        """,
    )
    assert_one_error_line(cli("validate", str(path)), "unknown tool 'no_such_tool'")
    assert_no_bundle(piw_home)


@pytest.mark.parametrize("command", ["run", "resume", "runs", "list", "validate"])
def test_every_command_has_help(command: str, cli: Cli) -> None:
    done = cli(command, "--help")
    assert done.returncode == 0 and "Usage" in done.stdout


def test_resume_of_a_finished_run_is_refused(cli: Cli) -> None:
    run_id = json.loads(cli("run", "hello", "--json").stdout)["runId"]
    assert_one_error_line(cli("resume", run_id), f"Run {run_id} already ended (completed)")


def test_run_json_final_output_is_resolved(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "big",
        """
        from piw import compute, define_workflow
        workflow = define_workflow(name="big", start_at="a", nodes={"a": compute(
            lambda c: {"text": "é" * 5000, "user": {"$artifact": "mine"}})})
        """,
    )
    done = cli("run", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finalOutput"] == {"text": "é" * 5000, "user": {"$artifact": "mine"}}


def test_runs_tells_a_crashed_run_from_a_live_one(cli: Cli, make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "slow",
        """
        import time
        from piw import action, define_workflow
        workflow = define_workflow(name="slow", start_at="a", nodes={"a": action(lambda ctx: time.sleep(30))})
        """,
    )
    process = cli.popen("run", str(path))
    try:
        # The writer refreshes the index row within about a second even while the step runs and nothing is
        # appended (persistence.md §3): the listing shows the step, not the moment before it.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and [row["currentNode"] for row in cli.json("runs")] != ["a"]:
            time.sleep(0.05)
        assert [row["currentNode"] for row in cli.json("runs")] == ["a"]
        state = json.loads((cli.home / "runs" / cli.json("runs")[0]["runId"] / "state.json").read_text())
        assert state["currentNode"] == "a"  # state.json too
        live = cli("runs").stdout
        assert "running" in live and "interrupted" not in live
    finally:
        process.kill()
        process.wait()
    table = cli("runs").stdout
    assert "running (interrupted)" in table
    assert "continue one with 'piw resume RUN_ID'" in table
    assert cli.json("runs")[0]["status"] == "running"  # the JSON status stays the RunState status
