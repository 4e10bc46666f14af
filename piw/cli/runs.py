"""Commands that start, resume, list and check workflows and runs."""

from __future__ import annotations

import io
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.confirm import confirmation_needed
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.cli.foreground import (
    BudgetOption,
    Following,
    ModelOption,
    PlanOption,
    ProviderOption,
    RunJsonOption,
    ScriptOption,
    VerboseOption,
    report_adopted,
)
from piw.cli.plan import print_plan, projection_of
from piw.errors import PiwError, UsageError
from piw.run.launch import LaunchOptions
from piw.store.home import piw_home
from piw.store.runref import resolve_run_id
from piw.terminal import json_text, safe_text, single_line

if TYPE_CHECKING:
    from pathlib import Path

    from piw.workflow.budget import Budget
    from piw.workflow.import_deadline import DeadlineSetting

# Heavy modules are imported inside the commands that use them, so `piw --help` does not load them.


@app.command()
def run(
    workflow: Annotated[str, typer.Argument(help="A workflow file path, or a name to discover.")],
    input: Annotated[
        str | None,
        typer.Option(
            "--input", help="Run input: a JSON object, @FILE holding one, or - to read it from stdin."
        ),
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="A title for this run.")] = None,
    provider: ProviderOption = None,
    model: ModelOption = None,
    script: ScriptOption = None,
    verbose: VerboseOption = False,
    budget: BudgetOption = None,
    as_json: RunJsonOption = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Queue the run for 'piw host' instead of running it here.")
    ] = False,
    no_origin: Annotated[
        bool,
        typer.Option("--no-origin", help="With --detach: record no origin session for assistant replies."),
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key",
            help="Start at most one run for this key: repeating the same command reports that run; "
            "a different request under the key is refused.",
        ),
    ] = None,
    database: DatabaseOption = None,
    plan: PlanOption = False,
    confirm_above: Annotated[
        str | None,
        typer.Option(
            "--confirm-above",
            help="Ask before the first model request when the projected cost is over COST (USD); "
            "overrides [budget] confirm_above.",
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Answer yes to --confirm-above in advance (no prompt).")
    ] = False,
) -> int:
    """Start a run and follow it until it ends, waits, or is interrupted. With --detach, queue it for a host."""
    from piw.run.runner import start_run
    from piw.workflow.budget import parse_budget
    from piw.workflow.loader import parse_input_option

    raw_input = parse_input_option(input)
    if plan:
        return print_plan(projection_of(workflow, piw_home(), raw_input, provider, model, script), as_json)
    limits = parse_budget(budget) if budget is not None else None
    key = _checked_key(idempotency_key)
    home = command_home(database)
    if no_origin and not detach:
        raise UsageError("--no-origin only applies to --detach runs.")
    launch = LaunchOptions.given(provider, model, script)
    confirmation = confirmation_needed(
        workflow, home, raw_input, launch, confirm_above, yes=yes, detach=detach
    )  # asks, refuses, or gives the budget stop a detached run waits on before its first step
    if detach:
        return _detach(workflow, raw_input, title, launch, no_origin, as_json, key, limits, confirmation)
    return Following(as_json, launch, verbose).follow(
        lambda options: start_run(
            workflow, home, raw_input, title, replace(options, budget=limits, idempotency_key=key)
        )
    )


def _checked_key(key: str | None) -> str | None:
    """An idempotency key is 1–200 printable characters (it is stored and shown back)."""
    if key is None:
        return None
    if not key or len(key) > 200 or not key.isprintable():
        raise UsageError("--idempotency-key must be 1 to 200 printable characters.")
    return key


def _detach(
    workflow: str,
    raw_input: Any,
    title: str | None,
    launch: LaunchOptions,
    no_origin: bool,
    as_json: bool,
    idempotency_key: str | None = None,
    budget: Budget | None = None,
    confirmation: dict[str, Any] | None = None,
) -> int:
    """``piw run --detach``: validate everything, write ``run_started``, queue the run, exit 0 (over
    ``--confirm-above``: the run waits on its budget instead, with the projection)."""
    from piw.agent_steps.factory import agent_executor_factory
    from piw.run.runner import ForegroundOptions, new_origin_session, queue_run
    from piw.store.db.idempotency import Adopted

    home = piw_home()
    from_terminal = sys.stdin.isatty() or sys.stdout.isatty()
    # The provider the host will use must exist and be requestable now, not fail later in the host.
    factory = agent_executor_factory(home, make_console(io.StringIO()), launch)
    options = ForegroundOptions(
        launch=launch.recorded(),
        origin_session=new_origin_session() if from_terminal and not no_origin else None,
        idempotency_key=idempotency_key,
        budget=budget,
        confirmation=confirmation,
    )
    state = queue_run(workflow, home, raw_input, title, options, check=factory)
    if isinstance(state, Adopted):
        return report_adopted(state, as_json)
    if as_json:
        final = state.final_output if state.status == "waiting" else None
        payload = {"runId": state.run_id, "status": state.status, "finalOutput": final, "error": None}
        sys.stdout.write(json_text(payload) + "\n")
    elif state.status == "waiting":
        from piw.views.budget import budget_stop_lines

        console = make_console()
        for line in budget_stop_lines(state.run_id, state.final_output):
            console.print(line, soft_wrap=True)
    else:
        make_console().print(
            f"Queued run {state.run_id}; 'piw host' executes it. Follow it with 'piw watch {state.run_id}'.",
            soft_wrap=True,
        )
    return 0


@app.command(context_settings={"ignore_unknown_options": True})
def resume(
    run_id: Annotated[
        str, typer.Argument(help="The run to continue (an id, a unique prefix, latest or -N).")
    ],
    provider: ProviderOption = None,
    model: ModelOption = None,
    script: ScriptOption = None,
    verbose: VerboseOption = False,
    as_json: RunJsonOption = False,
    database: DatabaseOption = None,
) -> int:
    """Continue an interrupted, parked or paused run from its trace; completed steps are not run again.

    The provider, model and script default to the ones the run was started with.
    """
    from piw.run.runner import recorded_launch, resume_run

    home = command_home(database)
    run_id = resolve_run_id(home, run_id)
    launch = LaunchOptions.given(provider, model, script).or_else(recorded_launch(home, run_id))
    return Following(as_json, launch, verbose).follow(lambda options: resume_run(run_id, home, options))


@app.command()
def runs(
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="Only runs with this status (waiting: still needs an answer; answered: a gate that was answered).",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    database: DatabaseOption = None,
) -> int:
    """List runs, newest first."""
    from piw.cli.runs_table import print_runs
    from piw.store.history import RUN_FILTERS, run_summaries

    if status is not None and status not in RUN_FILTERS:
        raise UsageError(f"Unknown status {status!r}; use one of: {', '.join(RUN_FILTERS)}.")
    if limit is not None and limit < 1:
        raise UsageError("--limit must be at least 1.")
    rows = list(run_summaries(command_home(database), status, limit))
    if as_json:
        sys.stdout.write(json_text([row.to_json() for row in rows]) + "\n")
        return 0
    console = make_console()
    if not rows:
        console.print("No runs yet. Start one with 'piw run WORKFLOW'.")
        return 0
    print_runs(console, rows)
    if any(row.interrupted for row in rows):
        console.print(
            "Interrupted runs have no process writing them; continue one with 'piw resume RUN_ID' "
            "or end it with 'piw cancel RUN_ID'."
        )
    if any(row.detail == "queued" for row in rows):
        console.print("Queued runs wait for 'piw host' to execute them.")
    for row in rows:
        if row.damage is not None:  # in full: the table clips its notice column
            console.print(f"⚠ {row.run_id} is damaged: {row.damage.notice} See 'piw inspect {row.run_id}'.")
    return 0


@app.command("list")
def list_workflows(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> int:
    """List built-in workflows and discovered workflow files."""
    from piw.workflow.import_deadline import import_setting
    from piw.workflow.loader import discover

    home = piw_home()
    setting = import_setting(home)
    rows = [_workflow_row(label, path, setting) for label, path in discover(home)]
    if as_json:
        public = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
        sys.stdout.write(json_text(public) + "\n")
        return 0
    from rich.table import Table

    console = make_console()
    table = Table(box=None, pad_edge=False)
    for column in ("id", "kind", "revision", "contract", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        revision = "" if row["revision"] is None else str(row["revision"])
        table.add_row(
            row["id"],
            row["_origin"],
            revision,
            safe_text(single_line(row["contractId"] or "")),
            safe_text(single_line(row["description"] or "")),
        )
    console.print(table)
    for row in rows:
        if row["_timeout"] is not None:  # in full, with the path: the table folds its description column
            console.print(f"⚠ {safe_text(row['_timeout'])}", soft_wrap=True)
    console.print("See what a workflow takes and does, with a run command that works: piw show WORKFLOW")
    return 0


def _workflow_row(label: str, path: Path, setting: DeadlineSetting) -> dict[str, Any]:
    """One ``piw list`` row; a file that cannot be imported (or whose import ran past its deadline) says why."""
    from piw.errors import ImportTimeout
    from piw.wire import sha256_hex
    from piw.workflow.loader import import_definition, shown_path, source_identity

    row: dict[str, Any] = {
        "id": shown_path(path.name).removesuffix(".workflow.py"),
        "_origin": label,
        "_timeout": None,
    }
    try:
        definition = import_definition(path, setting)
        source = source_identity(definition, path)
    except PiwError as exc:
        source = {"kind": "file", "path": shown_path(path.resolve()), "hash": sha256_hex(path.read_bytes())}
        row.update(revision=None, contractId=None, description=f"(cannot load: {exc})", source=source)
        if isinstance(exc, ImportTimeout):
            row["_timeout"] = str(exc)
        return row
    row.update(
        revision=definition.revision,
        contractId=definition.contract_id,
        description=definition.description,
        source=source,
    )
    return row


@app.command()
def validate(file: Annotated[str, typer.Argument(help="The workflow file to check.")]) -> int:
    """Check a workflow definition with both validation passes, without starting a run."""
    from piw.run.runner import tools_known
    from piw.workflow.loader import load_workflow

    home = piw_home()
    loaded = load_workflow(file, home, tools_known())
    make_console().print(
        f"OK {loaded.definition.name}: {len(loaded.graph.nodes)} nodes, start {loaded.graph.start_at}, "
        f"digest {loaded.digest[:19]}…"
    )
    return 0
