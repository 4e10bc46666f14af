"""Lifecycle commands safe from any terminal: ``pause``, ``cancel``, and ``host`` (executes detached runs)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home, where_runs_live
from piw.errors import UsageError
from piw.store.runref import resolve_run_id
from piw.terminal import json_text, safe_text

RunRef = Annotated[str, typer.Argument(help="The run: an id, a unique prefix, 'latest' or -1, -2, ….")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print {runId,status,queueStatus,done,message}.")]


def _report(result: object, as_json: bool) -> int:
    from piw.run.lifecycle import LifecycleResult

    assert isinstance(result, LifecycleResult)
    if as_json:
        sys.stdout.write(json_text(result.to_json()) + "\n")
    else:
        make_console().print(safe_text(result.message), soft_wrap=True)
    return 0


@app.command(context_settings={"ignore_unknown_options": True})
def pause(run: RunRef, as_json: JsonOption = False, database: DatabaseOption = None) -> int:
    """Pause a run at its next step boundary (the current step is never interrupted); 'piw resume' continues."""
    from piw.run.lifecycle import pause_run

    home = command_home(database)
    return _report(pause_run(home, resolve_run_id(home, run)), as_json)


@app.command(context_settings={"ignore_unknown_options": True})
def cancel(run: RunRef, as_json: JsonOption = False, database: DatabaseOption = None) -> int:
    """Cancel a run: a live one aborts its current step and ends cancelled; a parked or waiting one too."""
    from piw.run.lifecycle import cancel_run

    home = command_home(database)
    return _report(cancel_run(home, resolve_run_id(home, run)), as_json)


@app.command()
def host(
    once: Annotated[
        bool, typer.Option("--once", help="Exit once no queued run is left (instead of waiting for more).")
    ] = False,
    max_runs: Annotated[int | None, typer.Option("--max-runs", help="Exit after claiming N runs.")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Runs executed at the same time.")] = 1,
    workflows: Annotated[
        list[Path] | None,
        typer.Option(
            "--workflows",
            metavar="DIR",
            help="With --database: also serve the workflows in DIR (a host claims only runs of workflow versions "
            "it can load).",
        ),
    ] = None,
    database: DatabaseOption = None,
) -> int:
    """Claim runs queued with 'piw run --detach' and execute them until stopped (Ctrl-C parks what runs)."""
    from piw.agent_steps.factory import agent_executor_factory
    from piw.channels.duty import ChannelDuty
    from piw.run.continuation import continuation_executors, spec_of
    from piw.run.host import HostOptions, serve
    from piw.run.launch import LaunchOptions
    from piw.store.db.rows import QueueRow

    if max_runs is not None and max_runs < 1:
        raise UsageError("--max-runs must be at least 1.")
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1.")
    home = command_home(database)
    console = make_console()
    # A detached run's agent output is visible nowhere (docs/design/agent-steps.md §7).
    quiet = make_console(io.StringIO())

    def executor_for(row: QueueRow):  # type: ignore[no-untyped-def]
        factory = agent_executor_factory(home, quiet, LaunchOptions.from_json(row.options))
        spec = spec_of(row)  # a continuation builds its provider only for an agent step ahead
        return factory if spec is None else continuation_executors(factory, home, spec)

    def report(line: str) -> None:
        console.print(safe_text(line), soft_wrap=True)

    console.print(
        f"piw host: claiming queued runs in {where_runs_live(home)} (Ctrl-C stops and parks what runs)."
    )
    result = serve(
        home,
        HostOptions(
            once=once,
            max_runs=max_runs,
            concurrency=concurrency,
            workflows=list(workflows or []),
            executor_factory=executor_for,
            report=report,
            duties=[ChannelDuty],  # gates announced on their channels, answers read back (docs/channels.md)
        ),
    )
    console.print(f"piw host: {result.claimed} run{'s' if result.claimed != 1 else ''} claimed; stopped.")
    return 0
