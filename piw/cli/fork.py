"""``piw fork``: start a new run from a step of an earlier one, adopting everything that finished before it."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.follow_flags import FollowFlags, follow_flags
from piw.cli.foreground import (
    BudgetOption,
    Following,
)
from piw.store.runref import resolve_run_id

# The engine loads inside the command, so `piw --help` does not load it.


@app.command()
@follow_flags
def fork(
    run_id: Annotated[str, typer.Argument(help="The run to fork (an id, a unique prefix, latest or -N).")],
    from_node: Annotated[
        str | None, typer.Option("--from", help="Fork before the first attempt of this node.")
    ] = None,
    at: Annotated[int | None, typer.Option("--at", help="Fork after this trace sequence number.")] = None,
    workflow: Annotated[
        str | None, typer.Option("--workflow", help="A changed definition to continue with (a path or name).")
    ] = None,
    input: Annotated[
        str | None,
        typer.Option("--input", help="New run input: JSON, @FILE or - for stdin (default: the parent's)."),
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="A title for the fork.")] = None,
    budget: BudgetOption = None,
    *,
    flags: FollowFlags,
) -> int:
    """Start a new run that adopts the steps a run finished before a fork point, then continues live.

    Adopted steps are copied from the parent's trace with their outputs, updates and conversation; none runs
    again and none makes a model request. With --provider replay, later agent steps are answered from the
    parent's recorded replies while their prompts match.
    """
    from piw.run.fork import ForkPoint
    from piw.run.runner import fork_run
    from piw.workflow.budget import parse_budget
    from piw.workflow.loader import parse_input_option

    point = ForkPoint(node=from_node, seq=at)
    home = flags.home()
    parent = resolve_run_id(home, run_id)
    raw_input = parse_input_option(input) if input is not None else None
    limits = parse_budget(budget) if budget is not None else None
    replay_from = parent if flags.provider == "replay" else None
    # the parent's provider, model and script unless given (as piw resume and piw answer do)
    launch = flags.launch_of(home, parent)
    following = Following(flags.as_json, launch, flags.verbose, replay_from)
    return following.follow(
        lambda options: fork_run(
            parent,
            home,
            point,
            replace(options, budget=limits),
            workflow=workflow,
            raw_input=raw_input,
            title=title,
        )
    )
