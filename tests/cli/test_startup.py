"""Start-up: a command line imports and builds only its own command, ``--help`` builds none.

The figures live in the bench (``bench/targets.py --only startup``); these tests pin what keeps them small, and
that what a user reads does not depend on it: the help text, the command table, and the conversion of option
values.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import typer

from piw.cli.app import app
from piw.cli.commands import COMMAND_MODULES, command_group, command_name, register_all
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker


def test_the_command_table_names_every_registered_command_and_its_module() -> None:
    register_all()
    registered = {command_name(info): info.callback.__module__ for info in app.registered_commands}
    assert registered == COMMAND_MODULES


def test_the_help_read_from_docstrings_is_the_help_of_the_built_commands() -> None:
    """``piw --help`` lists the commands without building them; the text is what the full group prints."""
    register_all()
    in_table_order = copy.copy(app)  # a test may have imported the modules in another order than piw does
    in_table_order.registered_commands = sorted(
        app.registered_commands, key=lambda info: list(COMMAND_MODULES).index(command_name(info))
    )
    full = typer.main.get_command(in_table_order)
    lazy = command_group(["--help"])
    assert not lazy.commands
    for width in (60, 80, 120):
        expected = full.get_help(
            full.make_context("piw", [], resilient_parsing=True, max_content_width=width)
        )
        shown = lazy.get_help(lazy.make_context("piw", [], resilient_parsing=True, max_content_width=width))
        assert shown == expected
    assert "inspect" in expected and "providers" in expected


def test_a_command_line_builds_only_its_command() -> None:
    group = command_group(["inspect", "some-run", "--view", "steps"])
    assert list(group.commands) == ["inspect"]
    unknown = command_group(["inpsect"])  # click's "Did you mean" needs every name
    assert set(unknown.commands) == set(COMMAND_MODULES)


IMPORTED = (
    "import sys, contextlib, io\n"
    "from piw.cli.main import main\n"
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
    "    main(sys.argv[1:])\n"
    "import json; print(json.dumps(sorted(sys.modules)))\n"
)


def _modules_after(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORTED, *args], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_help_imports_neither_rich_pydantic_click_nor_the_trace_codec() -> None:
    modules = _modules_after("--help")
    for heavy in ("rich", "pydantic", "click", "msgspec", "piw.store.bundle", "piw.store.fold"):
        assert heavy not in modules, heavy
    assert "piw.cli.views" in modules  # every command module is read for the command list


def test_inspect_imports_only_its_own_command_module(cli: Cli) -> None:
    modules = _modules_after("inspect", "no-such-run")
    assert "piw.cli.views" in modules
    assert not {"piw.cli.runs", "piw.cli.answers", "piw.cli.lifecycle", "piw.cli.viewer"} & modules
    assert "pydantic" not in modules  # typer's own conversion would import it


def test_option_values_are_converted_and_refused_as_before(cli: Cli) -> None:
    refused = cli("host", "--max-runs", "abc")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "Error: Invalid value for '--max-runs': Input should be a valid integer, unable to parse string as an integer"
    )
    assert cli("inspect", "x", "--at", "0").stderr.startswith("Error: --at takes a trace sequence number")
    assert cli("inspect", "x", "--at", " +1_0 ").stderr.startswith("Error: No run 'x'")


COMPUTE_ONLY = """
from piw import compute, define_workflow, edge

workflow = define_workflow(
    name="small",
    start_at="a",
    nodes={"a": compute(lambda ctx: {"n": 1}), "b": compute(lambda ctx: {"n": ctx.outputs["a"]["n"] + 1})},
    edges=[edge("a", "b")],
)
"""


def test_a_run_without_agent_or_action_steps_does_not_import_the_agent_stack(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    """The providers, the agent loop and its display are imported only for a workflow that may ask a model; the
    tool registry, the shell executor and a human decision's request models only for a workflow that uses them."""
    path = make_workflow("small", COMPUTE_ONLY)
    modules = _modules_after("run", str(path))
    assert (
        not {
            "piw.agent_steps.setup",
            "piw.agent_steps.executor",
            "piw.agent_steps.loop",
            "piw.agent_steps.display",
        }
        & modules
    )
    assert not {name for name in modules if name.startswith(("piw.providers", "piw.tools"))}
    lazy = {
        "piw.run.executors.shell",
        "piw.updates.shell_lines",
        "piw.workflow.decision_request",
        "piw.run.answers",
    }
    assert not lazy & modules
    assert {"piw.agent_steps.factory", "piw.run.decision_book"} <= modules
    (bundle,) = (cli.home / "runs").iterdir()  # and the run itself happened, to the end
    assert json.loads((bundle / "state.json").read_text())["outputs"] == {"a": {"n": 1}, "b": {"n": 2}}


def test_inspect_json_imports_neither_rich_nor_pydantic(cli: Cli, make_workflow: WorkflowMaker) -> None:
    """``inspect --json`` writes the replayed state with msgspec: the views' renderer and pydantic are not needed."""
    run_id = json.loads(cli("run", str(make_workflow("small", COMPUTE_ONLY)), "--json").stdout)["runId"]
    modules = _modules_after("inspect", run_id, "--json")
    assert "msgspec" in modules and "piw.store.foldcache" in modules  # the run was read
    assert not {"rich", "pydantic", "piw.views.base"} & modules


def test_runs_from_a_current_index_imports_no_fold(cli: Cli, make_workflow: WorkflowMaker) -> None:
    """``piw runs`` lists from the ``runs`` index: the trace codec and the fold are imported only to refold a row
    whose trace changed, or a bundle the index does not know (tests/store/db/test_index.py)."""
    run_id = json.loads(cli("run", str(make_workflow("small", COMPUTE_ONLY)), "--json").stdout)["runId"]
    assert [row["runId"] for row in json.loads(cli("runs", "--json").stdout)] == [run_id]
    modules = _modules_after("runs")
    assert "piw.store.db.index" in modules  # it listed
    assert not {"msgspec", "piw.store.fold", "piw.store.bundle", "piw.store.foldcache"} & modules


def test_runs_of_finished_runs_does_not_open_the_queue_and_decision_stores(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    """A listing opens the queue and decision records only for a waiting or running row it shows."""
    run_id = json.loads(cli("run", str(make_workflow("small", COMPUTE_ONLY)), "--json").stdout)["runId"]
    assert [row["runId"] for row in json.loads(cli("runs", "--json", "--status", "completed").stdout)] == [
        run_id
    ]
    modules = _modules_after("runs", "--json", "--status", "completed")
    assert "piw.store.db.index" in modules  # it listed
    assert not {"piw.store.db.run_database", "piw.store.db.decisions", "piw.store.db.outbox"} & modules
