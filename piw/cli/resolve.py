"""``piw resolve RUN done|retry|skip [--output JSON]``: a person's answer for an effect whose outcome is unknown.

An ``effect="once"`` action that piw was interrupted in parks its run with status ``unknown``; only this command
continues it, in the foreground like ``piw resume`` (``docs/effects.md``, ``docs/cli.md``). A run whose status is not
``unknown`` is refused before anything is claimed or written.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.follow_flags import FollowFlags, follow_flags
from piw.cli.foreground import Following
from piw.errors import UsageError
from piw.store.runref import resolve_run_id


@app.command()
@follow_flags
def resolve(
    run_id: Annotated[
        str, typer.Argument(help="The run whose effect outcome is unknown (an id, prefix, latest or -N).")
    ],
    answer: Annotated[
        str, typer.Argument(help="done: it happened; retry: run it again; skip: go on without it.")
    ],
    output: Annotated[
        str | None,
        typer.Option("--output", help="With done: the step's output, a JSON value (default null)."),
    ] = None,
    *,
    flags: FollowFlags,
) -> int:
    """Answer an interrupted effect="once" step (status unknown) and continue its run here.

    done records the step as finished with --output (it is not run again), retry runs it again with the same
    ctx.idempotency_key, skip finishes it with a null output. Refused, with nothing changed, for a run whose
    status is not unknown.
    """
    from piw.run.effects import RESOLUTIONS, refuse_unknown
    from piw.run.resume import read_run_trace
    from piw.run.runner import resume_run
    from piw.store.run_store import open_run_stores

    if answer not in RESOLUTIONS:
        raise UsageError(f"Unknown answer {answer!r}; use one of: {', '.join(RESOLUTIONS)}.")
    if output is not None and answer != "done":
        raise UsageError(
            "--output goes with 'done' only (retry runs the step again, skip gives it no output)."
        )
    resolution: dict[str, Any] = {"resolution": answer, "output": _output(output)}
    home = flags.home()
    run_id = resolve_run_id(home, run_id)
    refuse_unknown(read_run_trace(open_run_stores(home).open(run_id)).state, resolution)  # before any claim
    launch = flags.launch_of(home, run_id)
    return Following(flags.as_json, launch, flags.verbose).follow(
        lambda options: resume_run(run_id, home, replace(options, resolution=resolution))
    )


def _output(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--output is not valid JSON ({exc.msg} at position {exc.pos}).") from exc
