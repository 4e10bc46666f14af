"""Commands that start, resume, list and check workflows and runs."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.confirm import confirmation_needed
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.cli.follow_flags import FollowFlags, follow_flags
from piw.cli.foreground import (
    BudgetOption,
    Following,
    PlanOption,
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

    from piw.store.history import RunSummary
    from piw.store.run_query import RunQuery
    from piw.workflow.budget import Budget
    from piw.workflow.import_deadline import DeadlineSetting

# Heavy modules are imported inside the commands that use them, so `piw --help` does not load them.


@app.command()
@follow_flags
def run(
    workflow: Annotated[str, typer.Argument(help="A workflow file path, or a name to discover.")],
    input: Annotated[
        str | None,
        typer.Option(
            "--input", help="Run input: a JSON object, @FILE holding one, or - to read it from stdin."
        ),
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="A title for this run.")] = None,
    budget: BudgetOption = None,
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
    allow_duplicate: Annotated[
        bool,
        typer.Option(
            "--allow-duplicate",
            help="With --detach: start even while a run of this file with the same input is live.",
        ),
    ] = False,
    *,
    flags: FollowFlags,
) -> int:
    """Start a run and follow it until it ends, waits, or is interrupted. With --detach, queue it for a host."""
    from piw.run.runner import start_run
    from piw.workflow.budget import parse_budget
    from piw.workflow.loader import parse_input_option

    raw_input = parse_input_option(input)
    if plan:
        return print_plan(
            projection_of(workflow, piw_home(), raw_input, flags.provider, flags.model, flags.script),
            flags.as_json,
        )
    limits = parse_budget(budget) if budget is not None else None
    key = _checked_key(idempotency_key)
    home = flags.home()
    if no_origin and not detach:
        raise UsageError("--no-origin only applies to --detach runs.")
    if allow_duplicate and not detach:
        raise UsageError("--allow-duplicate only applies to --detach runs.")
    launch = flags.launch()
    confirmation = confirmation_needed(
        workflow, home, raw_input, launch, confirm_above, yes=yes, detach=detach
    )  # asks, refuses, or gives the budget stop a detached run waits on before its first step
    if detach:
        return _detach(
            workflow,
            raw_input,
            title,
            launch,
            no_origin,
            flags.as_json,
            key,
            limits,
            confirmation,
            allow_duplicate,
        )
    return Following(flags.as_json, launch, flags.verbose).follow(
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
    allow_duplicate: bool = False,
) -> int:
    """``piw run --detach``: validate everything, write ``run_started``, queue the run, exit 0 (over
    ``--confirm-above``: the run waits on its budget instead, with the projection). A live run of the same file
    and input is refused unless ``allow_duplicate`` (``piw.run.duplicates``)."""
    from piw.run.runner import new_origin_session
    from piw.service.starting import queue_detached
    from piw.store.db.idempotency import Adopted

    home = piw_home()
    from_terminal = sys.stdin.isatty() or sys.stdout.isatty()
    state = queue_detached(
        home,
        workflow,
        raw_input,
        title,
        launch,
        origin_session=new_origin_session() if from_terminal and not no_origin else None,
        idempotency_key=idempotency_key,
        budget=budget,
        confirmation=confirmation,
        allow_duplicate=allow_duplicate,
    )
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
@follow_flags
def resume(
    run_id: Annotated[
        str, typer.Argument(help="The run to continue (an id, a unique prefix, latest or -N).")
    ],
    *,
    flags: FollowFlags,
) -> int:
    """Continue an interrupted, parked or paused run from its trace; completed steps are not run again.

    The provider, model and script default to the ones the run was started with.
    """
    from piw.run.runner import resume_run

    home = flags.home()
    run_id = resolve_run_id(home, run_id)
    launch = flags.launch_of(home, run_id)
    return Following(flags.as_json, launch, flags.verbose).follow(
        lambda options: resume_run(run_id, home, options)
    )


@app.command()
def runs(
    status: Annotated[
        list[str] | None,
        typer.Option(
            "--status",
            help="Only runs with this status; repeat it or separate several with commas (waiting: still needs "
            "an answer; answered: a gate that was answered).",
        ),
    ] = None,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Only runs of this workflow.")] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only runs started since: a date (2026-12-01), an instant, or an age (2d, 3h)."
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until", help="Only runs started before: a date (that day included), an instant or an age."
        ),
    ] = None,
    search: Annotated[
        str | None, typer.Option("--search", help="Only runs whose title or input contains this text.")
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option("--parent", help="Only the continuations of this run (its checkpoint answers)."),
    ] = None,
    schedule: Annotated[
        str | None, typer.Option("--schedule", help="Only runs started by this schedule's fires.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many runs.")] = None,
    size: Annotated[bool, typer.Option("--size", help="Show each run's disk use, and the total.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    database: DatabaseOption = None,
) -> int:
    """List runs, newest first; the options narrow the list (docs/cli.md, "Finding runs")."""
    from piw.store.history import find_runs
    from piw.store.run_query import query_of

    home = command_home(database)
    query = query_of(home, status, workflow, since, until, search, parent, schedule, limit)
    if as_json:
        return _print_json(home, query, size)
    rows = find_runs(home, query)
    if size:
        rows = _with_sizes(home, rows)
    warnings = _schedule_warnings(home)
    from piw.cli.runs_table import print_runs  # (rich's console: not needed for --json)

    console = make_console()
    for line in warnings:  # before the table: a held backlog spends nothing until someone decides
        console.print(f"⚠ {safe_text(line)}", soft_wrap=True)
    if not rows:
        filtered = query != type(query)(limit=query.limit)
        console.print(
            "No runs match these filters." if filtered else "No runs yet. Start one with 'piw run WORKFLOW'."
        )
        return 0
    print_runs(console, rows)
    if size:
        from piw.store.disk_use import human_bytes

        total = sum(row.size_bytes or 0 for row in rows)
        console.print(f"{len(rows)} runs, {human_bytes(total)} on disk.")
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


def _print_json(home: Path, query: RunQuery, size: bool) -> int:
    """``piw runs --json``: the summaries' JSON; without ``--size``, that same text encoded from the index rows
    without a summary object per run (``piw.store.history.listing_json``). Warnings go to stderr."""
    from piw.store.history import find_runs, listing_json

    if size:
        text = json_text([row.to_json() for row in _with_sizes(home, find_runs(home, query))])
    else:
        from piw.terminal import safe_json_bytes

        text = safe_json_bytes(listing_json(home, query)).decode()
    warnings = _schedule_warnings(home)
    sys.stdout.write(text + "\n")
    for line in warnings:
        sys.stderr.write(f"Warning: {line}\n")
    return 0


def _with_sizes(home: Path, rows: list[RunSummary]) -> list[RunSummary]:
    from piw.store.disk_use import tree_bytes
    from piw.store.place import runs_home

    root = runs_home(home) / "runs"
    return [replace(row, size_bytes=tree_bytes(root / row.run_id)) for row in rows]


def _schedule_warnings(home: Path) -> list[str]:
    """Schedules holding a backlog of missed fires (nothing was spent on them): said before the runs."""
    from piw.schedule.warnings import backlog_warnings

    return backlog_warnings(home)


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
def validate(
    file: Annotated[str, typer.Argument(help="The workflow file to check.")],
    input: Annotated[
        str | None,
        typer.Option("--input", help="With a script node: the input its two dry runs get (JSON or @FILE)."),
    ] = None,
) -> int:
    """Check a workflow definition with both validation passes, without starting a run; a script node is also
    run twice without a model and its leaf keys compared (docs/dynamic-workflows.md)."""
    from piw.run.runner import tools_known
    from piw.workflow.loader import load_workflow, parse_input_option

    home = piw_home()
    loaded = load_workflow(file, home, tools_known())
    console = make_console()
    console.print(
        f"OK {loaded.definition.name}: {len(loaded.graph.nodes)} nodes, start {loaded.graph.start_at}, "
        f"digest {loaded.digest[:19]}…"
    )
    from piw.run.script_check import check_scripts, script_nodes

    if script_nodes(loaded):
        raw_input = parse_input_option(input)
        for report in check_scripts(loaded.path, {} if raw_input is None else raw_input):
            phases = ", ".join(f"{safe_text(name)} {count}" for name, count in report.phases.items())
            console.print(
                f"Script {report.node_id}: keys stable over two dry runs; leaves per phase: {phases or 'none'}",
                soft_wrap=True,
            )
    return 0
