"""``piw export`` and ``piw import``: a run as a standard bundle, out of any mode and into a database.

``export`` writes a run as the bundle SQLite mode would have left (``docs/bundle-format.md``): from PostgreSQL's
rows in database mode, so a run can be archived, attached to a bug report or read with every bundle tool.
``import`` is the way from one machine to many: a local run, parked or finished, moved into the database whole
(``docs/many-machines.md``). The work is in ``piw.store.pg.export``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.store.runref import resolve_run_id
from piw.terminal import json_text, safe_text

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("export")
def export_command(
    run: Annotated[str, typer.Argument(help="The run: an id, a unique prefix, 'latest' or -1, -2, ….")],
    target: Annotated[Path, typer.Argument(metavar="DIR", help="The folder the bundle is written into.")],
    as_json: JsonOption = False,
    database: DatabaseOption = None,
) -> int:
    """Write a run as a standard bundle (DIR/RUN_ID), from SQLite or from the database's rows."""
    from piw.store.pg.export import export_run

    home = command_home(database)
    path = export_run(home, resolve_run_id(home, run), target)
    if as_json:
        sys.stdout.write(json_text({"runId": path.name, "path": str(path)}) + "\n")
    else:
        make_console().print(safe_text(f"Exported run {path.name} to {path}."), soft_wrap=True)
    return 0


@app.command("import")
def import_command(
    bundle: Annotated[
        Path, typer.Argument(metavar="BUNDLE", help="A run's bundle folder (e.g. PIW_HOME/runs/RUN).")
    ],
    as_json: JsonOption = False,
    database: DatabaseOption = None,
) -> int:
    """Move a local run (parked, interrupted or finished) into the database; hosts and 'piw resume' continue it."""
    from piw.store.pg.export import import_bundle

    home = command_home(database)
    done = import_bundle(home, bundle)
    if as_json:
        payload = {
            "runId": done.run_id,
            "status": done.status,
            "queueStatus": done.queue_status,
            "events": done.events,
        }
        sys.stdout.write(json_text(payload) + "\n")
        return 0
    then = (
        "" if done.queue_status != "parked" else f"; continue it on any host with 'piw resume {done.run_id}'"
    )
    make_console().print(
        safe_text(f"Imported run {done.run_id} ({done.status}, {done.events} events){then}."), soft_wrap=True
    )
    return 0
