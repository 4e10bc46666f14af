"""``piw export`` and ``piw import``: a run as a standard bundle, out of any mode and into a database.

``export RUN --otlp URL`` sends the run as OpenTelemetry spans instead (``docs/telemetry.md``; the work is in
``piw.telemetry.export``).

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
from piw.errors import UsageError
from piw.store.runref import resolve_run_id
from piw.terminal import json_text, safe_text

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("export")
def export_command(
    run: Annotated[str, typer.Argument(help="The run: an id, a unique prefix, 'latest' or -1, -2, ….")],
    target: Annotated[
        Path | None, typer.Argument(metavar="[DIR]", help="The folder the bundle is written into.")
    ] = None,
    otlp: Annotated[
        str | None,
        typer.Option(
            "--otlp",
            metavar="URL",
            help="Send the run as OpenTelemetry spans to this OTLP/HTTP endpoint instead (piw[otel]).",
        ),
    ] = None,
    include_content: Annotated[
        bool,
        typer.Option("--include-content", help="With --otlp: attach prompts, replies and tool arguments."),
    ] = False,
    as_json: JsonOption = False,
    database: DatabaseOption = None,
) -> int:
    """Write a run as a standard bundle (DIR/RUN_ID), or send it as OpenTelemetry spans (--otlp URL)."""
    if (target is None) == (otlp is None):
        raise UsageError(
            "Give either a folder (piw export RUN DIR) or --otlp URL (piw export RUN --otlp URL)."
        )
    if include_content and otlp is None:
        raise UsageError("--include-content only applies to --otlp; a bundle always holds the whole run.")
    home = command_home(database)
    run_id = resolve_run_id(home, run)
    if otlp is not None:
        return _export_otlp(home, run_id, otlp, include_content, as_json)
    assert target is not None
    from piw.store.pg.export import export_run

    path = export_run(home, run_id, target)
    if as_json:
        sys.stdout.write(json_text({"runId": path.name, "path": str(path)}) + "\n")
    else:
        make_console().print(safe_text(f"Exported run {path.name} to {path}."), soft_wrap=True)
    return 0


def _export_otlp(home: Path, run_id: str, endpoint: str, include_content: bool, as_json: bool) -> int:
    from piw.telemetry.export import export_otlp
    from piw.telemetry.otlp import shown_endpoint

    done = export_otlp(home, run_id, endpoint, include_content=include_content)
    shown = shown_endpoint(endpoint)
    if as_json:
        payload = {"runId": done.run_id, "spans": done.spans, "traceId": done.trace_id, "endpoint": shown}
        sys.stdout.write(json_text(payload) + "\n")
    else:
        make_console().print(
            safe_text(f"Exported run {done.run_id} to {shown}: {done.spans} spans, trace {done.trace_id}."),
            soft_wrap=True,
        )
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
