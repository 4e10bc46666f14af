"""Commands that start, resume, list and check workflows and runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.errors import PiwError, UsageError
from piw.store.bundle import piw_home
from piw.terminal import json_text, safe_text, single_line
from piw.wire import sha256_hex

if TYPE_CHECKING:
    from piw.cli.live import LiveDisplay
    from piw.run.runner import ForegroundOptions
    from piw.store.replay import RunState

# The engine, the loader and the live display are imported inside the commands that use them, so that
# ``piw --help`` and the read-only commands start without loading them.

EXIT_BY_STATUS = {"completed": 0, "waiting": 0, "running": 0, "failed": 1, "timed_out": 1, "cancelled": 1}


def _finish(
    state: RunState, as_json: bool, extra: dict[str, Any] | None = None, verbose: bool = False
) -> int:
    from piw.cli.outcome import print_outcome
    from piw.run.runner import resolved_outcome

    if as_json:
        final_output, error = resolved_outcome(piw_home(), state)
        payload = {"runId": state.run_id, "status": state.status, "finalOutput": final_output, "error": error}
        sys.stdout.write(json_text({**payload, **(extra or {})}) + "\n")
    else:
        print_outcome(make_console(), piw_home(), state, verbose=verbose)
    return EXIT_BY_STATUS.get(state.status, 1)


def _foreground(
    as_json: bool,
    verbose: bool = False,
    provider: str | None = None,
    model: str | None = None,
    script: str | None = None,
    replay_from: str | None = None,
) -> tuple[ForegroundOptions, LiveDisplay]:
    """The live display and agent wiring of a foreground run (the live view goes to stderr with --json)."""
    from piw.agent.setup import agent_executor_factory
    from piw.cli.live import LiveDisplay
    from piw.run.runner import ForegroundOptions

    console = make_console(sys.stderr if as_json else sys.stdout)
    home = piw_home()
    display = LiveDisplay(console, home=home)
    sink = display if display.interactive else None
    options = ForegroundOptions(
        listeners=[display],
        agent_executor_factory=agent_executor_factory(
            home,
            console,
            verbose=verbose,
            provider=provider,
            model=model,
            script=script,
            sink=sink,
            replay_from=replay_from,
        ),
    )
    return options, display


ProviderOption = Annotated[str | None, typer.Option("--provider", help="Provider for agent steps.")]
ModelOption = Annotated[str | None, typer.Option("--model", help="Model (or provider/model).")]
ScriptOption = Annotated[str | None, typer.Option("--script", help="Replies file for the scripted provider.")]
VerboseOption = Annotated[
    bool, typer.Option("--verbose", help="Expand step cards; a failure shows its whole traceback.")
]
RunJsonOption = Annotated[
    bool, typer.Option("--json", help="Print {runId,status,finalOutput,error} at the end.")
]


def _follow(
    start: Callable[[ForegroundOptions], RunState],
    as_json: bool,
    flags: tuple[Any, ...],
    extra: dict[str, Any] | None = None,
    replay_from: str | None = None,
) -> int:
    """Run in the foreground with the live display, closing it before the final JSON is printed."""
    verbose, provider, model, script = flags
    options, display = _foreground(as_json, verbose, provider, model, script, replay_from=replay_from)
    try:
        state = start(options)
    finally:
        display.close()
    return _finish(state, as_json, extra, verbose=bool(flags[0]) if flags else False)


@app.command()
def run(
    workflow: Annotated[str, typer.Argument(help="A workflow file path, or a name to discover.")],
    input: Annotated[str | None, typer.Option("--input", help="Run input: JSON text, or @file.")] = None,
    title: Annotated[str | None, typer.Option("--title", help="A title for this run.")] = None,
    provider: ProviderOption = None,
    model: ModelOption = None,
    script: ScriptOption = None,
    verbose: VerboseOption = False,
    as_json: RunJsonOption = False,
) -> int:
    """Start a run and follow it until it ends, waits, or is interrupted."""
    from piw.run.runner import start_run
    from piw.workflow.loader import parse_input_option

    raw_input = parse_input_option(input)
    home = piw_home()
    return _follow(
        lambda options: start_run(workflow, home, raw_input, title, options),
        as_json,
        (verbose, provider, model, script),
    )


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue.")],
    provider: ProviderOption = None,
    model: ModelOption = None,
    script: ScriptOption = None,
    verbose: VerboseOption = False,
    as_json: RunJsonOption = False,
) -> int:
    """Continue an interrupted run from its trace; completed steps are not run again."""
    from piw.run.runner import resume_run

    home = piw_home()
    return _follow(
        lambda options: resume_run(run_id, home, options), as_json, (verbose, provider, model, script)
    )


@app.command()
def runs(
    status: Annotated[str | None, typer.Option("--status", help="Only runs with this status.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> int:
    """List runs, newest first."""
    from rich.table import Table

    from piw.store.history import run_summaries

    statuses = ("running", "waiting", "completed", "failed", "timed_out", "cancelled")
    if status is not None and status not in statuses:
        raise UsageError(f"Unknown status {status!r}; use one of: {', '.join(statuses)}.")
    if limit is not None and limit < 1:
        raise UsageError("--limit must be at least 1.")
    rows = list(run_summaries(piw_home(), status, limit))
    if as_json:
        sys.stdout.write(json_text([row.to_json() for row in rows]) + "\n")
        return 0
    console = make_console()
    if not rows:
        console.print("No runs yet. Start one with 'piw run WORKFLOW'.")
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("run id", "status", "title", "started", "current node"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row.run_id,
            "running (interrupted)" if row.interrupted else row.status,
            safe_text(
                single_line(row.run_title or row.workflow_name) + (f"  ⚠ {row.notice}" if row.notice else "")
            ),
            row.started_at or "",
            safe_text(row.current_node or ""),
        )
    console.print(table)
    if any(row.interrupted for row in rows):
        console.print("Interrupted runs have no process writing them; continue one with 'piw resume RUN_ID'.")
    return 0


@app.command("list")
def list_workflows(
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> int:
    """List built-in workflows and discovered workflow files."""
    from rich.table import Table

    from piw.workflow.loader import discover, import_definition, source_identity

    home = piw_home()
    rows: list[dict[str, Any]] = []
    for label, path in discover(home):
        try:
            definition = import_definition(path)
            source = source_identity(definition, path)
            rows.append({"id": path.name.removesuffix(".workflow.py"), "revision": definition.revision,
                         "contractId": definition.contract_id, "description": definition.description,
                         "source": source, "_origin": label})  # fmt: skip
        except PiwError as exc:
            source = {"kind": "file", "path": str(path.resolve()), "hash": sha256_hex(path.read_bytes())}
            rows.append({"id": path.name.removesuffix(".workflow.py"), "revision": None, "contractId": None,
                         "description": f"(cannot load: {exc})", "source": source,
                         "_origin": label})  # fmt: skip
    if as_json:
        public = [{k: v for k, v in row.items() if not k.startswith("_")} for row in rows]
        sys.stdout.write(json_text(public) + "\n")
        return 0
    console = make_console()
    table = Table(box=None, pad_edge=False)
    for column in ("id", "kind", "revision", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        revision = "" if row["revision"] is None else str(row["revision"])
        table.add_row(row["id"], row["_origin"], revision, safe_text(single_line(row["description"] or "")))
    console.print(table)
    console.print("See what a workflow takes and does, with a run command that works: piw show WORKFLOW")
    return 0


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
