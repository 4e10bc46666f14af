"""``piw waiting``: what needs an answer across runs, with the command that answers it and its API route.

The same list as ``piw runs --status waiting`` (gates and checkpoints still open) with, for each, the question,
the copy-paste ``piw decide``/``piw answer`` commands and the ``piw serve`` route (``docs/serve.md``).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.terminal import json_text, safe_text, single_line


@app.command()
def waiting(
    api: Annotated[
        str | None,
        typer.Option(
            "--api",
            metavar="URL",
            help="The piw serve address the routes name (default: PIW_SERVE_URL or loopback).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
    database: DatabaseOption = None,
) -> int:
    """List what needs your answer across runs, with the command and the API route that answer it."""
    from piw.views.waits import DEFAULT_API, waiting_items

    base = (api or os.environ.get("PIW_SERVE_URL") or DEFAULT_API).rstrip("/")
    items = waiting_items(command_home(database))
    if as_json:
        sys.stdout.write(json_text([item.to_json(base) for item in items]) + "\n")
        return 0
    console = make_console()
    if not items:
        console.print("Nothing waits for an answer.")
        return 0
    for item in items:
        title = f" — {single_line(item.run_title)}" if item.run_title else ""
        due = f" (due {item.due_at})" if item.due_at else ""
        console.print(
            safe_text(f"{item.run_id}  {item.workflow_name}{title}  at {item.summary.get('nodeId')}{due}"),
            soft_wrap=True,
        )
        if item.question:
            console.print(safe_text(f"  {single_line(item.question)[:200]}"), soft_wrap=True)
        for command in item.to_json(base)["commands"]:
            console.print(safe_text(f"  {command}"), soft_wrap=True)
        console.print(safe_text(f"  POST {item.route(base)}"), soft_wrap=True)
    return 0
