"""``piw export`` and ``piw import``: a run as a standard bundle, out of any mode and into a database.

``export RUN --otlp URL`` sends the run as OpenTelemetry spans instead (``docs/telemetry.md``; the work is in
``piw.telemetry.otlp``).

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
    """The run's spans built after the fact from its bundle, read the way every view reads it (the one fold, from
    the newest fold checkpoint, and the conversation's entry stream), never by a second parser of the trace. Ids
    derive from the run and attempt ids, so exporting twice sends the same spans again and a collector keeps one
    set (``docs/telemetry.md``); ``TelemetryError`` when the collector does not take them."""
    from piw.redaction import redactor_for
    from piw.store.place import home_of
    from piw.telemetry.otlp import export_specs, shown_endpoint, traces_url
    from piw.telemetry.spans import run_spans
    from piw.views.source import load_run

    traces_url(endpoint)  # a malformed endpoint is reported before the run is read
    run = load_run(home, run_id)
    redactor = redactor_for(home_of(run.bundle.path.parent.parent))
    specs = run_spans(
        run.state, run.entries(), redactor, include_content=include_content, resolve=run.bundle.resolve
    )
    export_specs(endpoint, specs)
    trace_id = f"{specs[0].trace_id:032x}" if specs else ""
    shown = shown_endpoint(endpoint)
    if as_json:
        payload = {"runId": run.state.run_id, "spans": len(specs), "traceId": trace_id, "endpoint": shown}
        sys.stdout.write(json_text(payload) + "\n")
    else:
        make_console().print(
            safe_text(f"Exported run {run.state.run_id} to {shown}: {len(specs)} spans, trace {trace_id}."),
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
